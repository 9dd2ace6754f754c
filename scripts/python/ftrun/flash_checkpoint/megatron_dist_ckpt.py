"""DLRover's dlrover.trainer.torch.flash_checkpoint.megatron_dist_ckpt, the import the DLRover
user guide's Megatron-LM example uses:

    from ftrun.flash_checkpoint.megatron_dist_ckpt import save_checkpoint, load_checkpoint
    from ftrun.flash_checkpoint.megatron import StorageType

The functions have that module's signatures (deletion_strategy, no storage; replica_count,
which the guide passes, is accepted too) and save and load as ftrun.flash_checkpoint.megatron
does: Megatron-LM's own save_checkpoint runs and each rank's files become its shard. Where
DLRover's module writes the distributed optimizer's state per rank without gathering it,
Megatron-LM's function here gathers it on data-parallel rank 0 as it always does: the same
state, another cost. Tested against the Megatron-LM stand-in only (ftrun-flash-checkpoint(7),
MEGATRON).
"""
from . import engine, megatron
from .engine import StorageType
from .megatron import SAVE_TIMEOUT, wait_latest_checkpoint
# Importable from DLRover's module too.
from .storage import KeepLatestStepStrategy, KeepStepIntervalStrategy  # noqa: F401

__all__ = ["save_checkpoint", "load_checkpoint", "wait_latest_checkpoint", "StorageType"]


def save_checkpoint(iteration, model, optimizer, opt_param_scheduler,
                    num_floating_point_operations_so_far=0, storage_type=StorageType.DISK,
                    comm_backend="", deletion_strategy=None, save_timeout=SAVE_TIMEOUT,
                    replica_count=0):
    """megatron.save_checkpoint; deletion_strategy as DdpCheckpointer's, removing iter_<N>/
    with the step (the first one given to a save or load under args.save applies)."""
    engine.accepted_options(None, replica_count, "args.save")
    return megatron._save(iteration, model, optimizer, opt_param_scheduler,
                          num_floating_point_operations_so_far, storage_type, comm_backend,
                          deletion_strategy)


def load_checkpoint(model, optimizer, opt_param_scheduler, load_arg="load", strict=True,
                    comm_backend="", deletion_strategy=None, save_timeout=SAVE_TIMEOUT,
                    replica_count=0):
    """megatron.load_checkpoint; returns (iteration, num_floating_point_operations_so_far) as
    DLRover's does: Megatron-LM's own pair, or (iteration, 0) from a Megatron-LM before 0.5,
    whose load_checkpoint returns the iteration alone ((0, 0): nothing loaded)."""
    engine.accepted_options(None, replica_count, "args.save")
    loaded = megatron._load(model, optimizer, opt_param_scheduler, load_arg, strict,
                            comm_backend, deletion_strategy)
    return tuple(loaded) if isinstance(loaded, (tuple, list)) else (loaded, 0)
