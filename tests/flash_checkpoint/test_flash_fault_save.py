"""The fault-time save ("last words") of a script that uses a flash checkpointer goes to the
agent's memory first, end to end: a real ftrun, two real torch ranks (DDP, gloo on loopback)
that save to memory only every SAVE_EVERY steps, wrap their loop in guard() and register the
state for the fault with one line (register_fault_save).

* Rank 1 SIGKILLed mid-run: rank 0 serves the fault-time save into its agent's memory at the
  step it had finished, and after the restart every rank resumes right after that step,
  restored from memory (nothing on disk at all), with the weights of a fault-free run. Also
  with rank 0 killed instead: rank 1, whose agent slot held no snapshot of the one copy, saves.
* The job then failing for good (no restart left): the agent's exit persist writes the
  fault-time snapshot, and a new job resumes from disk at that step.
* A script whose saves are DISK: the fault-time snapshot is also written to storage at once.
  So it is under dlrover-run's --save-at-breakpoint, with MEMORY saves.
* Shards (ShardedCheckpointer) with rank 1 hung instead: the agent's hang detector asks both
  ranks (their helper threads) for their shard of the step they finished; both resume from
  memory right after it.
* A worker whose agent keeps no memory snapshots: the same save goes to disk by the files
  path, and load_checkpoint reads it.
* Across nodes (a master and two agents of one rank each): the rank on one node SIGKILLed, the
  other node's rank saves into its own agent's memory and both resume right after that step;
  shards of a job hung across both nodes are saved by each rank into its own node's agent.

Run as `python3 test_flash_fault_save.py train <root> <config json>` it is one rank of the
training job (see train()).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_flash_memory import (FTRUN, Processes, assert_same_weights, final,  # noqa: E402
                               free_port, progress, start_rank, write_final)
from test_flash_replica import read  # noqa: E402

STEPS = 20
SAVE_EVERY = 5  # memory saves after steps 4, 9, 14, 19
KILL_AT = 12  # rank 1 dies before step 12: the fault-time save is of step 11, never saved else


def train(root, config):
    """One rank. progress-<rank>.txt records where each attempt started; final-<rank>.json
    the final weights."""
    import torch
    import torch.distributed as dist

    import ftrun
    from ftrun.flash_checkpoint.ddp import StorageType

    if config.get("no_memory"):  # as under an agent that keeps no memory snapshots
        os.environ.pop("FTRUN_FLASH_MEMORY_BUDGET", None)
    rank, attempt, sharded, model, net, opt, cp = start_rank(root, config)
    storage = StorageType.DISK if config.get("storage") == "disk" else StorageType.MEMORY
    # The one line: the state is built when the fault comes, at the step the agent names.
    cp.register_fault_save(lambda step: {"model": model.state_dict(), "opt": opt.state_dict(),
                                         "step": step, "rank": rank})
    ft = ftrun.connect()
    progress_file = open(os.path.join(root, f"progress-{rank}.txt"), "a", buffering=1)
    state = cp.load_checkpoint()
    start = 0
    if state:
        if sharded and state["rank"] != rank:
            raise RuntimeError(f"rank {rank} got the shard of rank {state['rank']}")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"] + 1
    progress_file.write(f"start {start} attempt {attempt}\n")
    with ft.guard():
        for step in range(start, config["steps"]):
            if attempt == 0 and step == config.get("kill_at") and rank == config.get("kill", 1):
                os.kill(os.getpid(), signal.SIGKILL)
            if attempt == 0 and step == config.get("hang_at") and rank == 1:
                time.sleep(3600)
            g = torch.Generator().manual_seed(step * 100 + rank)
            x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
            loss = torch.nn.functional.mse_loss(net(x), y)
            opt.zero_grad()
            loss.backward()  # rank 0 learns here that rank 1 is gone
            if sharded:  # the collectives of a sharded job tie its ranks together
                dist.all_reduce(loss.detach())
            with ft.update(step):
                opt.step()
            if (step + 1) % SAVE_EVERY == 0:
                # A dict whose "step" goes stale: the fault-time save must not reuse it.
                cp.save_checkpoint(step, {"model": model.state_dict(), "opt": opt.state_dict(),
                                          "step": step, "rank": rank}, storage_type=storage)
                progress_file.write(f"saved {step}\n")
    write_final(root, rank, model)


def run_job(root, config, restarts=1, extra=(), command=()):
    """ftrun (`command`: a personality, as ("dlrover-run",)) with two ranks of train(); the
    CompletedProcess."""
    os.makedirs(root, exist_ok=True)
    cmd = [FTRUN, *command, "--standalone", "--nproc-per-node", "2", "--max-restarts", str(restarts),
           "--restart-backoff", "0", "--monitor-interval", "0.05",
           "--log-dir", os.path.join(root, "logs"), *extra, "--no-python", "/usr/bin/python3",
           __file__, "train", root, json.dumps(dict({"steps": STEPS}, **config))]
    env = dict(os.environ)
    env.pop("FTRUN_CONTROL_SOCKET", None)
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)


def starts(root, rank):
    return [line for line in progress(root, rank) if line.startswith("start")]


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class FaultTimeSaveToMemoryTest(unittest.TestCase):
    clean = {}

    @classmethod
    def fault_free(cls, kind="ddp"):
        """The final weights of a run without faults (once per kind)."""
        if kind not in cls.clean:
            root = tempfile.mkdtemp(prefix="ftrun-fault-clean-")
            done = run_job(root, {"kind": kind})
            assert done.returncode == 0, done.stdout
            cls.clean[kind] = final(root)
        return cls.clean[kind]

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ftrun-fault-mem-")

    def assert_resumed_after_the_fault_step(self, root, log, attempt=1, kind="ddp"):
        for rank in (0, 1):
            self.assertEqual(starts(root, rank)[-1], f"start {KILL_AT} attempt {attempt}", log)
        assert_same_weights(self, final(root), self.fault_free(kind))

    def test_the_survivor_saves_the_fault_step_to_memory_and_the_restart_restores_it(self):
        done = run_job(self.root, {"kill_at": KILL_AT})
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertIn(f"fault-time save of step {KILL_AT - 1} to the agent's memory done",
                      done.stdout)
        self.assertIn(f"ftrun: restored step {KILL_AT - 1} from memory", done.stdout)
        self.assert_resumed_after_the_fault_step(self.root, done.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.root, "ckpt")),
                         "nothing was written to (or read from) disk")

    def test_rank_1_saves_the_one_copy_when_rank_0_is_killed(self):
        # Local rank 1 holds no snapshot of the DDP copy before: its agent's slot gets one.
        done = run_job(self.root, {"kill_at": KILL_AT, "kill": 0})
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertIn(f"ftrun[1]: fault-time save of step {KILL_AT - 1} to the agent's memory "
                      "done", done.stdout)
        self.assertIn(f"ftrun: restored step {KILL_AT - 1} from memory", done.stdout)
        self.assert_resumed_after_the_fault_step(self.root, done.stdout)

    def test_a_job_failing_for_good_persists_the_fault_step_and_a_new_job_resumes(self):
        failed = run_job(self.root, {"kill_at": KILL_AT}, restarts=0)
        self.assertEqual(failed.returncode, 1, failed.stdout)
        self.assertIn(f"fault-time save of step {KILL_AT - 1} to the agent's memory done",
                      failed.stdout)
        self.assertIn(f"flash checkpoint: step={KILL_AT - 1} stored at ", failed.stdout)
        ckpt = os.path.join(self.root, "ckpt")
        with open(os.path.join(ckpt, "dlrover_latest.txt")) as f:
            self.assertEqual(int(f.read()), KILL_AT - 1)
        link = os.path.join(ckpt, str(KILL_AT - 1), "rank_0.pt")
        self.assertTrue(os.path.islink(link) and os.path.isfile(link), link)
        again = run_job(self.root, {})
        self.assertEqual(again.returncode, 0, again.stdout)
        self.assertNotIn("from memory", again.stdout)
        self.assert_resumed_after_the_fault_step(self.root, again.stdout, attempt=0)

    def test_after_disk_saves_the_fault_step_is_also_written_to_storage_at_once(self):
        done = run_job(self.root, {"kill_at": KILL_AT, "storage": "disk"})
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertIn(f"ftrun: restored step {KILL_AT - 1} from memory", done.stdout)
        self.assertIn(f"flash checkpoint: step={KILL_AT - 1} stored at ", done.stdout)
        self.assertTrue(os.path.isfile(os.path.join(self.root, "ckpt", str(KILL_AT - 1),
                                                    "rank_0.pt")), done.stdout)
        self.assert_resumed_after_the_fault_step(self.root, done.stdout)

    def test_dlrover_runs_save_at_breakpoint_also_writes_the_fault_step_to_storage(self):
        # DLRover's breakpoint save: the memory checkpoint goes to storage when workers fail,
        # while the job goes on (here restoring from memory, as without the option).
        done = run_job(self.root, {"kill_at": KILL_AT}, command=("dlrover-run",),
                       extra=("--save-at-breakpoint",))
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertIn(f"fault-time save of step {KILL_AT - 1} to the agent's memory done",
                      done.stdout)
        self.assertIn("flash checkpoint: the workers stopped; writing the newest memory "
                      "snapshots (--save-at-breakpoint)", done.stdout)
        self.assertIn(f"flash checkpoint: step={KILL_AT - 1} stored at ", done.stdout)
        self.assertIn(f"ftrun: restored step {KILL_AT - 1} from memory", done.stdout)
        ckpt = os.path.join(self.root, "ckpt")
        with open(os.path.join(ckpt, "dlrover_latest.txt")) as f:
            self.assertEqual(int(f.read()), KILL_AT - 1)
        import torch
        stored = torch.load(os.path.join(ckpt, str(KILL_AT - 1), "rank_0.pt"))
        self.assertEqual(stored["step"], KILL_AT - 1)
        self.assert_resumed_after_the_fault_step(self.root, done.stdout)

    def test_shards_of_a_hung_job_are_saved_by_every_rank_into_memory(self):
        done = run_job(self.root, {"kind": "sharded", "hang_at": KILL_AT},
                       extra=("--hang-timeout", "2"))
        self.assertEqual(done.returncode, 0, done.stdout)
        for rank in (0, 1):
            self.assertIn(f"ftrun[{rank}]: fault-time save of step {KILL_AT - 1} to the agent's "
                          "memory done", done.stdout)
        self.assertIn(f"ftrun: restored step {KILL_AT - 1} from memory", done.stdout)
        self.assert_resumed_after_the_fault_step(self.root, done.stdout, kind="sharded")
        self.assertFalse(os.path.exists(os.path.join(self.root, "ckpt")), done.stdout)

    def test_without_memory_snapshots_the_fault_step_goes_to_disk(self):
        done = run_job(self.root, {"kill_at": KILL_AT, "no_memory": True})
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertIn(f"fault-time save of step {KILL_AT - 1} done", done.stdout)
        self.assertTrue(os.path.isdir(os.path.join(self.root, "ckpt",
                                                   f"ftrun-step-{KILL_AT - 1}")), done.stdout)
        self.assertNotIn("from memory", done.stdout)
        self.assert_resumed_after_the_fault_step(self.root, done.stdout)


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class MultiNodeFaultSaveTest(Processes, unittest.TestCase):
    """Two nodes of one rank each behind a master: the same ranks 0 and 1 as the one-node
    tests, so their fault-free weights are the reference."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ftrun-fault-nodes-")
        self.processes_setup()

    def run_nodes(self, config, extra=()):
        """The agents' combined log once the master and both agents have exited 0."""
        endpoint = f"127.0.0.1:{free_port()}"
        conf = self.TWO_NODES_CONF
        master = self.start_master(endpoint.split(":")[1], "f", conf,
                                   ["--max-restarts", "1", "--restart-backoff", "0"])
        agents = [self.start_agent(
            f"{node}.log", endpoint, "f", conf,
            ["--nproc-per-node", "1", "--max-restarts", "1", "--restart-backoff", "0",
             "--monitor-interval", "0.05", *extra, "--log-dir",
             os.path.join(self.root, "logs", node)],
            [__file__, "train", self.root, json.dumps(dict({"steps": STEPS}, **config))])
            for node in ("a", "b")]
        logs = ""
        try:
            for p in (*agents, master):
                p.wait(timeout=150)
        finally:
            for node in ("a", "b", "master"):
                logs += read(os.path.join(self.root, f"{node}.log"))
        self.assertEqual([p.returncode for p in (*agents, master)], [0, 0, 0], logs[-6000:])
        return logs

    def assert_resumed_after_the_fault_step(self, log, kind):
        for rank in (0, 1):
            self.assertEqual(starts(self.root, rank)[-1], f"start {KILL_AT} attempt 1", log)
        assert_same_weights(self, final(self.root), FaultTimeSaveToMemoryTest.fault_free(kind))

    def test_the_other_nodes_rank_saves_the_fault_step_into_its_agents_memory(self):
        log = self.run_nodes({"kill_at": KILL_AT})
        self.assertIn(f"fault-time save of step {KILL_AT - 1} to the agent's memory done", log)
        self.assert_resumed_after_the_fault_step(log, "ddp")
        self.assertFalse(os.path.exists(os.path.join(self.root, "ckpt")), log[-4000:])

    def test_shards_of_a_job_hung_across_nodes_are_saved_on_each_node(self):
        log = self.run_nodes({"kind": "sharded", "hang_at": KILL_AT},
                             extra=("--hang-timeout", "2"))
        for rank in (0, 1):
            self.assertIn(f"ftrun[{rank}]: fault-time save of step {KILL_AT - 1} to the agent's "
                          "memory done", log)
        self.assertIn(f"ftrun: restored step {KILL_AT - 1} from memory", log)
        self.assert_resumed_after_the_fault_step(log, "sharded")
        self.assertFalse(os.path.exists(os.path.join(self.root, "ckpt")), log[-4000:])


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "train":
        train(sys.argv[2], json.loads(sys.argv[3]))
    else:
        unittest.main()
