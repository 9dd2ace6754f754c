"""A memory snapshot changed after its commit (a bit flipped in the agent's memory), under a
real ftrun with real torch ranks: the agent finds it out by the CRC-32C it computed at the
commit, skips it with a warning naming it, and the job restores from the next source (disk),
its final weights still equal to a fault-free run.

Run as `python3 test_flash_corrupt.py train <root> <config json>` it is one rank of the
training job (see train()).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_flash_memory as memory  # noqa: E402 (its test class stays out of this module)
from test_flash_memory import FTRUN, final, one_step, progress, resume  # noqa: E402

STEPS = 12


def corrupt_agent_snapshots(offset):
    """Flips a byte at `offset` in every snapshot buffer of this worker's agent (its parent),
    as a fault in the agent's memory would; how many buffers were changed."""
    agent = os.getppid()
    changed = 0
    for name in os.listdir(f"/proc/{agent}/fd"):
        path = f"/proc/{agent}/fd/{name}"
        try:
            if "memfd:ftrun-snapshot-" not in os.readlink(path):
                continue
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_size > offset:
                byte = os.pread(fd, 1, offset)
                os.pwrite(fd, bytes([byte[0] ^ 0xFF]), offset)
                changed += 1
        finally:
            os.close(fd)
    return changed


def train(root, config):
    """One DDP rank: a MEMORY save every step, a DISK save every 3rd; rank 1 SIGKILLs itself at
    config["kill_at"] on the first attempt; on the second, rank 0 first flips a byte of the
    agent's snapshots, then restores."""
    import signal
    import time

    import torch
    import torch.distributed as dist
    from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cp = DdpCheckpointer(os.path.join(root, "ckpt"))
    ballast = torch.zeros(1 << 20)  # 4 MiB after the small model: the offset lands in it
    log = open(os.path.join(root, f"progress-{rank}.txt"), "a", buffering=1)
    if attempt == 1 and rank == 0:
        log.write(f"corrupted {corrupt_agent_snapshots(2 << 20)}\n")
    dist.barrier()  # nobody restores before the bytes are changed
    start = resume(cp, model, opt, rank, False)
    log.write(f"start {start} attempt {attempt}\n")
    for step in range(start, config["steps"]):
        one_step(net, opt, step, rank, lockstep=False)
        if attempt == 0 and step == config["kill_at"] and rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        storage = StorageType.DISK if step % 3 == 0 else StorageType.MEMORY
        saved = cp.save_checkpoint(step, {"model": model.state_dict(), "opt": opt.state_dict(),
                                          "step": step, "rank": rank, "ballast": ballast},
                                   storage_type=storage)
        log.write(f"saved {step} {saved}\n")
        time.sleep(config.get("pause", 0))
    with open(os.path.join(root, f"final-{rank}.json"), "w") as f:
        json.dump({"w": model.weight.flatten().tolist(), "b": model.bias.tolist()}, f)


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class FlashCorruptTest(unittest.TestCase):
    def test_a_snapshot_changed_in_memory_is_skipped_and_disk_restores(self):
        root = tempfile.mkdtemp(prefix="ftrun-flash-corrupt-")
        env = dict(os.environ)
        env.pop("FTRUN_CONTROL_SOCKET", None)
        done = subprocess.run(
            [FTRUN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
             "--monitor-interval", "0.05", "--restart-backoff", "0", "--no-python",
             "/usr/bin/python3", __file__, "train", root,
             json.dumps({"steps": STEPS, "kill_at": 8, "pause": 0.1})],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
        out = done.stdout
        self.assertEqual(done.returncode, 0, out)
        lines = progress(root, 0)
        self.assertIn("corrupted 2", lines, (lines, out))  # both of local rank 0's buffers
        self.assertRegex(out, r"flash checkpoint: the snapshot of local rank 0 at step [78] has "
                              r"checksum \d+, not the \d+ recorded when it was saved; skipped "
                              r"\(corrupt\)")
        self.assertIn("from memory", out)  # the worker's fallback said why
        self.assertNotIn("ftrun: restored step", out)
        starts = [l for l in lines if l.startswith("start")]
        self.assertEqual(starts, ["start 0 attempt 0", "start 7 attempt 1"],
                         "step 6, the newest DISK save, restored")
        self.assertEqual(final(root), memory.FlashMemoryTest.fault_free("ddp", STEPS))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "train":
        sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))
        train(sys.argv[2], json.loads(sys.argv[3]))
    else:
        unittest.main()
