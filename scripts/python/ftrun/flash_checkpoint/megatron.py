"""Megatron-LM's save_checkpoint/load_checkpoint with flash checkpoint, in the shape of DLRover's
dlrover.trainer.torch.flash_checkpoint.megatron. A Megatron-LM training script replaces

    from megatron.checkpointing import load_checkpoint, save_checkpoint
with
    from ftrun.flash_checkpoint.megatron import load_checkpoint, save_checkpoint, StorageType

(and DLRover's wait_latest_checkpoint).

Megatron-LM's own functions run unchanged. While its save_checkpoint runs, torch.save hands
each rank's files (model_optim_rng.pt, distrib_optim.pt) to ftrun instead of writing them, and
its tracker goes to a scratch file; the files become this rank's shard of the iteration
(ShardedCheckpointer: the agent's memory, then storage). While its load_checkpoint runs, the
tracker names the iteration ftrun restores (from memory or disk, the same on every rank) and
torch.load answers each file out of the restored shards.

On storage a checkpoint is ftrun's (ftrun-step-<N>/, each rank's shard one file named
model_optim_rng.pt), with Megatron-LM's names around it: <save>/latest_checkpointed_iteration.txt
names the newest complete iteration, <save>/iter_<7 digits>/ftrun-checkpoint links to the stored
checkpoint, and after a DISK save iter_<N>/mp_rank_XX links to the shard of the rank that saved
that directory, so iter_<N>/mp_rank_XX/model_optim_rng.pt (and distrib_optim.pt, with the
distributed optimizer) are there. They are Megatron-LM's own files: each state dict as
Megatron-LM saved it, model_optim_rng.pt's with one key added ("ftrun_path": its path under
iter_<N>), in torch.save's format (unless a dtype has no torch storage type: then ftrun's
snapshot layout), which Megatron-LM's loader, torch.load(path, weights_only=False) (as
Megatron-LM's own files need) and conversion tools read. The iteration the agents store when
the job fails has the same names (each save's target names its mp_rank_XX: the agent makes
that link, or another node's agent storing the shard from its replica). See
ftrun-flash-checkpoint(7) for what is tested.
"""
import contextlib
import inspect
import os
import re
import shutil
import sys
import tempfile

import torch

from .. import checkpoint
from ..checkpoint import CheckpointError
from . import engine, snapshot
from .engine import StorageType
from .sharded import ShardedCheckpointer

__all__ = ["save_checkpoint", "load_checkpoint", "wait_latest_checkpoint", "StorageType",
           "MegatronCheckpointer"]

MODEL_FILE = "model_optim_rng.pt"  # Megatron-LM's names of a rank's files
OPTIMIZER_FILE = "distrib_optim.pt"
TRACKER = "latest_checkpointed_iteration.txt"  # Megatron-LM's tracker
STEP_LINK = "ftrun-checkpoint"  # in iter_<N>/: the link to the stored checkpoint
FILES = "files"  # the key of a shard that holds a rank's files by their path (_shard)
PATH = "ftrun_path"  # the key ftrun adds to a model_optim_rng.pt stored as it is (_shard)
SAVE_TIMEOUT = 600  # DLRover's default (CheckpointConstant.SAVE_TIMEOUT)

_torch_save, _torch_load = torch.save, torch.load


def _megatron():
    """(get_args, the checkpointing module) of the installed Megatron-LM: the layout before
    megatron/training/ (the one DLRover patches), else the newer one."""
    try:
        from megatron import checkpointing, get_args
        return get_args, checkpointing
    except ImportError:
        pass
    try:
        from megatron.training import checkpointing, get_args
        return get_args, checkpointing
    except ImportError as e:
        raise ImportError("ftrun.flash_checkpoint.megatron needs Megatron-LM "
                          "(megatron.checkpointing or megatron.training.checkpointing)") from e


class MegatronCheckpointer(ShardedCheckpointer):
    """A rank's Megatron-LM files of an iteration as its shard, with Megatron-LM's names."""
    tracker_name = TRACKER

    def shard_file_name(self) -> str:
        return MODEL_FILE

    def step_companions(self, step: int) -> list:
        return [_iter_dir(os.path.abspath(self.checkpoint_dir), step)]  # its links

    def saved_by_dlrover(self):
        return None  # _load() hands a checkpoint of Megatron-LM's layout to its own loader

    def load_checkpoint(self, resume_path=""):
        if self._rank == 0:
            _discard_dangling_links(os.path.abspath(self.checkpoint_dir))
        return super().load_checkpoint(resume_path)

    _rank_dir = (None, "")  # (iteration, iter_<N>/mp_rank_XX of its save)

    def part_link(self, step: int) -> str:
        # iter_<N>/mp_rank_XX of the rank's files of that iteration, so that the step the
        # agent stores when the job fails has Megatron-LM's paths too.
        at, rank_dir = self._rank_dir
        return rank_dir if at == step else ""


