#!/usr/bin/python3
"""A bounded chaos run: real torch.distributed (gloo) training through ftrun while a seeded
schedule of faults hits it, then proof that nothing was lost.

The job: `ftrun master` (a standalone rendezvous server, so that any agent may die) and three
agents on loopback (dynamic rendezvous, --nnodes 2:3, one rank each) running
scripts/demo/train.py with the ftrun Python helper, periodic checkpoints and a world-size-
independent global batch. The faults, one after another as the training progresses (the
ranks wait at each fault's step until it is injected, `train.py --hold`, so a fault that takes
long on a loaded machine never lets the job run past the next one):
  kill-rank   SIGKILL of a rank (ftrun sees the exit; a survivor saves; the group restarts)
  stop-rank   SIGSTOP of a rank: a hang, caught by --hang-timeout
  kill-agent  SIGKILL of an agent; its node comes back a few seconds later, as a scheduler
              would restart it (the others go on with 2 nodes, then scale back up to 3)
  kill-master SIGKILL of `ftrun master`, the process hosting the rendezvous server; it is
              started again 1-2 s later with no state (as a Kubernetes Deployment would), on
              the same port: within the outage window (5 s here) the agents rejoin it with the
              round their workers run, it takes that round over, and the job goes on without
              a restart (the same rank processes, no new attempt)
  forge       an outsider (tests/bench/rendezvous_outsider: no token, no member) learns the
              members' node ids from Status and makes every call it can in their names (Join
              elsewhere, failure/success/stop/partition reports, Watch, Leave): every one is
              refused, and the job goes on without a restart
  watch-flood 20,000 Watch calls at once against the rendezvous from 32 connections, as
              made-up nodes and in the members' names: all answered, `ftrun master` stays
              under 200 MB (VmRSS), and the job goes on without a restart
  hang-save   the next fault-time save handler hangs, then a rank is killed: the save times
              out (--save-timeout) and the job restarts from the last complete checkpoint
  control-flood  300 connections to a rank's control socket, half of them sending a
              30,000-deep JSON line before any hello, then that rank is SIGKILLed: its agent
              still restarts the job in time, with bounded memory
  stray-console  agent 2's console (its stdout, a pipe: it runs with --tee 3) stops being
              read, and a worker of the next attempt leaves a setsid'd process behind; a rank
              is killed, agent 2's new worker floods the console, then that worker is killed:
              the job restarts in time, agent 2 says it drops console output, its memory stays
              bounded, and the setsid'd process is gone with its attempt
Not among the faults: a partition between two nodes. On loopback every agent reaches every
other; cutting one pair off takes network namespaces, i.e. root: `--scenario partition` runs
a job of its own in namespaces it creates (scripts/chaos_partition.py), cuts two agents off
from each other mid-job and heals them (the pair named, no restart spent, no step lost); it
skips, saying why, where namespaces cannot be created.
A stopped rank (stop-rank) must cost no grace period: it is gone within --hang-timeout plus
15 s of its SIGSTOP (the stop grace is 30 s).
At the end: the job finished (exit 0), the step count is exact, the final weights equal a
fault-free run's (float64, within 1e-9), no process of the job is left, and one summary line
says how many faults were injected and survived and how many completed steps were lost
(done again after a restart).

  scripts/chaos.py [--seed N] [--faults N] [--steps N] [--short] [--ftrun PATH] [--keep]
                   [--scenario faults|partition]
Exit status 0 when every check passed. Needs Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "scripts", "demo", "train.py")
KINDS = ["kill-rank", "stop-rank", "kill-agent", "kill-master", "hang-save", "control-flood",
         "stray-console", "forge", "watch-flood"]
# Faults that must cost no restart: the job goes on with the same rank processes.
NO_RESTART = {"kill-master", "forge", "watch-flood"}
WATCH_FLOOD = 20000
CONSOLE_SLOT = 2  # the agent whose console (stdout) chaos.py reads, and may stop reading
HANG_TIMEOUT = 6
RSS_BOUND_KB = 200 * 1024
# Workers run through this PYTHON_EXEC: a stray once ordered (stray-order, claimed by one
# worker), and while `noise` exists CONSOLE_SLOT's workers print a burst of lines (for its
# tee'd console) first.
WRAPPER = """#!/bin/sh
out="$(dirname "$0")"
if mv "$out/stray-order" "$out/stray-order.$$" 2>/dev/null; then
  setsid sh -c 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 3600' sh "$out/stray.pid" \
    </dev/null >/dev/null 2>&1 &
