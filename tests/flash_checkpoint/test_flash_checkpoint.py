"""ftrun.flash_checkpoint in one process (a job of one): real torch state, real files."""
import contextlib
import importlib
import inspect
import io
import json
import os
import shutil
import sys
import tempfile
import time
import unittest
from unittest import mock

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))

import ftrun  # noqa: E402
from ftrun.flash_checkpoint import engine  # noqa: E402
from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType  # noqa: E402
from ftrun.flash_checkpoint.sharded import ShardedCheckpointer, WorldSizeError  # noqa: E402


def training_state(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": seed}


def assert_state_equal(test, got, want):
    test.assertEqual(got["step"], want["step"])
    for key, value in want["model"].items():
        test.assertTrue(torch.equal(got["model"][key], value), key)
    test.assertEqual(got["optimizer"]["param_groups"], want["optimizer"]["param_groups"])


def one_state_file(root, step):
    part = os.path.join(root, f"ftrun-step-{step}", "group-all")
    return os.path.join(part, next(n for n in os.listdir(part) if n.endswith(".pt")))


class TestCase(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()
        engine._warned.clear()
        patcher = mock.patch.dict(os.environ)
        patcher.start()
        self.addCleanup(patcher.stop)
        for name in ("FTRUN_CONTROL_SOCKET", "WORLD_SIZE", "RANK_SIZE"):
            os.environ.pop(name, None)

    def saved_by_dlrover(self, step, *names):
        """What DLRover's own save leaves: <root>/<step>/<name> by torch.save, the tracker."""
        os.makedirs(os.path.join(self.root, str(step)), exist_ok=True)
        for name in names:
            torch.save(training_state(step), os.path.join(self.root, str(step), name))
        with open(os.path.join(self.root, engine.TRACKER_FILE_NAME), "w") as f:
            f.write(str(step))

    def quietly(self, fn, *args, **kwargs):
        """fn's result and what it wrote to stderr."""
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            result = fn(*args, **kwargs)
        return result, err.getvalue()


class DdpTest(TestCase):
    def test_round_trip_and_the_path_is_a_link_to_the_stored_copy(self):
        cp = DdpCheckpointer(self.root)
        self.assertEqual(cp.load_checkpoint(), {})
        state = training_state(7)
        path = os.path.join(self.root, "checkpoint-7.pt")
        cp.save_checkpoint(7, state, path, storage_type=StorageType.DISK)
        assert_state_equal(self, DdpCheckpointer(self.root).load_checkpoint(), state)
        assert_state_equal(self, torch.load(path), state)
        self.assertTrue(os.path.islink(path))
        with open(os.path.join(self.root, engine.TRACKER_FILE_NAME)) as f:
            self.assertEqual(f.read().strip(), "7")
        # One format: the project's own helper finds and verifies it.
        self.assertEqual(ftrun.latest_checkpoint(self.root).step, 7)

    def test_default_path_and_resume_path(self):
        cp = DdpCheckpointer(self.root)
        cp.save_checkpoint(1, training_state(1))
        cp.save_checkpoint(2, training_state(2))
        default = os.path.join(self.root, "1", "rank_0.pt")
        assert_state_equal(self, cp.load_checkpoint(resume_path=default), training_state(1))
        assert_state_equal(self, cp.load_checkpoint(os.path.join(self.root, "ftrun-step-1")),
                           training_state(1))
        # DLRover's storage reads nothing from a path that does not exist: {}, not an error.
        missing = os.path.join(self.root, "nothing.pt")
        state, err = self.quietly(cp.load_checkpoint, missing)
        self.assertEqual(state, {})
        self.assertIn(f"ftrun: no checkpoint at resume_path {missing}: nothing restored", err)

    def test_a_snapshot_in_memory_wins_over_resume_path_as_in_dlrover(self):
        # A restart within the job restores the agents' newest snapshot even when the script
        # passes resume_path (DLRover's engines read memory first), else every restart of
        # such a script would go back to the file. End to end: test_flash_memory.py.
        cp = DdpCheckpointer(self.root)
        cp.save_checkpoint(1, training_state(1))
        in_memory = engine.Restored(2, training_state(2), True)
        for memory, want in [(in_memory, 2), (engine.Restored(None, None, False), 1)]:
            with mock.patch.object(engine, "restore_from_memory", return_value=memory):
                assert_state_equal(self, cp.load_checkpoint(os.path.join(self.root, "1",
                                                                         "rank_0.pt")),
                                   training_state(want))

    def test_resume_path_is_not_read_when_memory_held_an_older_snapshot_than_disk(self):
        # The agents' memory held a step but disk has a newer one (a refused memory save, a
        # damaged snapshot): the newer checkpoint on disk, not the script's resume_path.
        cp = DdpCheckpointer(self.root)
        cp.save_checkpoint(1, training_state(1))
        cp.save_checkpoint(2, training_state(2))
        older = os.path.join(self.root, "1", "rank_0.pt")
        with mock.patch.object(engine, "restore_from_memory",
                               return_value=engine.Restored(None, None, True)):
            assert_state_equal(self, cp.load_checkpoint(older), training_state(2))
            shutil.rmtree(os.path.join(self.root, "ftrun-step-2"))
            os.remove(os.path.join(self.root, "2", "rank_0.pt"))
            # Nothing stored verifies: resume_path after all.
            shutil.copy(older, os.path.join(self.root, "initial.pt"))
            shutil.rmtree(os.path.join(self.root, "ftrun-step-1"))
            assert_state_equal(self, cp.load_checkpoint(os.path.join(self.root, "initial.pt")),
                               training_state(1))

    def test_a_checkpoint_dlrover_saved_is_restored_when_ftrun_saved_none(self):
        # A job moved from DLRover: its tracker and <step>/rank_0.pt, written by torch.save.
        self.saved_by_dlrover(7, "rank_0.pt")
        state, err = self.quietly(DdpCheckpointer(self.root).load_checkpoint)
        assert_state_equal(self, state, training_state(7))
        self.assertIn(f"restored step 7 from {self.root}/7/rank_0.pt, as DLRover saved it", err)
        # ftrun's own, once there is one, come first (they verify; DLRover's files do not).
        cp = DdpCheckpointer(self.root)
        cp.save_checkpoint(8, training_state(8))
        assert_state_equal(self, cp.load_checkpoint(), training_state(8))

    def test_an_unreadable_checkpoint_dlrover_saved_is_skipped(self):
        self.saved_by_dlrover(7)
        with open(os.path.join(self.root, "7", "rank_0.pt"), "wb") as f:
            f.write(b"not a torch file")
        state, err = self.quietly(DdpCheckpointer(self.root).load_checkpoint)
        self.assertEqual(state, {})
        self.assertIn(f"ftrun: skipping checkpoint {self.root}/7/rank_0.pt "
                      f"({engine.TRACKER_FILE_NAME} names step 7)", err)

    def test_newest_complete_step_wins_partial_and_corrupt_ones_are_skipped(self):
        cp = DdpCheckpointer(self.root)
        for step in (1, 2, 3, 4):
            cp.save_checkpoint(step, training_state(step), f"{self.root}/ckpt-{step}.pt")
        with open(one_state_file(self.root, 4), "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0xFF]))  # same size, wrong checksum
        os.remove(os.path.join(self.root, "ftrun-step-3", "MANIFEST.json"))  # interrupted
        os.makedirs(os.path.join(self.root, ".ftrun-step-5.tmp-x", "group-all"))  # in progress
        state, err = self.quietly(cp.load_checkpoint)
        assert_state_equal(self, state, training_state(2))
        self.assertIn("ftrun-step-4: group-all/ckpt-4.pt has the wrong checksum", err)
        self.assertIn("ftrun-step-3: no MANIFEST.json", err)
        # The damaged ones are moved aside (kept), so that saving their steps again stores
        # them: an existing step directory is never overwritten, and the corrupt copy kept
        # every later load from resuming after step 2.
        aside = sorted(n for n in os.listdir(self.root) if ".damaged-" in n)
        self.assertEqual([n.split(".damaged-")[0] for n in aside],
                         [".ftrun-step-3", ".ftrun-step-4"], err)
        self.assertIn(f"moved to {self.root}/{aside[1]} so that a new save of step 4", err)
        cp.save_checkpoint(4, training_state(40))
        assert_state_equal(self, cp.load_checkpoint(), training_state(40))

    def test_a_failed_save_leaves_the_previous_checkpoint(self):
        cp = DdpCheckpointer(self.root)
        cp.save_checkpoint(1, training_state(1))
        with self.assertRaises(Exception):
            cp.save_checkpoint(2, {"unpicklable": lambda: 0})
        self.assertFalse(os.path.exists(os.path.join(self.root, "ftrun-step-2")))
        assert_state_equal(self, cp.load_checkpoint(), training_state(1))

    def test_a_step_saved_again_keeps_the_first_copy(self):
        cp = DdpCheckpointer(self.root)
        cp.save_checkpoint(3, training_state(3), os.path.join(self.root, "first.pt"))
        cp.save_checkpoint(3, training_state(4), os.path.join(self.root, "again.pt"))
        assert_state_equal(self, torch.load(os.path.join(self.root, "again.pt")),
                           training_state(3))
        assert_state_equal(self, cp.load_checkpoint(), training_state(3))

    def test_a_function_is_called_for_the_state_and_a_module_is_saved_as_it_is(self):
        cp = DdpCheckpointer(self.root)
        state = training_state(3)
        cp.save_checkpoint(3, lambda: state)
        assert_state_equal(self, cp.load_checkpoint(), state)
        module = torch.nn.Linear(2, 1)  # callable, but a state of its own (pickled whole)
        cp.save_checkpoint(4, module)
        loaded = cp.load_checkpoint()
        self.assertIsInstance(loaded, torch.nn.Linear)
        self.assertTrue(torch.equal(loaded.weight, module.weight))

    def test_unsupported_arguments_are_clear_errors(self):
        with self.assertRaisesRegex(ValueError, "ShardedCheckpointer"):
            DdpCheckpointer(self.root, global_shard_num=2)
        with self.assertRaisesRegex(ValueError, "custom storage"):
            DdpCheckpointer(self.root, storage=object())
        os.environ["WORLD_SIZE"] = "2"
        with self.assertRaisesRegex(RuntimeError, "one of 2 ranks.*init_process_group"):
            DdpCheckpointer(self.root)
        del os.environ["WORLD_SIZE"]
        with self.assertRaisesRegex(ValueError, "No support storage type"):
            DdpCheckpointer(self.root).save_checkpoint(1, {}, "p", storage_type="GPU")


class MemoryFallbackTest(TestCase):
    def save_in_memory_twice(self, checkpointer):
        def both():
            checkpointer.save_checkpoint(1, {"a": torch.ones(2)}, "",
                                         storage_type=StorageType.MEMORY)
            checkpointer.save_checkpoint(2, {"a": torch.ones(2) * 2}, "",
                                         storage_type=StorageType.MEMORY)
        _, err = self.quietly(both)
        self.assertEqual(err.count("falls back to a synchronous DISK save"), 1, err)
        self.assertTrue(torch.equal(checkpointer.load_checkpoint()["a"], torch.ones(2) * 2))
        return err

    def test_outside_ftrun_memory_saves_go_to_disk_and_say_so_once(self):
        err = self.save_in_memory_twice(DdpCheckpointer(self.root))
        self.assertIn("not started by ftrun (no FTRUN_CONTROL_SOCKET)", err)

    def test_under_an_agent_without_memory_snapshots_too(self):
        os.environ["FTRUN_CONTROL_SOCKET"] = "/nonexistent/control.sock"
        err = self.save_in_memory_twice(ShardedCheckpointer(self.root))
        self.assertIn("this ftrun agent does not keep memory snapshots", err)


class ShardedTest(TestCase):
    def test_round_trip_in_a_directory_per_step(self):
        cp = ShardedCheckpointer(self.root)
        self.assertEqual(cp.load_checkpoint(), {})
        for step in (3, 4):
            cp.save_checkpoint(step, training_state(step), os.path.join(self.root, str(step)))
        assert_state_equal(self, ShardedCheckpointer(self.root).load_checkpoint(),
                           training_state(4))
        self.assertEqual(os.path.realpath(os.path.join(self.root, "3")),
                         os.path.realpath(os.path.join(self.root, "ftrun-step-3")))
        assert_state_equal(self, cp.load_checkpoint(resume_path=os.path.join(self.root, "3")),
                           training_state(3))

    def test_resume_path_that_does_not_exist_restores_nothing(self):
        missing = os.path.join(self.root, "9")
        state, err = self.quietly(ShardedCheckpointer(self.root).load_checkpoint, missing)
        self.assertEqual(state, {})
        self.assertIn(f"no checkpoint at resume_path {missing}", err)

    def test_a_snapshot_in_memory_wins_over_resume_path(self):
        cp = ShardedCheckpointer(self.root)
        cp.save_checkpoint(3, training_state(3))
        with mock.patch.object(engine, "restore_from_memory",
                               return_value=engine.Restored(4, training_state(4), True)):
            assert_state_equal(self, cp.load_checkpoint(os.path.join(self.root, "3")),
                               training_state(4))

    def test_shards_dlrover_saved_are_restored_at_the_same_world_size_only(self):
        self.saved_by_dlrover(6, "rank_0.pt")
        state, _ = self.quietly(ShardedCheckpointer(self.root).load_checkpoint)
        assert_state_equal(self, state, training_state(6))
        self.saved_by_dlrover(6, "rank_1.pt")
        with self.assertRaisesRegex(WorldSizeError, "saved by 2 ranks and this job has 1"):
            ShardedCheckpointer(self.root).load_checkpoint()

    def test_a_different_world_size_is_an_error_naming_both(self):
        cp = ShardedCheckpointer(self.root)
        cp.save_checkpoint(5, training_state(5))
        manifest_path = os.path.join(self.root, "ftrun-step-5", "MANIFEST.json")
        with open(manifest_path) as f:
            manifest = json.load(f)
        manifest["world_size"] = 2
        with open(manifest_path, "w") as f:
            json.dump(manifest, f)
        with self.assertRaisesRegex(WorldSizeError, "saved by 2 ranks and this job has 1"):
            cp.load_checkpoint()


class StagedShardsTest(TestCase):
    def test_load_removes_what_an_earlier_failed_run_staged_and_nothing_else(self):
        cp = ShardedCheckpointer(self.root)
        cp.save_checkpoint(3, training_state(3), storage_type=StorageType.DISK)
        staged = os.path.join(self.root, ".ftrun-step-9.parts")  # agents' leftover shards
        os.makedirs(os.path.join(staged, "group-rank-0-abcdef12"))
        age(staged)
        os.utime(staged, (time.time() - 3600, time.time() - 3600))
        ours = os.path.join(self.root, ".ftrun-step-7.parts")  # this run's agents stage here
        os.makedirs(os.path.join(ours, "group-rank-1-abcdef12"))
        saving = os.path.join(self.root, ".ftrun-step-4.tmp-1-2")  # not the loader's business
        os.makedirs(saving)
        state, err = self.quietly(ShardedCheckpointer(self.root).load_checkpoint)
        self.assertEqual(state["step"], 3)
        self.assertFalse(os.path.exists(staged))
        self.assertIn(f"ftrun: removing {staged}: shards of a step", err)
        self.assertTrue(os.path.isdir(ours), "changed since this run began")
        self.assertTrue(os.path.isdir(saving))

    def test_the_tracker_is_never_lowered_within_a_run_but_an_earlier_runs_is(self):
        tracker = os.path.join(self.root, engine.TRACKER_FILE_NAME)
        engine._write_tracker(self.root, 8)
        engine._write_tracker(self.root, 5)
        with open(tracker) as f:
            self.assertEqual(f.read(), "8")
        self.assertEqual(sorted(os.listdir(self.root)), [engine.TRACKER_FILE_NAME])
        age(self.root)
        engine._write_tracker(self.root, 5)
        with open(tracker) as f:
            self.assertEqual(f.read(), "5")


def age(root):
    """Dates everything under root an hour back: what an earlier run left."""
    hour_ago = time.time() - 3600
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (hour_ago, hour_ago), follow_symlinks=False)


class EarlierRunTest(TestCase):
    """A run that did not resume, in a directory an earlier run left higher steps in: its saves
    replace the earlier run's as DLRover's do, and its loads take its own steps (the agent's
    side: earlier_run_test.cc; end to end under ftrun: test_flash_runs.py)."""

    def test_a_new_run_lowers_the_tracker_replaces_its_step_and_loads_its_own(self):
        cp = DdpCheckpointer(self.root)
        for step in (5, 50):
            cp.save_checkpoint(step, training_state(step))
        age(self.root)
        cp.save_checkpoint(5, training_state(105))  # a new run's step 5
        cp.save_checkpoint(3, training_state(103))  # within the run: the tracker stays
        with open(os.path.join(self.root, engine.TRACKER_FILE_NAME)) as f:
            self.assertEqual(f.read(), "5")
        assert_state_equal(self, torch.load(os.path.join(self.root, "5", "rank_0.pt")),
                           training_state(105))
        assert_state_equal(self, DdpCheckpointer(self.root).load_checkpoint(),
                           training_state(105))
        self.assertEqual(engine.loadable_steps(self.root, engine.TRACKER_FILE_NAME), [5, 3])

    def test_an_earlier_runs_tracker_and_step_are_not_this_runs_save_stored(self):
        from ftrun.flash_checkpoint import retention
        DdpCheckpointer(self.root).save_checkpoint(2, training_state(2))
        self.assertTrue(retention.is_stored(self.root, engine.TRACKER_FILE_NAME, 2))
        age(self.root)
        self.assertFalse(retention.is_stored(self.root, engine.TRACKER_FILE_NAME, 2))
        self.assertEqual(engine.stored_in_this_run(self.root, [2]), [])

    def test_a_step_stored_after_the_tracker_was_written_is_loaded(self):
        # Its writer stopped between the rename and the tracker: the step is complete and
        # newer than the tracker's.
        cp = DdpCheckpointer(self.root)
        cp.save_checkpoint(50, training_state(50))
        age(self.root)
        cp.save_checkpoint(5, training_state(5))
        tracker = os.path.join(self.root, engine.TRACKER_FILE_NAME)
        written = os.stat(tracker).st_mtime
        cp.save_checkpoint(6, training_state(6))
        with open(tracker, "w") as f:
            f.write("5")
        os.utime(tracker, (written, written))
        self.assertEqual(engine.loadable_steps(self.root, engine.TRACKER_FILE_NAME), [6, 5])
        assert_state_equal(self, DdpCheckpointer(self.root).load_checkpoint(), training_state(6))


class DlroverShapeTest(unittest.TestCase):
    """The names a DLRover script imports exist with DLRover's signatures."""

    def params(self, fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    def test_ddp(self):
        empty = inspect.Parameter.empty
        self.assertEqual([m.name for m in StorageType], ["MEMORY", "DISK"])
        # DLRover's since 0.3.7 (storage, before it, by keyword).
        self.assertEqual(self.params(DdpCheckpointer.__init__),
                         [("self", empty), ("checkpoint_dir", empty), ("local_shard_num", 1),
                          ("global_shard_num", 1), ("comm_backend", ""),
                          ("deletion_strategy", None), ("save_timeout", 600),
                          ("replica_count", 0), ("storage", None)])
        self.assertEqual(self.params(DdpCheckpointer.save_checkpoint),
                         [("self", empty), ("step", empty), ("state_dict", empty),
                          ("path", ""), ("storage_type", StorageType.DISK)])
        self.assertEqual(self.params(DdpCheckpointer.load_checkpoint),
                         [("self", empty), ("resume_path", "")])
        self.assertEqual(self.params(DdpCheckpointer.wait_latest_checkpoint),
                         [("self", empty), ("timeout", 1800)])
        self.assertEqual(engine.TRACKER_FILE_NAME, "dlrover_latest.txt")

    def test_fsdp_names_fail_to_import_with_one_line_saying_why(self):
        with self.assertRaises(ImportError) as caught:
            importlib.import_module("ftrun.flash_checkpoint.fsdp")
        message = str(caught.exception)
        self.assertIn("FsdpShardCheckpointer", message)
        self.assertIn("torch.distributed.checkpoint", message)
        self.assertIn("ftrun.flash_checkpoint.sharded.ShardedCheckpointer", message)
        self.assertNotIn("\n", message)

    def test_deepspeed_and_hf_trainer_fail_to_import_with_one_line_saying_why(self):
        for module, names, instead in [
                ("deepspeed", "DeepSpeedCheckpointer", "ShardedCheckpointer"),
                ("hf_trainer", "FlashCkptTrainer, HfDdpCheckpointer", "DdpCheckpointer")]:
            with self.assertRaises(ImportError) as caught:
                importlib.import_module(f"ftrun.flash_checkpoint.{module}")
            message = str(caught.exception)
            self.assertTrue(message.startswith(f"ftrun.flash_checkpoint.{module} ({names}"),
                            message)
            self.assertIn("not in this release of ftrun", message)
            self.assertIn(instead, message)
            self.assertNotIn("\n", message)
            self.assertEqual(caught.exception.name, f"ftrun.flash_checkpoint.{module}")

    def test_sharded_has_the_same_methods(self):
        for name in ("save_checkpoint", "load_checkpoint", "wait_latest_checkpoint"):
            self.assertEqual(self.params(getattr(ShardedCheckpointer, name)),
                             self.params(getattr(DdpCheckpointer, name)))


if __name__ == "__main__":
    unittest.main()
