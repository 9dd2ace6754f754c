"""One rank of scripts/bench_replica.py: a sharded state of --mib MiB saved to the agent's
memory (ShardedCheckpointer, StorageType.MEMORY) --saves times, --gap seconds apart; prints one
JSON line per save: {"rank", "step", "returned" (wall clock when the save returned), "blocked"
(seconds the save took)}."""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts", "python"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=int, default=1024)
    p.add_argument("--saves", type=int, default=4)
    p.add_argument("--gap", type=float, default=3.0)
    p.add_argument("--dir", required=True)
    p.add_argument("--only-rank", type=int, default=-1,
                   help="only this rank's state is --mib MiB; the others' are 1 MiB")
    a = p.parse_args()
    import torch
    import torch.distributed as dist
    from ftrun.flash_checkpoint.sharded import ShardedCheckpointer, StorageType

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mib = a.mib if a.only_rank in (-1, rank) else 1
    state = {"w": torch.randn(mib << 18)}  # float32: 4 bytes each
    cp = ShardedCheckpointer(a.dir)
    for step in range(a.saves):
        state["w"][0] = step
        dist.barrier()
        t0 = time.perf_counter()
        cp.save_checkpoint(step, state, storage_type=StorageType.MEMORY)
        blocked = time.perf_counter() - t0
        print(json.dumps({"rank": rank, "step": step, "returned": time.time(),
                          "blocked": blocked}), flush=True)
        time.sleep(a.gap)
    dist.barrier()


if __name__ == "__main__":
    main()