fi
if [ -n "$CHAOS_NOISE" ] && [ -e "$out/noise" ]; then
  yes "chaos: noise for the console of agent $CHAOS_NOISE" | head -n 50000
fi
exec /usr/bin/python3 "$@"
"""


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


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().split(")")[-1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


class Console:
    """An agent's stdout as a small pipe that a thread copies into its log, unless paused."""

    def __init__(self, logf):
        self.read_fd, self.write_fd = os.pipe()
        fcntl.fcntl(self.write_fd, 1031, 4096)  # F_SETPIPE_SZ: it fills at once when paused
        self.reading = threading.Event()
        self.reading.set()
        self.logf = logf
        threading.Thread(target=self.copy, daemon=True).start()

    def copy(self):
        while True:
            self.reading.wait()
            data = os.read(self.read_fd, 65536)
            if not data:
                return
            self.logf.write(data.decode(errors="replace"))
            self.logf.flush()


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
        wrapper = os.path.join(out, "python")
        with open(wrapper, "w") as f:
            f.write(WRAPPER)
        os.chmod(wrapper, 0o755)
        self.env = dict(os.environ, PYTHON_EXEC=wrapper)
        self.console = None  # CONSOLE_SLOT's Console
        self.logs = {}  # slot -> its agent's log file
        self.agents = {}  # slot -> Popen
        self.starts = 0
        self.master = None
        self.master_starts = 0
        # is_host=0: the agents share the master's host, and none of them may serve the
        # rendezvous itself (any agent may be killed). A 5 s window for a master outage.
        conf = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=5,is_host=0"
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
             # A week of faults in a minute: the same node failing 3 times in 10 minutes is the
             # run's design, not a bad node, so none is left out (--exclude-after's default).
             "--exclude-after", "0",
             "--rdzv-conf", "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=5",
             "--event-log", os.path.join(self.out, "events.jsonl")],
            stdout=open(os.path.join(self.out, f"master.{self.master_starts}.log"), "w"),
            stderr=subprocess.STDOUT,
            env=self.env)

    def start_agent(self, slot):
        self.starts += 1
        self.logs[slot] = os.path.join(self.out, f"agent{slot}.{self.starts}.log")
        logf = open(self.logs[slot], "w")
        stdout, env, tee = logf, self.env, []
        if slot == CONSOLE_SLOT:
            self.console = Console(open(os.path.join(self.out, f"console{slot}.{self.starts}.log"),
                                        "w"))
            stdout, tee = self.console.write_fd, ["--tee", "3"]
            env = dict(self.env, CHAOS_NOISE=str(slot))
        self.agents[slot] = subprocess.Popen(
            [self.args.ftrun, *self.common, "--nproc-per-node", "1", "--max-restarts", "30",
             "--hang-timeout", str(HANG_TIMEOUT), "--save-timeout", "10",
             "--monitor-interval", "0.5", *tee,
             "--log-dir", os.path.join(self.out, "logs"),
             *self.train_args(self.out), "--progress", os.path.join(self.out, "progress"),
             "--attempt-log", os.path.join(self.out, "attempts.jsonl"),
             "--hold", self.hold_file(),
             "--hang-save-once", os.path.join(self.out, "hang-save")],
            stdout=stdout, stderr=logf, env=env)
        if slot == CONSOLE_SLOT:
            os.close(self.console.write_fd)

    def agent_log(self, slot):
        try:
            with open(self.logs[slot]) as f:
                return f.read()
        except OSError:
            return ""

    def workers(self):
        """Live training processes of this job (python running train.py; the agents' own
        command lines name train.py too)."""
        out = []
        for p in pids_with(self.out):
            args = cmdline(p)
            # Not a --warm-restart standby still waiting (its command line names the script).
            if args and b"python" in os.path.basename(args[0]) and any(
                    a.endswith(b"train.py") for a in args) and not any(
                    a.endswith(b"ftrun/standby.py") for a in args):
                out.append(p)
        return out

    def hold_file(self):
        return os.path.join(self.out, "hold")

    def hold(self, step):
        """The ranks wait before `step` (None: no more) until told otherwise: a fault that
        takes long (a flood under load) must not let the job run past the next fault."""
        tmp = self.hold_file() + ".tmp"
        with open(tmp, "w") as f:
            f.write("" if step is None else str(step))
        os.replace(tmp, self.hold_file())

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


