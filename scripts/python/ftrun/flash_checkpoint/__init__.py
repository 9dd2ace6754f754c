"""DLRover-compatible flash-checkpoint API (ftrun-flash-checkpoint(7)).

A DLRover script migrates by changing its import:

    from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType
    checkpointer = DdpCheckpointer(checkpoint_dir)
    checkpointer.save_checkpoint(step, state_dict, path, storage_type=StorageType.MEMORY)
    state_dict = checkpointer.load_checkpoint()      # {} when there is none
    checkpointer.wait_latest_checkpoint(timeout=1800)  # the newest DISK save is on storage

DLRover's deletion strategies (dlrover.python.common.storage) are in
ftrun.flash_checkpoint.storage (retention.py applies them):

    from ftrun.flash_checkpoint.storage import KeepLatestStepStrategy
    DdpCheckpointer(checkpoint_dir, deletion_strategy=KeepLatestStepStrategy(3, checkpoint_dir))

    from ftrun.flash_checkpoint.sharded import ShardedCheckpointer   # a shard per rank

Under an ftrun agent, saves go to memory the agent owns (memory.py: memfd buffers handed over
the control channel; lease_mailbox.py: the page every-step saves use instead of messages;
snapshot.py and layout.py: their byte layout), survive the death of the training
process, and are restored from there (engine.restore_from_memory: the newest step the ranks
agree on); DISK saves and a job that fails for good are written to storage by the agent.
Elsewhere (plain python, torchrun) both kinds are synchronous disk saves in the project's one
checkpoint format (scripts/python/ftrun/checkpoint.py: temporary directory, fsync, rename,
MANIFEST.json with sizes and CRC-32s; storage.py writes, loading.py reads) under
`checkpoint_dir`; loads take the newest complete
checkpoint the whole job can restore and skip a partial or corrupt one with a warning.

With several nodes each node's snapshots are also copied to another node's agent
(--flash-replicas), and a replaced node restores from them.
FsdpShardCheckpointer (fsdp.py) needs torch.distributed.checkpoint, which the torch ftrun is
tested with (1.13, Debian) does not have: importing it says so and names ShardedCheckpointer.

    from ftrun.flash_checkpoint.megatron import save_checkpoint, load_checkpoint  # Megatron-LM

has DLRover's Megatron-LM shape (megatron.py), tested against a stand-in of Megatron-LM only.
"""
from .engine import StorageType

__all__ = ["StorageType"]
