"""A full disk under the agent's DISK saves, end to end: a real ftrun with two DDP ranks saving
to DISK every step, its checkpoint_dir a 3 MiB tmpfs (a mount namespace the test creates; skipped
where none can be made) that holds two steps of the state. The saves that do not fit fail with
one message naming the step, the path and the kernel's reason; what was stored before stays
complete and is what dlrover_latest.txt names (load_checkpoint reads it); training goes on, and a
rank SIGKILLed later still resumes from memory with zero steps lost; one line per failed save;
wait_latest_checkpoint stops waiting for the last step with the agent's reason.

Run as `python3 test_flash_full_disk.py train <root> <config json>` it is one rank (the train()
of test_flash_memory.py).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_flash_memory as memory_tests  # noqa: E402
from test_flash_memory import FTRUN, assert_same_weights, final, progress, train  # noqa: E402

STEPS, KILL_AT = 8, 6


def namespaces_work():
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
@unittest.skipUnless(namespaces_work(), "no user and mount namespaces here (unshare -rm)")
class FullDiskTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ftrun-flash-full-")
        self.addCleanup(shutil.rmtree, self.root, True)

    def test_saves_that_do_not_fit_are_named_and_the_stored_step_stays_whole(self):
        ckpt, kept = os.path.join(self.root, "ckpt"), os.path.join(self.root, "kept")
        os.makedirs(ckpt)
        config = {"steps": STEPS, "storage": "disk", "ballast_mb": 1, "kill_rank": 1,
                  "kill_at": KILL_AT, "wait": 120}
        ftrun = [FTRUN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                 "--restart-backoff", "0", "--monitor-interval", "0.05", "--log-dir",
                 os.path.join(self.root, "logs"), "--no-python", "/usr/bin/python3", __file__,
                 "train", self.root, json.dumps(config)]
        # The tmpfs lives as long as the namespace: the script keeps a copy for the checks.
        script = ('mount -t tmpfs -o size=3m tmpfs "$1" && shift && "$@"; rc=$?; '
                  f'cp -a {ckpt} {kept}; exit $rc')
        env = dict(os.environ)
        env.pop("FTRUN_CONTROL_SOCKET", None)
        done = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", ckpt, *ftrun],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=150)
        out = done.stdout
        self.assertEqual(done.returncode, 0, out[-6000:])

        failed = re.findall(r"flash checkpoint: persisting step (\d+) failed: (.*)", out)
        self.assertTrue(failed, out[-6000:])
        for step, why in failed:
            self.assertIn(ckpt, why)
            self.assertIn("No space left on device", why)
        # One line a save, and one from wait_latest_checkpoint (rank 0's, the last step's).
        waited = re.findall(r"ftrun: step (\d+) is not on storage: the agent could not write "
                            r"step (\d+): .*No space left on device", out)
        self.assertEqual(waited, [(str(STEPS - 1), str(STEPS - 1))], out[-6000:])
        self.assertEqual(out.count("No space left on device"), len(failed) + 1,
                         "one line a save")
        self.assertIn("waited False", progress(self.root, 0))
        self.assertIn("waited True", progress(self.root, 1))  # nothing of its own to wait for
        stored = [int(s) for s in re.findall(r"flash checkpoint: step=(\d+) stored at ", out)]
        self.assertTrue(stored, out[-6000:])
        with open(os.path.join(kept, "dlrover_latest.txt")) as f:
            latest = int(f.read())
        self.assertEqual(latest, max(stored))
        self.assertNotIn(str(latest), [s for s, _ in failed])
        self.assertEqual([n for n in os.listdir(kept) if ".tmp" in n], [], "no partial step")
        # What the tracker names loads whole, outside ftrun, as a new job would read it.
        code = ("import sys, json; sys.path.insert(0, sys.argv[2]);"
                "from ftrun.flash_checkpoint.ddp import DdpCheckpointer;"
                "s = DdpCheckpointer(sys.argv[1]).load_checkpoint();"
                "print(json.dumps([s['step'], s['ballast'].numel()]))")
        helper = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts", "python")
        loaded = subprocess.run(["/usr/bin/python3", "-c", code, kept, helper], env=env,
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(loaded.returncode, 0, loaded.stderr)
        self.assertEqual(json.loads(loaded.stdout.strip().splitlines()[-1]), [latest, 1 << 18])

        # Training went on past the failures, and the rank killed later resumed from memory
        # (rank 0 may have saved the step rank 1 died in).
        restored = [int(s) for s in re.findall(r"ftrun: restored step (\d+) from memory", out)]
        self.assertIn(restored[-1:], ([KILL_AT - 1], [KILL_AT]), out[-4000:])
        for rank in (0, 1):
            starts = [l for l in progress(self.root, rank) if l.startswith("start")]
            self.assertEqual(starts[-1], f"start {restored[-1] + 1} attempt 1", out[-4000:])
        assert_same_weights(self, final(self.root),
                            memory_tests.FlashMemoryTest.fault_free("ddp", STEPS))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "train":
        train(sys.argv[2], json.loads(sys.argv[3]))
    else:
        unittest.main()