def control_flood(path):
    """300 connections to a control socket; every other one sends a 30,000-deep JSON line
    (60 KB) before any hello. Returns the sockets (kept open while the fault plays out)."""
    deep = b'{"type":"hello","x":' + b"[" * 30000 + b"]" * 30000 + b"}\n"
    socks = []
    for i in range(300):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
            if i % 2 == 0:
                s.send(deep)
        except OSError:  # the backlog is full for a moment, or the agent closed it
            pass
        socks.append(s)
    return socks


def control_socket(worker):
    try:
        with open(f"/proc/{worker}/environ", "rb") as f:
            for var in f.read().split(b"\0"):
                if var.startswith(b"FTRUN_CONTROL_SOCKET="):
                    return var.split(b"=", 1)[1].decode()
    except OSError:
        pass
    return None


def watch_rss(job, slot, peak):
    """A wait_for condition wrapper that records the agent's largest resident set."""
    def sample():
        p = job.agents.get(slot)
        if p is not None and p.poll() is None:
            peak[0] = max(peak[0], rss_kb(p.pid))
    return sample


def inject(job, kind, rng):
    """Injects one fault. Returns (the slot of an agent to start again or None, a check to run
    once the job runs again: it returns the failures it found)."""
    live = [s for s, p in job.agents.items() if p.poll() is None]
    no_check = lambda: []  # noqa: E731
    if kind == "kill-agent":
        slot = rng.choice(live)
        log(f"SIGKILL agent {slot} (pid {job.agents[slot].pid})")
        job.agents[slot].send_signal(signal.SIGKILL)
        job.agents[slot].wait()
        return slot, no_check
    if kind == "kill-master":
        down = rng.uniform(1, 2)
        log(f"SIGKILL ftrun master (pid {job.master.pid}); started again {down:.1f}s later")
        job.master.send_signal(signal.SIGKILL)
        job.master.wait()
        time.sleep(down)  # the outage
        job.start_master()
        return None, no_check
    if kind == "forge":
        return None, forge_fault(job)
    if kind == "watch-flood":
        return None, watch_flood_fault(job)
    workers = job.workers()
    if not workers:
        return None, no_check
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
        stopped = time.monotonic()
        os.kill(victim, signal.SIGSTOP)
        # Caught after --hang-timeout, then SIGTERM and SIGCONT: it must not wait for the
        # 30 s stop grace and its SIGKILL.
        dead = wait_for(lambda: not alive(victim), HANG_TIMEOUT + 45, "the stopped rank to go")
        took = time.monotonic() - stopped
        log(f"a stopped rank: gone {took:.1f}s after the SIGSTOP (--hang-timeout {HANG_TIMEOUT})")
        if not dead or took > HANG_TIMEOUT + 15:
            return None, lambda: [f"a stopped rank lived {took:.0f}s after its SIGSTOP "
                                  f"(the stop grace is 30 s)"]
    elif kind == "control-flood":
        return control_flood_fault(job, victim)
    elif kind == "stray-console":
        return stray_console_fault(job, victim)
    return None, no_check


