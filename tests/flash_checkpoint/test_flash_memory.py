"""Flash checkpoint in the agent's memory, end to end: a real ftrun, real torch ranks (gloo on
loopback) that save with ftrun.flash_checkpoint every step, and real faults.

* A rank SIGKILLed (no last words possible): the job resumes from memory, zero steps lost,
  final weights equal to a fault-free run; likewise for shards (each rank gets its own).
* A rank killed in the middle of a save: the previous snapshot is whole and restored.
* A job that fails for good: the agent writes the newest snapshot to disk before exiting, and
  a new job resumes from it; a SIGTERM (a scheduler's) does the same within its grace.
* A state over the memory budget: a clear message naming the budget, no partial snapshot.
* Two jobs on one node: each restores its own snapshots.
* Nothing is left behind: no file in /dev/shm, and the snapshot memory (Shmem) is given back
  when the agent is SIGKILLed.
* A whole node (agent and rank) SIGKILLed and replaced, 2 nodes on loopback: its replacement
  gets the newest step from the surviving node's copy, zero steps lost.

Run as `python3 test_flash_memory.py train <root> <config json>` it is one rank of the
training job (see train()).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))
FTRUN = os.environ.get("FTRUN_BINARY") or os.path.join(HERE, "..", "..", "build", "launcher",
                                                        "ftrun")
STEPS = 24


def train(root, config):
    """One rank: a small model trained for config["steps"] steps with a MEMORY (or DISK) save
    after every step; progress-<rank>.txt records where each attempt started and what was
    saved; final-<rank>.json the final weights."""
    import torch
    from ftrun import control
    from ftrun.flash_checkpoint import snapshot
    from ftrun.flash_checkpoint.ddp import StorageType
    from ftrun.flash_checkpoint.layout import Layout

    rank, attempt, sharded, model, net, opt, cp = start_rank(root, config)
    storage = StorageType.DISK if config.get("storage") == "disk" else StorageType.MEMORY
    ballast = torch.zeros(config.get("ballast_mb", 0) * (1 << 18))  # float32: 4 bytes each
    progress = open(os.path.join(root, f"progress-{rank}.txt"), "a", buffering=1)

    start = resume(cp, model, opt, rank, sharded, config.get("resume_path", ""))
    progress.write(f"start {start} attempt {attempt}\n")
    for step in range(start, config["steps"]):
        one_step(net, opt, step, rank, lockstep=sharded)
        doomed = attempt == 0 and step == config.get("kill_at") and rank == config["kill_rank"]
        if doomed and config.get("kill_how") == "mid_save":
            real_write, real_layout_write = snapshot.Plan.write, Layout.write

            def tear_and_die(self, buffer):
                memoryview(buffer)[self.pickle_at:self.bytes] = b"\xff" * (
                    self.bytes - self.pickle_at)
                os.kill(os.getpid(), signal.SIGKILL)  # between the copy and the commit

            def half_then_die(self, buffer):
                real_write(self, buffer)
                tear_and_die(self, buffer)

            def layout_half_then_die(self, buffer, *args):  # the every-step save's path
                real_layout_write(self, buffer, *args)
                tear_and_die(self, buffer)
            snapshot.Plan.write = half_then_die
            Layout.write = layout_half_then_die
        elif doomed and config.get("kill_how") == "after_save":
            # The agent is stopped while this rank reports, saves and dies, so it finds the
            # lines and the exit together when a grandchild wakes it (the save's buffer was
            # leased ahead: it needs no answer).
            agent = os.getppid()
            if os.fork() == 0:
                time.sleep(0.5)
                os.kill(agent, signal.SIGCONT)
                os._exit(0)
            os.kill(agent, signal.SIGSTOP)
            control.connect().report(step)  # a line ahead of the commit
        elif doomed:
            os.kill(os.getpid(), signal.SIGKILL)
        if config.get("loan_report"):
            from ftrun.flash_checkpoint import engine
            mem, _ = engine.memory_store()
            if mem is not None and mem._loan is not None:
                progress.write(f"lent {step}\n")  # this save goes under a loan
        saved = cp.save_checkpoint(step, {"model": model.state_dict(), "opt": opt.state_dict(),
                                          "step": step, "rank": rank, "ballast": ballast},
                                   storage_type=storage)
        progress.write(f"saved {step} {saved}\n")
        if doomed and config.get("kill_how") == "after_save":
            os.kill(os.getpid(), signal.SIGKILL)  # its commit may still be unread by the agent
        time.sleep(config.get("pause", 0))
    if config.get("wait"):
        progress.write(f"waited {cp.wait_latest_checkpoint(timeout=config['wait'])}\n")
    if config.get("mailbox_report"):
        from ftrun.flash_checkpoint import engine
        mem, _ = engine.memory_store()
        progress.write(f"mailbox {mem.mailbox_leases} loan {mem.loan_saves} of "
                       f"{config['steps'] - start}\n")
    write_final(root, rank, model)


def write_final(root, rank, linear):
    """final-<rank>.json: the final weights of `linear`; then the rank leaves its process
    group and the process ends without the interpreter's teardown. Left to the teardown,
    torch 1.13 can hang or abort the exit of a DDP rank: the DDP module's reducer drops the
    last reference to the gloo group while holding the GIL, and the group's destructor joins
    a gloo thread that is still freeing a tensor and waits for the GIL (pytorch#56297; seen
    here under load). The weights and progress lines are on disk by then."""
    import torch.distributed as dist
    with open(os.path.join(root, f"final-{rank}.json"), "w") as f:
        json.dump({"w": linear.weight.flatten().tolist(), "b": linear.bias.tolist()}, f)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def start_rank(root, config):
    """One rank's process group, model (the same on every rank, or one per rank for shards),
    optimizer and checkpointer under <root>/ckpt: (rank, attempt, sharded, model, the module
    to train, optimizer, checkpointer)."""
    import torch
    import torch.distributed as dist
    from ftrun.flash_checkpoint.ddp import DdpCheckpointer
    from ftrun.flash_checkpoint.sharded import ShardedCheckpointer
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    sharded = config.get("kind") == "sharded"
    torch.manual_seed(rank if sharded else 0)
    model = torch.nn.Linear(16, 4)
    net = model if sharded else torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cp = (ShardedCheckpointer if sharded else DdpCheckpointer)(os.path.join(root, "ckpt"))
    return rank, attempt, sharded, model, net, opt, cp


def resume(cp, model, opt, rank, sharded, resume_path=""):
    """Loads the newest checkpoint into model and opt; the step to start at. A shard must be
    the one this rank saved."""
    state = cp.load_checkpoint(resume_path)
    if not state:
        return 0
    if sharded and state["rank"] != rank:
        raise RuntimeError(f"rank {rank} got the shard of rank {state['rank']}")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"] + 1


def one_step(net, opt, step, rank, lockstep):
    """One training step on rank's data for `step` (the same on every run). lockstep: the
    ranks all-reduce the loss, as a real sharded job's collectives tie them together."""
    import torch
    import torch.distributed as dist
    g = torch.Generator().manual_seed(step * 100 + rank)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
    loss = torch.nn.functional.mse_loss(net(x), y)
    opt.zero_grad()
    loss.backward()
    if lockstep:
        dist.all_reduce(loss.detach())
    opt.step()


