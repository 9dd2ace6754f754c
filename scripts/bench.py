#!/usr/bin/python3
"""Benchmark ftrun against Debian's torchrun (torch 1.13) on the same work.

Runs every measurement several times per launcher and prints medians, minimums and the
ratio ftrun/torchrun. A second table puts ftrun variants side by side on the same job: the
pre-flight network check on and off (4 agents on loopback), and `ftrun dlrover-run` against
plain ftrun. Not a test: a missed target is only reported. Exits non-zero only if a launcher
run fails. Stdlib only; run with /usr/bin/python3 (the one that sees torch).
--only SECTION (torchrun, store, recovery, nodeloss, variants, save, scale, flash, etcd,
stacks, replica; repeatable) runs part of it.
"""
import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"

# Debian's torchrun (torch 1.13) needs a one-function patch on Python 3.11.
TORCHRUN = os.path.join(REPO, "scripts", "torchrun_compat.py")


class LauncherFailed(Exception):
    pass


@dataclass
class RunResult:
    wall: float      # seconds from spawn to exit of the launcher
    sampled: object  # what on_start returned
    dir: str         # the run's private dir (logs, TMPDIR, stamp files)


class Bench:
    def __init__(self, ftrun: str, fake_worker: str, runs: int):
        self.runs = runs
        self.root = tempfile.mkdtemp(prefix="ftrun-bench-")
        # Private copies: a rebuild of the tree during the benchmark must not swap binaries.
        self.ftrun = shutil.copy2(ftrun, os.path.join(self.root, "ftrun"))
        self.worker = shutil.copy2(fake_worker, os.path.join(self.root, "fake_worker"))
        self._cache: dict = {}
        self.notes: dict = {}  # by-products of measurements (e.g. the network check's own time)

    def torchrun(self, monitor_interval: float) -> list:
        return [PYTHON, TORCHRUN, "--monitor_interval", str(monitor_interval)]

    def ftrun_cmd(self, *extra: str) -> list:
        """ftrun at its defaults; extra goes after the program name (e.g. "dlrover-run")
        or after the options (e.g. "--network-check")."""
        if extra and not extra[0].startswith("-"):
            return [self.ftrun, extra[0], "--log-level", "warning", *extra[1:]]
        return [self.ftrun, "--log-level", "warning", *extra]

    def command(self, launcher: list, opts: dict, worker: str, worker_args: list,
                run_dir: str) -> list:
        cmd = list(launcher)
        for key, value in opts.items():
            cmd += [f"--{key}", str(value).replace("{dir}", run_dir)]
        return cmd + ["--no_python", worker or self.worker,
                      *[a.replace("{dir}", run_dir) for a in worker_args]]

    def run(self, launcher: list, nproc: int, worker_args: list, worker: str = "",
            on_start: Optional[Callable] = None, nodes: int = 1, **launcher_opts) -> RunResult:
        """Runs `nodes` launchers of one job (c10d on loopback when nodes > 1), each with
        nproc workers (default: the fake worker); every one must exit 0.

        "{dir}" in worker_args and in option values becomes the run's private dir (e.g.
        event_log="{dir}/events"). on_start(popen) runs while
        the (first) launcher is alive (e.g. to sample it) and must return once it has exited.
        """
        run_dir = tempfile.mkdtemp(dir=self.root)
        opts = {"nproc_per_node": nproc, "log_dir": os.path.join(run_dir, "logs")}
        if nodes == 1:
            opts["master_port"] = free_port()
        else:
            opts.update(nnodes=nodes, rdzv_backend="c10d", rdzv_id="bench",
                        rdzv_endpoint=f"127.0.0.1:{free_port()}")
        opts.update(launcher_opts)
        env = dict(os.environ, TMPDIR=run_dir)
        start = time.perf_counter()
        running = []
        for node in range(nodes):
            cmd = self.command(launcher, opts, worker, worker_args, run_dir)
            out = open(os.path.join(run_dir, f"console.{node}"), "w+")
            running.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env),
                            out, cmd))
        extra = on_start(running[0][0]) if on_start else None
        failure = None
        for proc, out, cmd in running:
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            if rc != 0 and failure is None:
                out.seek(0)
                shown = cmd[1:] if cmd[0] == PYTHON else cmd
                failure = f"exit {rc}: {' '.join(shown)}\n{out.read()[-3000:]}"
            out.close()
        wall = time.perf_counter() - start
        if failure:
            raise LauncherFailed(failure)
        return RunResult(wall, extra, run_dir)

    def samples(self, measure: Callable, launcher: list) -> list:
        """N values of measure(bench, launcher); cached so rows can share a launcher's samples."""
        key = (measure.__name__, tuple(launcher))
        if key not in self._cache:
            if launcher[0] == self.ftrun:
                name = " ".join(["ftrun"] + [a for a in launcher[1:]
                                             if a not in ("--log-level", "warning")])
            else:
                name = "torchrun " + " ".join(launcher[2:])
            values = []
            for i in range(self.runs):
                print(f"  {measure.__name__} [{name}] run {i + 1}/{self.runs}", file=sys.stderr, flush=True)
                values.append(measure(self, launcher))
            self._cache[key] = values
        return self._cache[key]

    def paired_samples(self, measure: Callable, left: list, right: list) -> tuple:
        """N values of measure for each of two launchers, run alternately so that a change in
        the machine's load during the benchmark hits both alike."""
        values = ([], [])
        for i in range(self.runs):
            for launcher, out in ((left, values[0]), (right, values[1])):
                name = (" ".join(["ftrun"] + [a for a in launcher[1:]
                                              if a not in ("--log-level", "warning")])
                        if launcher[0] != PYTHON else "torchrun " + " ".join(launcher[2:]))
                print(f"  {measure.__name__} [{name}] run {i + 1}/{self.runs}", file=sys.stderr,
                      flush=True)
                out.append(measure(self, launcher))
        return values

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- measurements: f(bench, launcher argv prefix) -> one value ----