def recovery_failures(kind, took, slot, peak_kb):
    """What went wrong with a restart under attack: too slow, or the agent's memory grew."""
    out = []
    if took > 30:
        out.append(f"{kind}: the restart took {took:.0f}s")
    if peak_kb > RSS_BOUND_KB:
        out.append(f"{kind}: agent {slot} grew to {peak_kb // 1024} MB")
    return out


def control_flood_fault(job, victim):
    path, slot = control_socket(victim), None
    for s, p in job.agents.items():
        if p.pid == ppid(victim):
            slot = s
    if path is None or slot is None:
        log(f"control-flood: no control socket for {victim}; a plain SIGKILL")
        os.kill(victim, signal.SIGKILL)
        return None, lambda: []
    socks = control_flood(path)
    log(f"control-flood: 300 connections (150 with 30,000-deep lines) to agent {slot}'s "
        f"control socket; SIGKILL rank process {victim}")
    os.kill(victim, signal.SIGKILL)
    peak = [0]
    sample = watch_rss(job, slot, peak)
    killed = time.monotonic()

    def check():
        sample()
        for s in socks:
            s.close()
        took = time.monotonic() - killed
        log(f"control-flood: the job ran again {took:.1f}s after the kill; agent {slot} "
            f"VmRSS {peak[0] // 1024} MB")
        return recovery_failures("control-flood", took, slot, peak[0])
    return None, check


def stray_console_fault(job, victim):
    agent = job.agents.get(CONSOLE_SLOT)
    if agent is None or agent.poll() is not None or job.console is None:
        log("stray-console: agent 2 is away; a plain SIGKILL")
        os.kill(victim, signal.SIGKILL)
        return None, lambda: []
    job.console.reading.clear()
    open(os.path.join(job.out, "noise"), "w").close()
    stray_pid = os.path.join(job.out, "stray.pid")
    open(os.path.join(job.out, "stray-order"), "w").close()
    log(f"stray-console: agent {CONSOLE_SLOT}'s console is no longer read, the next attempt "
        f"leaves a setsid'd process; SIGKILL rank process {victim}")
    os.kill(victim, signal.SIGKILL)
    peak = [0]
    sample = watch_rss(job, CONSOLE_SLOT, peak)
    failures = []

    def dropping():
        sample()
        return (os.path.exists(stray_pid) and
                "console=stdout is not being read" in job.agent_log(CONSOLE_SLOT) and
                any(ppid(w) == agent.pid for w in job.workers()))
    if not wait_for(dropping, 60, "a stray and a flooded console"):
        failures.append("stray-console: no stray, or agent 2 never said it drops console output")
    else:
        # The agent must still see its own worker's death with its console stuck.
        mine = [w for w in job.workers() if ppid(w) == agent.pid]
        log(f"stray-console: stray pid {open(stray_pid).read().strip()}; SIGKILL agent "
            f"{CONSOLE_SLOT}'s rank process {mine[0]}")
        os.kill(mine[0], signal.SIGKILL)
    killed = time.monotonic()
    before = job.progress()

    def check():
        # The survival wait may have seen the first restart: wait for the second one.
        if not wait_for(lambda: sample() or (job.progress()[0] != before[0] and
                                              job.progress()[1] > before[1]), 60,
                        "progress after the second kill"):
            failures.append("stray-console: no progress after agent 2's rank was killed")
        took = time.monotonic() - killed
        os.remove(os.path.join(job.out, "noise"))
        job.console.reading.set()
        out = list(failures)
        try:
            stray = int(open(stray_pid).read())
        except (OSError, ValueError):
            stray = None
        gone = "no stray"
        if stray is not None:
            gone = "the stray is gone"
            if not wait_for(lambda: not alive(stray), 15, "the stray to go"):
                gone = "the stray is left"
                out.append(f"stray-console: the setsid'd process {stray} outlived its attempt")
                os.kill(stray, signal.SIGKILL)
            os.rename(stray_pid, stray_pid + ".done")
        log(f"stray-console: the job ran again {took:.1f}s after the kill; agent "
            f"{CONSOLE_SLOT} VmRSS {peak[0] // 1024} MB; {gone}")
        return out + recovery_failures("stray-console", took, CONSOLE_SLOT, peak[0])
    return None, check