_checkpointers = {}


def _checkpointer(checkpoint_dir: str, comm_backend: str,
                  deletion_strategy=None) -> MegatronCheckpointer:
    # One per directory: creating one is collective (every rank saves and loads in step). The
    # deletion strategy is the first one given to a save or load (DLRover's one
    # MegatronCheckpointer keeps the first call's, even None: a strategy given only to later
    # calls would be lost there).
    key = (checkpoint_dir, comm_backend)
    if key not in _checkpointers:
        _checkpointers[key] = MegatronCheckpointer(checkpoint_dir, comm_backend,
                                                   deletion_strategy)
    cp = _checkpointers[key]
    if cp._rank == 0:
        cp._stored.use_strategy(deletion_strategy)
    return cp


def _iter_dir(root: str, iteration: int) -> str:
    return os.path.join(root, "iter_{:07d}".format(int(iteration)))


def _discard_dangling_links(root: str):
    """Removes the iter_<N> links (ftrun-checkpoint, mp_rank_XX) that agents of an earlier run
    made for a step they never stored whole (discard_staged removed its shards), and iter_<N>
    when that leaves it empty: Megatron-LM's tracker never names those iterations, but their
    paths led nowhere. A link made since this run began is kept: this run's agents link a
    step before its last shard arrives."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if not re.fullmatch(r"iter_\d{7}", name):
            continue
        iter_dir = os.path.join(root, name)
        earlier = checkpoint.written_before(iter_dir, engine.RUN_STARTED)
        try:
            entries = os.listdir(iter_dir)
        except OSError:
            continue
        removed = 0
        for entry in entries:
            path = os.path.join(iter_dir, entry)
            with contextlib.suppress(OSError):
                if (os.path.islink(path) and not os.path.exists(path)
                        and checkpoint.written_before(path, engine.RUN_STARTED,
                                                      follow_symlinks=False)):
                    os.unlink(path)
                    removed += 1
                    print(f"ftrun: removed {path}: a link to a step that an earlier run did "
                          "not store whole", file=sys.stderr, flush=True)
        if removed and earlier:  # nothing of this run's went into it
            with contextlib.suppress(OSError):
                os.rmdir(iter_dir)  # only when empty


def _under(path, directory: str):
    """path relative to directory, or None when it is not a path under it."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    rel = os.path.relpath(os.path.abspath(path), directory)
    return None if rel.startswith("..") else rel


@contextlib.contextmanager
def _redirected(module, tracker: str, save=None, load=None):
    """While Megatron-LM's function runs: its tracker is `tracker`, torch.save/torch.load are
    `save`/`load` (when given)."""
    kept = torch.save, torch.load, module.get_checkpoint_tracker_filename
    torch.save, torch.load = save or kept[0], load or kept[1]
    module.get_checkpoint_tracker_filename = lambda _checkpoints_path: tracker
    try:
        yield
    finally:
        torch.save, torch.load, module.get_checkpoint_tracker_filename = kept


def save_checkpoint(iteration, model, optimizer, opt_param_scheduler,
                    num_floating_point_operations_so_far=0, storage_type=StorageType.DISK,
                    storage=None, comm_backend="", save_timeout=SAVE_TIMEOUT, replica_count=0):
    """Megatron-LM's save_checkpoint into flash checkpoint. Every rank calls it.

    MEMORY: each rank's files go to its agent's memory (elsewhere: a synchronous disk save).
    DISK: also to storage as ShardedCheckpointer.save_checkpoint says, with Megatron-LM's
    tracker and iter_<N>/mp_rank_XX names (the module docstring). storage must be None or
    DLRover's disk storage (a PosixStorageWithDeletion's strategy is used, as
    megatron_dist_ckpt's deletion_strategy);
    save_timeout is DLRover's (ftrun waits FTRUN_SAVE_TIMEOUT for a busy buffer);
    replica_count is ignored (--flash-replicas). Returns False when the memory save was not
    taken (the message says why)."""
    strategy = engine.accepted_options(storage, replica_count, "args.save")
    return _save(iteration, model, optimizer, opt_param_scheduler,
                 num_floating_point_operations_so_far, storage_type, comm_backend, strategy)


