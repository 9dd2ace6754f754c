"""A stand-in for a MindSpore training script started by msrun (stdlib only).

msrun starts the same script as the scheduler (MS_ROLE=MS_SCHED) and as every worker
(MS_ROLE=MS_WORKER); this one behaves like MindSpore's dynamic cluster around them:

* Scheduler: listens on MS_SCHED_HOST:MS_SCHED_PORT, waits up to MS_TOPO_TIMEOUT seconds
  (negative: forever) for MS_WORKER_NUM workers to register with their MS_NODE_ID, tells
  them the cluster is ready, and exits 0 once every worker has finalized. If a worker's
  connection drops before it finalized (the real scheduler notices a lost heartbeat), it
  logs an ERROR, tells the others to abort, waits for them to go, and exits 1.
* Worker: checks the environment msrun must set (exit 4 with a message on stderr if it is
  wrong), registers (retrying until the scheduler is up), runs --steps steps of --step-time
  seconds, optionally waits for --wait-file, finalizes and exits 0. On an abort it takes
  --save-time seconds (finalizing, or with MS_ENABLE_TFT containing TTP:1 the TTP
  "last words" save, after which it writes <record>/ttp_saved_rank_<R>) and exits 1.
  --crash-rank R --crash-at S makes rank R exit 3 before step S, once: a marker file in
  the record directory keeps it from crashing again after a restart.

--record DIR writes DIR/<role>_<id>_<pid>.json per process: its role, pid and environment.

Wire protocol, one line per message: worker -> scheduler "register <id>", "finalize";
scheduler -> worker "ready", "reject <why>", "abort".
"""

import argparse
import json
import os
import selectors
import socket
import sys
import threading
import time


def log(*args):
    print(*args, flush=True)


def fail_env(message):
    print(f"ms_standin: bad environment: {message}", file=sys.stderr, flush=True)
    sys.exit(4)


def env_int(name, low=None, high=None):
    value = os.environ.get(name)
    if value is None:
        fail_env(f"{name} is not set")
    try:
        number = int(value)
    except ValueError:
        fail_env(f"{name}={value!r} is not an integer")
    if (low is not None and number < low) or (high is not None and number > high):
        fail_env(f"{name}={number} is outside [{low}, {high}]")
    return number


def check_env():
    """Returns (role, worker_num, rank) after checking what msrun sets; rank is None for
    the scheduler."""
    role = os.environ.get("MS_ROLE")
    if role not in ("MS_SCHED", "MS_WORKER"):
        fail_env(f"MS_ROLE={role!r} is neither MS_SCHED nor MS_WORKER")
    worker_num = env_int("MS_WORKER_NUM", 1)
    if not os.environ.get("MS_SCHED_HOST"):
        fail_env("MS_SCHED_HOST is not set")
    env_int("MS_SCHED_PORT", 1, 65535)
    env_int("MS_TOPO_TIMEOUT")
    if env_int("RANK_SIZE") != worker_num:
        fail_env(f"RANK_SIZE={os.environ['RANK_SIZE']} differs from MS_WORKER_NUM={worker_num}")
    if role == "MS_SCHED":
        if os.environ.get("RANK_ID") != "0":
            fail_env(f"the scheduler's RANK_ID is {os.environ.get('RANK_ID')!r}, not 0")
        return role, worker_num, None
    rank = env_int("MS_NODE_ID", 0, worker_num - 1)
    if os.environ.get("RANK_ID") != str(rank):
        fail_env(f"RANK_ID={os.environ.get('RANK_ID')!r} differs from MS_NODE_ID={rank}")
    env_int("DEVICE_ID", 0, worker_num - 1)
    env_int("MS_NODE_RANK", -1)
    return role, worker_num, rank


