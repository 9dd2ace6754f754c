"""Writes this worker's environment to <out>/env.<RANK>.json, then checks that
torch.distributed can form the group from it (gloo all_reduce of the ranks)."""
import json
import os
import sys

import torch
import torch.distributed as dist

out = sys.argv[1]
rank = os.environ["RANK"]
with open(os.path.join(out, f"env.{rank}.json"), "w") as f:
    json.dump(dict(os.environ), f)
dist.init_process_group("gloo")
t = torch.tensor([float(rank)])
dist.all_reduce(t)
world = int(os.environ["WORLD_SIZE"])
assert t.item() == world * (world - 1) / 2, t.item()
dist.destroy_process_group()
