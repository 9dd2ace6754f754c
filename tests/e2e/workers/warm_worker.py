"""A plain torch worker for the --warm-restart tests: records what it sees of its start (the
cold-start contract: argv, __file__, __name__, sys.path[0], environment, working directory,
signal dispositions, stdio) in <out>/contract.<attempt>.<rank>.json, then runs gloo steps.

  warm_worker.py OUT [--crash-rank R] [--go FILE] [--fail-rank R] [--exit-code N]

Attempt 0: rank R (--crash-rank) SIGKILLs itself at step 2 once FILE (--go) exists.
Attempt 1: rank R (--fail-rank) exits with --exit-code N, or with -1 raises ValueError (under
torch's @record, so the error file gets it). Everything else runs 5 steps and exits 0.
"""
import sys

PRELOADED = "torch" in sys.modules  # before anything else: a standby imported it already

import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402


def contract():
    def stream(f):
        return {"line_buffering": f.line_buffering, "write_through": f.write_through,
                "encoding": f.encoding, "errors": f.errors, "name": f.name,
                "buffer": type(f.buffer).__name__, "mode": f.mode}
    handlers = {}
    for s in signal.valid_signals():
        try:
            h = signal.getsignal(s)
        except (OSError, ValueError):
            continue
        handlers[str(int(s))] = h if isinstance(h, int) else getattr(h, "__name__", repr(h))
    main = sys.modules["__main__"]
    return {
        "preloaded": PRELOADED,
        "pid": os.getpid(),
        "argv": sys.argv,
        "orig_argv": getattr(sys, "orig_argv", []),
        "cmdline": [os.fsdecode(a) for a in
                    open("/proc/self/cmdline", "rb").read().rstrip(b"\0").split(b"\0")],
        "file": __file__,
        "name": __name__,
        "main_is_this": main.__dict__ is globals(),
        "main_keys": sorted(k for k in globals() if k.startswith("__")),
        "spec": None if __spec__ is None else [__spec__.name, __spec__.origin],
        "path0": sys.path[0],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "signals": handlers,
        "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "stdin": {"name": sys.stdin.name, "line_buffering": sys.stdin.line_buffering},
        "stdout": stream(sys.stdout),
        "stderr": stream(sys.stderr),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "pgid_is_pid": os.getpgid(0) == os.getpid(),
        "threads": len(os.listdir("/proc/self/task")),
    }


@record
def main():
    out = sys.argv[1]
    opts = dict(zip(sys.argv[2::2], sys.argv[3::2]))
    rank = int(os.environ["RANK"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    c = contract()
    with open(os.path.join(out, f"contract.{attempt}.{rank}.json"), "w") as f:
        json.dump(c, f)
    print(f"rank {rank} attempt {attempt} preloaded={PRELOADED} pid={os.getpid()}", flush=True)
    if attempt >= 1 and int(opts.get("--fail-rank", -1)) == rank:
        code = int(opts.get("--exit-code", -1))
        if code < 0:
            raise ValueError(f"boom from rank {rank}")
        sys.exit(code)
    dist.init_process_group("gloo")
    t = torch.ones(4)
    for step in range(5):
        if (attempt == 0 and int(opts.get("--crash-rank", -1)) == rank and step == 2):
            go = opts.get("--go")
            while go and not os.path.exists(go):
                time.sleep(0.05)
            print(f"rank {rank}: crashing", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)
        if attempt == 0 and opts.get("--go"):
            while not os.path.exists(opts["--go"]):
                time.sleep(0.05)  # attempt 0 lasts until the test says go
    print(f"rank {rank} attempt {attempt} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
