"""DLRover's wait_latest_checkpoint and deletion strategies (retention.py), with real torch
state and real files: in one process (a job of one, saves written before they return) and
under a real ftrun whose agent writes DISK saves in the background (two gloo ranks).

Run as `python3 test_flash_retention.py rank <root> <steps> <keep>` it is one rank.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_flash_checkpoint import TestCase, training_state  # noqa: E402

from ftrun.flash_checkpoint import engine, megatron  # noqa: E402
from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType  # noqa: E402
from ftrun.flash_checkpoint.sharded import ShardedCheckpointer  # noqa: E402
from ftrun.flash_checkpoint.storage import (KeepLatestStepStrategy,  # noqa: E402
                                            KeepStepIntervalStrategy)

FTRUN = os.environ.get("FTRUN_BINARY", os.path.join(HERE, "..", "..", "build", "launcher",
                                                    "ftrun"))


def stored_steps(root):
    return sorted(int(n[len("ftrun-step-"):]) for n in os.listdir(root)
                  if n.startswith("ftrun-step-"))


def tracker(root):
    with open(os.path.join(root, engine.TRACKER_FILE_NAME)) as f:
        return int(f.read())


class DeletionTest(TestCase):
    def save_steps(self, cp, steps, path=None):
        for step in steps:
            cp.save_checkpoint(step, training_state(step), path(step) if path else "",
                               storage_type=StorageType.DISK)
        self.assertTrue(cp.wait_latest_checkpoint(timeout=60))

    def test_keep_latest_keeps_that_many_newest_steps_with_their_paths(self):
        cp = DdpCheckpointer(self.root, deletion_strategy=KeepLatestStepStrategy(2, self.root))
        self.save_steps(cp, range(1, 6))
        self.assertEqual(stored_steps(self.root), [4, 5])
        self.assertEqual(sorted(n for n in os.listdir(self.root) if n.isdigit()), ["4", "5"])
        self.assertEqual(tracker(self.root), 5)
        self.assertEqual(torch.load(os.path.join(self.root, "4", "rank_0.pt"))["step"], 4)
        self.assertEqual(DdpCheckpointer(self.root).load_checkpoint()["step"], 5)
        self.assertEqual([n for n in os.listdir(self.root) if "deleted" in n], [])

    def test_keep_interval_keeps_the_multiples_and_the_newest(self):
        cp = DdpCheckpointer(self.root,
                             deletion_strategy=KeepStepIntervalStrategy(2, self.root))
        self.save_steps(cp, range(1, 6))
        self.assertEqual(stored_steps(self.root), [2, 4, 5])

    def test_links_a_script_named_go_with_their_step(self):
        cp = DdpCheckpointer(self.root, deletion_strategy=KeepLatestStepStrategy(1, self.root))
        self.save_steps(cp, range(1, 4), lambda s: os.path.join(self.root, f"checkpoint-{s}.pt"))
        self.assertEqual(stored_steps(self.root), [3])
        self.assertEqual(sorted(n for n in os.listdir(self.root) if n.startswith("checkpoint")),
                         ["checkpoint-3.pt"])
        self.assertEqual(torch.load(os.path.join(self.root, "checkpoint-3.pt"))["step"], 3)

    def test_sharded_steps_and_their_directory_links_are_deleted(self):
        cp = ShardedCheckpointer(self.root,
                                 deletion_strategy=KeepLatestStepStrategy(2, self.root))
        self.save_steps(cp, range(1, 5))
        self.assertEqual(stored_steps(self.root), [3, 4])
        self.assertEqual(sorted(n for n in os.listdir(self.root) if n.isdigit()), ["3", "4"])
        self.assertEqual(ShardedCheckpointer(self.root).load_checkpoint()["step"], 4)

    def test_a_duck_typed_strategy_sees_each_older_step_once_and_never_the_newest(self):
        seen = []

        class Everything:  # DLRover's interface without its base class
            def clean_up(self, step, delete_func):
                seen.append(step)

        cp = DdpCheckpointer(self.root, deletion_strategy=Everything())
        self.save_steps(cp, range(1, 5))
        self.assertEqual(seen, [1, 2, 3])
        self.assertEqual(stored_steps(self.root), [1, 2, 3, 4])

    def test_a_failing_strategy_is_a_warning_and_root_is_never_deleted(self):
        root = self.root

        class Reckless:
            def clean_up(self, step, delete_func):
                delete_func(os.path.dirname(root) if step == 1 else root)

        cp = DdpCheckpointer(root, deletion_strategy=Reckless())
        _, err = self.quietly(self.save_steps, cp, range(1, 4))
        self.assertEqual(err.count("the deletion strategy failed on step"), 2, err)
        self.assertIn("refusing to delete", err)
        self.assertEqual(stored_steps(root), [1, 2, 3])

    def test_what_an_interrupted_deletion_left_is_removed(self):
        left = os.path.join(self.root, ".ftrun-step-1.deleted-1-2")
        os.makedirs(os.path.join(left, "group-all"))
        cp = DdpCheckpointer(self.root, deletion_strategy=KeepLatestStepStrategy(5, self.root))
        self.save_steps(cp, [2])
        self.assertFalse(os.path.exists(left))
        os.makedirs(os.path.join(left, "group-all"))
        DdpCheckpointer(self.root).load_checkpoint()  # a load removes it too, strategy or not
        self.assertFalse(os.path.exists(left))

    def test_a_tracker_left_higher_by_an_earlier_run_deletes_nothing_of_this_run(self):
        with open(os.path.join(self.root, engine.TRACKER_FILE_NAME), "w") as f:
            f.write("5000\n")  # e.g. a DLRover run in the same directory; never lowered
        cp = DdpCheckpointer(self.root, deletion_strategy=KeepLatestStepStrategy(1, self.root))
        self.save_steps(cp, [100, 200, 300])
        self.assertEqual(stored_steps(self.root), [300])
        self.assertEqual(DdpCheckpointer(self.root).load_checkpoint()["step"], 300)

    def test_older_history_is_kept_and_the_newest_before_the_run_is_given(self):
        self.save_steps(DdpCheckpointer(self.root), [1, 2])  # an earlier run, no strategy
        seen = []

        class Recording(KeepLatestStepStrategy):
            def clean_up(self, step, delete_func):
                seen.append(step)
                super().clean_up(step, delete_func)

        cp = DdpCheckpointer(self.root, deletion_strategy=Recording(1, self.root))
        self.save_steps(cp, [10, 11])
        self.assertEqual(seen, [2, 10], "DLRover gives the step before each new one")
        self.assertEqual(stored_steps(self.root), [1, 11])

    def test_a_root_reached_through_a_link_and_spelled_either_way(self):
        real = os.path.join(self.root, "real")
        os.makedirs(real)
        link = os.path.join(self.root, "link")
        os.symlink(real, link)
        cp = ShardedCheckpointer(link, deletion_strategy=KeepLatestStepStrategy(1, real))
        self.save_steps(cp, [1, 2, 3])
        self.assertEqual(stored_steps(real), [3])
        self.assertEqual(ShardedCheckpointer(link).load_checkpoint()["step"], 3)

    def test_dlrovers_storage_objects_carry_their_strategy(self):
        class PosixStorageWithDeletion:  # DLRover's class, by its name and attribute
            def __init__(self, strategy):
                self._deletion_strategy = strategy

        class PosixDiskStorage:
            pass

        cp = DdpCheckpointer(self.root, storage=PosixStorageWithDeletion(
            KeepLatestStepStrategy(1, self.root)))
        self.save_steps(cp, [1, 2])
        self.assertEqual(stored_steps(self.root), [2])
        DdpCheckpointer(self.root, storage=PosixDiskStorage())
        with self.assertRaisesRegex(ValueError, "custom storage"):
            DdpCheckpointer(self.root, storage=object())

    def test_ftruns_storage_objects_as_dlrovers(self):
        from ftrun.flash_checkpoint import storage
        self.assertIsInstance(storage.get_checkpoint_storage(), storage.PosixDiskStorage)
        with_deletion = storage.get_checkpoint_storage(KeepLatestStepStrategy(1, self.root))
        self.assertIsInstance(with_deletion, storage.PosixStorageWithDeletion)
        cp = DdpCheckpointer(self.root, storage=with_deletion)
        self.save_steps(cp, [1, 2])
        self.assertEqual(stored_steps(self.root), [2])
        # A script's own use of the storage, DLRover's behaviour: the step a tracker write
        # replaces goes to the strategy at commit.
        own = os.path.join(self.root, "own")
        plain = storage.PosixDiskStorage()
        plain.safe_makedirs(os.path.join(own, "5"))
        self.assertEqual(plain.read(os.path.join(own, "none.txt")), "")
        self.assertEqual(plain.read_state_dict(os.path.join(own, "none.pt"), open), {})
        tracker = os.path.join(own, storage.TRACKER_FILE_NAME)
        deleting = storage.PosixStorageWithDeletion(storage.TRACKER_FILE_NAME,
                                                    KeepLatestStepStrategy(1, own))
        deleting.write("5", tracker)
        deleting.write(b"6", tracker)
        deleting.commit(6, True)
        self.assertFalse(deleting.exists(os.path.join(own, "5")))
        self.assertEqual(deleting.read(tracker), "6")
        self.assertEqual(deleting.listdir(own), [storage.TRACKER_FILE_NAME])

    def test_the_newest_step_is_refused_to_a_strategy_that_asks(self):
        class Greedy:
            def clean_up(self, step, delete_func):
                delete_func(os.path.join(root, str(step + 1)))  # the next: the newest at last

        root = self.root
        cp = DdpCheckpointer(root, deletion_strategy=Greedy())
        _, err = self.quietly(self.save_steps, cp, [1, 2, 3])
        self.assertIn("refusing to delete step 2: it is the newest", err)
        self.assertIn("refusing to delete step 3: it is the newest", err)
        self.assertEqual(stored_steps(root), [1, 2, 3])

    def test_only_rank_0_deletes(self):
        class Forbidden:
            def clean_up(self, step, delete_func):
                raise AssertionError("called")

        with mock.patch.object(engine.Comm, "__init__", _rank(1)):
            cp = DdpCheckpointer(self.root, deletion_strategy=Forbidden())
        self.assertIsNone(cp._stored._retention)
        for step in (1, 2, 3):  # written as rank 0 would have; rank 1 only looks
            engine.save_one_copy(_Alone(), self.root, step, "rank_0.pt", training_state(step),
                                 os.path.join(self.root, str(step), "rank_0.pt"))
            cp._stored.written(step)
        self.assertTrue(cp.wait_latest_checkpoint(timeout=0))
        self.assertEqual(stored_steps(self.root), [1, 2, 3])


class _Alone:
    """engine.Comm of a job of one."""
    active, rank, world_size = False, 0, 1

    def all_ok(self, ok):
        return ok


def _rank(r):
    def init(self, comm_backend=""):
        self.active, self.rank, self.world_size, self._group = False, r, 2, None
    return init


class SignatureTest(TestCase):
    def test_dlrovers_current_arguments_by_position_and_keyword(self):
        DdpCheckpointer(self.root, 1, 1, "", None, 600, 0)
        ShardedCheckpointer(self.root, "", None, 600)
        _, err = self.quietly(DdpCheckpointer, self.root, replica_count=2, save_timeout=30)
        self.assertIn("replica_count is ignored", err)
        with self.assertRaisesRegex(ValueError, "custom storage"):
            DdpCheckpointer(self.root, storage=object())
        with self.assertRaisesRegex(ValueError, "custom storage"):  # checked with a strategy too
            DdpCheckpointer(self.root, deletion_strategy=KeepLatestStepStrategy(1, self.root),
                            storage=object())

    def test_dlrovers_checkpointer_module(self):
        from ftrun.flash_checkpoint import checkpointer
        self.assertIs(checkpointer.StorageType, StorageType)  # DLRover's mnist example's import
        self.assertIsInstance(DdpCheckpointer(self.root), checkpointer.Checkpointer)
        self.assertIsInstance(ShardedCheckpointer(self.root), checkpointer.Checkpointer)

    def test_wait_without_a_disk_save_returns_at_once(self):
        self.assertTrue(DdpCheckpointer(self.root).wait_latest_checkpoint(timeout=0))
        self.assertTrue(ShardedCheckpointer(self.root).wait_latest_checkpoint(timeout=0))
        self.assertTrue(hasattr(megatron, "wait_latest_checkpoint"))


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class UnderTheAgentTest(unittest.TestCase):
    """The agent writes each DISK save after save_checkpoint returned: wait_latest_checkpoint
    returns once the newest is stored, and the strategy then leaves the newest two."""

    def test_the_wait_returns_with_the_newest_step_stored_and_older_ones_deleted(self):
        root = tempfile.mkdtemp(prefix="ftrun-retention-")
        self.addCleanup(shutil.rmtree, root, True)
        steps = 5
        env = dict(os.environ)
        env.pop("FTRUN_CONTROL_SOCKET", None)
        done = subprocess.run(
            [FTRUN, "--standalone", "--nproc-per-node", "2", "--log-dir",
             os.path.join(root, "logs"), "--no-python", "/usr/bin/python3", __file__, "rank",
             root, str(steps), "2"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=150)
        self.assertEqual(done.returncode, 0, done.stdout[-6000:])
        results = {}
        for r in (0, 1):
            with open(os.path.join(root, f"rank-{r}.json")) as f:
                results[r] = json.load(f)
        self.assertEqual(results[0]["waited"], True, done.stdout[-4000:])
        self.assertEqual(results[0]["tracker_after"], steps, "the wait returned early")
        self.assertEqual(results[1]["waited"], True)
        ckpt = os.path.join(root, "ckpt")
        self.assertEqual(stored_steps(ckpt), [steps - 1, steps])
        # The agent writes ftrun's snapshot layout (engine.load_file reads it and torch.save's).
        self.assertEqual(engine.load_file(os.path.join(ckpt, str(steps), "rank_0.pt"))["step"],
                         steps)
        self.assertEqual(sorted(n for n in os.listdir(ckpt) if n.isdigit()),
                         [str(steps - 1), str(steps)])


    def test_a_sharded_step_one_rank_failed_to_save_is_not_waited_for(self):
        """Two ranks of a sharded job on one node: rank 1's state function raises at the last
        step, 3. Both learn that it is not saved (False, or the exception), the agent writes
        steps 1 and 2, and the wait returns with 2 stored (waiting for 3 would never end)."""
        root = tempfile.mkdtemp(prefix="ftrun-retention-sharded-")
        self.addCleanup(shutil.rmtree, root, True)
        env = dict(os.environ)
        env.pop("FTRUN_CONTROL_SOCKET", None)
        done = subprocess.run(
            [FTRUN, "--standalone", "--nproc-per-node", "2", "--log-dir",
             os.path.join(root, "logs"), "--no-python", "/usr/bin/python3", __file__, "sharded",
             root, "3", "3"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=150)
        self.assertEqual(done.returncode, 0, done.stdout[-6000:])
        for r, last in ((0, False), (1, "raised")):
            with open(os.path.join(root, f"rank-{r}.json")) as f:
                got = json.load(f)
            self.assertEqual(got["saves"], [True, True, last], done.stdout[-4000:])
            self.assertEqual(got["waited"], True, done.stdout[-4000:])
            self.assertEqual(got["tracker_after"], 2)
        self.assertEqual(stored_steps(os.path.join(root, "ckpt")), [1, 2])


def sharded_main(root: str, steps: int, failing_step: int):
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ckpt = os.path.join(root, "ckpt")
    cp = ShardedCheckpointer(ckpt)
    saves = []
    for step in range(1, steps + 1):
        def state(step=step):
            if rank == 1 and step == failing_step:
                raise RuntimeError("no state this time")
            return {"step": step, "w": torch.full((4,), float(rank))}
        try:
            saves.append(cp.save_checkpoint(step, state, storage_type=StorageType.DISK))
        except RuntimeError:
            saves.append("raised")
    waited = cp.wait_latest_checkpoint(timeout=20)  # the agent writes steps in milliseconds
    with open(os.path.join(root, f"rank-{rank}.json"), "w") as f:
        json.dump({"saves": saves, "waited": waited, "tracker_after": tracker(ckpt)}, f)
    dist.destroy_process_group()


def rank_main(root: str, steps: int, keep: int):
    import torch.distributed as dist
    dist.init_process_group("gloo")
    ckpt = os.path.join(root, "ckpt")
    cp = DdpCheckpointer(ckpt, deletion_strategy=KeepLatestStepStrategy(keep, ckpt))
    ballast = torch.zeros(4 << 20)  # 16 MiB: each write to storage takes a moment
    for step in range(1, steps + 1):
        ballast[0] = step
        cp.save_checkpoint(step, {"step": step, "ballast": ballast},
                           storage_type=StorageType.DISK)
    before = os.path.exists(os.path.join(ckpt, engine.TRACKER_FILE_NAME)) and tracker(ckpt)
    waited = cp.wait_latest_checkpoint(timeout=120)
    after = tracker(ckpt) if dist.get_rank() == 0 else None
    with open(os.path.join(root, f"rank-{dist.get_rank()}.json"), "w") as f:
        json.dump({"waited": waited, "tracker_before": before, "tracker_after": after}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "rank":
        rank_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) == 5 and sys.argv[1] == "sharded":
        sharded_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        unittest.main()
