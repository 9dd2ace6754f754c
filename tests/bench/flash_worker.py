"""One rank of the flash-checkpoint benchmark (scripts/bench_flash.py), under ftrun: times a
MEMORY save of a state of --mib MiB (blocking time, buffers reused after the first), the
restore of it from the agent's memory, DISK saves of it (the blocking time, and the time
until the agent has it on storage: written in torch.save's format, fsynced, renamed, the
tracker updated), and torch.save + fsync of the same state to --dir (over the previous
file's pages, and to files kept as the agent's are). Prints one JSON line."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts", "python"))
from ftrun.flash_checkpoint import engine  # noqa: E402
from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--saves", type=int, default=5)
    p.add_argument("--dir", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    os.makedirs(a.dir, exist_ok=True)
    tensors = 8
    state = {f"layer{i}": torch.randn(a.mib * (1 << 20) // 4 // tensors) for i in range(tensors)}
    state["step"] = 0
    gib = a.mib / 1024
    cp = DdpCheckpointer(os.path.join(a.dir, "flash"))
    mem, why = engine.memory_store()
    if mem is None:
        raise SystemExit(f"no agent memory: {why}")
    save_times = []
    for step in range(a.saves):
        state["step"] = step
        t = time.perf_counter()
        if not cp.save_checkpoint(step, state, storage_type=StorageType.MEMORY):
            raise SystemExit("the memory save was refused")
        save_times.append(time.perf_counter() - t)
    restore_times = []
    for _ in range(3):
        t = time.perf_counter()
        restored = mem.load(a.saves - 1, "", 1)
        restore_times.append(time.perf_counter() - t)
        assert torch.equal(restored["layer0"], state["layer0"])
        del restored
    persist_block, persist_stored = [], []
    for step in range(a.saves, a.saves + 3):
        state["step"] = step
        t = time.perf_counter()
        if not cp.save_checkpoint(step, state, storage_type=StorageType.DISK):
            raise SystemExit("the DISK save was refused")
        persist_block.append(time.perf_counter() - t)
        if not cp.wait_latest_checkpoint(600):
            raise SystemExit(f"the agent did not store step {step}")
        persist_stored.append(time.perf_counter() - t)
    written = torch.load(os.path.join(cp.checkpoint_dir, str(step), "rank_0.pt"))
    assert written["step"] == step and torch.equal(written["layer7"], state["layer7"])
    del written
    # torch.save + fsync: each file removed before the next (its page cache reused: the best
    # case), and files kept as checkpoints are (as the agent's are), each on pages the page
    # cache had not used (on this VM fresh pages cost five times more to write).
    disk_times, kept_times = [], []
    for i in range(6):
        path = os.path.join(a.dir, f"torch-{i}.pt")
        t = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        (kept_times if i >= 3 else disk_times).append(time.perf_counter() - t)
        if i < 3:
            os.unlink(path)
    agent = {}
    with open(f"/proc/{os.getppid()}/status") as f:  # the agent is this worker's parent
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssShmem"):
                agent[key] = int(value.split()[0]) / 1024
    print(json.dumps({
        "agent_rss_anon_mib": agent.get("RssAnon", 0),
        "mib": a.mib,
        "first_save_s": save_times[0],
        "save_s": statistics.median(save_times[1:]),
        "save_s_per_gib": statistics.median(save_times[1:]) / gib,
        "restore_s_per_gib": statistics.median(restore_times) / gib,
        "disk_save_s": statistics.median(persist_block),
        "disk_stored_s": statistics.median(persist_stored),
        "torch_save_fsync_s": statistics.median(disk_times),
        "torch_save_fsync_s_per_gib": statistics.median(disk_times) / gib,
        "torch_save_fsync_kept_s": statistics.median(kept_times),
    }), flush=True)


if __name__ == "__main__":
    main()