def _save(iteration, model, optimizer, opt_param_scheduler, num_floating_point_operations_so_far,
          storage_type, comm_backend, deletion_strategy=None):
    if storage_type not in (StorageType.MEMORY, StorageType.DISK):
        raise ValueError(f"No support storage type {storage_type}")
    get_args, module = _megatron()
    root = os.path.abspath(get_args().save)
    cp = _checkpointer(root, comm_backend, deletion_strategy)
    iter_dir = _iter_dir(root, iteration)
    files = {}

    def keep(obj, f, *args, **kwargs):
        rel = _under(f, iter_dir)
        if rel is not None and os.path.basename(rel) in (MODEL_FILE, OPTIMIZER_FILE):
            files[rel] = obj
            return None
        return _torch_save(obj, f, *args, **kwargs)

    scratch = tempfile.mkdtemp(prefix="ftrun-megatron-")
    try:
        with _redirected(module, os.path.join(scratch, TRACKER), save=keep):
            if "num_floating_point_operations_so_far" in inspect.signature(
                    module.save_checkpoint).parameters:
                module.save_checkpoint(iteration, model, optimizer, opt_param_scheduler,
                                       num_floating_point_operations_so_far)
            else:
                module.save_checkpoint(iteration, model, optimizer, opt_param_scheduler)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for rel in files:  # the directories Megatron-LM made for files it did not write
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(iter_dir, os.path.dirname(rel)))
    subs = {rel.split(os.sep)[0] for rel in files if os.sep in rel}
    cp._rank_dir = (int(iteration), os.path.join(iter_dir, *subs) if len(subs) == 1 else "")
    taken = cp.save_checkpoint(iteration, _shard(iteration, files),
                               os.path.join(iter_dir, STEP_LINK),
                               storage_type)
    if storage_type == StorageType.DISK and taken:
        _link_rank_dirs(cp, iter_dir, files, iteration)
    elif storage_type == StorageType.MEMORY:
        with contextlib.suppress(OSError):
            os.rmdir(iter_dir)  # empty unless another rank or a DISK save put something there
    return taken


def _shard(iteration, files: dict):
    """A rank's shard of an iteration. When the rank saved model_optim_rng.pt, alone or with
    distrib_optim.pt beside it (the distributed optimizer), its files as they are, so that the
    files the agent stores are Megatron-LM's own: the one state dict, or a snapshot.Files of
    both by their names; model_optim_rng.pt's with one key added (PATH: its path under
    iter_<N>, so that a load finds the files whatever the new job's model-parallel layout).
    Else (no file, or files elsewhere) the rank's files by their path under iter_<N> with the
    iteration."""
    model = next((rel for rel in files if os.path.basename(rel) == MODEL_FILE), None)
    if model is not None:
        state, sub = files[model], os.path.dirname(model)
        names = {os.path.basename(rel) for rel in files if os.path.dirname(rel) == sub}
        if (type(state) is dict and not {FILES, PATH} & state.keys()
                and state.get("iteration") == int(iteration) and len(names) == len(files)
                and names <= {MODEL_FILE, OPTIMIZER_FILE}):
            if len(files) == 1:
                return {**state, PATH: model}
            return snapshot.Files((os.path.basename(rel), {**value, PATH: model}
                                   if rel == model else value) for rel, value in files.items())
    return {"iteration": int(iteration), FILES: files}


def _files(shard):
    """(iteration, the rank's files by their path under iter_<N>) of a shard _shard made."""
    if isinstance(shard, snapshot.Files):
        state = dict(shard.get(MODEL_FILE) or {})
        if PATH not in state:
            raise CheckpointError(f"a restored shard of files {sorted(shard)} has no "
                                  f"{MODEL_FILE} of ftrun's")
        rel = state.pop(PATH)
        files = {os.path.join(os.path.dirname(rel), name): value
                 for name, value in shard.items() if name != MODEL_FILE}
        files[rel] = state
        return state["iteration"], files
    if PATH in shard:
        state = dict(shard)
        return state["iteration"], {state.pop(PATH): state}
    if FILES not in shard:
        raise CheckpointError(f"a restored shard holds no Megatron-LM file (its keys: "
                              f"{sorted(map(str, shard))[:8]})")
    return shard["iteration"], dict(shard[FILES])


