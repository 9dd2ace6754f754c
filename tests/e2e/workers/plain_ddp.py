#!/usr/bin/python3
"""A plain torch DDP (gloo) training script, no ftrun helper: what most users run. rank 0 saves
a checkpoint every --ckpt-every steps with torch.save and every attempt resumes from it; the
data of a step is the same for any world size and rank layout (--global-batch samples split
among the ranks), so a resumed run ends with the weights of a run without faults. A failed
collective (a peer died) raises, so the rank exits 1 as with torchrun.

  ftrun --nproc-per-node 4 plain_ddp.py --steps 40 --out /tmp/run
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def held_before(path, step):
    """Whether the number in `path` (no file, or no number: none) holds the job before step."""
    try:
        with open(path) as f:
            return int(f.read()) <= step
    except (OSError, ValueError):
        return False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--global-batch", type=int, default=32)
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--step-time", type=float, default=0.0)
    p.add_argument("--out", required=True)
    p.add_argument("--hold", default=None, metavar="FILE",
                   help="wait before step S while FILE holds a number <= S (a test's pause)")
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(),
                                    torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    os.makedirs(args.out, exist_ok=True)
    ckpt = os.path.join(args.out, "ckpt.pt")
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"] + 1
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    print(f"rank {rank} attempt {attempt}: world_size={world} resuming at step {start}",
          flush=True)
    for step in range(start, args.steps):
        while args.hold and held_before(args.hold, step):
            time.sleep(0.01)
        g = torch.Generator().manual_seed(step)
        x = torch.randn(args.global_batch, 8, generator=g)
        y = x[:, :1] * 2.0 - x[:, 1:2]
        loss = torch.nn.functional.mse_loss(model(x[rank::world]), y[rank::world])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            with open(os.path.join(args.out, "progress"), "a") as f:
                f.write(f"{os.getpid()} {step}\n")
            if args.ckpt_every and (step + 1) % args.ckpt_every == 0:
                torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                            "step": step}, ckpt + ".tmp")
                os.replace(ckpt + ".tmp", ckpt)
        time.sleep(args.step_time)
    if rank == 0:
        weights = torch.cat([t.flatten() for t in model.module.state_dict().values()])
        with open(os.path.join(args.out, "result.0.json"), "w") as f:
            json.dump({"weights": weights.tolist()}, f)
    dist.destroy_process_group()
    # Not returning: freeing the DDP module with main()'s locals can hang torch 1.13 for good
    # (pytorch#56297: the reducer drops the gloo group with the GIL held).
    os._exit(0)


if __name__ == "__main__":
    main()
