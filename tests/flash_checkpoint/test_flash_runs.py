"""Runs sharing a checkpoint directory, end to end (a real ftrun, one torch rank): a new run that
does not resume, in a directory an earlier run left a higher step in, restores its own steps as
DLRover's overwritten tracker makes it: from the agent's memory after a fault within the run
(the earlier run's higher step on disk does not win over it, even before any DISK save of the
run), and from its own DISK save in the next run; the earlier run's step saved again is
replaced.

Run as `python3 test_flash_runs.py rank <dir> <config json>` it is the job's rank (see rank()).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))
from test_flash_memory import FTRUN  # noqa: E402


def rank(d, config):
    """Loads first when config["load"] (always after a restart) and records the step loaded in
    loaded-<attempt>.txt; then, on the first attempt, saves config["steps"] (DISK for those in
    config["disk"], waited for; MEMORY else) and SIGKILLs itself after config["kill_at"]."""
    import torch
    from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType
    cp = DdpCheckpointer(os.path.join(d, "ckpt"))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if config["load"] or attempt > 0:
        state = cp.load_checkpoint()
        with open(os.path.join(d, f"loaded-{attempt}.txt"), "w") as f:
            f.write(f"{state.get('step')} {state['w'][0].item() if state else None}")
    if attempt > 0:
        return
    for step in config["steps"]:
        disk = step in config.get("disk", [])
        state = {"w": torch.full((4,), float(config.get("value", 0) + step)), "step": step}
        cp.save_checkpoint(step, state,
                           storage_type=StorageType.DISK if disk else StorageType.MEMORY)
        if disk and not cp.wait_latest_checkpoint(60):
            raise SystemExit(f"step {step} was not stored")
        if step == config.get("kill_at"):
            os.kill(os.getpid(), signal.SIGKILL)


class RunsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ftrun-runs-")
        self.ckpt = os.path.join(self.dir, "ckpt")

    def run_job(self, config, max_restarts=0):
        for name in os.listdir(self.dir):
            if name.startswith("loaded-"):
                os.remove(os.path.join(self.dir, name))
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "scripts", "python"))
        env.pop("FTRUN_CONTROL_SOCKET", None)
        done = subprocess.run(
            [FTRUN, "--max-restarts", str(max_restarts), "--monitor-interval", "0.1",
             "--no-python", "/usr/bin/python3", os.path.abspath(__file__), "rank", self.dir,
             json.dumps(config)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stdout[-3000:])
        return done.stdout

    def loaded(self, attempt):
        with open(os.path.join(self.dir, f"loaded-{attempt}.txt")) as f:
            return f.read()

    def earlier_run_ended(self):
        """Dates what the runs so far left an hour back, as a later run finds it."""
        hour_ago = time.time() - 3600
        for dirpath, dirnames, filenames in os.walk(self.ckpt):
            for name in dirnames + filenames:
                os.utime(os.path.join(dirpath, name), (hour_ago, hour_ago),
                         follow_symlinks=False)

    def test_a_run_that_did_not_resume_restores_its_own_steps(self):
        self.run_job({"load": False, "steps": [2, 50], "disk": [2, 50]})
        self.earlier_run_ended()
        # A new run starting over, MEMORY saves only, killed after step 4: its restart restores
        # step 4 from memory (the earlier run's step 50 on disk is not newer than that).
        out = self.run_job({"load": False, "steps": [0, 1, 2, 3, 4], "value": 100,
                            "kill_at": 4}, max_restarts=1)
        self.assertEqual(self.loaded(1), "4 104.0", out[-3000:])
        # A run that saves step 2 to disk: the earlier run's step 2 is replaced, the tracker
        # lowered; the next run (the agent and its memory gone) loads it, not step 50.
        out = self.run_job({"load": False, "steps": [0, 1, 2], "disk": [2], "value": 200})
        with open(os.path.join(self.ckpt, "dlrover_latest.txt")) as f:
            self.assertEqual(f.read(), "2")
        out = self.run_job({"load": True, "steps": []})
        self.assertEqual(self.loaded(0), "2 202.0", out[-3000:])
        self.assertTrue(os.path.isdir(os.path.join(self.ckpt, "ftrun-step-50")))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        sys.exit(rank(sys.argv[2], json.loads(sys.argv[3])))
    unittest.main()
