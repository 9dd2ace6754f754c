"""DLRover's dlrover.trainer.torch.flash_checkpoint.checkpointer: StorageType and the
Checkpointer base class (save_checkpoint, load_checkpoint) that DdpCheckpointer and
ShardedCheckpointer derive from. DLRover's own examples import StorageType from here."""
from abc import ABCMeta, abstractmethod

from .engine import StorageType

__all__ = ["Checkpointer", "StorageType"]


class Checkpointer(metaclass=ABCMeta):
    """Saves a training state to memory or storage and loads the newest one back."""

    @abstractmethod
    def save_checkpoint(self, step, state_dict, path, storage_type=StorageType.DISK):
        """Saves state_dict as the checkpoint of `step` (path: where it is stored)."""

    @abstractmethod
    def load_checkpoint(self, resuming_path=None):
        """The newest state dict ({} when there is none), or the one at resuming_path."""