def run_job(root, config, ranks=2, restarts=1, extra=(), env=None, wait=True):
    """ftrun with `ranks` training ranks; the CompletedProcess (or the Popen if not wait)."""
    os.makedirs(root, exist_ok=True)
    cmd = [FTRUN, "--standalone", "--nproc-per-node", str(ranks), "--max-restarts",
           str(restarts), "--monitor-interval", "0.05", "--log-dir", os.path.join(root, "logs"),
           *extra, "--no-python", "/usr/bin/python3", __file__, "train", root,
           json.dumps(dict({"steps": STEPS, "kill_rank": 1}, **config))]
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("FTRUN_CONTROL_SOCKET", None)
    if not wait:
        return subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=150)


def progress(root, rank):
    try:
        with open(os.path.join(root, f"progress-{rank}.txt")) as f:
            return f.read().split("\n")
    except FileNotFoundError:
        return []


def final(root, ranks=2):
    out = []
    for rank in range(ranks):
        with open(os.path.join(root, f"final-{rank}.json")) as f:
            out.append(json.load(f))
    return out


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def memfds(pid):
    """{(st_dev, st_ino): bytes allocated} of the memfds process `pid` holds open."""
    held = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                continue
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        held[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return held


def holders(files):
    """The processes that hold any of `files` ((st_dev, st_ino)) open or mapped: while none
    does, the kernel has freed them. Other users' processes are not readable and are skipped."""
    found = set()
    wanted = {(os.major(dev), os.minor(dev), ino) for dev, ino in files}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if (st.st_dev, st.st_ino) in files:
                    found.add(int(pid))
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) < 6 or not parts[5].startswith("/memfd:"):
                        continue
                    major, minor = (int(x, 16) for x in parts[3].split(":"))
                    if (major, minor, int(parts[4])) in wanted:
                        found.add(int(pid))
        except OSError:
            continue
    return found


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class FlashMemoryTest(unittest.TestCase):
    baseline = {}

    @classmethod
    def fault_free(cls, kind, steps=STEPS):
        """The final weights of a run without faults (computed once per kind and length)."""
        if (kind, steps) not in cls.baseline:
            root = tempfile.mkdtemp(prefix="ftrun-flash-clean-")
            done = run_job(root, {"kind": kind, "steps": steps})
            assert done.returncode == 0, done.stdout
            cls.baseline[kind, steps] = final(root)
            shutil.rmtree(root, ignore_errors=True)
        return cls.baseline[kind, steps]

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ftrun-flash-")
        self.shm_before = set(os.listdir("/dev/shm"))

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)
        left = {n for n in set(os.listdir("/dev/shm")) - self.shm_before
                if "ftrun" in n or "snapshot" in n or "checkpoint" in n}
        self.assertEqual(left, set(), "files left in /dev/shm")

    def assert_resumed_without_loss(self, root, log, kind="ddp"):
        """Attempt 1 started right after the newest step saved before the fault, and the
        final weights are those of a fault-free run."""
        saved = [int(l.split()[1]) for l in progress(root, 0)
                 if l.startswith("saved") and l.endswith("True")]
        starts = [l for l in progress(root, 0) if l.startswith("start")]
        self.assertEqual(len(starts), 2, (starts, log))
        resumed = int(starts[1].split()[1])
        before_fault = [s for s in saved if s < resumed]
        self.assertEqual(resumed, max(before_fault) + 1, (saved, starts, log))
        self.assertEqual(final(root), self.fault_free(kind))
        return resumed

    def test_a_sigkilled_rank_resumes_from_memory_with_zero_steps_lost(self):
        done = run_job(self.root, {"kill_at": 11})
        self.assertEqual(done.returncode, 0, done.stdout)
        resumed = self.assert_resumed_without_loss(self.root, done.stdout)
        self.assertIn(f"ftrun: restored step {resumed - 1} from memory", done.stdout)
        self.assertGreaterEqual(resumed, 11)
        self.assertFalse(os.path.exists(os.path.join(self.root, "ckpt")),
                         "a job that succeeded writes no MEMORY save to disk")

    def test_a_restart_restores_memory_even_when_the_script_gives_resume_path(self):
        # DLRover's order: memory first, resume_path only when memory holds nothing. Attempt
        # 0 starts from the file (the untrained state, as step -1); the restart after the kill
        # must not go back to it.
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        initial = os.path.join(self.root, "initial", "rank_0.pt")
        os.makedirs(os.path.dirname(initial))
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": -1}, initial)
        done = run_job(self.root, {"kill_at": 11, "resume_path": initial})
        self.assertEqual(done.returncode, 0, done.stdout)
        resumed = self.assert_resumed_without_loss(self.root, done.stdout)
        self.assertIn(f"ftrun: restored step {resumed - 1} from memory", done.stdout)
        self.assertEqual(progress(self.root, 0)[0], "start 0 attempt 0")

    def test_saves_every_step_take_a_loan_of_both_buffers_and_a_kill_loses_nothing(self):
        # A pause after each save, as a training step takes: the agent has written the next
        # lease into the mailbox by the time the save begins, with a loan of both buffers
        # from the third save on (the first two set the buffers up), and from then on the
        # saves tell the agent nothing: the kill leaves the newest save recorded in the
        # mailbox, which the agent takes back when the rank exits.
        done = run_job(self.root, {"kill_at": 11, "pause": 0.03, "mailbox_report": True})
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assert_resumed_without_loss(self.root, done.stdout)
        report = [l.split() for l in progress(self.root, 0) if l.startswith("mailbox")]
        self.assertEqual(len(report), 1, progress(self.root, 0))
        leases, loans, saves = int(report[0][1]), int(report[0][3]), int(report[0][5])
        self.assertGreaterEqual(saves, 10)
        self.assertGreaterEqual(leases, 1, report)  # the one that came with the loan
        self.assertGreaterEqual(loans, saves - 4, report)  # a slow moment may miss one

    def test_two_jobs_on_one_node_keep_their_own_snapshots(self):
        other = tempfile.mkdtemp(prefix="ftrun-flash-other-")
        self.addCleanup(shutil.rmtree, other, True)
        jobs = [run_job(self.root, {"kill_at": 8}, wait=False),
                run_job(other, {"kill_at": 13, "kind": "sharded"}, wait=False)]
        outs = []
        try:
            for job in jobs:
                outs.append(job.communicate(timeout=150)[0])
                self.assertEqual(job.returncode, 0, outs[-1])
        finally:
            for job in jobs:
                if job.poll() is None:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
        self.assert_resumed_without_loss(self.root, outs[0])
        self.assert_resumed_without_loss(other, outs[1], "sharded")

    def test_each_rank_gets_back_its_own_shard(self):
        done = run_job(self.root, {"kind": "sharded", "kill_at": 9})
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assert_resumed_without_loss(self.root, done.stdout, "sharded")
        self.assertIn("from memory", done.stdout)

    # Both with a message per save (FTRUN_FLASH_LOAN=0) and under a loan of both buffers (a
    # pause after each save, as a training step takes, lets the loan come with the third).
    SAVE_PATHS = (("messages", {}, {"FTRUN_FLASH_LOAN": "0"}), ("loan", {"pause": 0.03}, {}))

    def killed(self, kill_at, kill_how):
        """Runs a job whose rank 0 is killed at `kill_at` (`kill_how`) on each save path;
        yields the job's output once it resumed without loss and its first attempt's step."""
        for name, config, env in self.SAVE_PATHS:
            with self.subTest(name):
                shutil.rmtree(self.root, ignore_errors=True)
                done = run_job(self.root, dict(config, kill_at=kill_at, kill_rank=0,
                                               kill_how=kill_how, loan_report=True), env=env)
                self.assertEqual(done.returncode, 0, done.stdout)
                lent = f"lent {kill_at}" in progress(self.root, 0)
                self.assertEqual(lent, name == "loan", progress(self.root, 0))
                yield done, self.assert_resumed_without_loss(self.root, done.stdout)

    def test_a_rank_killed_in_the_middle_of_a_save_leaves_the_previous_snapshot(self):
        for done, resumed in self.killed(7, "mid_save"):
            self.assertEqual(resumed, 7, "step 7 was never committed: step 6 is restored")
            self.assertIn("ftrun: restored step 6 from memory", done.stdout)

    def test_a_rank_killed_as_its_save_returns_keeps_that_step(self):
        # The commit waits for no answer: the agent reads what the dead rank sent (or recorded
        # under a loan) before it handles the exit, so the step the rank was told is saved is
        # the one restored.
        for done, resumed in self.killed(9, "after_save"):
            self.assertEqual(resumed, 10, "step 9's save returned before the kill")
            self.assertIn("ftrun: restored step 9 from memory", done.stdout)

    def test_a_job_that_fails_for_good_is_persisted_and_a_new_job_resumes(self):
        failed = run_job(self.root, {"kill_at": 10}, restarts=0)
        self.assertEqual(failed.returncode, 1, failed.stdout)
        self.assertRegex(failed.stdout, r"flash checkpoint: step=1[01] stored at ")
        with open(os.path.join(self.root, "ckpt", "dlrover_latest.txt")) as f:
            stored = int(f.read())
        link = os.path.join(self.root, "ckpt", str(stored), "rank_0.pt")
        self.assertTrue(os.path.islink(link) and os.path.isfile(link), link)
        # The agent wrote torch.save's format: any tool reads it with torch.load.
        import torch
        saved = torch.load(link)
        self.assertEqual((saved["step"], sorted(saved)),
                         (stored, ["ballast", "model", "opt", "rank", "step"]))
        again = run_job(self.root, {})
        self.assertEqual(again.returncode, 0, again.stdout)
        starts = [l for l in progress(self.root, 0) if l.startswith("start")]
        self.assertEqual(starts[-1], f"start {stored + 1} attempt 0")
        self.assertEqual(final(self.root), self.fault_free("ddp"))

    def test_sigterm_writes_the_newest_snapshot_before_ftrun_exits(self):
        job = run_job(self.root, {"pause": 0.1, "steps": 1000}, wait=False)
        try:
            wait_for(lambda: sum(l.startswith("saved") for l in progress(self.root, 0)) >= 5,
                     "five saves")
            os.kill(job.pid, signal.SIGTERM)
            out, _ = job.communicate(timeout=60)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
        saved = [int(l.split()[1]) for l in progress(self.root, 0) if l.startswith("saved")]
        with open(os.path.join(self.root, "ckpt", "dlrover_latest.txt")) as f:
            stored = int(f.read())
        self.assertIn(stored, saved, out)
        self.assertGreaterEqual(stored, max(saved) - 1, "the newest (or the one being saved)")
        self.assertIn("flash checkpoint: the job failed; writing", out)

    def test_a_state_over_the_budget_is_refused_and_names_the_budget(self):
        done = run_job(self.root, {"ballast_mb": 2, "steps": 3}, extra=("--flash-memory-budget",
                                                                       "1M"))
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertIn("NOT saved to memory", done.stdout)
        self.assertIn("--flash-memory-budget (FTRUN_FLASH_MEMORY_BUDGET)", done.stdout)
        self.assertEqual([l for l in progress(self.root, 0) if l.startswith("saved")],
                         ["saved 0 False", "saved 1 False", "saved 2 False"])

    def test_the_agents_memory_goes_with_the_agent_even_when_it_is_sigkilled(self):
        # The agent's own memfds, not the machine's Shmem: other jobs on the machine (tests
        # run in parallel) allocate and free shared memory meanwhile.
        job = run_job(self.root, {"ballast_mb": 64, "pause": 0.2, "steps": 1000}, wait=False)
        try:
            wait_for(lambda: sum(l.startswith("saved") for l in progress(self.root, 0)) >= 3,
                     "three saves")
            held = memfds(job.pid)
            self.assertGreater(sum(held.values()), 100 << 20,
                               "two 64 MiB buffers in the agent's memory")
            os.killpg(job.pid, signal.SIGKILL)  # the agent and its workers
            job.wait(timeout=30)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
        wait_for(lambda: not holders(held), "no process to hold the snapshot memory")


