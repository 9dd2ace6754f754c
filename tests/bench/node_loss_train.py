"""A plain torch training script (no ftrun helper) for scripts/bench.py's node-loss section:
gloo, a small model, gradients all-reduced by hand, a 50 ms sleep per step standing in for
the GPU. A failed collective (a peer's node is gone) raises, so the rank exits 1 as with
torchrun.

  node_loss_train.py DIR

Every process appends one line to DIR/started after its first step:
  <pid> <rank> <group_rank> <started ns> <torch imported ns> <process group ready ns>
  <first step ns> <world size>
(ns since the epoch). A rank whose collective fails appends "<pid> <rank> <ns>" to DIR/failed
before the error ends it. All ranks stop together, after the step in which DIR/stop appeared on
any of them, and exit 0.
"""
import time

T_START = time.time_ns()

import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

T_IMPORTED = time.time_ns()
out = sys.argv[1]
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
T_GROUP = time.time_ns()
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
stop_file = os.path.join(out, "stop")


def step() -> bool:
    x = torch.randn(32, 64)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    stop = torch.tensor([1.0 if os.path.exists(stop_file) else 0.0])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    opt.step()
    time.sleep(0.05)
    return stop.item() > 0


done = step()
T_FIRST = time.time_ns()
with open(os.path.join(out, "started"), "a") as f:
    f.write(f"{os.getpid()} {rank} {os.environ.get('GROUP_RANK', '?')} "
            f"{T_START} {T_IMPORTED} {T_GROUP} {T_FIRST} {dist.get_world_size()}\n")
while not done:
    try:
        done = step()
    except RuntimeError:
        with open(os.path.join(out, "failed"), "a") as f:
            f.write(f"{os.getpid()} {rank} {time.time_ns()}\n")
        raise
dist.destroy_process_group()
