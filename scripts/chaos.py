#!/usr/bin/python3
"""A bounded chaos run: real torch.distributed (gloo) training through ftrun while a seeded
schedule of faults hits it, then proof that nothing was lost.

The job: `ftrun master` (a standalone rendezvous server, so that any agent may die) and three
agents on loopback (dynamic rendezvous, --nnodes 2:3, one rank each) running
scripts/demo/train.py with the ftrun Python helper, periodic checkpoints and a world-size-
independent global batch. The faults, one after another as the training progresses:
  kill-rank   SIGKILL of a rank (ftrun sees the exit; a survivor saves; the group restarts)
  stop-rank   SIGSTOP of a rank: a hang, caught by --hang-timeout
  kill-agent  SIGKILL of an agent; its node comes back a few seconds later, as a scheduler
              would restart it (the others go on with 2 nodes, then scale back up to 3)
  kill-master SIGKILL of `ftrun master`, the process hosting the rendezvous server; it is
              started again at once with no state (as a Kubernetes Deployment would), the
              agents rejoin it and the job goes on (round and restart count carried on)
  hang-save   the next fault-time save handler hangs, then a rank is killed: the save times
              out (--save-timeout) and the job restarts from the last complete checkpoint
At the end: the job finished (exit 0), the step count is exact, the final weights equal a
fault-free run's (float64, within 1e-9), no process of the job is left, and one summary line
says how many faults were injected and survived and how many completed steps were lost
(done again after a restart).

  scripts/chaos.py [--seed N] [--faults N] [--steps N] [--short] [--ftrun PATH] [--keep]
Exit status 0 when every check passed. Needs Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "scripts", "demo", "train.py")
KINDS = ["kill-rank", "stop-rank", "kill-agent", "kill-master", "hang-save"]


def log(msg):
    print(f"chaos: {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def pids_with(marker):
    """Live processes whose command line mentions `marker` (our output directory)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            if any(marker.encode() in arg for arg in cmdline(int(entry))) and alive(int(entry)):
                out.append(int(entry))
    return out


class Job:
    def __init__(self, args, out):
        self.args = args
        self.out = out
        self.port = free_port()
        self.env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3")
        self.agents = {}  # slot -> Popen
        self.starts = 0
        self.master = None
        self.master_starts = 0
        # is_host=0: the agents share the master's host, and none of them may serve the
        # rendezvous itself (any agent may be killed).
        conf = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3,is_host=0"
        self.common = ["--nnodes", "2:3", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                       f"127.0.0.1:{self.port}", "--rdzv-id", "chaos", "--rdzv-conf", conf]

    def train_args(self, out):
        return [TRAIN, "--steps", str(self.args.steps), "--global-batch", "48",
                "--ckpt-every", "20", "--step-time", str(self.args.step_time), "--out", out]

    def start_master(self):
        self.master_starts += 1
        self.master = subprocess.Popen(
            [self.args.ftrun, "master", "--port", str(self.port), "--nnodes", "2:3",
             "--rdzv-id", "chaos", "--max-restarts", "30", "--save-timeout", "10",
             "--rdzv-conf", "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3",
             "--event-log", os.path.join(self.out, "events.jsonl")],
            stdout=open(os.path.join(self.out, f"master.{self.master_starts}.log"), "w"),
            stderr=subprocess.STDOUT,
            env=self.env)

    def start_agent(self, slot):
        self.starts += 1
        logf = open(os.path.join(self.out, f"agent{slot}.{self.starts}.log"), "w")
        self.agents[slot] = subprocess.Popen(
            [self.args.ftrun, *self.common, "--nproc-per-node", "1", "--max-restarts", "30",
             "--hang-timeout", "6", "--save-timeout", "10", "--monitor-interval", "0.5",
             "--log-dir", os.path.join(self.out, "logs"),
             *self.train_args(self.out), "--progress", os.path.join(self.out, "progress"),
             "--attempt-log", os.path.join(self.out, "attempts.jsonl"),
             "--hang-save-once", os.path.join(self.out, "hang-save")],
            stdout=logf, stderr=subprocess.STDOUT, env=self.env)

    def workers(self):
        """Live training processes of this job (python running train.py; the agents' own
        command lines name train.py too)."""
        out = []
        for p in pids_with(self.out):
            args = cmdline(p)
            if args and b"python" in os.path.basename(args[0]) and any(
                    a.endswith(b"train.py") for a in args):
                out.append(p)
        return out

    def progress(self):
        """(rank 0's pid, completed steps) of the newest progress line."""
        try:
            with open(os.path.join(self.out, "progress")) as f:
                lines = f.read().split("\n")
        except OSError:
            return (-1, 0)
        for line in reversed(lines):
            parts = line.split()
            if len(parts) == 2:
                return (int(parts[0]), int(parts[1]) + 1)
        return (-1, 0)


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    log(f"timed out after {timeout:.0f}s waiting for {what}")
    return False


