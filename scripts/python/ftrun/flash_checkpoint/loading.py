"""Reading a stored checkpoint (ftrun's one format, storage.py): a group's state files, as
torch.save wrote them or as the agent persisted a memory snapshot, and a shard's checks before
it is read.
"""
import mmap
import os

import torch

from .. import checkpoint
from ..checkpoint import CheckpointError
from . import snapshot


class WorldSizeError(CheckpointError):
    """A sharded checkpoint saved by a different number of ranks (resharding is not done)."""


def load_file(path: str):
    """A state file: saved by torch.save, or a memory snapshot the agent persisted."""
    with open(path, "rb") as f:
        if f.read(len(snapshot.MAGIC)) == snapshot.MAGIC:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                try:
                    return snapshot.read(m)
                except snapshot.SnapshotError as e:
                    raise CheckpointError(f"{path}: {e}") from None
    return _torch_load(path)


def _torch_load(path: str):
    """torch.load of a checkpoint this job (or DLRover's) wrote: trusted as the memory
    snapshots are, so weights_only is off (torch 2.6 turned it on by default, and a state may
    hold any picklable value)."""
    return torch.load(path, map_location="cpu", weights_only=False)


def load_part(checkpoint_path: str, manifest: dict, group: str):
    """A group's state: its one file's, or a snapshot.Files of its files' (a state of several
    files, stored one file per file)."""
    part = manifest["groups"].get(group)
    if part is None or len(part["files"]) < 2:
        return load_file(only_file(checkpoint_path, manifest, group))
    return snapshot.Files((name, load_file(os.path.join(checkpoint_path, part["dir"], name)))
                          for name in sorted(part["files"]))


def only_file(checkpoint_path: str, manifest: dict, group: str) -> str:
    """The one state file of a group (a flash checkpoint stores one file per group)."""
    part = manifest["groups"].get(group)
    if part is None:
        raise CheckpointError(f"{checkpoint_path} has no copy '{group}'")
    files = sorted(part["files"])
    if len(files) != 1:
        raise CheckpointError(f"{checkpoint_path} group '{group}' has {len(files)} files, "
                              "not one state file")
    return os.path.join(checkpoint_path, part["dir"], files[0])


def verify_shard(path: str, group: str, world_size: int) -> dict:
    """Manifest and sizes of every shard, the world size, and the checksums of this rank's
    own shard only (every rank checks its own)."""
    manifest = checkpoint.verify(path, checksums=False)
    if manifest.get("world_size") != world_size:
        raise WorldSizeError(f"{path} was saved by {manifest.get('world_size')} ranks and this "
                             f"job has {world_size}: a sharded checkpoint restores only at the "
                             "world size that saved it (resharding is not supported)")
    part = manifest["groups"].get(group)
    if part is None:
        raise CheckpointError(f"no shard '{group}'")
    for rel, meta in part["files"].items():
        problem = checkpoint.checksum_problem(os.path.join(path, part["dir"], rel), meta)
        if problem:
            raise checkpoint.CheckpointDamaged(f"{part['dir']}/{rel} {problem}")
    return manifest
