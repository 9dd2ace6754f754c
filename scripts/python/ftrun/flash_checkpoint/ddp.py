"""DLRover's DdpCheckpointer: state that is equal on every rank (DDP). Rank 0 writes the one
copy; every rank can restore it. See the package docstring for what is not implemented yet."""
import os

from .. import checkpoint
from . import engine
from .checkpointer import Checkpointer
from .engine import StorageType

__all__ = ["DdpCheckpointer", "StorageType"]

_FILE = "rank_0.pt"  # the default path's file name: <checkpoint_dir>/<step>/rank_0.pt


def _default_path(root: str, step: int) -> str:
    """<root>/<step>/rank_0.pt, as os.path.join makes it (without its cost at every save)."""
    return f"{root}{'' if not root or root.endswith('/') else '/'}{step}/{_FILE}"


class DdpCheckpointer(Checkpointer):
    """Saves and loads the state of a data-parallel job under checkpoint_dir.

    Create it on every rank, after torch.distributed is initialised (without it, the process
    is a job of one). The arguments are DLRover's (since its 0.3.7; `storage`, of earlier
    versions, by keyword: DLRover's PosixDiskStorage or PosixStorageWithDeletion, whose
    strategy is then used). local_shard_num and global_shard_num: only their defaults are
    supported (state that differs per rank belongs in
    ftrun.flash_checkpoint.sharded.ShardedCheckpointer). comm_backend: the backend of the
    small group the checkpointer synchronises on (default gloo). deletion_strategy: which
    older checkpoints to delete (storage.py: KeepLatestStepStrategy, KeepStepIntervalStrategy
    or DLRover's own; default None keeps all). save_timeout: accepted (ftrun waits
    FTRUN_SAVE_TIMEOUT for a busy buffer); replica_count: ignored, with a message (copies on
    other nodes are ftrun's --flash-replicas)."""

    def __init__(self, checkpoint_dir: str, local_shard_num=1, global_shard_num=1,
                 comm_backend="", deletion_strategy=None, save_timeout=600, replica_count=0,
                 *, storage=None):
        carried = engine.accepted_options(storage, replica_count, "checkpoint_dir")
        deletion_strategy = deletion_strategy or carried
        if local_shard_num != 1 or global_shard_num != 1:
            raise ValueError("state that differs per rank: use ftrun.flash_checkpoint.sharded."
                             "ShardedCheckpointer (local_shard_num/global_shard_num must be 1)")
        self.checkpoint_dir = checkpoint_dir
        self._comm = engine.Comm(comm_backend)
        self._rank = self._comm.rank
        self._persist = False  # the newest save_checkpoint asked for DISK
        self._local_rank = engine.local_rank()  # the launcher's, fixed for the process
        self._stored = engine.Stored(checkpoint_dir, engine.TRACKER_FILE_NAME,
                                     deletion_strategy if self._rank == 0 else None)

    def register_fault_save(self, state_fn, path=None):
        """An ftrun extension: the fault-time save (ftrun-control(7): when a rank dies, the
        agent asks a surviving rank to save the step whose update() ended last; the script
        wraps its loop in guard()) stores state_fn(step) into the agent's memory first, like a
        MEMORY save_checkpoint of that step, and the restart restores it with
        load_checkpoint(). state_fn(step) returns the state dict after `step`, built when
        asked (pass the step in it rather than a value kept from an earlier save). path(step)
        names the save's path as in save_checkpoint (default: the default path). The snapshot
        is written to storage as the newest save_checkpoint was: at once after a DISK one,
        else when the job fails for good. Without an agent that keeps memory snapshots it is
        written to disk under checkpoint_dir instead."""
        engine.register_fault_save(state_fn, "", self._comm.world_size,
                                   lambda step: self._target(step, path(step) if path else ""),
                                   lambda: self._persist)

    def _path(self, step, path: str, root: str = "") -> str:
        return path or _default_path(root or self.checkpoint_dir, step)

    def _target(self, step, path: str) -> dict:
        """Where the agent persists the snapshot of `step`."""
        root = engine.absolute(self.checkpoint_dir)
        if path:
            path = os.path.abspath(path)
            name = os.path.basename(path)
        else:  # the default, on the absolute root: nothing to normalise again
            path, name = _default_path(root, int(step)), _FILE
        return {"root": root, "path": path, "name": name, "tracker": engine.TRACKER_FILE_NAME}

    def save_checkpoint(self, step, state_dict, path="", storage_type=StorageType.DISK):
        """Saves state_dict as the checkpoint of `step`. Every rank calls it. `path` (default
        <checkpoint_dir>/<step>/rank_0.pt) names the file: it becomes a link to the stored
        copy.

        Under an ftrun agent that keeps memory snapshots, local rank 0 of each node copies the
        state into the agent's memory and the call returns (other ranks return at once);
        with DISK, rank 0's agent then writes it to storage in the background. Elsewhere
        both kinds are synchronous disk saves by rank 0 that every rank waits for. Returns
        False when the memory save was not taken (the message says why).

        An ftrun extension: state_dict may be a function of no arguments returning the state
        dict. Only the rank that stores the copy calls it (local rank 0 of each node under an
        agent that keeps memory snapshots, rank 0 elsewhere), so the other ranks do not build
        a state nobody stores; it must not run collectives (the other ranks do not call it).
        Where rank 0 writes the copy to disk, its failure fails the save on every rank; under
        the agent only the ranks that call it see it."""
        if storage_type not in (StorageType.MEMORY, StorageType.DISK):
            raise ValueError(f"No support storage type {storage_type}")
        step = int(step)
        self._persist = storage_type == StorageType.DISK
        mem, why = engine.memory_store()
        if mem is None:
            if storage_type == StorageType.MEMORY:
                engine.disk_instead_of_memory(why)
            path = self._path(step, path)
            engine.save_one_copy(self._comm, self.checkpoint_dir, step, os.path.basename(path),
                                 state_dict, path)
            self._stored.written(step)
            return True
        if self._local_rank != 0:
            return True  # one copy per node: local rank 0's
        persist = self._persist and self._rank == 0
        taken = engine.save_to_memory(mem, step, engine.one_state(engine.built(state_dict)), "",
                                      self._comm.world_size, self._target(step, path), persist)
        if persist and taken:
            self._stored.writing(step, mem)
        return taken

    def wait_latest_checkpoint(self, timeout=1800):
        """DLRover's: waits until the newest DISK save is on storage, at most `timeout` seconds.
        Under an ftrun agent only rank 0, whose agent writes it, waits (the others, and saves
        written before save_checkpoint returned, have nothing to wait for); it stops early,
        with a message, when its agent failed to write the step. Then the deletion strategy's
        deletions are finished. Returns False when the step is not on storage (an ftrun
        extension; DLRover returns None)."""
        return self._stored.wait(timeout)

    def load_checkpoint(self, resume_path=""):
        """The newest complete state dict (the same step on every rank), or {} when there is
        none. In DLRover's order (engine.restore): the snapshot in the agents' memory (a
        restart within the job); else, when memory held none, resume_path, a checkpoint file
        or ftrun checkpoint directory ({} when it does not exist); else the newest checkpoint
        under checkpoint_dir that verifies, or the one DLRover itself saved there (its
        tracker's <step>/rank_0.pt) when ftrun saved none.
        Rank 0 first removes what an interrupted deletion left (engine.discard_staged)."""
        if self._rank == 0:
            engine.discard_staged(self.checkpoint_dir)
        return engine.restore(self._comm, self.checkpoint_dir, "", True, resume_path, _load_path,
                              _verify_copy,
                              lambda: engine.dlrover_written(self._comm, self.checkpoint_dir,
                                                             engine.TRACKER_FILE_NAME, _FILE))


def _verify_copy(path: str) -> dict:
    manifest = checkpoint.verify(path)
    engine.only_file(path, manifest, "")
    return manifest


def _load_path(path: str):
    """resume_path: a checkpoint file, or an ftrun checkpoint directory."""
    if os.path.isdir(path):
        return engine.load_file(engine.only_file(path, _verify_copy(path), ""))
    return engine.load_file(path)
