"""A checkpointer for state that differs per rank (FSDP/ZeRO/Megatron-style shards), with
DLRover's method shapes. Each rank saves and restores its own shard inside one checkpoint per
step; a restore never mixes steps. See the package docstring for what is not implemented."""
import os

from .. import control
from . import engine
from .checkpointer import Checkpointer
from .engine import StorageType, WorldSizeError

__all__ = ["ShardedCheckpointer", "StorageType", "WorldSizeError"]


class ShardedCheckpointer(Checkpointer):
    """Saves and loads one shard per rank under checkpoint_dir.

    Create it on every rank, after torch.distributed is initialised. Rank r restores the shard
    rank r saved; a checkpoint saved by a different number of ranks raises WorldSizeError
    naming both sizes (resharding is not supported). comm_backend: the backend of the small
    group the checkpointer synchronises on (default gloo)."""

    # The shard's file name in a step's checkpoint and the tracker's name under checkpoint_dir:
    # a subclass with another layout (megatron.py) chooses its own.
    tracker_name = engine.TRACKER_FILE_NAME

    def shard_file_name(self) -> str:
        return f"rank_{self._rank}.pt"

    def step_companions(self, step: int) -> list:
        """Paths a deletion strategy removes with the stored step (megatron.py: iter_<N>)."""
        return []

    def __init__(self, checkpoint_dir: str, comm_backend="", deletion_strategy=None,
                 save_timeout=600):
        self.checkpoint_dir = checkpoint_dir
        self._comm = engine.Comm(comm_backend)
        self._rank = self._comm.rank
        self._group = engine.shard_group(self._rank)
        self._persist = False  # the newest save_checkpoint asked for DISK
        self._stored = engine.Stored(checkpoint_dir, self.tracker_name,
                                     deletion_strategy if self._rank == 0 else None,
                                     self.step_companions)

    def register_fault_save(self, state_fn, path=None):
        """An ftrun extension, as DdpCheckpointer.register_fault_save: the fault-time save
        stores state_fn(step), this rank's shard after `step`, into the agent's memory. Every
        shard is needed, so it happens only when every rank can still save (a hung rank, not a
        dead one: the agent's planner finds no saver for a dead rank's shard) and each rank
        saves its own; otherwise the restart restores the newest step all ranks saved. A
        rank's replica group becomes its shard unless the script set one. Persisted as the
        newest save_checkpoint was (at once after DISK when every rank runs on this node)."""
        controller = control.connect()
        group = self._group if not getattr(controller, "group", "") else None
        one_node = engine.node_holds_every_rank(self._comm)
        engine.register_fault_save(state_fn, self._group, self._comm.world_size,
                                   lambda step: self._target(step, path(step) if path else ""),
                                   lambda: self._persist and one_node, group)

    @staticmethod
    def _step_dir(step, root: str) -> str:
        """The default directory of a step's checkpoint."""
        return os.path.join(root, str(step))

    def _target(self, step, path: str) -> dict:
        """Where the agent persists this rank's shard of `step`."""
        root = engine.absolute(self.checkpoint_dir)
        path = os.path.abspath(path) if path else self._step_dir(int(step), root)
        target = {"root": root, "path": path, "name": self.shard_file_name(),
                  "tracker": self.tracker_name}
        part_link = self.part_link(int(step))
        if part_link:
            target["part_link"] = os.path.abspath(part_link)
        return target

    def part_link(self, step: int) -> str:
        """A path the agent makes a link to this rank's shard directory in the stored step, or
        "" (megatron.py: iter_<N>/mp_rank_XX)."""
        return ""

    def save_checkpoint(self, step, state_dict, path="", storage_type=StorageType.DISK):
        """Saves this rank's shard as part of the checkpoint of `step`. Every rank calls it.
        `path` (default <checkpoint_dir>/<step>) names the step's directory: it becomes a link
        to the stored checkpoint.

        Under an ftrun agent that keeps memory snapshots, each rank copies its shard into its
        agent's memory and returns; with DISK, when every rank runs on one node, the agent
        writes the step's checkpoint in the background once all shards are in, and with
        ranks on several nodes the ranks also write it synchronously (every rank returns when
        every shard is complete). Elsewhere both kinds are synchronous disk saves. Returns
        False when the memory save was not taken (the message says why), for DISK on one node
        when any rank's was not. state_dict may be a
        function of no arguments returning the shard (every rank calls its own, once; where the
        ranks write to disk together, its failure on one rank fails the save on every rank)."""
        if storage_type not in (StorageType.MEMORY, StorageType.DISK):
            raise ValueError(f"No support storage type {storage_type}")
        state_dict = engine.Once(state_dict)
        given, path = path, path or self._step_dir(step, self.checkpoint_dir)
        step, name = int(step), self.shard_file_name()
        mem, why = engine.memory_store()
        disk = storage_type == StorageType.DISK
        self._persist = disk
        if mem is None and not disk:
            engine.disk_instead_of_memory(why)
        one_node = engine.node_holds_every_rank(self._comm)
        taken = True
        if mem is not None:
            if not disk:  # no agreement of the ranks: a failure is this rank's
                return engine.save_to_memory(mem, step, state_dict(), self._group,
                                             self._comm.world_size, self._target(step, given),
                                             False)
            if one_node:
                taken = False
                try:
                    taken = engine.save_to_memory(mem, step, state_dict(), self._group,
                                                  self._comm.world_size,
                                                  self._target(step, given), True)
                finally:
                    # The agent writes the step once every rank's shard is in: none refused
                    # (busy) and no state function raised (reached as that rank raises).
                    agreed = self._comm.all_ok(taken)
                    if agreed:
                        self._stored.writing(step, mem)
                return agreed
            try:
                state = state_dict()
            except BaseException:  # noqa: BLE001 (raised again in save_shards' agreement)
                pass
            else:
                taken = engine.save_to_memory(mem, step, state, self._group,
                                              self._comm.world_size, self._target(step, given),
                                              False)
        engine.save_shards(self._comm, self.checkpoint_dir, step, name, state_dict, path,
                           self.tracker_name)
        self._stored.written(step)
        return taken

    def wait_latest_checkpoint(self, timeout=1800):
        """DLRover's: waits until the newest DISK save is on storage, at most `timeout` seconds
        (every rank whose agent writes it; a save written before save_checkpoint returned has
        nothing to wait for), as DdpCheckpointer.wait_latest_checkpoint."""
        return self._stored.wait(timeout)

    def load_checkpoint(self, resume_path=""):
        """This rank's shard of the newest checkpoint every rank can restore, or {} when there
        is none. In DLRover's order (engine.restore): the snapshot in the agents' memory (a
        restart within the job); else, when memory held none, resume_path, a step directory or
        its link ({} when it does not exist);
        else the newest checkpoint under checkpoint_dir that verifies, or the one DLRover
        itself saved there (its tracker's <step>/rank_<r>.pt) when ftrun saved none.

        Rank 0 first removes what agents of an earlier run that failed left staged but never
        stored whole (see the man page's WHEN THE JOB FAILS)."""
        if self._rank == 0:
            engine.discard_staged(self.checkpoint_dir)
        return engine.restore(self._comm, self.checkpoint_dir, self._group, False, resume_path,
                              self._load_path, self._verify, self.saved_by_dlrover,
                              self.tracker_name)

    def _load_path(self, path: str):
        """resume_path: a step directory or its link."""
        path = os.path.realpath(path)
        return engine.load_part(path, self._verify(path), self._group)

    def saved_by_dlrover(self):
        """This rank's shard of the checkpoint DLRover saved under checkpoint_dir, or None
        (megatron.py: Megatron-LM's own loader reads those)."""
        return engine.dlrover_written(self._comm, self.checkpoint_dir, self.tracker_name,
                                      self.shard_file_name(), self._comm.world_size)

    def _verify(self, path: str) -> dict:
        return engine.verify_shard(path, self._group, self._comm.world_size)