def outsider(job, *args):
    """Runs tests/bench/rendezvous_outsider against the job's rendezvous; its output line."""
    tool = os.path.join(os.path.dirname(os.path.dirname(job.args.ftrun)), "tests",
                        "rendezvous_outsider")
    r = subprocess.run([tool, "--target", f"127.0.0.1:{job.port}", "--run-id", "chaos", *args],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout.strip(), r.stderr.strip()


def forge_fault(job):
    code, out, err = outsider(job, "--forge", "--round", str(round_of(job)))
    log(f"forge: an outsider's calls in the members' names: {out or err}")
    failures = []
    fields = dict(kv.split("=") for kv in out.split() if "=" in kv)
    if code != 0 or int(fields.get("forged", 0)) == 0:
        failures.append(f"forge: the outsider could not run ({err or out})")
    elif fields.get("accepted") != "0":
        failures.append(f"forge: {fields.get('accepted')} forged calls were accepted: {err}")
    return lambda: failures


def watch_flood_fault(job):
    peak = [rss_kb(job.master.pid)]
    before = peak[0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kb(job.master.pid))
            time.sleep(0.05)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code, out, err = outsider(job, "--watch-flood", str(WATCH_FLOOD), "--channels", "32")
    done.set()
    sampler.join()
    log(f"watch-flood: {out or err}; ftrun master VmRSS {before // 1024} MB before, "
        f"{peak[0] // 1024} MB at most")
    failures = []
    if code != 0 or f"answered={WATCH_FLOOD}" not in out:
        failures.append(f"watch-flood: not every watch was answered ({out or err})")
    if peak[0] > RSS_BOUND_KB:
        failures.append(f"watch-flood: ftrun master grew to {peak[0] // 1024} MB")
    return lambda: failures


def round_of(job):
    """The round the job runs now, from the newest round_formed record of the event log."""
    rnd = 0
    try:
        with open(os.path.join(job.out, "events.jsonl")) as f:
            for line in f:
                if '"round_formed"' in line:
                    rnd = json.loads(line).get("round", rnd)
    except (OSError, ValueError):
        pass
    return rnd


def attempts(out):
    try:
        with open(os.path.join(out, "attempts.jsonl")) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def partition(args):
    """The partition scenario (scripts/chaos_partition.py): 0 passed, 77 skipped, 1 failed."""
    import chaos_partition
    if args.short:
        args.steps = 150
    out = args.out or tempfile.mkdtemp(prefix="ftrun-chaos-partition.")
    os.makedirs(out, exist_ok=True)
    log(f"scenario=partition steps={args.steps} out={out}")
    failures = chaos_partition.run(args, out)
    if failures == chaos_partition.SKIP:
        if not args.out:
            subprocess.run(["rm", "-rf", out])
        return chaos_partition.SKIP
    finish(args, out, failures)
    return 1 if failures else 0


def finish(args, out, failures):
    """Prints the failures; keeps the output directory when asked or when something failed."""
    for f in failures:
        print(f"chaos: FAILED: {f}", flush=True)
    if failures or args.keep:
        print(f"chaos: logs in {out}", flush=True)
    elif not args.out:
        subprocess.run(["rm", "-rf", out])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    p.add_argument("--faults", type=int, default=8)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--short", action="store_true",
                   help="CI: one fault of each kind (kill-rank within control-flood), 200 steps")
    p.add_argument("--ftrun", default=os.path.join(ROOT, "build", "launcher", "ftrun"))
    p.add_argument("--out", default=None)
    p.add_argument("--keep", action="store_true", help="keep the output directory")
    p.add_argument("--timeout", type=float, default=900, help="the whole run, seconds")
    p.add_argument("--scenario", choices=["faults", "partition"], default="faults",
                   help="faults: the seeded schedule above; partition: scripts/chaos_partition.py")
    args = p.parse_args()
    if args.scenario == "partition":
        return partition(args)
    kinds_used = KINDS
    if args.short:  # control-flood is a kill-rank too: one fault fewer
        kinds_used = [k for k in KINDS if k != "kill-rank"]
        args.faults, args.steps = len(kinds_used), 200
    rng = random.Random(args.seed)
    kinds = (kinds_used * (args.faults // len(kinds_used)) +
             rng.sample(kinds_used, args.faults % len(kinds_used)))
    rng.shuffle(kinds)
    out = args.out or tempfile.mkdtemp(prefix="ftrun-chaos.")
    os.makedirs(out, exist_ok=True)
    log(f"seed={args.seed} faults={kinds} steps={args.steps} out={out}")
    started = time.monotonic()

    reference = reference_weights(args, out)
    if reference is None:
        return 1
    job = Job(args, out)
    # Faults at evenly spread points of the training, each once the job runs again; the job
    # waits at each point until its fault is injected.
    points = [int(args.steps * (0.1 + 0.75 * i / max(1, len(kinds)))) for i in range(len(kinds))]
    job.hold(points[0] if points else None)
    job.start_master()
    for slot in range(3):
        job.start_agent(slot)
    failures = []
    injected = survived = 0
    pending_restart = None  # the slot of an agent to start again
    deadline = started + args.timeout
    for i, (kind, at) in enumerate(zip(kinds, points)):
        if not wait_for(lambda: job.progress()[1] >= at or job.master.poll() is not None,
                        deadline - time.monotonic(), f"step {at}"):
            failures.append(f"no progress to step {at}")
            break
        job.hold(points[i + 1] if i + 1 < len(points) else None)
        if job.master.poll() is not None:
            failures.append(f"the job ended before the {kind} fault at step {at}")
            break
        if pending_restart is not None:  # slot 0 is a slot too
            job.start_agent(pending_restart)
            log(f"agent {pending_restart} started again")
            pending_restart = None
        before = job.progress()
        attempts_before = attempts(out)
        slot, check = inject(job, kind, rng)
        injected += 1
        if slot is not None:
            time.sleep(rng.uniform(2, 5))  # the node is away for a while
            pending_restart = slot
        if kind in NO_RESTART:
            # Survived: the same group got well past where the fault struck, with no new
            # attempt (a few steps: a restart would have shown by then).
            went_on = wait_for(lambda: job.progress()[1] > before[1] + 10 or
                               job.master.poll() is not None, deadline - time.monotonic(),
                               f"progress after {kind}")
            if went_on:
                survived += 1
                failures.extend(check())
                if attempts(out) != attempts_before or job.progress()[0] != before[0]:
                    failures.append(f"{kind} cost a restart")
                else:
                    log(f"{kind}: the job went on without a restart")
                continue
            failures.append(f"no progress after {kind}")
            break
        # Survived: a new group (rank 0 is a new process) got past where the fault struck.
        if wait_for(lambda: (job.progress()[0] != before[0] and job.progress()[1] > before[1])
                    or job.master.poll() is not None, deadline - time.monotonic(),
                    f"progress after {kind}"):
            survived += 1
            failures.extend(check())
        else:
            failures.append(f"no progress after {kind}")
            break
    job.hold(None)  # also after a failure above: the job may finish
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
    finish(args, out, failures)
    return 0 if not failures and survived == injected else 1


if __name__ == "__main__":
    sys.exit(main())
