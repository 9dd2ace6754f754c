"""ftrun.ttp, MindIO TTP's framework API on ftrun's fault-time save.

* Under a real ftrun, a Megatron-shaped script adapted line by line as MindCluster's guide
  adapts Megatron (megatron_standin.py; 4 ranks, 2-way tensor parallel, 2 data-parallel groups):
  a rank SIGKILLed mid-iteration, a surviving replica of each group saves the newest iteration
  through the script's TTP handlers, the rename handler publishes it, the job resumes there and
  ends with the weights of the run without faults: no step lost.
* Outside ftrun the same calls do nothing harmful and the decorator only calls the function;
  wrong arguments are clear errors.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))
FTRUN = os.environ.get("FTRUN_BINARY") or os.path.join(HERE, "..", "..", "build", "launcher",
                                                        "ftrun")
SCRIPT = os.path.join(HERE, "megatron_standin.py")
ITERS = 20


def run_job(tmp, name, extra=(), timeout=240):
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3", TTP_PORT="8000",
               FTRUN_TTP_DIR=os.path.join(tmp, name, "ttp"))
    cmd = [FTRUN, "--nproc-per-node", "4", "--max-restarts", "1", "--log-dir",
           os.path.join(tmp, name, "logs"), SCRIPT, "--train-iters", str(ITERS),
           "--save", os.path.join(tmp, name, "ckpt"), "--out", os.path.join(tmp, name, "out"),
           *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def weights(tmp, name, rank):
    with open(os.path.join(tmp, name, "out", f"result.{rank}.json")) as f:
        return json.load(f)


class UnderFtrun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ftrun-ttp-test-")
        clean = run_job(cls.tmp, "clean")
        if clean.returncode != 0:
            raise AssertionError(f"the run without faults failed:\n{clean.stdout}\n{clean.stderr}")

    def test_rank_killed_mid_iteration_loses_no_step(self):
        r = run_job(self.tmp, "fault", ["--kill-rank", "1", "--kill-iter", "13"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # The periodic checkpoint was at iteration 10; the TTP handlers saved iteration 13.
        self.assertIn("saved step 13", r.stderr)
        self.assertIn("rank 1 attempt 1: resuming at iteration 13", r.stdout)
        ckpt = os.path.join(self.tmp, "fault", "ckpt")
        with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")) as f:
            self.assertEqual(f.read(), str(ITERS))  # the last periodic save after the resume
        for tp in (0, 1):  # both shards of the fault-time save were published by the rename
            self.assertTrue(os.path.isfile(os.path.join(
                ckpt, "iter_0000013", f"mp_rank_{tp:02d}", "model_optim_rng.pt")))
        self.assertFalse(os.path.exists(os.path.join(ckpt, "iter_0000013_tmp")))
        manifest = os.path.join(self.tmp, "fault", "ttp", "ftrun-step-13", "MANIFEST.json")
        with open(manifest) as f:
            self.assertEqual(len(json.load(f)["groups"]), 2)  # one saver per data-parallel group
        for rank in range(4):
            got, want = weights(self.tmp, "fault", rank), weights(self.tmp, "clean", rank)
            self.assertEqual(got["iteration"], ITERS)
            for a, b in zip(got["weights"], want["weights"]):
                self.assertAlmostEqual(a, b, places=9, msg=f"rank {rank}")


class OutsideFtrun(unittest.TestCase):
    def setUp(self):
        os.environ.pop("FTRUN_CONTROL_SOCKET", None)
        import importlib

        import ftrun.ttp
        self.ttp = importlib.reload(ftrun.ttp)

    def test_calls_are_harmless_and_the_decorator_calls_through(self):
        ttp = self.ttp
        ttp.ttp_init_controller(0, 4, 1, False)
        ttp.ttp_start_controller("127.0.0.1", 8000)
        ttp.ttp_init_processor(0, [0, 2], 2, 4, 1, False)
        ttp.ttp_start_processor("127.0.0.1", 8000)
        ttp.ttp_register_save_ckpt_handler(lambda step, info, args: None)
        ttp.ttp_register_rename_handler(lambda step, args: None)
        ttp.ttp_set_ckpt_args((1, None, None, None))
        ttp.ttp_start_updating_os(-1)
        ttp.ttp_end_updating_os(1)

        @ttp.ttp_to_persist
        def train(a, b=0):
            return a + b
        self.assertEqual(train(1, b=2), 3)
        self.assertEqual(train.__name__, "train")

    def test_wrong_arguments_are_clear_errors(self):
        ttp = self.ttp
        with self.assertRaisesRegex(ValueError, r"rank 1 is not in its data-parallel ranks"):
            ttp.ttp_init_processor(1, [0, 2], 2, 4)
        with self.assertRaisesRegex(TypeError, "must be a callable"):
            ttp.ttp_register_save_ckpt_handler("save")
        with self.assertRaisesRegex(ValueError, "rank_list"):
            ttp.tft_set_optimizer_replica(0, [{}])

    def test_tft_names_give_handlers_their_ctx(self):
        ttp = self.ttp
        seen = []
        ttp.tft_set_optimizer_replica(0, [{"type": 0, "rank_list": [0, 2], "replica_cnt": 2,
                                           "replica_shift": 0}])
        ttp.tft_register_save_ckpt_handler(lambda *a: seen.append(("save",) + a), "ctx")
        ttp.tft_register_rename_handler(lambda *a: seen.append(("rename",) + a), "ctx")
        ttp.tft_set_step_args("args")
        with tempfile.TemporaryDirectory() as d:
            ttp._save(5, d)  # what the agent's save order runs
            ttp._complete(5)
            with open(os.path.join(d, "ttp.json")) as f:
                self.assertEqual(json.load(f)["dp_ranks"], [0, 2])
        self.assertEqual(seen, [("save", 5, [{"type": 0, "ranks": [0]}], "args", "ctx"),
                                ("rename", 5, "args", "ctx")])


if __name__ == "__main__":
    unittest.main()