def record(directory, role, ident):
    if not directory:
        return
    data = {"role": role, "id": ident, "pid": os.getpid(), "pgid": os.getpgid(0),
            "argv": sys.argv, "env": dict(os.environ)}
    path = os.path.join(directory, f"{role}_{ident}_{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)  # readers never see half a file


def deadline_after(seconds):
    return None if seconds < 0 else time.monotonic() + seconds


def left(deadline):
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def send(conn, line):
    try:
        conn.sendall((line + "\n").encode())
    except OSError:
        pass


def read_line(conn):
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


def run_scheduler(worker_num):
    host, port = os.environ["MS_SCHED_HOST"], int(os.environ["MS_SCHED_PORT"])
    deadline = deadline_after(int(os.environ["MS_TOPO_TIMEOUT"]))
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(worker_num + 4)
    log(f"scheduler: listening on {host}:{port} for {worker_num} workers")
    workers = {}  # node id -> connection
    while len(workers) < worker_num:
        server.settimeout(left(deadline))
        try:
            conn, _ = server.accept()
        except socket.timeout:
            print(f"ERROR: the cluster was not built within MS_TOPO_TIMEOUT: {len(workers)} of "
                  f"{worker_num} workers registered", file=sys.stderr, flush=True)
            sys.exit(1)
        conn.settimeout(10)
        words = read_line(conn).split()
        if len(words) != 2 or words[0] != "register":
            conn.close()
        elif words[1] in workers or len(workers) >= worker_num:
            send(conn, f"reject node id {words[1]} is registered already")
            conn.close()
        else:
            workers[words[1]] = conn
    log(f"scheduler: cluster is ready, node ids {sorted(workers, key=int)}")
    for conn in workers.values():
        conn.settimeout(None)
        send(conn, "ready")

    selector = selectors.DefaultSelector()
    for node, conn in workers.items():
        selector.register(conn, selectors.EVENT_READ, node)
    finalized, lost = set(), None
    while selector.get_map():
        for key, _ in selector.select():
            node, conn = key.data, key.fileobj
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            if b"finalize" in data:
                finalized.add(node)
            if data:
                continue
            selector.unregister(conn)
            conn.close()
            if node not in finalized and lost is None:
                lost = node
                print(f"ERROR: worker {node} was lost before it finalized; aborting the cluster",
                      file=sys.stderr, flush=True)
                for other in selector.get_map().values():
                    send(other.fileobj, "abort")
    if lost is not None:
        sys.exit(1)
    log("scheduler: every worker finalized")


def run_worker(opts, rank):
    host, port = os.environ["MS_SCHED_HOST"], int(os.environ["MS_SCHED_PORT"])
    deadline = deadline_after(int(os.environ["MS_TOPO_TIMEOUT"]))
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=1)
            break
        except OSError:
            if deadline is not None and time.monotonic() > deadline:
                print(f"ERROR: no scheduler at {host}:{port} within MS_TOPO_TIMEOUT",
                      file=sys.stderr, flush=True)
                sys.exit(1)
            time.sleep(0.05)
    conn.settimeout(None)
    send(conn, f"register {rank}")
    answer = read_line(conn)
    if answer != "ready":
        print(f"ERROR: the scheduler did not admit rank {rank}: {answer or 'connection lost'}",
              file=sys.stderr, flush=True)
        sys.exit(1)
    log(f"rank {rank}: Global rank id {rank}, cluster is ready")

    aborted = threading.Event()

    def listen():
        while read_line(conn) not in ("abort", ""):
            pass
        aborted.set()

    threading.Thread(target=listen, daemon=True).start()

    def on_abort():
        log(f"rank {rank}: the cluster aborts")
        time.sleep(opts.save_time)
        if "TTP:1" in os.environ.get("MS_ENABLE_TFT", "") and opts.record:
            with open(os.path.join(opts.record, f"ttp_saved_rank_{rank}"), "w") as f:
                f.write(f"{os.getpid()}\n")
            log(f"rank {rank}: ttp save done")
        sys.exit(1)

    for step in range(opts.steps):
        if rank == opts.crash_rank and step == opts.crash_at:
            marker = os.path.join(opts.record, f"crashed_rank_{rank}")
            if not os.path.exists(marker):
                open(marker, "w").close()
                print(f"rank {rank}: crashing at step {step}", file=sys.stderr, flush=True)
                os._exit(3)
        log(f"rank {rank} step {step}")
        if aborted.wait(opts.step_time):
            on_abort()
    while opts.wait_file and not os.path.exists(opts.wait_file):
        if aborted.wait(0.02):
            on_abort()
    send(conn, "finalize")
    conn.close()
    log(f"rank {rank}: finalized")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--step-time", type=float, default=0.05)
    parser.add_argument("--save-time", type=float, default=1.0)
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-at", type=int, default=0)
    parser.add_argument("--wait-file", default="")
    parser.add_argument("--record", default="")
    opts = parser.parse_args()
    if opts.crash_rank >= 0 and not opts.record:
        parser.error("--crash-rank needs --record (its marker file lives there)")
    role = os.environ.get("MS_ROLE")
    record(opts.record, "scheduler" if role == "MS_SCHED" else "worker",
           "sched" if role == "MS_SCHED" else os.environ.get("MS_NODE_ID", "none"))
    role, worker_num, rank = check_env()
    if role == "MS_SCHED":
        run_scheduler(worker_num)
    else:
        run_worker(opts, rank)


if __name__ == "__main__":
    main()
