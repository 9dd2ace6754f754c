"""The etcd rendezvous in figures (scripts/bench.py --only etcd): a 3-member etcd cluster on
loopback (Debian's etcd-server), then
  * a 2-node x 2-rank job of /bin/true, whole run: --rdzv-backend etcd against the built-in
    c10d backend, runs alternated;
  * N simulated agents (tests/bench/etcd_loadgen: the agent's own EtcdCoordinator, one per
    agent) forming one round through the cluster, and the etcd calls per agent per second
    once the round runs (target at 1000: < 10 s).
Stdlib only."""
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ETCD = "/usr/bin/etcd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdCluster:
    """members etcd processes on 127.0.0.1 with data in a temporary directory."""

    def __init__(self, members: int = 3):
        self.dir = tempfile.mkdtemp(prefix="ftrun-bench-etcd-")
        names = [f"m{i}" for i in range(members)]
        ports = [(free_port(), free_port()) for _ in names]
        cluster = ",".join(f"{n}=http://127.0.0.1:{p}" for n, (_, p) in zip(names, ports))
        self.endpoints = ",".join(f"127.0.0.1:{c}" for c, _ in ports)
        self.procs = []
        for name, (client, peer) in zip(names, ports):
            log = open(os.path.join(self.dir, name + ".log"), "w")
            self.procs.append(subprocess.Popen([
                ETCD, "--name", name, "--data-dir", os.path.join(self.dir, name),
                "--listen-client-urls", f"http://127.0.0.1:{client}",
                "--advertise-client-urls", f"http://127.0.0.1:{client}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--log-level", "warn", "--logger", "zap"], stdout=log, stderr=log))
        # Serving once a client port accepts and a leader is elected (a moment later).
        deadline = time.time() + 20
        for c, _ in ports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", c), timeout=1).close()
                    break
                except OSError:
                    if time.time() > deadline:
                        self.close()
                        raise RuntimeError("etcd did not start within 20 s")
                    time.sleep(0.05)
        time.sleep(1.0)

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def two_node_job(bench, etcd: EtcdCluster) -> tuple:
    """([built-in seconds], [etcd seconds]) for a 2-node x 2-rank job of /bin/true."""
    builtin, on_etcd = [], []
    for i in range(bench.runs):
        print(f"  2-node whole run [c10d | etcd] run {i + 1}/{bench.runs}", file=sys.stderr,
              flush=True)
        builtin.append(bench.run(bench.ftrun_cmd(), 2, [], worker="/bin/true", nodes=2,
                                 rdzv_conf="last_call_timeout=1").wall)
        on_etcd.append(bench.run(bench.ftrun_cmd(), 2, [], worker="/bin/true", nodes=2,
                                 rdzv_conf="last_call_timeout=1", rdzv_backend="etcd",
                                 rdzv_endpoint=etcd.endpoints, rdzv_id=f"bench{i}").wall)
    return builtin, on_etcd


def loadgen(path: str, etcd: EtcdCluster, nodes: int, run_id: str) -> tuple:
    out = subprocess.run([path, "--endpoints", etcd.endpoints, "--nodes", str(nodes),
                          "--run-id", run_id, "--steady", "10"],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"etcd_loadgen {nodes}: {out.stdout}{out.stderr[-2000:]}")
    fields = dict(kv.split("=") for kv in out.stdout.split())
    return float(fields["seconds"]), float(fields["steady_calls_per_agent_per_s"])


def run(bench, loadgen_path: str, sizes: list):
    etcd = EtcdCluster(3)
    try:
        builtin, on_etcd = two_node_job(bench, etcd)
        scale = [(n, *loadgen(loadgen_path, etcd, n, f"scale{n}")) for n in sizes]
    finally:
        etcd.close()
    print()
    print("etcd rendezvous (3-member etcd 3.4 on loopback), median (min)")
    bm, em = statistics.median(builtin), statistics.median(on_etcd)
    print(f"  2 nodes x 2 ranks whole run: built-in c10d {bm:.3f} s ({min(builtin):.3f}) | "
          f"etcd {em:.3f} s ({min(on_etcd):.3f}); ratio etcd/built-in {em / bm:.2f}")
    print("agents".rjust(8) + "round complete".rjust(18) + "etcd calls/agent/s (steady)".rjust(30))
    for n, seconds, rps in scale:
        line = f"{n:8d}" + f"{seconds:15.3f} s" + f"{rps:30.3f}"
        if n == 1000:
            line += "  ok" if seconds < 10 else "  MISSED (< 10 s)"
        print(line)
