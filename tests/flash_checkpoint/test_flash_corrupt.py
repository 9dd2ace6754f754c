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
from test_flash_memory import FTRUN, final, progress  # noqa: E402

STEPS = 12


def corrupt_agent_snapshots(offset):
    """Sets the byte at `offset` (a zero of the ballast tensor) to 0xFF in every snapshot
    buffer of this worker's agent (its parent), as a fault in the agent's memory would; how
    many buffers were changed. Idempotent: every rank does it before it restores."""
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
                os.pwrite(fd, b"\xff", offset)
                changed += 1
        finally:
            os.close(fd)
    return changed


def train(root, config):
    """test_flash_memory's rank (rank 1 SIGKILLs itself at config["kill_at"]), with a DISK save
    every 3rd step and MEMORY saves between; on the second attempt each rank first changes a
    byte of the agent's snapshots, then restores."""
    from ftrun.flash_checkpoint import ddp
    real_save, real_resume = ddp.DdpCheckpointer.save_checkpoint, memory.resume

    def save(self, step, state, path="", storage_type=None):
        kind = ddp.StorageType.DISK if step % 3 == 0 else ddp.StorageType.MEMORY
        return real_save(self, step, state, path, storage_type=kind)

    def resume(cp, model, opt, rank, sharded, resume_path=""):
        if os.environ.get("TORCHELASTIC_RESTART_COUNT") == "1":
            with open(os.path.join(root, f"corrupted-{rank}.txt"), "w") as f:
                f.write(str(corrupt_agent_snapshots(2 << 20)))
        return real_resume(cp, model, opt, rank, sharded, resume_path)

    ddp.DdpCheckpointer.save_checkpoint = save
    memory.resume = resume
    memory.train(root, config)


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
             json.dumps({"steps": STEPS, "kill_at": 8, "kill_rank": 1, "pause": 0.1,
                         "ballast_mb": 4})],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
        out = done.stdout
        self.assertEqual(done.returncode, 0, out)
        lines = progress(root, 0)
        with open(os.path.join(root, "corrupted-0.txt")) as f:
            self.assertEqual(f.read(), "2", out)  # both of local rank 0's buffers
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
