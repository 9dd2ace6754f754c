"""DLRover's DdpCheckpointer: state that is equal on every rank (DDP). Rank 0 writes the one
copy; every rank can restore it. See the package docstring for what is not implemented yet."""
import os

from .. import checkpoint
from ..checkpoint import CheckpointError
from . import engine
from .engine import StorageType

__all__ = ["DdpCheckpointer", "StorageType"]


class DdpCheckpointer:
    """Saves and loads the state of a data-parallel job under checkpoint_dir.

    Create it on every rank, after torch.distributed is initialised (without it, the process
    is a job of one). storage, local_shard_num and global_shard_num exist for DLRover's
    signature: only their defaults are supported (state that differs per rank belongs in
    ftrun.flash_checkpoint.sharded.ShardedCheckpointer). comm_backend: the backend of the
    small group the checkpointer synchronises on (default gloo)."""

    def __init__(self, checkpoint_dir: str, storage=None, local_shard_num=1,
                 global_shard_num=1, comm_backend=""):
        if storage is not None:
            raise ValueError("ftrun's DdpCheckpointer writes to checkpoint_dir's file system; "
                             "a custom storage is not supported")
        if local_shard_num != 1 or global_shard_num != 1:
            raise ValueError("state that differs per rank: use ftrun.flash_checkpoint.sharded."
                             "ShardedCheckpointer (local_shard_num/global_shard_num must be 1)")
        self.checkpoint_dir = checkpoint_dir
        self._comm = engine.Comm(comm_backend)
        self._rank = self._comm.rank

    def save_checkpoint(self, step, state_dict, path="", storage_type=StorageType.DISK):
        """Saves state_dict as the checkpoint of `step`. Every rank calls it; it returns when
        the checkpoint is complete. `path` (default <checkpoint_dir>/<step>/rank_0.pt) names
        the file: it becomes a link to the stored copy."""
        if storage_type == StorageType.MEMORY:
            engine.disk_instead_of_memory()
        elif storage_type != StorageType.DISK:
            raise ValueError(f"No support storage type {storage_type}")
        if not path:
            path = os.path.join(self.checkpoint_dir, str(step), "rank_0.pt")
        engine.save_one_copy(self._comm, self.checkpoint_dir, int(step),
                             os.path.basename(path), state_dict, path)

    def load_checkpoint(self, resume_path=""):
        """The newest complete state dict under checkpoint_dir (the same step on every rank),
        or {} when there is none. resume_path: a checkpoint file or ftrun checkpoint
        directory to load instead."""
        if resume_path:
            return _load_path(resume_path)
        path, manifest = engine.choose(self._comm, self.checkpoint_dir, _verify_copy)
        if path is None:
            return {}
        return engine.load_file(engine.only_file(path, manifest, ""))


def _verify_copy(path: str) -> dict:
    manifest = checkpoint.verify(path)
    engine.only_file(path, manifest, "")
    return manifest


def _load_path(path: str):
    if os.path.isdir(path):
        return engine.load_file(engine.only_file(path, _verify_copy(path), ""))
    if os.path.isfile(path):
        return engine.load_file(path)
    raise CheckpointError(f"no checkpoint at {path}")