def assert_same_weights(test, finals, clean):
    """Each rank's final weights equal the fault-free run's (to 1e-6)."""
    for got, want in zip(finals, clean):
        for key in ("w", "b"):
            test.assertEqual(len(got[key]), len(want[key]))
            test.assertLess(max(abs(x - y) for x, y in zip(got[key], want[key])), 1e-6)


class Processes:
    """A test's ftrun processes (each in its own session, its output in a file under
    self.root): started with start(), SIGKILLed with their children at tearDown if still
    running. setUp sets self.root first and calls processes_setup()."""

    def processes_setup(self):
        self.env = dict(os.environ)
        self.env.pop("FTRUN_CONTROL_SOCKET", None)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def start(self, args, name, env=None):
        """ftrun with `args`, its output in self.root/`name`; env: variables added."""
        with open(os.path.join(self.root, name), "w") as log:
            p = subprocess.Popen([FTRUN, *args], stdout=log, stderr=subprocess.STDOUT,
                                 env=dict(self.env, **(env or {})), start_new_session=True)
        self.procs.append(p)
        return p

    # A two-node job on loopback: an `ftrun master` and agents that join it. The rendezvous
    # notices a lost node within about 3 s.
    TWO_NODES_CONF = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"

    def start_master(self, port, run_id, conf, options=(), name="master.log"):
        """`ftrun master` of a 2-node job on `port` (log: `name`), once it listens."""
        p = self.start(["master", "--port", str(port), "--nnodes", "2", "--rdzv-id", run_id,
                        "--rdzv-conf", conf, *options], name)
        log = os.path.join(self.root, name)
        wait_for(lambda: "listening" in open(log).read(), "the master", 60)
        return p

    def start_agent(self, name, endpoint, run_id, conf, options, script, env=None):
        """An agent of a 2-node job that joins the master at `endpoint` (log: `name`), its
        workers `/usr/bin/python3 script...`; options: the agent's own (ranks, restarts...)."""
        return self.start(["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                           endpoint, "--rdzv-id", run_id, "--rdzv-conf", conf + ",is_host=0",
                           "--local-addr", "127.0.0.1", *options, "--no-python",
                           "/usr/bin/python3", *script], name, env)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class NodeLossTest(Processes, unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ftrun-flash-nodes-")
        self.processes_setup()

    def test_a_replaced_node_gets_the_newest_step_from_the_surviving_nodes_memory(self):
        root, endpoint = self.root, f"127.0.0.1:{free_port()}"
        config = json.dumps({"steps": 60, "kill_rank": -1, "pause": 0.05})

        def agent(name):
            return self.start_agent(
                name, endpoint, "flash", self.TWO_NODES_CONF,
                ["--nproc-per-node", "1", "--max-restarts", "5", "--monitor-interval", "0.1",
                 "--log-dir", os.path.join(root, "logs")], [__file__, "train", root, config])

        def saved():
            return {int(l.split()[1]) for r in (0, 1) for l in progress(root, r)
                    if l.startswith("saved") and l.endswith("True")}

        self.start_master(endpoint.split(":")[1], "flash", self.TWO_NODES_CONF,
                          ["--max-restarts", "5"])
        a, b = agent("a.log"), agent("b.log")
        wait_for(lambda: len(saved()) >= 10, "ten saves")
        os.killpg(b.pid, signal.SIGKILL)  # the node: its agent and its rank
        b.wait(timeout=30)
        before = max(saved())
        b2 = agent("b2.log")
        self.assertEqual(a.wait(timeout=120), 0)
        self.assertEqual(b2.wait(timeout=60), 0)
        logs = ""
        for name in ("a.log", "b2.log"):
            with open(os.path.join(root, name)) as f:
                logs += f.read()
        self.assertRegex(logs, r"ftrun: restored step \d+ from memory \(ranks \[\d\] from rank")
        starts = [l for r in (0, 1) for l in progress(root, r) if l.startswith("start")]
        resumed = {int(l.split()[1]) for l in starts if not l.startswith("start 0 ")}
        self.assertEqual(len(resumed), 1, starts)
        self.assertGreaterEqual(resumed.pop(), before, "at most the step in flight is redone")
        clean = FlashMemoryTest.fault_free("ddp", 60)
        assert_same_weights(self, final(root), clean)

if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "train":
        train(sys.argv[2], json.loads(sys.argv[3]))
    else:
        unittest.main()
