"""The replica section of scripts/bench.py (`--only replica`): flash-checkpoint replicas
across nodes on loopback. A `ftrun master` and two agents (one rank each, a sharded state of
N MiB per rank, so N MiB per node) save to memory every few seconds; each node's agent copies
its shard to the other's. Figures, medians over the saves after the first two (the snapshot
and the replica are double-buffered: from the third save on, every buffer is reused; the
first copy into each fresh buffer also pays for its pages, shown apart):
  * lag: from the save returning in the worker to the peer's agent logging the replica
    stored (its log's millisecond clock);
  * the save's blocking time with replicas (--flash-replicas 2) and without (1), side by side:
    the save does not wait for the copy.
Rows: N MiB on each node (both copies at once, competing for the CPUs of one machine), and
1 GiB on one node only (the other's state is 1 MiB): one copy at a time, as each node's own
copy runs on its own CPUs in a real cluster; and that row again with the copy streamed over
gRPC (FTRUN_FLASH_REPLICA_DIRECT=0, the path TLS jobs take), side by side.
Target (issue 15): the copy of up to 1 GiB per node complete within 1 s of the save returning.
"""
import datetime
import json
import os
import re
import socket
import statistics
import subprocess
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
STORED = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\].*replica of rank-(\d+) "
                    r"step=(\d+) stored")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job(ftrun, mib, saves, replicas, only_rank=-1, direct=True):
    """One two-node job; (per-save JSON records, {(rank, step): stored wall time}).
    direct=False: the copies stream over gRPC (FTRUN_FLASH_REPLICA_DIRECT=0)."""
    d = tempfile.mkdtemp(prefix="ftrun-bench-replica-", dir="/var/tmp")
    port = _free_port()
    conf = "last_call_timeout=1"
    env = dict(os.environ)
    env["FTRUN_FLASH_REPLICA_DIRECT"] = "1" if direct else "0"
    env.pop("FTRUN_CONTROL_SOCKET", None)
    procs, logs = [], []
    master = subprocess.Popen([ftrun, "master", "--port", str(port), "--nnodes", "2",
                               "--rdzv-id", "bench", "--rdzv-conf", conf],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        time.sleep(0.5)
        for name in ("a", "b"):
            log = os.path.join(d, f"{name}.log")
            logs.append(log)
            with open(log, "w") as out, open(os.path.join(d, f"{name}.out"), "w") as stdout:
                procs.append(subprocess.Popen(
                    [ftrun, "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                     f"127.0.0.1:{port}", "--rdzv-id", "bench", "--rdzv-conf",
                     conf + ",is_host=0", "--local-addr", "127.0.0.1", "--nproc-per-node", "1",
                     "--flash-replicas", str(replicas), "--log-level", "debug", "--no-python",
                     PYTHON, os.path.join(REPO, "tests", "bench", "replica_worker.py"),
                     "--mib", str(mib), "--saves", str(saves), "--dir", d,
                     "--only-rank", str(only_rank),
                     # A copy still in flight at the save after next is superseded (the
                     # worker leases that buffer again): room for one copy per save.
                     "--gap", str(2 + mib / 128)],
                    stdout=stdout, stderr=out, env=env))
        for p in procs:
            if p.wait(timeout=600) != 0:
                raise RuntimeError(f"an agent failed; see {d}")
    finally:
        for p in procs + [master]:
            if p.poll() is None:
                p.kill()
                p.wait()
    records, stored = [], {}
    for name in ("a", "b"):
        with open(os.path.join(d, f"{name}.out")) as f:
            records += [json.loads(l) for l in f if l.startswith("{")]
    for log in logs:
        with open(log) as f:
            for line in f:
                m = STORED.match(line)
                if m:
                    when = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
                    stored[int(m.group(2)), int(m.group(3))] = when.timestamp()
    return records, stored


def run(ftrun, runs):
    print()
    print("flash-checkpoint replicas, 2 agents on loopback, 1 rank each, median over saves "
          "after the first two (min, max); first 2: the copies into fresh buffers; gRPC: 1 node, "
          "the copy streamed over gRPC instead of the direct path")
    print(f"{'state per node':<16}{'save, no replicas':>26}{'save, replicas':>26}"
          f"{'copy done after return':>26}{'first 2':>14}{'target':>10}")
    medians = {}
    for mib, only, direct in ((256, -1, True), (1024, -1, True), (1024, 0, True),
                              (1024, 0, False)):
        saves = 5
        with_r, stored = _job(ftrun, mib, saves, 2, only, direct)
        if direct:
            without, _ = _job(ftrun, mib, saves, 1, only)
        big = [r for r in with_r if only in (-1, r["rank"])]
        lags = [stored[r["rank"], r["step"]] - r["returned"] for r in big
                if r["step"] > 1 and (r["rank"], r["step"]) in stored]
        first = [stored[r["rank"], r["step"]] - r["returned"] for r in big
                 if r["step"] <= 1 and (r["rank"], r["step"]) in stored]
        missing = sum(1 for r in big if r["step"] > 1 and (r["rank"], r["step"]) not in stored)
        b_with = [r["blocked"] for r in big if r["step"] > 1]
        b_without = [r["blocked"] for r in without if r["step"] > 1 and only in (-1, r["rank"])]

        def cell(xs):
            return (f"{statistics.median(xs):.3f}s ({min(xs):.3f}, {max(xs):.3f})" if xs
                    else "-")
        if lags and max(lags) <= 1.0 and not missing:
            verdict = "  ok"
        elif lags and statistics.median(lags) <= 1.0 and not missing:
            verdict = "  median ok, not every copy"
        else:
            verdict = "  MISSED"
        label = f"{mib} MiB" + (" each" if only == -1 else ", 1 node")
        if not direct:
            label = f"{mib} MiB, gRPC"  # 1 node, the copy streamed
            b_without = []
        if lags:
            medians[direct] = statistics.median(lags)
        print(label.ljust(16) + cell(b_without).rjust(26) + cell(b_with).rjust(26)
              + cell(lags).rjust(26)
              + (f"{max(first):.3f}s" if first else "-").rjust(14) + "<= 1 s".rjust(10) + verdict
              + (f" ({missing} copies never logged)" if missing else ""))
    if len(medians) == 2:
        print(f"1 GiB on 1 node, copy done after return: direct path {medians[True]:.3f}s, gRPC "
              f"stream {medians[False]:.3f}s (FTRUN_FLASH_REPLICA_DIRECT=0): ratio "
              f"{medians[True] / medians[False]:.2f}")
    del runs  # one job per size: each already gives saves-2 samples per rank
