"""DLRover's FSDP names (dlrover.trainer.torch.flash_checkpoint.fsdp: FsdpShardCheckpointer,
FsdpFullCheckpointer), so that a migrated script's import fails with one line saying why and
what to use instead.

They build on torch.distributed.checkpoint (torch >= 2.0). The torch ftrun is tested with
(Debian's 1.13) has none, so they are not in this release: they could not be tested.
"""
import torch

from .unavailable import unavailable

try:
    import torch.distributed.checkpoint  # noqa: F401
    _WHY = ("they are not in this release of ftrun (they could not be tested: the torch it is "
            "tested with has no torch.distributed.checkpoint)")
except ImportError:
    _WHY = (f"they need torch.distributed.checkpoint, which torch {torch.__version__} here "
            "does not have (torch >= 2.0)")

raise unavailable("fsdp", "FsdpShardCheckpointer, FsdpFullCheckpointer", _WHY,
                  "for a shard per rank use ftrun.flash_checkpoint.sharded.ShardedCheckpointer "
                  "with the FSDP module's sharded state_dict")
