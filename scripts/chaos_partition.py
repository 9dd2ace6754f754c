"""The chaos run's partition scenario (scripts/chaos.py --scenario partition).

`ftrun master` and three agents (a, b, c; one rank each, real gloo training with
scripts/demo/train.py) run in network namespaces this script creates, as
tests/integration/partition_netns_test.cc does: m for the master, a veth pair from m to each
agent's namespace, m forwarding, and routes between the agents' namespaces through m. Mid-job
b and c (neither group rank 0) lose their routes to each other; once the master has named the
pair they get them back. Passes when the pair is named (by both addresses), no restart is
spent (the restart budget is untouched: a partition stops the round with a fault-time save and
spends none), the training finishes with the exact step count and zero completed steps lost,
and no process of the job is left. Skips, saying why, where namespaces cannot be created; the
namespaces are deleted whatever happens.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

import chaos

IP = shutil.which("ip") or "/usr/sbin/ip"
SKIP = 77  # CTest's SKIP_RETURN_CODE for this test


class Netns:
    """m and one namespace per agent; `routes` says which agent pairs reach each other."""

    def __init__(self, agents):
        tag = f"ftc{os.getpid() % 10000}"
        self.m = tag + "m"
        self.ns = {x: tag + x for x in agents}
        self.net = {x: f"10.{81 + i}.{os.getpid() % 250}." for i, x in enumerate(agents)}
        self.dev = {x: f"{tag}{x}m" for x in agents}  # the agent's end of its veth pair
        self.peer = {x: f"{tag}m{x}" for x in agents}  # m's end
        self.created = []

    def ip(self, *args):
        return subprocess.run([IP, *args], capture_output=True, text=True, timeout=10)

    def create(self):
        """None, or why namespaces cannot be created here."""
        if not os.access(IP, os.X_OK):
            return "iproute2 (ip) is not installed"
        r = self.ip("netns", "add", self.m)
        if r.returncode != 0:
            return r.stderr.strip() or f"ip netns add exited {r.returncode}"
        self.created.append(self.m)
        steps = [("-n", self.m, "link", "set", "lo", "up")]
        for x, ns in self.ns.items():
            to, net = self.peer[x], self.net[x]
            self.created.append(ns)
            steps += [("netns", "add", ns),
                      ("link", "add", to, "type", "veth", "peer", "name", self.dev[x]),
                      ("link", "set", to, "netns", self.m),
                      ("link", "set", self.dev[x], "netns", ns),
                      ("-n", self.m, "addr", "add", net + "1/24", "dev", to),
                      ("-n", ns, "addr", "add", net + "2/24", "dev", self.dev[x]),
                      ("-n", self.m, "link", "set", to, "up"),
                      ("-n", ns, "link", "set", self.dev[x], "up"),
                      ("-n", ns, "link", "set", "lo", "up")]
        steps.append(("netns", "exec", self.m, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
        for s in steps:
            r = self.ip(*s)
            if r.returncode != 0:
                return f"ip {' '.join(s)}: {r.stderr.strip()}"
        return None

    def route(self, x, y, add=True):
        """Adds (or deletes) the routes between agents x and y, through m."""
        verb = "add" if add else "del"
        for a, b in ((x, y), (y, x)):
            r = self.ip("-n", self.ns[a], "route", verb, self.net[b] + "0/24", "via",
                        self.net[a] + "1")
            if r.returncode != 0:
                raise RuntimeError(f"route {verb} {a}->{b}: {r.stderr.strip()}")

    def delete(self):
        for ns in reversed(self.created):
            self.ip("netns", "del", ns)
        self.created = []


def run(args, out):
    agents = ["a", "b", "c"]
    net = Netns(agents)
    why = net.create()
    if why:
        net.delete()
        print(f"chaos: partition: SKIPPED: cannot create network namespaces here ({why})",
              flush=True)
        return SKIP
    procs = []
    # A SIGTERM (ctest's timeout, a user) still runs the clean-up below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        return scenario(args, out, net, agents, procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for pid in chaos.pids_with(out):  # workers of a killed agent
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        net.delete()


def scenario(args, out, net, agents, procs):
    started = time.monotonic()
    port = 29400
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3")
    master_log = os.path.join(out, "master.log")
    procs.append(subprocess.Popen(
        [IP, "netns", "exec", net.m, args.ftrun, "master", "--port", str(port), "--nnodes", "3",
         "--rdzv-id", "chaosp", "--max-restarts", "3", "--save-timeout", "10",
         "--rdzv-conf", "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=5",
         "--event-log", os.path.join(out, "events.jsonl")],
        stdout=open(master_log, "w"), stderr=subprocess.STDOUT, env=env))

    def master_text():
        with open(master_log) as f:
            return f.read()

    if not chaos.wait_for(lambda: "listening" in master_text(), 20, "the master"):
        return ["the master did not start"]
    net.route("a", "b")
    net.route("a", "c")
    net.route("b", "c")
    job = chaos.Job(args, out)
    for i, x in enumerate(agents):
        conf = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=5,is_host=0"
        logf = open(os.path.join(out, f"agent-{x}.log"), "w")
        procs.append(subprocess.Popen(
            [IP, "netns", "exec", net.ns[x], args.ftrun, "--nnodes", "3", "--rdzv-backend",
             "c10d", "--rdzv-endpoint", f"{net.net[x]}1:{port}", "--rdzv-id", "chaosp",
             "--rdzv-conf", conf, "--local-addr", f"{net.net[x]}2", "--nproc-per-node", "1",
             "--max-restarts", "3", "--save-timeout", "10", "--monitor-interval", "0.5",
             "--log-dir", os.path.join(out, "logs"), *job.train_args(out),
             "--progress", os.path.join(out, "progress"),
             "--attempt-log", os.path.join(out, "attempts.jsonl")],
            stdout=logf, stderr=logf, env=dict(env, GLOO_SOCKET_IFNAME=net.dev[x])))
        if i == 0:  # a joins first: group rank 0
            chaos.wait_for(lambda: "joined the job" in open(logf.name).read(), 20, "agent a")
    deadline = started + args.timeout
    failures = []
    cut_at = args.steps // 3
    if not chaos.wait_for(lambda: job.progress()[1] >= cut_at, deadline - time.monotonic(),
                          f"step {cut_at}"):
        return [f"no progress to step {cut_at}"]
    before = job.progress()[1]
    net.route("b", "c", add=False)
    chaos.log(f"partition: b ({net.net['b']}2) and c ({net.net['c']}2) cut off at step {before}")

    def named():
        return any("partition detected" in line and net.net["b"] + "2" in line and
                   net.net["c"] + "2" in line for line in master_text().split("\n"))

    found = chaos.wait_for(named, 60, "the master to name the pair")
    took = time.monotonic()
    net.route("b", "c")
    if not found:
        failures.append("the partitioned pair was not named")
    else:
        chaos.log("partition: the master named the pair; routes restored")
    procs_job = procs[1:]
    if not chaos.wait_for(lambda: all(p.poll() is not None for p in procs),
                          deadline - time.monotonic(), "the job's end"):
        failures.append("the job did not finish in time")
    codes = [p.poll() for p in procs_job]
    if any(c != 0 for c in codes) or procs[0].poll() != 0:
        failures.append(f"exit codes: master {procs[0].poll()}, agents {codes}")
    text = master_text()
    if "restart 1/" in text:
        failures.append("the partition spent a restart")
    steps = job.progress()[1]
    if steps != args.steps:
        failures.append(f"step count {steps}, expected {args.steps}")
    lost = chaos.steps_lost(out)
    if lost:
        failures.append(f"{lost} completed step(s) lost")
    if not chaos.wait_for(lambda: not chaos.pids_with(out), 10, "the job's processes to go"):
        failures.append(f"processes left: {chaos.pids_with(out)}")
    print(f"chaos: partition: named={found} healed_after={time.monotonic() - took:.0f}s "
          f"steps lost={lost} restart spent={'restart 1/' in text} "
          f"steps={steps}/{args.steps} time={time.monotonic() - started:.0f}s "
          f"result={'ok' if not failures else 'FAILED'}", flush=True)
    return failures