def _link_rank_dirs(cp: MegatronCheckpointer, iter_dir: str, files: dict, iteration: int):
    """iter_<N>/mp_rank_XX -> ../ftrun-step-<N>/<this rank's part>: Megatron-LM's path of the
    rank's files leads to its shard once the checkpoint is stored (straight to the step: the
    step's own link leads to its one file when the job has one rank)."""
    part = os.path.join("..", f"ftrun-step-{int(iteration)}",
                        checkpoint.part_dir_name(engine.shard_group(cp._rank)))
    for sub in sorted({rel.split(os.sep)[0] for rel in files if os.sep in rel}):
        path = os.path.join(iter_dir, sub)
        if os.path.lexists(path) and not os.path.islink(path):
            engine.warn_once(f"link:{path}", f"{path} exists and is not a link: Megatron-LM's "
                             f"path of this rank's files stays as it is")
            continue
        os.makedirs(iter_dir, exist_ok=True)
        tmp = os.path.join(iter_dir, f".{sub}.link-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.symlink(part, tmp)
        os.replace(tmp, path)


def load_checkpoint(model, optimizer, opt_param_scheduler, load_arg="load", strict=True,
                    storage=None, comm_backend="", save_timeout=SAVE_TIMEOUT, replica_count=0):
    """Megatron-LM's load_checkpoint out of flash checkpoint; returns the iteration loaded (0:
    none). Every rank calls it.

    The iteration is the newest one every rank can restore, from its agents' memory or from
    disk (ShardedCheckpointer.load_checkpoint), the same on every rank; a rank whose Megatron
    file another rank saved (data-parallel ranks above 0) gets it from that rank. When no
    checkpoint of ftrun's is under the directory, Megatron-LM's loader runs as it is (a
    checkpoint Megatron-LM wrote itself still loads). storage, save_timeout, replica_count: as
    for save_checkpoint."""
    strategy = engine.accepted_options(storage, replica_count, "args.save")
    return _load(model, optimizer, opt_param_scheduler, load_arg, strict, comm_backend, strategy)


def _load(model, optimizer, opt_param_scheduler, load_arg, strict, comm_backend,
          deletion_strategy=None):
    get_args, module = _megatron()
    if deletion_strategy is not None:  # it applies to args.save, as DLRover's
        _checkpointer(os.path.abspath(get_args().save), comm_backend, deletion_strategy)
    root = os.path.abspath(getattr(get_args(), load_arg))
    cp = _checkpointer(root, comm_backend)
    shard = cp.load_checkpoint()
    if not cp._comm.all_ok(bool(shard)):
        if shard:  # (cannot happen: the ranks restore the same step or none)
            raise CheckpointError("some ranks restored a checkpoint and others none")
        return module.load_checkpoint(model, optimizer, opt_param_scheduler, load_arg, strict)
    iteration, files = _files(shard)
    iter_dir = _iter_dir(root, iteration)
    own = _under(module.get_checkpoint_name(root, iteration), iter_dir)
    files.update(_from_other_ranks(cp, files, own))

    def serve(f, *args, **kwargs):
        rel = _under(f, iter_dir)
        if rel is None:
            return _torch_load(f, *args, **kwargs)
        if rel not in files:
            raise CheckpointError(f"{f}: no rank saved it at iteration {iteration} (rank "
                                  f"{cp._rank} has {sorted(files)}): was the model-parallel "
                                  "layout different?")
        return files[rel]

    scratch = tempfile.mkdtemp(prefix="ftrun-megatron-")
    try:
        tracker = os.path.join(scratch, TRACKER)
        with open(tracker, "w") as f:
            f.write(str(iteration))
        with _redirected(module, tracker, load=serve):
            loaded = module.load_checkpoint(model, optimizer, opt_param_scheduler, load_arg,
                                            strict)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if cp._rank == 0:
        print(f"ftrun: Megatron-LM checkpoint of iteration {iteration} loaded", file=sys.stderr,
              flush=True)
    return loaded


def wait_latest_checkpoint(timeout=1800):
    """DLRover's: waits until the newest DISK save_checkpoint under args.save is on storage, at
    most `timeout` seconds (ShardedCheckpointer.wait_latest_checkpoint). Returns False when
    it is not (an ftrun extension; DLRover returns None)."""
    get_args, _ = _megatron()
    root = os.path.abspath(get_args().save)
    return all([cp.wait_latest_checkpoint(timeout)
                for (where, _), cp in _checkpointers.items() if where == root])


def _from_other_ranks(cp: MegatronCheckpointer, files: dict, wanted):
    """The file `wanted` from the rank whose shard holds it, when this rank's does not (every
    data-parallel rank loads the file data-parallel rank 0 saved). Collective."""
    held = cp._comm.gather(sorted(files))
    need = cp._comm.gather(wanted if wanted is not None and wanted not in files else None)
    got = {}
    for rel in sorted({n for n in need if n is not None}):
        owners = [r for r, names in enumerate(held) if rel in names]
        if not owners:
            continue  # the load names it in its error
        src, to = owners[0], [r for r, n in enumerate(need) if n == rel]
        value = cp._comm.share(files.get(rel) if cp._rank == src else None, src, to)
        if cp._rank in to:
            got[rel] = value
    return got
