"""scripts/bench.py's worker for the process-group store rows: plain torch (gloo), no ftrun
helper, so torchrun and ftrun run the very same script.

Appends "<attempt> <rank> <what> <time_ns>" lines to <dir>/stamps: "init0"/"init1" around
dist.init_process_group, "step" after each completed step (an all_reduce) of attempt >= 1.
With "crash", rank 1 of attempt 0 stamps "crash" after 3 steps and exits 1; the others of
attempt 0 keep stepping until they are stopped. Attempt >= 1 (or without "crash") runs 3
steps and exits 0."""
import os
import sys
import time

import torch
import torch.distributed as dist

out, crash = sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "crash"
rank = int(os.environ["RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def stamp(what):
    with open(os.path.join(out, "stamps"), "a") as f:
        f.write(f"{attempt} {rank} {what} {time.time_ns()}\n")


stamp("init0")
dist.init_process_group("gloo")
stamp("init1")
t = torch.ones(1024)
for step in range(3 if not crash or attempt > 0 else 10**9):
    dist.all_reduce(t)
    if attempt > 0:
        stamp("step")
    if crash and attempt == 0 and rank == 1 and step == 2:
        stamp("crash")
        os._exit(1)
    if crash and attempt == 0:
        time.sleep(0.01)
dist.destroy_process_group()
