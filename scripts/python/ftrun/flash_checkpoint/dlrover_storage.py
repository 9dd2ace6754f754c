"""The names of DLRover's dlrover.python.common.storage, so that a script importing them
migrates by changing the import to ftrun.flash_checkpoint.storage (re-exported there).

The deletion strategies are applied by retention.py: after each stored DISK save, rank 0 hands
the strategy the step that was the newest before it. The storages are what a checkpointer's
`storage=` takes (engine.accepted_options): ftrun writes checkpoints itself, in its own format,
and uses only a PosixStorageWithDeletion's deletion strategy; their file methods work as
DLRover's for a script that calls them.
"""
import os
import shutil
from abc import ABCMeta, abstractmethod

TRACKER_FILE_NAME = "dlrover_latest.txt"  # DLRover's CheckpointConstant.TRACER_FILE_NAME


class CheckpointDeletionStrategy:
    """DLRover's interface: clean_up(step, delete_func) may delete the checkpoint of `step` by
    calling delete_func(<checkpoint_dir>/<step>)."""

    def clean_up(self, step: int, delete_func):
        raise NotImplementedError


class KeepStepIntervalStrategy(CheckpointDeletionStrategy):
    """Keeps the steps that are multiples of keep_interval (and the newest); deletes the
    others once a newer step is stored."""

    def __init__(self, keep_interval: int, checkpoint_dir: str):
        self._keep_interval = keep_interval
        self._checkpoint_dir = checkpoint_dir

    def clean_up(self, step, delete_func):
        if step % self._keep_interval != 0:
            delete_func(os.path.join(self._checkpoint_dir, str(step)))


class KeepLatestStepStrategy(CheckpointDeletionStrategy):
    """Keeps the newest max_to_keep steps (at least one) and deletes older ones."""

    def __init__(self, max_to_keep: int, checkpoint_dir: str):
        self._max_to_keep = max(max_to_keep, 1)
        self._checkpoint_dir = checkpoint_dir
        self._steps = []

    def clean_up(self, step, delete_func):
        self._steps.append(step)
        if len(self._steps) == self._max_to_keep:
            delete_func(os.path.join(self._checkpoint_dir, str(self._steps.pop(0))))


class CheckpointStorage(metaclass=ABCMeta):
    """DLRover's interface of a storage (only the POSIX one is supported by ftrun)."""

    @abstractmethod
    def write(self, content, path):
        """Writes str or bytes content to path."""

    @abstractmethod
    def write_state_dict(self, state_dict, path, write_func):
        """Writes state_dict to path with write_func(state_dict, path)."""

    @abstractmethod
    def read(self, path):
        """The content of path; "" when there is none."""

    @abstractmethod
    def read_state_dict(self, path, read_func):
        """read_func(path); {} when there is no such path."""

    @abstractmethod
    def safe_rmtree(self, dir):
        """Removes a directory tree if it exists."""

    @abstractmethod
    def safe_remove(self, path):
        """Removes a file if it exists."""

    @abstractmethod
    def safe_makedirs(self, dir):
        """Makes a directory and its parents."""

    @abstractmethod
    def safe_move(self, src_path, dst_path):
        """Moves src_path to dst_path when the one exists and the other does not."""

    @abstractmethod
    def commit(self, step: int, success: bool):
        """Called once the checkpoint of step is stored (success) or failed."""

    @abstractmethod
    def exists(self, path: str):
        """Whether path exists."""

    @abstractmethod
    def listdir(self, path: str):
        """The names in directory path."""


class PosixDiskStorage(CheckpointStorage):
    """A local or mounted file system."""

    def write(self, content, path):
        binary = isinstance(content, (bytes, bytearray, memoryview))
        with open(path, "wb" if binary else "w") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())

    def write_state_dict(self, state_dict, path, write_func=None):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        if write_func:
            write_func(state_dict, path)

    def read(self, path, mode="r"):
        if not os.path.exists(path):
            return ""
        with open(path, mode) as f:
            return f.read()

    def read_state_dict(self, path, read_func):
        if not read_func or not os.path.exists(path):
            return {}
        return read_func(path)

    def safe_rmtree(self, dir):
        if os.path.exists(dir):
            shutil.rmtree(dir, ignore_errors=True)

    def safe_remove(self, path):
        if os.path.exists(path):
            os.remove(path)

    def safe_makedirs(self, dir):
        os.makedirs(dir, exist_ok=True)

    def safe_move(self, src_path, dst_path):
        if os.path.exists(src_path) and not os.path.exists(dst_path):
            shutil.move(src_path, dst_path)

    def commit(self, step, success):
        pass

    def exists(self, path: str):
        return os.path.exists(path)

    def listdir(self, path: str):
        return os.listdir(path)


class PosixStorageWithDeletion(PosixDiskStorage):
    """A PosixDiskStorage with a deletion strategy: given to a checkpointer, its strategy
    deletes older checkpoints (as deletion_strategy= does). Called by a script: a write of the
    tracker file remembers the step it replaces, and commit(step, True) hands that step to
    the strategy (DLRover's order)."""

    def __init__(self, tracker_file: str, deletion_strategy: CheckpointDeletionStrategy):
        super().__init__()
        self._tracker_file = tracker_file
        self._deletion_strategy = deletion_strategy
        self._pre_step = 0

    def write(self, content, path):
        path = str(path)
        if path.endswith(self._tracker_file):
            before = self.read(path).strip()
            if before:
                self._pre_step = int(before)
        super().write(content, path)

    def commit(self, step, success):
        if success and self._pre_step not in (0, step):
            self._deletion_strategy.clean_up(self._pre_step, shutil.rmtree)


def get_checkpoint_storage(deletion_strategy=None):
    """DLRover's factory: a PosixStorageWithDeletion with the strategy, else a
    PosixDiskStorage."""
    if deletion_strategy:
        return PosixStorageWithDeletion(TRACKER_FILE_NAME, deletion_strategy)
    return PosixDiskStorage()