def whole_run(bench: Bench, launcher: list) -> float:
    """Seconds from spawn to exit of the launcher, 4 workers of /bin/true."""
    return bench.run(launcher, 4, [], worker="/bin/true").wall


def restart_latency(bench: Bench, launcher: list) -> float:
    """Ms from rank 1's failure in attempt 0 to the last rank's start in attempt 1."""
    args = ["stamp", "{dir}/start",
            "if-attempt", "0", "if-rank", "1", "stamp", "{dir}/exit",
            "if-attempt", "0", "if-rank", "1", "exit", "1",
            "if-attempt", "0", "sleep", "30",
            "exit", "0"]
    run_dir = bench.run(launcher, 4, args, max_restarts=1).dir
    (exit_ns,) = [int(l.split()[2]) for l in read_lines(f"{run_dir}/exit")]
    starts = [l.split() for l in read_lines(f"{run_dir}/start")]
    restarted = [int(ns) for rank, attempt, ns in starts if attempt == "1"]
    if len(restarted) != 4:
        raise LauncherFailed(f"expected 4 starts in attempt 1, got {len(restarted)}")
    return (max(restarted) - exit_ns) / 1e6


def peak_rss(bench: Bench, launcher: list) -> float:
    """MB: the launcher's own VmHWM, last value read while 4 workers sleep 1.5 s."""
    def sample(proc):
        peak_kb = 0
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak_kb = int(line.split()[1])
            except OSError:
                pass
            time.sleep(0.005)
        return peak_kb
    return bench.run(launcher, 4, ["sleep", "1.5"], on_start=sample).sampled / 1024


def two_node_run(bench: Bench, launcher: list) -> float:
    """Seconds until both launchers of a 2-node x 2-rank c10d job of /bin/true have exited."""
    return bench.run(launcher, 2, [], worker="/bin/true", nodes=2,
                     rdzv_conf="last_call_timeout=1").wall


def two_node_restart(bench: Bench, launcher: list) -> float:
    """Ms from rank 2's failure (node 1) to the last of the 4 ranks running again.

    The failing rank marks the failure with a file rather than an attempt number: torchrun
    counts restarts per node, so node 0's next workers still say attempt 0 there."""
    args = ["stamp", "{dir}/start",
            "if-rank", "2", "if-missing", "{dir}/failed", "sleep", "0.3",  # all have started
            "if-rank", "2", "if-missing", "{dir}/failed", "stamp", "{dir}/exit",
            "if-rank", "2", "exit-once", "{dir}/failed",
            "if-missing", "{dir}/failed", "sleep", "30"]
    run_dir = bench.run(launcher, 2, args, nodes=2, max_restarts=1,
                        rdzv_conf="last_call_timeout=1").dir
    (exit_ns,) = [int(l.split()[2]) for l in read_lines(f"{run_dir}/exit")]
    last_start = {}
    for rank, _, ns in (l.split() for l in read_lines(f"{run_dir}/start")):
        if int(ns) > exit_ns:
            last_start[rank] = max(last_start.get(rank, 0), int(ns))
    if len(last_start) != 4:
        raise LauncherFailed(f"expected 4 ranks to start after the failure, got {last_start}")
    return (max(last_start.values()) - exit_ns) / 1e6


def fault_time_save(bench: Bench, agents: int) -> tuple:
    """(ms from the failure to the saver receiving "save", ms from the save done to every rank
    of the next attempt running): `agents` agents of 2 ranks on loopback, the last rank fails."""
    worker = os.path.join(REPO, "tests", "bench", "save_worker.py")
    args = [worker, "{dir}"]
    run_dir = bench.run(bench.ftrun_cmd(), 2, args, worker=sys.executable, nodes=agents,
                        max_restarts=1, rdzv_conf="last_call_timeout=1").dir
    (exit_ns,) = [int(l.split()[1]) for l in read_lines(f"{run_dir}/exit")]
    saves = [l.split() for l in read_lines(f"{run_dir}/save")]
    received = min(int(ns) for _, ns, what in saves if what == "received")
    done = max(int(ns) for _, ns, what in saves if what == "done")
    starts = [int(l.split()[1]) for l in read_lines(f"{run_dir}/start")]
    restarted = sorted(starts)[-2 * agents:]
    if len(starts) != 4 * agents or min(restarted) < done:
        raise LauncherFailed(f"unexpected starts in {run_dir}: {starts}")
    return (received - exit_ns) / 1e6, (max(restarted) - done) / 1e6


def log_time(line: str) -> float:
    """Seconds since the epoch of an ftrun log line ("[2026-11-26 01:54:13.038] ...")."""
    return datetime.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def merged_stacks(bench: Bench) -> float:
    """ms from --hang-timeout firing to the merged report written, on the agent that wrote
    the first: 4 agents x 8 ranks on loopback (tests/bench/hang_worker.py, no torch), the
    last rank hung in user code, the others waiting. Every rank of every node is dumped
    (Python, and native with eu-stack) and merged job-wide through the rendezvous server."""
    worker = os.path.join(REPO, "tests", "bench", "hang_worker.py")
    run_dir = bench.run(bench.ftrun_cmd(), 8, [worker], worker=PYTHON, nodes=4,
                        max_restarts=1, hang_timeout=2, rdzv_conf="last_call_timeout=1").dir
    best = None
    for node in range(4):
        fired = done = None
        for line in read_lines(f"{run_dir}/console.{node}"):
            if fired is None and "reported no progress for" in line:
                fired = log_time(line)
            if done is None and "merged stacks: " in line:
                done = log_time(line)
                if "rank(s) 31 stuck where the others are not (0-30 at " not in line:
                    raise LauncherFailed(f"unexpected merged stacks in {run_dir}: {line}")
        if fired is not None and done is not None and (best is None or done < best[1]):
            best = (fired, done)
    if best is None:
        raise LauncherFailed(f"no merged stacks in {run_dir}")
    return (best[1] - best[0]) * 1000


