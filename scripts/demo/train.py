#!/usr/bin/python3
"""A small but real torch.distributed (gloo) DDP training job for ftrun's demo and tests.

Trains a tiny MLP on a fixed synthetic regression problem. Rank 0 saves a checkpoint every
--ckpt-every steps (written to a temporary file, fsynced, renamed); every rank resumes from the
newest checkpoint at start, so a restarted job continues where it stopped. --crash-rank and
--crash-step inject a fault (SIGKILL of that rank) on the first attempt only.

Run it under ftrun (or torchrun) with Debian's /usr/bin/python3, e.g.
  ftrun --nproc-per-node 4 --max-restarts 2 scripts/demo/train.py --steps 60 --out /tmp/run
"""
import argparse
import hashlib
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--out", required=True, help="directory for checkpoints and results")
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--crash-step", type=int, default=-1)
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step")
    return p.parse_args()


def model_fn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def batch(step, rank, size):
    # The data depends only on (step, rank): a resumed run sees exactly what it would have.
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(size, 8, generator=g)
    y = (x[:, :1] * 2.0 - x[:, 1:2] + 0.5 * x[:, 2:3] ** 2)
    return x, y


def flat_weights(model):
    return torch.cat([p.detach().flatten() for p in model.state_dict().values()])


def checksum(weights):
    # Rounded, so that a resumed run (whose DDP gradient buckets reduce in a different order)
    # and a fault-free run print the same digest; --out holds the exact weights.
    return hashlib.sha256(weights.mul(1e6).round().numpy().tobytes()).hexdigest()[:16]


def save_checkpoint(path, step, model, opt):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    args = parse_args()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    # float64: reduction-order differences stay near 1e-16 instead of amplifying.
    torch.set_default_dtype(torch.float64)
    os.makedirs(args.out, exist_ok=True)
    ckpt = os.path.join(args.out, "checkpoint.pt")

    model = DDP(model_fn())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    if rank == 0:
        print(f"attempt {attempt}: world_size={world} resuming at step {start}", flush=True)

    loss = torch.tensor(0.0)
    for step in range(start, args.steps):
        if attempt == 0 and rank == args.crash_rank and step == args.crash_step:
            print(f"rank {rank}: injected crash at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch(step, rank, args.batch)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if args.step_time:
            time.sleep(args.step_time)
        done = step + 1
        if rank == 0 and (done % 10 == 0 or done == args.steps):
            print(f"step {done}/{args.steps} loss {loss.item():.4f}", flush=True)
        if rank == 0 and args.ckpt_every > 0 and done % args.ckpt_every == 0:
            save_checkpoint(ckpt, done, model.module, opt)

    weights = flat_weights(model.module)
    result = {"rank": rank, "world_size": world, "attempt": attempt, "steps": args.steps,
              "loss": loss.item(), "checksum": checksum(weights), "weights": weights.tolist()}
    with open(os.path.join(args.out, f"result.{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"done: {args.steps} steps, final loss {loss.item():.4f}, "
              f"weights {result['checksum']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
