"""DLRover-compatible flash-checkpoint API (ftrun-flash-checkpoint(7)).

A DLRover script migrates by changing its import:

    from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType
    checkpointer = DdpCheckpointer(checkpoint_dir)
    checkpointer.save_checkpoint(step, state_dict, path, storage_type=StorageType.MEMORY)
    state_dict = checkpointer.load_checkpoint()      # {} when there is none

    from ftrun.flash_checkpoint.sharded import ShardedCheckpointer   # a shard per rank

What works now: the DISK path. Saves are synchronous and use the project's one checkpoint
format (scripts/python/ftrun/checkpoint.py: temporary directory, fsync, rename, MANIFEST.json
with sizes and sha256) under `checkpoint_dir`; loads take the newest complete checkpoint the
whole job can restore and skip a partial or corrupt one with a warning.

What does not exist yet:
* StorageType.MEMORY is not backed by the agent: the agent-owned snapshot store (issue 15) is
  being built separately. Until the agent offers it, a MEMORY save is a synchronous DISK save and
  says so once. The one place where the agent-backed memory path plugs in is
  `engine.memory_store()`.
* FsdpShardCheckpointer: needs torch.distributed.checkpoint, which the installed torch (1.13,
  Debian) does not have.
* Megatron's save_checkpoint/load_checkpoint shape, replicas across nodes, restore from memory.
"""
from .engine import StorageType

__all__ = ["StorageType"]
