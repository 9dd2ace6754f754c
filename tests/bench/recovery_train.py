"""A plain torch training script (no ftrun helper) for scripts/bench.py's recovery row: gloo,
a small model, gradients all-reduced by hand, a 20 ms sleep per step standing in for the GPU.

  recovery_train.py DIR

Attempt 0: every rank writes DIR/running.0.<rank> after its first step and trains until DIR/go
exists; then rank 2 writes the time to DIR/crash and SIGKILLs itself. Attempt 1: each rank
writes DIR/stamps.1.<rank> (ns since the epoch: script started, torch imported, process group
ready, first step completed), trains 2 more steps and exits 0.
"""
import time

T_START = time.time_ns()

import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

T_IMPORTED = time.time_ns()
out = sys.argv[1]
rank = int(os.environ["RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
dist.init_process_group("gloo")
T_GROUP = time.time_ns()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    x = torch.randn(32, 64)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    time.sleep(0.02)


step()
T_FIRST = time.time_ns()
if attempt == 0:
    open(os.path.join(out, f"running.0.{rank}"), "w").close()
    while not os.path.exists(os.path.join(out, "go")):
        step()
    if rank == 2:
        with open(os.path.join(out, "crash"), "w") as f:
            f.write(str(time.time_ns()))
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        step()  # until the peer's death ends the collective
else:
    with open(os.path.join(out, f"stamps.{attempt}.{rank}"), "w") as f:
        f.write(f"{T_START} {T_IMPORTED} {T_GROUP} {T_FIRST}\n")
    for _ in range(2):
        step()
    dist.destroy_process_group()
