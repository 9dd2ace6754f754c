"""A multi-node sharded job that fails for good, end to end: `ftrun master` and two ftrun
agents on loopback with two torch ranks each (gloo), ShardedCheckpointer MEMORY saves after
every step, and a new job started on the same checkpoint_dir afterwards.

* A rank exits non-zero with --max-restarts 0 (each agent holding only its own shards,
  --flash-replicas 1): the two agents store the newest step between them; the tracker names
  it; a new job resumes every rank at that step + 1 from disk, final weights equal to a
  fault-free run, and a newer step with a missing shard is skipped with a warning naming it.
* The agents get SIGTERM (a scheduler's): the same, with each agent holding the other's
  replicas.
* One agent SIGKILLed during the exit persist: the tracker never names a partial step (it
  still names the last DISK save, which the load path then restores), every checkpoint on
  disk verifies, and the new job resumes right after the step the tracker names.
* Runs sharing the directory: a new job that starts over where an earlier one left a higher
  step stores its own steps (the two agents, started 3 s apart, both go by the job's start
  the rendezvous hands out), and the next job resumes from them.

Run as `python3 test_flash_multinode_persist.py train <root> <config json>` it is one rank.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

# The flash tests' shared helpers (this directory is the script's sys.path[0]; importing them
# also puts ftrun's helper package on sys.path).
from test_flash_memory import FTRUN, Processes, assert_same_weights, free_port  # noqa: E402
from test_flash_memory import one_step, resume, wait_for, write_final  # noqa: E402
from test_flash_replica import finals, read  # noqa: E402

STEPS = 24


def train(root, config):
    """One rank of a sharded job: its own model (seeded by rank), a save of its shard after
    every step (DISK at the steps in config["disk_at"], else MEMORY). In a job with
    "fail_at", rank config["fail_rank"] exits 1 at the start of that step; with "hold_at"
    every rank waits after saving that step (to be signalled); with "start_over" it loads
    nothing (a new run from step 0). progress-<rank>.txt: where each job started and what it
    saved."""
    import time
    import torch
    import torch.distributed as dist
    from ftrun.flash_checkpoint.sharded import ShardedCheckpointer, StorageType

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if config.get("shard_name"):  # a script naming each rank's shard file itself
        class Named(ShardedCheckpointer):
            def shard_file_name(self):
                return config["shard_name"].format(rank=rank)
        cp = Named(os.path.join(root, "ckpt"))
    else:
        cp = ShardedCheckpointer(os.path.join(root, "ckpt"))
    ballast = torch.zeros(config.get("ballast_mb", 0) * (1 << 18))
    progress = open(os.path.join(root, f"progress-{rank}.txt"), "a", buffering=1)
    start = 0 if config.get("start_over") else resume(cp, model, opt, rank, sharded=True)
    progress.write(f"start {start}\n")
    for step in range(start, STEPS):
        if step == config.get("fail_at") and rank == config["fail_rank"]:
            sys.exit(1)
        one_step(model, opt, step, rank, lockstep=True)
        disk = step in config.get("disk_at", [])
        saved = cp.save_checkpoint(step, {"model": model.state_dict(), "opt": opt.state_dict(),
                                          "step": step, "rank": rank, "ballast": ballast},
                                   storage_type=StorageType.DISK if disk else StorageType.MEMORY)
        progress.write(f"saved {step} {saved}\n")
        if step == config.get("hold_at"):
            time.sleep(3600)
    write_final(root, rank, model)



def starts(root, rank):
    return [int(l.split()[1]) for l in read(os.path.join(root, f"progress-{rank}.txt")).split("\n")
            if l.startswith("start")]


def tracker(root):
    text = read(os.path.join(root, "ckpt", "dlrover_latest.txt"))
    return int(text) if text else None


def complete_steps(root):
    """The checkpoints under ckpt, each verified with checksums: {step: error or None}."""
    from ftrun import checkpoint
    out = {}
    ckpt = os.path.join(root, "ckpt")
    for name in os.listdir(ckpt) if os.path.isdir(ckpt) else []:
        m = re.fullmatch(r"ftrun-step-(\d+)", name)
        if m:
            try:
                manifest = checkpoint.verify(os.path.join(ckpt, name))
                out[int(m.group(1))] = None if len(manifest["groups"]) == 4 else "not 4 shards"
            except checkpoint.CheckpointError as e:
                out[int(m.group(1))] = str(e)
    return out


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class MultiNodeExitPersistTest(Processes, unittest.TestCase):
    clean = None

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ftrun-mnpersist-")
        self.processes_setup()
        self.jobs = 0

    def job(self, config, restarts=0, extra=(), stagger=0.0):
        """A master and two agents (2 ranks each), b started `stagger` seconds after a;
        returns (master, agent a, agent b, logs)."""
        self.jobs += 1
        port, run = free_port(), f"job{self.jobs}"
        conf = self.TWO_NODES_CONF
        master = self.start_master(port, run, conf, ["--max-restarts", str(restarts)],
                                   f"{run}-master.log")
        agents, logs = [], []
        for node in ("a", "b"):
            if node == "b":
                time.sleep(stagger)
            logs.append(os.path.join(self.root, f"{run}-{node}.log"))
            agents.append(self.start_agent(
                os.path.basename(logs[-1]), f"127.0.0.1:{port}", run, conf,
                ["--nproc-per-node", "2", "--max-restarts", str(restarts), "--monitor-interval",
                 "0.1", "--restart-backoff", "0", *extra, "--log-dir",
                 os.path.join(self.root, "logs", run)],
                [__file__, "train", self.root, json.dumps(config)]))
        return master, agents[0], agents[1], logs

    def fault_free(self):
        if MultiNodeExitPersistTest.clean is None:
            root = tempfile.mkdtemp(prefix="ftrun-mnpersist-clean-")
            done = subprocess.run(
                [FTRUN, "--standalone", "--nproc-per-node", "4", "--log-dir",
                 os.path.join(root, "logs"), "--no-python", "/usr/bin/python3", __file__,
                 "train", root, "{}"], env=self.env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, timeout=200)
            self.assertEqual(done.returncode, 0, done.stdout)
            MultiNodeExitPersistTest.clean = finals(root, 4)
        return MultiNodeExitPersistTest.clean

    def ended(self, procs, logs, timeout=120):
        for p in procs:
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.fail("a process did not exit: " + "".join(read(l)[-2000:] for l in logs))

    def resume(self, stored, extra_check=None):
        """A new job on the same checkpoint_dir: every rank starts at stored + 1 and ends with
        the weights of a fault-free run."""
        master, a, b, logs = self.job({})
        self.ended([a, b, master], logs, 180)
        out = "".join(read(l) for l in logs)
        self.assertEqual((a.returncode, b.returncode), (0, 0), out[-4000:])
        for r in range(4):
            self.assertEqual(starts(self.root, r)[-1], stored + 1, (r, out[-3000:]))
        if extra_check:
            extra_check(out)
        assert_same_weights(self, finals(self.root, 4), self.fault_free())

    def test_a_job_failing_for_good_is_stored_by_both_agents_and_a_new_job_resumes(self):
        master, a, b, logs = self.job({"fail_at": 13, "fail_rank": 3},
                                      extra=("--flash-replicas", "1"))
        self.ended([a, b, master], logs)
        out = "".join(read(l) for l in logs)
        self.assertNotEqual(a.returncode, 0, out[-3000:])
        self.assertNotEqual(b.returncode, 0, out[-3000:])
        stored = tracker(self.root)
        # Rank 3 saved 12 and exited; its commit may be read after its exit was seen (11).
        self.assertIn(stored, (11, 12), out[-4000:])
        self.assertEqual(complete_steps(self.root).get(stored, "absent"), None)
        for log in logs:  # each agent wrote its own two shards (no replicas)
            self.assertRegex(read(log), r"persisting shards rank-\d,rank-\d of step=\d+ "
                                        r"\(world size 4\)")
        self.assertEqual([n for n in os.listdir(os.path.join(self.root, "ckpt"))
                          if n.startswith(".")], [], "no staging area or temporary left")
        # A newer step with a shard missing is skipped, with a warning naming it.
        ckpt = os.path.join(self.root, "ckpt")
        broken = os.path.join(ckpt, f"ftrun-step-{stored + 5}")
        subprocess.run(["cp", "-r", os.path.join(ckpt, f"ftrun-step-{stored}"), broken],
                       check=True)
        from ftrun import checkpoint
        shard = os.path.join(broken, checkpoint.part_dir_name("rank-2"))
        for name in os.listdir(shard):
            if name != "PART.json":
                os.unlink(os.path.join(shard, name))
        self.resume(stored, lambda out: self.assertIn(f"ftrun: skipping checkpoint {broken}",
                                                      out))

    def test_sigterm_to_the_agents_stores_the_newest_step_and_a_new_job_resumes(self):
        master, a, b, logs = self.job({"hold_at": 10})
        wait_for(lambda: all("saved 10 True" in read(os.path.join(self.root, f"progress-{r}.txt"))
                             for r in range(4)), "every rank's save of step 10", 120)
        for agent in (a, b):
            os.kill(agent.pid, signal.SIGTERM)
        self.ended([a, b], logs)
        master.kill()
        master.wait()
        out = "".join(read(l) for l in logs)
        self.assertEqual(tracker(self.root), 10, out[-4000:])
        self.assertEqual(complete_steps(self.root), {10: None})
        self.resume(10)

    def test_a_lost_nodes_shards_are_stored_from_replicas_under_their_ranks_names(self):
        """Shard files named by their ranks without the "_<rank>." pattern (mp_rank_00.pt,
        ...): one node is SIGKILLed whole, the other agent then stores the step alone, from its
        own shards and its replicas of the lost node's, each under the name its rank gave it."""
        # At debug level the agents log every replica stored (at info only a new holder).
        master, a, b, logs = self.job({"hold_at": 8, "shard_name": "mp_rank_{rank:02d}.pt"},
                                      extra=("--log-level", "debug"))
        wait_for(lambda: all("saved 8 True" in read(os.path.join(self.root, f"progress-{r}.txt"))
                             for r in range(4)), "every rank's save of step 8", 120)

        def holder():
            """The node (0: a, 1: b) that holds replicas of both of the other node's shards of
            step 8 (an older step's replica is not enough: step 8's may still be on its way)."""
            for node, log in enumerate(logs):
                text = read(log)
                first = re.search(r"group_rank=(\d)", text)
                others = (2, 3) if first and first.group(1) == "0" else (0, 1)
                if first and all(f"replica of rank-{r} step=8 stored" in text for r in others):
                    return node
            return None
        wait_for(lambda: holder() is not None, "a node's replicas of the other's step 8", 60)
        survivor = holder()
        agents = (a, b)
        os.killpg(agents[1 - survivor].pid, signal.SIGKILL)  # that node: agent and workers
        os.kill(agents[survivor].pid, signal.SIGTERM)
        self.ended([a, b], logs)
        master.kill()
        master.wait()
        out = "".join(read(l) for l in logs)
        stored = tracker(self.root)
        self.assertIn(stored, (7, 8), out[-4000:])
        self.assertEqual(complete_steps(self.root).get(stored, "absent"), None, out[-4000:])
        self.assertRegex(read(logs[survivor]),  # its own two shards and two replicas
                         rf"persisting shards (rank-\d,){{3}}rank-\d of step={stored} ")
        from ftrun import checkpoint
        step_dir = os.path.join(self.root, "ckpt", f"ftrun-step-{stored}")
        for r in range(4):
            files = os.listdir(os.path.join(step_dir, checkpoint.part_dir_name(f"rank-{r}")))
            self.assertEqual(sorted(files), sorted(["PART.json", f"mp_rank_{r:02d}.pt"]), r)
        self.resume(stored)

    def test_an_agent_sigkilled_during_the_exit_persist_leaves_no_partial_step_named(self):
        master, a, b, logs = self.job({"hold_at": 6, "disk_at": [3], "ballast_mb": 24},
                                      extra=("--flash-replicas", "1"))
        wait_for(lambda: all("saved 6 True" in read(os.path.join(self.root, f"progress-{r}.txt"))
                             for r in range(4)), "every rank's save of step 6", 120)
        self.assertEqual(tracker(self.root), 3, "the DISK save of a multi-node sharded job")
        for agent in (a, b):
            os.kill(agent.pid, signal.SIGTERM)
        wait_for(lambda: "persisting shards" in read(logs[1]), "node b's exit persist", 60)
        os.killpg(b.pid, signal.SIGKILL)  # node b: its agent, mid-persist
        self.ended([a, b], logs)
        master.kill()
        master.wait()
        out = "".join(read(l) for l in logs)
        steps = complete_steps(self.root)
        self.assertEqual({s: e for s, e in steps.items() if e}, {}, "every checkpoint whole")
        stored = tracker(self.root)
        self.assertEqual(stored, max(steps), (steps, out[-4000:]))
        self.assertIn(stored, (3, 6))
        self.resume(stored)

    def test_a_new_run_starting_over_stores_its_own_steps_and_the_next_resumes_from_them(self):
        """An earlier job left step 20 (a DISK save). A new job starts over from step 0 (its
        agent b started 3 s after a: it learns a's start from the round), saves step 1 to DISK
        (the ranks write it) and fails for good at step 4: its agents store its newest step
        together; the earlier run's newer step supersedes neither (by the agents' old rule it
        superseded theirs: the tracker stayed at 1). The next job resumes right after this
        run's newest step."""
        master, a, b, logs = self.job({"disk_at": [20]})
        self.ended([a, b, master], logs, 180)
        self.assertEqual((a.returncode, b.returncode), (0, 0))
        self.assertEqual(tracker(self.root), 20)
        hour_ago = time.time() - 3600  # the earlier run's files, as old as they would be
        for dirpath, dirs, files in os.walk(os.path.join(self.root, "ckpt")):
            for name in dirs + files:
                os.utime(os.path.join(dirpath, name), (hour_ago, hour_ago),
                         follow_symlinks=False)
        master, a, b, logs = self.job({"start_over": True, "disk_at": [1], "fail_at": 4,
                                       "fail_rank": 3}, stagger=3.0)
        self.ended([a, b, master], logs)
        out = "".join(read(l) for l in logs)
        self.assertNotEqual(a.returncode, 0, out[-3000:])
        learnt = re.search(r"this run of the job began (\d+\.\d+)s before this agent",
                           read(logs[1]))
        self.assertTrue(learnt, read(logs[1])[-3000:])
        self.assertGreater(float(learnt.group(1)), 1.0)
        stored = tracker(self.root)
        self.assertIn(stored, (2, 3), out[-4000:])
        steps = complete_steps(self.root)
        self.assertEqual({s: e for s, e in steps.items() if e}, {}, "every checkpoint whole")
        self.assertIn(1, steps, "the ranks' DISK save of this run")
        self.resume(stored)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "train":
        train(sys.argv[2], json.loads(sys.argv[3]))
    else:
        unittest.main()