def print_stacks(samples: list):
    print()
    print("merged stacks, 4 agents x 8 ranks (simulated: Python ranks without torch):")
    print(f"  hang timeout -> merged report: median {statistics.median(samples):.0f} ms, "
          f"max {max(samples):.0f} ms (target < 5000 ms)"
          + ("  ok" if max(samples) < 5000 else "  MISSED"))


def event_ns(record: dict) -> int:
    """ns since the epoch of an event-log record's "time" (UTC, millisecond resolution)."""
    t = datetime.datetime.strptime(record["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return round(t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000) * 1_000_000


def round_to_workers(bench: Bench, launcher: list) -> float:
    """Ms from the round forming (the rendezvous host's round_formed event) to the last worker
    started: 4 agents x 1 rank on loopback (c10d). With --network-check in `launcher` the check
    (default 64 MiB each way per pair) runs in between; its own time (check started -> verdict)
    is kept in bench.notes["check_ms"]. Without it, no check event may appear at all."""
    run_dir = bench.run(launcher, 1, ["stamp", "{dir}/start"], nodes=4,
                        event_log="{dir}/events").dir
    events = [json.loads(l) for l in read_lines(f"{run_dir}/events")]
    formed = [event_ns(e) for e in events if e["event"] == "round_formed"]
    started = [event_ns(e) for e in events if e["event"] == "network_check_started"]
    verdict = [event_ns(e) for e in events if e["event"] == "network_check"]
    starts = [int(l.split()[2]) for l in read_lines(f"{run_dir}/start")]
    if len(formed) != 1 or len(starts) != 4:
        raise LauncherFailed(f"expected one round of 4 workers in {run_dir}: {formed}, {starts}")
    if "--network-check" in launcher:
        if len(started) != 1 or not verdict:
            raise LauncherFailed(f"the network check did not run once in {run_dir}")
        bench.notes.setdefault("check_ms", []).append((min(verdict) - started[0]) / 1e6)
    elif started or verdict:
        raise LauncherFailed(f"a network check ran without --network-check in {run_dir}")
    return (max(starts) - formed[0]) / 1e6


def startup(bench: Bench, launcher: list) -> float:
    """Ms from spawning the launcher to the last of its 4 workers (fake_worker) started."""
    spawned = time.time_ns()
    run_dir = bench.run(launcher, 4, ["stamp", "{dir}/start"]).dir
    starts = [int(l.split()[2]) for l in read_lines(f"{run_dir}/start")]
    if len(starts) != 4:
        raise LauncherFailed(f"expected 4 workers in {run_dir}, got {len(starts)}")
    return (max(starts) - spawned) / 1e6


RECOVERY_SCRIPT = os.path.join(REPO, "tests", "bench", "recovery_train.py")
PHASES = ("script started", "torch imported", "process group ready", "first step done")


def recovery(bench: Bench, launcher: list) -> list:
    """Ms from rank 2's SIGKILL to each phase of the next attempt (PHASES; the last rank to
    reach it), 4 gloo ranks of tests/bench/recovery_train.py (plain torch). The crash comes once
    every rank trains and, with --warm-restart, once the 4 standbys are ready."""
    run_dir = tempfile.mkdtemp(dir=bench.root)
    cmd = launcher + ["--nproc_per_node", "4", "--max_restarts", "1",
                      "--master_port", str(free_port()), "--log_dir", f"{run_dir}/logs",
                      RECOVERY_SCRIPT, run_dir]
    env = dict(os.environ, TMPDIR=run_dir, PYTHON_EXEC=PYTHON)
    console = os.path.join(run_dir, "console")
    with open(console, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    warm = "--warm-restart" in launcher
    deadline = time.monotonic() + 120
    def ready():
        if not all(os.path.exists(f"{run_dir}/running.0.{r}") for r in range(4)):
            return False
        return not warm or open(console).read().count(" ready after ") >= 4
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # steady state
    open(f"{run_dir}/go", "w").close()
    try:
        rc = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    if rc != 0:
        raise LauncherFailed(f"exit {rc}: {' '.join(cmd)}\n{open(console).read()[-3000:]}")
    with open(f"{run_dir}/crash") as f:
        crash = int(f.read())
    stamps = [[int(x) for x in read_lines(f"{run_dir}/stamps.1.{r}")[0].split()] for r in range(4)]
    if warm and open(console).read().count("starts on standby") != 4:
        raise LauncherFailed(f"--warm-restart: not every rank started on a standby in {run_dir}")
    return [(max(s[i] for s in stamps) - crash) / 1e6 for i in range(len(PHASES))]


def print_recovery(rows: list):
    print()
    print("recovery, 4 gloo ranks of a plain torch script on one node, runs alternated: "
          "rank 2 SIGKILLed -> the next attempt, median (min) ms; ratio = x/torchrun")
    names = [name for name, _ in rows]
    print("phase (last rank)".ljust(22) + "".join(n.rjust(22) for n in names) +
          "ratio".rjust(8) + "target".rjust(10))
    for i, phase in enumerate(PHASES):
        cells = []
        for _, samples in rows:
            v = [s[i] for s in samples]
            cells.append(f"{statistics.median(v):.1f} ({min(v):.1f})")
        line = phase.ljust(22) + "".join(c.rjust(22) for c in cells)
        if i == len(PHASES) - 1:
            t = statistics.median(s[i] for s in rows[0][1])
            w = statistics.median(s[i] for s in rows[-1][1])
            line += f"{w / t:8.2f}" + "<= 0.15".rjust(10)
            line += "  ok" if w / t <= 0.15 else "  MISSED"
        print(line)
    for name, samples in rows[1:]:
        t = statistics.median(s[-1] for s in rows[0][1])
        print(f"  {name}: {statistics.median(s[-1] for s in samples) / t:.2f} of torchrun's")


NODE_LOSS_SCRIPT = os.path.join(REPO, "tests", "bench", "node_loss_train.py")
NODE_LOSS_PHASES = ("detect", "stop", "rendezvous", "spawn", "first step", "total",
                    "launcher's own share", "kill -> scripts started",
                    "kill -> a survivor's collective failed", "... -> that rank exited")
# Fast failure detection on loopback, as the spare-node tests use; torch 1.13 takes whole
# seconds only, so torchrun gets the nearest it accepts.
NODE_LOSS_CONF = "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=4"
TORCHRUN_NODE_LOSS_CONF = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=2"


def wait_until(what: str, cond: Callable, procs: list, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not cond():
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            raise LauncherFailed(f"node loss: gave up waiting for {what}")
        time.sleep(0.02)


def node_loss(bench: Bench, warm: bool) -> list:
    """Ms of each NODE_LOSS_PHASES entry: three agents on loopback (2 ranks each, --nnodes 2,
    the third a spare beyond MAX), 4 gloo ranks of tests/bench/node_loss_train.py; agent B and
    its two workers SIGKILLed at once -> training again on the spare.
      detect      kill -> the job knows: the first of the survivor's fault report (its ranks'
                  collectives failed and a rank exited) and the rendezvous' node_lost
      stop        -> the survivor's workers all exited
      rendezvous  -> the next round formed (after the loss is declared)
      spawn       -> the last agent's workers_spawned
      first step  -> the last rank's first completed step
    The launcher's own share is detect + rendezvous + spawn (detect includes the survivor's
    rank noticing the failed collective and exiting); stop and first step are the workers'
    (SIGTERM handling; interpreter, import torch, init_process_group, a step)."""
    run_dir = tempfile.mkdtemp(dir=bench.root)
    port = free_port()
    env = dict(os.environ, TMPDIR=run_dir, PYTHON_EXEC=PYTHON)
    procs, consoles = {}, {}

    def start(name: str):
        cmd = [bench.ftrun, "--nproc-per-node", "2", "--nnodes", "2", "--max-restarts", "0",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
               "--rdzv-id", "nodeloss", "--rdzv-conf", NODE_LOSS_CONF,
               "--log-dir", f"{run_dir}/logs-{name}", "--event-log", f"{run_dir}/events-{name}"]
        if warm:
            cmd.append("--warm-restart")
        consoles[name] = f"{run_dir}/console-{name}"
        with open(consoles[name], "w") as out:
            procs[name] = subprocess.Popen(cmd + [NODE_LOSS_SCRIPT, run_dir], stdout=out,
                                           stderr=subprocess.STDOUT, env=env)

    def console(name: str) -> str:
        with open(consoles[name]) as f:
            return f.read()

    def started() -> list:
        if not os.path.exists(f"{run_dir}/started"):
            return []
        return [l.split() for l in read_lines(f"{run_dir}/started")]

    try:
        start("a")  # hosts the rendezvous
        wait_until("agent a to join", lambda: "joined the job" in console("a"), list(procs.values()))
        start("b")
        wait_until("4 ranks training", lambda: len(started()) >= 4, list(procs.values()))
        start("spare")
        wait_until("the spare", lambda: "waiting as a spare" in console("spare") and (
            not warm or console("spare").count(" ready after ") >= 2), list(procs.values()))
        time.sleep(1.0)  # steady state
        b_pids = [int(l[0]) for l in started() if l[2] == "1"]
        if len(b_pids) != 2:
            raise LauncherFailed(f"node loss: expected agent b's two ranks in {run_dir}")
        killed = time.time_ns()
        procs["b"].kill()
        for pid in b_pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        procs["b"].wait()
        survivors = [procs["a"], procs["spare"]]
        wait_until("training on the spare",
                   lambda: len([l for l in started() if int(l[3]) > killed]) >= 4, survivors)
        open(f"{run_dir}/stop", "w").close()
        for name in ("a", "spare"):
            try:
                rc = procs[name].wait(timeout=120)
            except subprocess.TimeoutExpired:
                procs[name].kill()
                rc = procs[name].wait()
            if rc != 0:
                raise LauncherFailed(f"node loss: agent {name} exit {rc}\n{console(name)[-3000:]}")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    ev = {name: [json.loads(l) for l in read_lines(f"{run_dir}/events-{name}")]
          for name in ("a", "spare")}
    after = lambda es, kind: [event_ns(e) for e in es if e["event"] == kind
                              and event_ns(e) >= killed - 1_000_000]
    known = (after(ev["a"], "fault_reported") + after(ev["a"], "round_saving") +
             after(ev["a"], "round_stopping") + after(ev["a"], "node_lost"))
    a_exits = after(ev["a"], "worker_exited")
    formed = after(ev["a"], "round_formed")
    spawned = after(ev["a"], "workers_spawned") + after(ev["spare"], "workers_spawned")
    new = [l for l in started() if int(l[3]) > killed]
    if not known or len(a_exits) < 2 or not formed or len(spawned) < 2 or len(new) < 4:
        raise LauncherFailed(f"node loss: missing events in {run_dir}")
    if warm and console("spare").count("starts on standby") != 2:
        raise LauncherFailed(f"node loss: the spare did not start warm in {run_dir}")
    if "no restart spent" not in console("a") and "reason=\"node " not in console("a"):
        bench.notes.setdefault("node_loss_spent", []).append(run_dir)
    t_known, t_stopped = min(known), max(sorted(a_exits)[:2])
    t_formed, t_spawned = min(formed), max(spawned)
    t_step = max(int(l[6]) for l in new)
    ms = lambda a, b: (b - a) / 1e6
    detect = ms(killed, t_known)
    stop = ms(t_known, t_stopped)
    rdzv = ms(max(t_stopped, t_known), t_formed)
    spawn = ms(t_formed, t_spawned)
    first = ms(t_spawned, t_step)
    t_scripts = max(int(l[3]) for l in new)
    # The workers' own part of detection: their collective failing, then their exit.
    failed = [int(l.split()[2]) for l in read_lines(f"{run_dir}/failed")
              if int(l.split()[2]) >= killed] if os.path.exists(f"{run_dir}/failed") else []
    exits = [event_ns(e) for e in ev["a"] if e["event"] == "worker_exited"
             and e.get("outcome") == "failed" and event_ns(e) >= killed - 1_000_000]
    return [detect, stop, rdzv, spawn, first, ms(killed, t_step), detect + rdzv + spawn,
            ms(killed, t_scripts), ms(killed, min(failed)) if failed else None,
            ms(min(failed), min(exits)) if failed and exits else None]


def torchrun_node_loss(bench: Bench) -> list:
    """torchrun's nearest equivalent of node_loss (it has no spares): three agents at --nnodes
    2:3 (6 ranks) with --max-restarts 3; one agent and its workers SIGKILLed -> the survivors
    restart the whole group with 4 ranks. Only what the workers' stamps show (torchrun writes no
    event log): NODE_LOSS_PHASES' total and "kill -> scripts started"; the rest is None."""
    run_dir = tempfile.mkdtemp(dir=bench.root)
    port = free_port()
    env = dict(os.environ, TMPDIR=run_dir)
    procs = []

    def started() -> list:
        if not os.path.exists(f"{run_dir}/started"):
            return []
        return [l.split() for l in read_lines(f"{run_dir}/started")]

    try:
        for name in ("a", "b", "c"):
            cmd = bench.torchrun(0.1) + [
                "--nproc_per_node", "2", "--nnodes", "2:3", "--max_restarts", "3",
                "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
                "--rdzv_id", "nodeloss", "--rdzv_conf", TORCHRUN_NODE_LOSS_CONF, NODE_LOSS_SCRIPT,
                run_dir]
            with open(f"{run_dir}/console-{name}", "w") as out:
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env))
            time.sleep(1.0 if name == "a" else 0.2)  # a hosts the store
        wait_until("6 ranks training", lambda: len([l for l in started() if l[7] == "6"]) >= 6,
                   procs, timeout=180)
        time.sleep(1.0)  # steady state
        victims = [int(l[0]) for l in started() if l[7] == "6" and l[2] == "1"]
        with open(f"/proc/{victims[0]}/stat") as f:
            agent = int(f.read().rsplit(")", 1)[1].split()[1])
        killed = time.time_ns()
        os.kill(agent, 9)
        for pid in victims:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        survivors = [p for p in procs if p.pid != agent]
        wait_until("training again",
                   lambda: len([l for l in started() if int(l[3]) > killed]) >= 4, survivors,
                   timeout=180)
        open(f"{run_dir}/stop", "w").close()
        for p in survivors:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    new = [l for l in started() if int(l[3]) > killed][:4]
    ms = lambda a, b: (b - a) / 1e6
    none = [None] * len(NODE_LOSS_PHASES)
    none[NODE_LOSS_PHASES.index("total")] = ms(killed, max(int(l[6]) for l in new))
    none[NODE_LOSS_PHASES.index("kill -> scripts started")] = ms(killed, max(int(l[3]) for l in new))
    return none


def print_node_loss(rows: list):
    print()
    print("node loss, 3 agents on loopback (--nnodes 2, 2 gloo ranks each, the third a spare), "
          "plain torch script: agent b and its workers SIGKILLed -> training on the spare, "
          f"median (min) ms; --rdzv-conf {NODE_LOSS_CONF} (torchrun: {TORCHRUN_NODE_LOSS_CONF})")
    print("phase".ljust(24) + "".join(name.rjust(26) for name, _ in rows) + "target".rjust(10))
    targets = {"total": 10000, "launcher's own share": 1000}
    for i, phase in enumerate(NODE_LOSS_PHASES):
        cells, line_ok = [], True
        for name, samples in rows:
            v = [s[i] for s in samples if s[i] is not None]
            if not v:
                cells.append("-")
                continue
            cells.append(f"{statistics.median(v):.1f} ({min(v):.1f})")
            if phase in targets and not name.startswith("torchrun"):
                line_ok = line_ok and statistics.median(v) <= targets[phase]
        line = phase.ljust(24) + "".join(c.rjust(26) for c in cells)
        if phase in targets:
            line += f"<= {targets[phase] / 1000:g} s".rjust(10) + ("  ok" if line_ok else "  MISSED")
        print(line)
    print("  torchrun has no spare nodes: its column is its nearest equivalent, three agents at "
          "--nnodes 2:3 (6 ranks) and --max-restarts 3, where a lost node makes the survivors "
          "restart the whole group with 4 ranks (a restart spent, every worker a new "
          "interpreter); torchrun writes no event log, so only the workers' stamps are shown. "
          "Targets apply to ftrun.")


STORE_WORKER = os.path.join(REPO, "tests", "bench", "store_worker.py")


def store_stamps(run_dir: str) -> list:
    return [(int(a), int(r), what, int(ns))
            for a, r, what, ns in (l.split() for l in read_lines(f"{run_dir}/stamps"))]


def pg_init(bench: Bench, launcher: list) -> float:
    """Ms inside the workers: from the last of 4 gloo ranks entering dist.init_process_group
    (env://, the store the launcher arranges) to the last one leaving it. From the last entry,
    so that the ranks' start-up skew (4 interpreters importing torch) is not counted."""
    run_dir = bench.run(launcher, 4, [STORE_WORKER, "{dir}"], worker=PYTHON).dir
    s = store_stamps(run_dir)
    begin = {r: ns for _, r, what, ns in s if what == "init0"}
    end = {r: ns for _, r, what, ns in s if what == "init1"}
    if len(end) != 4:
        raise LauncherFailed(f"expected 4 ranks to form the group in {run_dir}: {s}")
    return (max(end.values()) - max(begin.values())) / 1e6


def crash_to_step(bench: Bench, launcher: list) -> float:
    """Ms from rank 1's crash (after 3 steps of attempt 0) to the last of the 4 ranks of the
    next attempt completing its first step: the whole recovery, interpreters, `import torch`
    and init_process_group included."""
    run_dir = bench.run(launcher, 4, [STORE_WORKER, "{dir}", "crash"], worker=PYTHON,
                        max_restarts=1).dir
    s = store_stamps(run_dir)
    (crash,) = [ns for a, _, what, ns in s if what == "crash"]
    first = {}
    for a, r, what, ns in s:
        if a >= 1 and what == "step":
            first[r] = min(first.get(r, ns), ns)
    if len(first) != 4:
        raise LauncherFailed(f"expected 4 ranks to step in the next attempt in {run_dir}: {s}")
    return (max(first.values()) - crash) / 1e6


def read_lines(path: str) -> list:
    with open(path) as f:
        return [l for l in f.read().splitlines() if l.strip()]


# ---- the table ----

@dataclass
class Row:
    label: str
    measure: Callable
    monitor_interval: float          # torchrun's; ftrun always runs at its defaults
    unit: str                        # "s", "ms" or "MB"
    target: str = "-"
    met: Optional[Callable] = None   # met(torchrun median, ftrun median) -> bool


ROWS = [
    Row("whole run 4x /bin/true (mi=0.1)", whole_run, 0.1, "s", "<= 1/20", lambda t, f: f / t <= 1 / 20),
    Row("whole run 4x /bin/true (mi=5)", whole_run, 5, "s"),
    Row("restart latency 4 ranks (mi=0.1)", restart_latency, 0.1, "ms", "< 50 ms", lambda t, f: f < 50),
    Row("restart latency 4 ranks (mi=5)", restart_latency, 5, "ms"),
    Row("launcher peak RSS, 4 workers", peak_rss, 0.1, "MB", "< 20 MB", lambda t, f: f < 20),
    Row("2 nodes x 2 ranks whole run (c10d)", two_node_run, 0.1, "s", "<= 1/10",
        lambda t, f: f / t <= 1 / 10),
    Row("2 nodes: crash on node 1 -> 4 running", two_node_restart, 0.1, "ms", "< 200 ms",
        lambda t, f: f < 200),
]


# The process group's store: torchrun 1.13's static backend hosts it in its agent; so does
# ftrun's (TORCHELASTIC_USE_AGENT_STORE=True). Target: ftrun no slower than torchrun.
STORE_ROWS = [
    Row("init_process_group, 4 gloo ranks*", pg_init, 0.1, "ms", "<= 1",
        lambda t, f: f <= t * 1.1),
    Row("crash -> 1st step of next attempt", crash_to_step, 0.1, "ms", "<= 1",
        lambda t, f: f <= t * 1.1),
]


@dataclass
class PairRow:
    """Two ftrun variants side by side on the same job (no torchrun involved)."""
    label: str
    measure: Callable
    left: tuple                      # (column name, launcher(bench) -> argv prefix)
    right: tuple
    unit: str
    target: str = "-"
    met: Optional[Callable] = None   # met(left median, right median) -> bool


PAIR_ROWS = [
    # dlrover's --network-check (issue: the whole check for 4 nodes < 2 s; off adds nothing,
    # which round_to_workers enforces: no check event may appear without the flag).
    PairRow("network check, 4 nodes on loopback, default 64 MiB: round formed -> workers started",
            round_to_workers, ("check off", lambda b: b.ftrun_cmd()),
            ("--network-check", lambda b: b.ftrun_cmd("--network-check")), "ms",
            "on < 2 s", lambda off, on: on < 2000),
    PairRow("start-up, 4x fake_worker: spawn -> last worker started", startup,
            ("ftrun", lambda b: b.ftrun_cmd()),
            ("ftrun dlrover-run", lambda b: b.ftrun_cmd("dlrover-run")), "ms",
            "= 1 (0.9-1.1)", lambda a, b: 0.9 <= b / a <= 1.1),
    PairRow("whole run 4x /bin/true", whole_run,
            ("ftrun", lambda b: b.ftrun_cmd()),
            ("ftrun dlrover-run", lambda b: b.ftrun_cmd("dlrover-run")), "s",
            "= 1 (0.9-1.1)", lambda a, b: 0.9 <= b / a <= 1.1),
]


# The same rows, ftrun against itself with the store hosted by worker rank 0 (the first
# rounds' behaviour, still there with FTRUN_AGENT_STORE=0).
STORE_PAIR_ROWS = [
    PairRow("init_process_group, 4 gloo ranks*", pg_init,
            ("worker rank 0 hosts", lambda b: ["/usr/bin/env", "FTRUN_AGENT_STORE=0",
                                               *b.ftrun_cmd()]),
            ("agent store", lambda b: b.ftrun_cmd()), "ms"),
]


def print_pair_rows(bench: Bench, results: list):
    print()
    print("ftrun variants on the same job (no torchrun), runs alternated: median (min); "
          "ratio = right/left medians")
    widths = (34, 22, 22, 7, 15)
    for row, left, right in results:
        lm, rm = statistics.median(left), statistics.median(right)
        print(row.label)
        cells = (f"  {row.left[0]} | {row.right[0]}",
                 f"{fmt(lm, row.unit)} ({fmt(min(left), row.unit).split()[0]})",
                 f"{fmt(rm, row.unit)} ({fmt(min(right), row.unit).split()[0]})",
                 ratio(lm, rm), row.target)
        line = "".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(cells, widths)))
        if row.met:
            line += "  ok" if row.met(lm, rm) else "  MISSED"
        print(line)
        if row.measure is round_to_workers and bench.notes.get("check_ms"):
            check = bench.notes["check_ms"]
            print(f"  the check itself (started -> verdict)".ljust(widths[0]) +
                  "-".rjust(widths[1]) +
                  f"{fmt(statistics.median(check), 'ms')} ({min(check):.1f})".rjust(widths[2]) +
                  "; check off: no check event in any run")


