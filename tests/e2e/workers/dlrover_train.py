#!/usr/bin/python3
"""A short gloo all-reduce training loop for the dlrover-run end-to-end test.

  dlrover_train.py OUT --world N --role NAME [--steps S] [--crash-rank R --crash-step K]

Checks what dlrover-run promises a worker: ROLE_NAME is --role, WORLD_SIZE is --world, and
RANK/WORLD_SIZE agree with the process group. Every step all-reduces (rank + 1 + step) and
checks the sum; the running total is the training state. With ftrun's helper every rank
registers a save handler (--save-at-breakpoint: a survivor saves the last complete step when
a peer dies) and resumes from the newest checkpoint. On attempt 0, rank R SIGKILLs itself
before the all-reduce of step K. Writes OUT/result.<rank>.json and appends
"<rank> <attempt> <ns>" to OUT/starts; exits 3 when a check fails.
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "scripts", "python"))
import ftrun  # noqa: E402


def fail(message):
    print(f"dlrover_train: rank {os.environ.get('RANK')}: {message}", file=sys.stderr, flush=True)
    sys.exit(3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--role", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--crash-step", type=int, default=-1)
    args = p.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    with open(os.path.join(args.out, "starts"), "a") as f:
        f.write(f"{rank} {attempt} {time.time_ns()}\n")
    if os.environ.get("ROLE_NAME") != args.role:
        fail(f"ROLE_NAME={os.environ.get('ROLE_NAME')!r}, expected {args.role!r}")
    if world != args.world:
        fail(f"WORLD_SIZE={world}, expected {args.world}")
    dist.init_process_group("gloo")
    if dist.get_rank() != rank or dist.get_world_size() != world:
        fail(f"the process group says rank {dist.get_rank()} of {dist.get_world_size()}")

    root = os.path.join(args.out, "checkpoints")
    state = {"total": 0.0}

    def save(step, directory):
        with open(os.path.join(directory, "state.json"), "w") as f:
            json.dump({"step": step, "total": state["total"]}, f)

    ft = ftrun.connect()
    ft.register_save_handler(save, root)  # every rank holds the same total: replicas
    start = 0
    ckpt = ftrun.latest_checkpoint(root)
    if ckpt is not None:
        with open(os.path.join(ckpt.part(), "state.json")) as f:
            state["total"] = json.load(f)["total"]
        start = ckpt.step + 1
        ft.report(ckpt.step)
    print(f"rank {rank} attempt {attempt}: world {world} role {args.role} resuming at step {start}",
          flush=True)

    with ft.guard():
        for step in range(start, args.steps):
            if attempt == 0 and rank == args.crash_rank and step == args.crash_step:
                print(f"rank {rank}: injected crash at step {step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            t = torch.tensor([float(rank + 1 + step)], dtype=torch.float64)
            dist.all_reduce(t)
            want = world * (world + 1) / 2 + world * step
            if t.item() != want:
                fail(f"step {step}: all-reduce gave {t.item()}, expected {want}")
            with ft.update(step):
                state["total"] += t.item()

    result = {"rank": rank, "world_size": world, "attempt": attempt, "resumed_at": start,
              "total": state["total"], "role": os.environ.get("ROLE_NAME"),
              "run_id": os.environ.get("TORCHELASTIC_RUN_ID")}
    with open(os.path.join(args.out, f"result.{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: done, total {state['total']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
