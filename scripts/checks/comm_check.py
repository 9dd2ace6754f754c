#!/usr/bin/python3
"""ftrun's framework-level network check (--network-check-cmd, dlrover's --comm-perf-test).

Run as a short job with the environment a torchrun worker gets (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, LOCAL_RANK): initialise torch.distributed (nccl when CUDA is
available, else gloo), time a matmul and an all-reduce, and print ONE JSON line on rank 0
(on every rank with --all-ranks):

  {"rank":0,"world_size":2,"backend":"gloo","matmul_ms":0.41,"allreduce_ms":1.93,
   "allreduce_bytes":4194304,"algbw_mbps":2173.2,"busbw_mbps":2173.2}

The times are the slowest rank's (a MAX all-reduce after the timing), in milliseconds per
operation; MB = 1e6 bytes; busbw = algbw * 2 (n - 1) / n, as nccl-tests and dlrover report it.
Exit 0 on success; on failure, one line on stderr ("comm_check: rank R: ...") and exit 1
(2 for a usage error: bad flags, no torch, no RANK in the environment).
Needs Debian's /usr/bin/python3 (python3-torch); the python3 first on PATH may not see torch.
"""
import argparse
import datetime
import json
import os
import sys
import time
import warnings


def fail(code, message):
    sys.stderr.write("comm_check: " + " ".join(str(message).split()) + "\n")
    sys.exit(code)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--matmul-size", type=int, default=256,
                   help="N of the N x N x N matmul (default 256)")
    p.add_argument("--allreduce-bytes", type=int, default=4 << 20,
                   help="size of the all-reduced float32 tensor in bytes (default 4 MiB)")
    p.add_argument("--iters", type=int, default=5, help="timed iterations of each (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first (default 2)")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                   help="auto: nccl with CUDA, else gloo")
    p.add_argument("--timeout", type=float, default=60,
                   help="seconds for the process group's set-up and collectives (default 60)")
    p.add_argument("--all-ranks", action="store_true", help="print the JSON line on every rank")
    args = p.parse_args(argv)
    if args.matmul_size < 1 or args.allreduce_bytes < 4 or args.iters < 1 or args.warmup < 0:
        p.error("sizes and --iters must be positive")
    return args


def env_int(name):
    value = os.environ.get(name)
    if value is None:
        fail(2, f"{name} is not set (run me under ftrun or torchrun)")
    try:
        return int(value)
    except ValueError:
        fail(2, f"{name}={value!r} is not a number")


def timed(fn, iters, warmup, sync):
    for _ in range(warmup):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - start) * 1000 / iters


def run(args, rank, world_size, local_rank):
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    backend = args.backend if args.backend != "auto" else ("nccl" if cuda else "gloo")
    device = torch.device(f"cuda:{local_rank}" if cuda and backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=args.timeout))
    try:
        n = args.matmul_size
        a = torch.randn(n, n, device=device)
        b = torch.randn(n, n, device=device)
        matmul_ms = timed(lambda: torch.matmul(a, b), args.iters, args.warmup, sync)

        t = torch.ones(args.allreduce_bytes // 4, dtype=torch.float32, device=device)
        nbytes = t.numel() * 4
        dist.barrier()
        allreduce_ms = timed(lambda: dist.all_reduce(t), args.iters, args.warmup, sync)

        worst = torch.tensor([matmul_ms, allreduce_ms], dtype=torch.float64, device=device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        matmul_ms, allreduce_ms = (float(x) for x in worst.cpu())
    finally:
        dist.destroy_process_group()

    algbw = nbytes / (allreduce_ms / 1000) / 1e6 if allreduce_ms > 0 else 0.0
    busbw = algbw * 2 * (world_size - 1) / world_size
    return {"rank": rank, "world_size": world_size, "backend": backend,
            "matmul_ms": round(matmul_ms, 4), "allreduce_ms": round(allreduce_ms, 4),
            "allreduce_bytes": nbytes, "algbw_mbps": round(algbw, 1),
            "busbw_mbps": round(busbw, 1)}


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rank = env_int("RANK")
    world_size = env_int("WORLD_SIZE")
    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            fail(2, f"{name} is not set (run me under ftrun or torchrun)")
    warnings.filterwarnings("ignore")
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        fail(2, f"cannot import torch with {sys.executable}: {e}")
    try:
        record = run(args, rank, world_size, local_rank)
    except Exception as e:  # any failure of the check is the answer
        fail(1, f"rank {rank}: {type(e).__name__}: {e}")
    if rank == 0 or args.all_ranks:
        print(json.dumps(record, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