def reference_weights(args, out):
    """The same training without faults (3 ranks on one node)."""
    ref = os.path.join(out, "reference")
    os.makedirs(ref)
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3")
    job = Job(args, out)
    r = subprocess.run([args.ftrun, "--nproc-per-node", "3", "--log-level", "warning",
                        "--log-dir", os.path.join(ref, "logs"), *job.train_args(ref),
                        "--step-time", "0"],
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        log(f"the fault-free run failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
        return None
    with open(os.path.join(ref, "result.0.json")) as f:
        return json.load(f)["weights"]


def steps_lost(out):
    """Completed steps done again after restarts: for each new start of the group, the newest
    step completed before it (the progress file is in time order; rank 0's pid tells the
    starts apart) minus the step it resumed at."""
    try:
        with open(os.path.join(out, "attempts.jsonl")) as f:
            starts = [json.loads(line) for line in f if line.strip()]
        with open(os.path.join(out, "progress")) as f:
            progress = [tuple(map(int, line.split())) for line in f if line.strip()]
    except OSError:
        return 0
    lost = 0
    for s in starts[1:]:
        first = next((i for i, (pid, _) in enumerate(progress) if pid == s["pid"]),
                     len(progress))
        before = [step for (_, step) in progress[:first]]
        if before:
            lost += max(0, max(before) + 1 - s["resumed_at"])
    return lost


def inject(job, kind, rng):
    live = [s for s, p in job.agents.items() if p.poll() is None]
    if kind == "kill-agent":
        slot = rng.choice(live)
        log(f"SIGKILL agent {slot} (pid {job.agents[slot].pid})")
        job.agents[slot].send_signal(signal.SIGKILL)
        job.agents[slot].wait()
        return slot
    if kind == "kill-master":
        log(f"SIGKILL ftrun master (pid {job.master.pid}); started again at once")
        job.master.send_signal(signal.SIGKILL)
        job.master.wait()
        job.start_master()
        return None
    workers = job.workers()
    if not workers:
        return None
    victim = rng.choice(sorted(workers))
    if kind == "hang-save":
        open(os.path.join(job.out, "hang-save"), "w").close()
        log(f"the next fault-time save hangs; SIGKILL rank process {victim}")
        os.kill(victim, signal.SIGKILL)
    elif kind == "kill-rank":
        log(f"SIGKILL rank process {victim}")
        os.kill(victim, signal.SIGKILL)
    elif kind == "stop-rank":
        log(f"SIGSTOP rank process {victim} (a hang)")
        os.kill(victim, signal.SIGSTOP)
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    p.add_argument("--faults", type=int, default=8)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--short", action="store_true",
                   help="CI: one fault of each kind, 200 steps")
    p.add_argument("--ftrun", default=os.path.join(ROOT, "build", "launcher", "ftrun"))
    p.add_argument("--out", default=None)
    p.add_argument("--keep", action="store_true", help="keep the output directory")
    p.add_argument("--timeout", type=float, default=900, help="the whole run, seconds")
    args = p.parse_args()
    if args.short:
        args.faults, args.steps = len(KINDS), 200
    rng = random.Random(args.seed)
    kinds = KINDS * (args.faults // len(KINDS)) + rng.sample(KINDS, args.faults % len(KINDS))
    rng.shuffle(kinds)
    out = args.out or tempfile.mkdtemp(prefix="ftrun-chaos.")
    os.makedirs(out, exist_ok=True)
    log(f"seed={args.seed} faults={kinds} steps={args.steps} out={out}")
    started = time.monotonic()

    reference = reference_weights(args, out)
    if reference is None:
        return 1
    job = Job(args, out)
    job.start_master()
    for slot in range(3):
        job.start_agent(slot)
    failures = []
    injected = survived = 0
    pending_restart = None  # the slot of an agent to start again
    # Faults at evenly spread points of the training, each once the job runs again.
    points = [int(args.steps * (0.1 + 0.75 * i / max(1, len(kinds)))) for i in range(len(kinds))]
    deadline = started + args.timeout
    for kind, at in zip(kinds, points):
        if not wait_for(lambda: job.progress()[1] >= at or job.master.poll() is not None,
                        deadline - time.monotonic(), f"step {at}"):
            failures.append(f"no progress to step {at}")
            break
        if job.master.poll() is not None:
            failures.append(f"the job ended before the {kind} fault at step {at}")
            break
        if pending_restart is not None:  # slot 0 is a slot too
            job.start_agent(pending_restart)
            log(f"agent {pending_restart} started again")
            pending_restart = None
        before = job.progress()
        slot = inject(job, kind, rng)
        injected += 1
        if slot is not None:
            time.sleep(rng.uniform(2, 5))  # the node is away for a while
            pending_restart = slot
        # Survived: a new group (rank 0 is a new process) got past where the fault struck.
        if wait_for(lambda: (job.progress()[0] != before[0] and job.progress()[1] > before[1])
                    or job.master.poll() is not None, deadline - time.monotonic(),
                    f"progress after {kind}"):
            survived += 1
        else:
            failures.append(f"no progress after {kind}")
            break
    if pending_restart is not None and job.master.poll() is None:
        job.start_agent(pending_restart)
    if not wait_for(lambda: job.master.poll() is not None, deadline - time.monotonic(),
                    "the job's end"):
        failures.append("the job did not finish in time")
    for slot, proc in job.agents.items():
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            failures.append(f"agent {slot} did not exit")
    codes = {slot: proc.returncode for slot, proc in job.agents.items()}
    if job.master.returncode != 0:
        failures.append(f"ftrun master exited {job.master.returncode}")
    if any(c != 0 for c in codes.values()):
        failures.append(f"agents exited {codes}")

    result = {}
    try:
        with open(os.path.join(out, "result.0.json")) as f:
            result = json.load(f)
    except OSError:
        failures.append("no result.0.json: the training did not finish")
    if result:
        if result["steps"] != args.steps or job.progress()[1] != args.steps:
            failures.append(f"step count {job.progress()[1]}, expected {args.steps}")
        diff = max(abs(a - b) for a, b in zip(result["weights"], reference))
        if diff > 1e-9:
            failures.append(f"final weights differ from the fault-free run by {diff:.2e}")
        else:
            log(f"final weights equal the fault-free run (max difference {diff:.1e})")
    if not wait_for(lambda: not pids_with(out), 10, "the job's processes to go"):
        failures.append(f"processes left: {pids_with(out)}")
    lost = steps_lost(out)
    with open(os.path.join(out, "attempts.jsonl")) as f:
        restarts = sum(1 for _ in f) - 1
    elapsed = time.monotonic() - started
    print(f"chaos: seed={args.seed} faults injected={injected} survived={survived} "
          f"steps lost={lost} restarts={restarts} steps={job.progress()[1]}/{args.steps} "
          f"time={elapsed:.0f}s result={'ok' if not failures else 'FAILED'}", flush=True)
    for f in failures:
        print(f"chaos: FAILED: {f}", flush=True)
    if failures or args.keep:
        print(f"chaos: logs in {out}", flush=True)
    elif not args.out:
        subprocess.run(["rm", "-rf", out])
    return 0 if not failures and survived == injected else 1


if __name__ == "__main__":
    sys.exit(main())