def rendezvous_scale(bench: Bench, loadgen: str, sizes: list) -> list:
    """[(N, seconds to a complete round, server peak RSS MB)]: `ftrun master` against the
    load generator, which simulates N agents joining one round (over up to 256 connections)."""
    rows = []
    for n in sizes:
        port = free_port()
        master = subprocess.Popen([bench.ftrun, "master", "--port", str(port), "--nnodes", str(n),
                                   "--rdzv-id", "bench", "--log-level", "warning",
                                   # every simulated agent calls from 127.0.0.1
                                   "--rdzv-conf", f"max_watches_per_peer={n}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)  # let it bind; the load generator also waits for the connection
        out = subprocess.run([loadgen, "--target", f"127.0.0.1:{port}", "--nodes", str(n),
                              "--run-id", "bench"], capture_output=True, text=True, timeout=300)
        with open(f"/proc/{master.pid}/status") as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
        master.terminate()
        master.wait()
        if out.returncode != 0:
            raise LauncherFailed(f"rendezvous_loadgen {n}: {out.stdout}{out.stderr}")
        seconds = float(out.stdout.split("seconds=")[1].split()[0])
        rows.append((n, seconds, rss))
    return rows


def fmt(value: float, unit: str) -> str:
    return {"s": f"{value:.3f} s", "ms": f"{value:.1f} ms", "MB": f"{value:.1f} MB"}[unit]


def ratio(torchrun: float, ftrun: float) -> str:
    r = ftrun / torchrun
    return f"1/{round(1 / r)}" if r < 0.5 else f"{r:.2f}"


def header(bench: Bench, ftrun_path: str):
    torch_version = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip() or "not importable"
    ftrun_version = subprocess.run([bench.ftrun, "--version"], capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    u = os.uname()
    print(f"machine: {os.cpu_count()} CPUs ({cpu}), {u.sysname} {u.release} {u.machine}")
    built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(ftrun_path).st_mtime))
    print(f"torch {torch_version} (torchrun via {PYTHON} scripts/torchrun_compat.py)")
    print(f"{ftrun_version}: {os.path.abspath(ftrun_path)} (built {built})")
    print(f"runs per launcher: {bench.runs}; cells are median (min); ratio = ftrun/torchrun medians")


SECTIONS = ("torchrun", "store", "recovery", "nodeloss", "variants", "save", "scale", "flash",
            "etcd", "stacks", "replica")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ftrun", default=os.path.join(REPO, "build/launcher/ftrun"))
    p.add_argument("--fake-worker", default=os.path.join(REPO, "build/tests/fake_worker"))
    p.add_argument("--loadgen", default=os.path.join(REPO, "build/tests/rendezvous_loadgen"))
    p.add_argument("--etcd-loadgen", default=os.path.join(REPO, "build/tests/etcd_loadgen"))
    p.add_argument("--scale", default="100,1000,10000",
                   help="simulated agents per rendezvous scale run (default 100,1000,10000)")
    p.add_argument("--only", action="append", choices=SECTIONS,
                   help="run only this section (repeatable): torchrun (ftrun vs torchrun), "
                        "store (the process group's store: init_process_group and crash -> "
                        "first step of the next attempt, 4 gloo ranks, vs torchrun), "
                        "recovery (crash -> first step, torchrun vs ftrun vs --warm-restart), "
                        "nodeloss (SIGKILL of a node -> training on the spare, 3 agents), "
                        "variants (pre-flight check, dlrover-run vs ftrun), save, scale, "
                        "flash (memory snapshots vs torch.save; scripts/bench_flash.py), "
                        "etcd (the etcd backend vs built-in, 1000 agents; scripts/bench_etcd.py), "
                        "replica (flash-checkpoint replicas across 2 agents: save -> copy on "
                        "the peer, 256 MiB and 1 GiB; scripts/bench_replica.py); "
                        "default: all")
    n = p.add_mutually_exclusive_group()
    n.add_argument("--runs", type=int, default=7, help="runs per launcher and row (default 7)")
    n.add_argument("--quick", action="store_const", const=3, dest="runs", help="3 runs")
    opts = p.parse_args()
    for path in (opts.ftrun, opts.fake_worker, opts.loadgen):
        if not os.access(path, os.X_OK):
            p.error(f"{path} is not an executable (build first: scripts/bench.sh)")

    sections = set(opts.only or SECTIONS)
    bench = Bench(opts.ftrun, opts.fake_worker, opts.runs)
    results, pairs, scale, saves, recoveries, losses, stacks = [], [], [], [], [], [], []
    try:
        header(bench, opts.ftrun)  # also warms the page cache for torch
        for row in ROWS if "torchrun" in sections else []:
            t = bench.samples(row.measure, bench.torchrun(row.monitor_interval))
            f = bench.samples(row.measure, bench.ftrun_cmd())
            results.append((row, t, f))
        for row in STORE_ROWS if "store" in sections else []:
            # Alternated, run by run: tens of ms apart, so a drift of the machine's load between
            # a block of torchrun runs and a block of ftrun runs would decide the ratio.
            t, f = bench.paired_samples(row.measure, bench.torchrun(row.monitor_interval),
                                        bench.ftrun_cmd())
            results.append((row, t, f))
        for row in STORE_PAIR_ROWS if "store" in sections else []:
            pairs.append((row, *bench.paired_samples(row.measure, row.left[1](bench),
                                                      row.right[1](bench))))
        if "recovery" in sections:
            launchers = [("torchrun (mi 0.1)", bench.torchrun(0.1)),
                         ("ftrun", [bench.ftrun, "--log-level", "warning"]),
                         ("ftrun --warm-restart", [bench.ftrun, "--log-level", "info",
                                                   "--warm-restart"])]
            recoveries = [(name, []) for name, _ in launchers]
            for i in range(bench.runs):
                for (name, launcher), (_, out) in zip(launchers, recoveries):
                    print(f"  recovery [{name}] run {i + 1}/{bench.runs}", file=sys.stderr,
                          flush=True)
                    out.append(recovery(bench, launcher))
        if "nodeloss" in sections:
            losses = [("torchrun 2:3 (mi 0.1)", []), ("ftrun", []), ("ftrun --warm-restart", [])]
            measures = [torchrun_node_loss, lambda b: node_loss(b, False),
                        lambda b: node_loss(b, True)]
            for i in range(bench.runs):
                for measure, (name, out) in zip(measures, losses):
                    print(f"  node loss [{name}] run {i + 1}/{bench.runs}", file=sys.stderr,
                          flush=True)
                    out.append(measure(bench))
        for row in PAIR_ROWS if "variants" in sections else []:
            pairs.append((row, *bench.paired_samples(row.measure, row.left[1](bench),
                                                      row.right[1](bench))))
        if "scale" in sections:
            scale = rendezvous_scale(bench, opts.loadgen, [int(n) for n in opts.scale.split(",")])
        for agents in (1, 2, 4) if "save" in sections else ():
            samples = []
            for i in range(bench.runs):
                print(f"  fault_time_save [{agents} agents] run {i + 1}/{bench.runs}",
                      file=sys.stderr, flush=True)
                samples.append(fault_time_save(bench, agents))
            saves.append((agents, samples))
        for i in range(bench.runs) if "stacks" in sections else ():
            print(f"  merged_stacks [4 agents x 8 ranks] run {i + 1}/{bench.runs}",
                  file=sys.stderr, flush=True)
            stacks.append(merged_stacks(bench))
    except LauncherFailed as e:
        print(f"launcher run failed: {e}", file=sys.stderr)
        return 1
    finally:
        bench.close()

    widths = (34, 22, 22, 7, 9)
    cols = ("metric", "torchrun", "ftrun", "ratio", "target")
    if results:
        print()
        print("".join(c.ljust(w) if i == 0 else c.rjust(w)
                      for i, (c, w) in enumerate(zip(cols, widths))))
    for row, t, f in results:
        tm, fm = statistics.median(t), statistics.median(f)
        cells = (row.label,
                 f"{fmt(tm, row.unit)} ({fmt(min(t), row.unit).split()[0]})",
                 f"{fmt(fm, row.unit)} ({fmt(min(f), row.unit).split()[0]})",
                 ratio(tm, fm), row.target)
        line = "".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        if row.met:
            line += "  ok" if row.met(tm, fm) else "  MISSED"
        print(line)

    if recoveries:
        print_recovery(recoveries)
    if losses:
        print_node_loss(losses)
        if bench.notes.get("node_loss_spent"):
            print(f"  a node loss spent a restart in: {bench.notes['node_loss_spent']}")
    if pairs:
        print_pair_rows(bench, pairs)
    if "store" in sections:
        print("* from the last rank entering init_process_group to the last leaving it")

    if saves:
        print_saves(saves)
    if stacks:
        print_stacks(stacks)
    if scale:
        print_scale(scale)
    if "etcd" in sections:
        import bench_etcd
        try:
            bench = Bench(opts.ftrun, opts.fake_worker, opts.runs)
            bench_etcd.run(bench, opts.etcd_loadgen, [100, 1000])
        except (RuntimeError, LauncherFailed) as e:
            print(f"etcd benchmark failed: {e}", file=sys.stderr)
            return 1
        finally:
            bench.close()
    if "replica" in sections:
        import bench_replica
        try:
            bench_replica.run(opts.ftrun, bench.runs)
        except RuntimeError as e:
            print(f"replica benchmark failed: {e}", file=sys.stderr)
            return 1
    if "flash" in sections:
        import bench_flash
        try:
            bench_flash.run(opts.ftrun, bench.runs)
        except RuntimeError as e:
            print(f"launcher run failed: {e}", file=sys.stderr)
            return 1
    return 0


def print_saves(saves: list):
    print()
    print("fault-time save (ftrun only: torchrun has none), 2 ranks per agent, median (min)")
    print("agents".rjust(8) + "failure -> save order at saver".rjust(34) +
          "save done -> next attempt running".rjust(36))
    for agents, samples in saves:
        order = [o for o, _ in samples]
        restart = [r for _, r in samples]
        line = (f"{agents:8d}" +
                f"{statistics.median(order):17.1f} ms ({min(order):.1f})".rjust(34) +
                f"{statistics.median(restart):17.1f} ms ({min(restart):.1f})".rjust(36))
        line += "  ok" if statistics.median(order) < 20 else "  MISSED (< 20 ms)"
        print(line)


def print_scale(scale: list):
    print()
    print("rendezvous scale: `ftrun master` + N simulated agents joining one round "
          "(target at 10000: < 5 s, < 500 MB)")
    print("agents".rjust(8) + "round complete".rjust(18) + "per agent".rjust(14) +
          "server peak RSS".rjust(18))
    for n, seconds, rss in scale:
        line = (f"{n:8d}" + f"{seconds:15.3f} s" + f"{seconds / n * 1e6:11.1f} us" +
                f"{rss:15.1f} MB")
        if n == 10000:
            line += "  ok" if seconds < 5 and rss < 500 else "  MISSED"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
