"""Checkpoints on storage for DdpCheckpointer and ShardedCheckpointer, in ftrun's one format
(ftrun.checkpoint): saving a step (one copy, or a shard per rank), the tracker, the script's
`path` link, and choosing the newest checkpoint every rank can restore.

A checkpoint of step S is `<checkpoint_dir>/ftrun-step-S/` with one replica group per copy of
the state: group "" (one copy, DDP) or "rank-<r>" (one shard per rank). The `path` a script
passes becomes a symbolic link to the stored checkpoint, so `torch.load(path)` keeps working,
and `dlrover_latest.txt` (DLRover's tracker name) holds the newest step this run saved. Loading
never trusts the tracker alone: it takes the newest checkpoint whose manifest verifies.

Runs: what a checkpoint directory holds from before this run began (RUN_STARTED) is an earlier
run's, and this run's saves replace it as DLRover's overwrite theirs: the tracker is lowered
when this run saves a lower step (a run that did not resume), a step saved again is replaced,
and loads skip the earlier run's steps above the tracker's (loadable_steps). Within a run the
tracker is never lowered and a stored step is kept. Under ftrun a run is the whole job
(FTRUN_RUN_STARTED: the earliest start of its agents, from the rendezvous), so the steps the
agents of several nodes store together (staged_checkpoint.h) follow the same rule. `comm` is an
engine.Comm (the job's collectives); every rank calls the functions that take one.
"""
import fcntl
import math
import os
import re
import shutil
import sys
import time

import torch

from .. import checkpoint
from ..checkpoint import CheckpointError
from . import snapshot
from .loading import WorldSizeError, _torch_load, only_file
# DLRover's names of dlrover.python.common.storage: a script imports them from here.
from .dlrover_storage import (TRACKER_FILE_NAME, CheckpointDeletionStrategy,  # noqa: F401
                              CheckpointStorage, KeepLatestStepStrategy,
                              KeepStepIntervalStrategy, PosixDiskStorage,
                              PosixStorageWithDeletion, get_checkpoint_storage)

_warned = set()


def warn_once(key: str, message: str):
    if key in _warned:
        return
    _warned.add(key)
    print(f"ftrun: {message}", file=sys.stderr, flush=True)


def _run_started() -> float:
    try:
        started = float(os.environ["FTRUN_RUN_STARTED"])
        if math.isfinite(started):
            return started
    except (KeyError, ValueError):
        pass
    return time.time() - 2  # as the agent: files are stamped by a coarse clock


# When this run began, in seconds since the epoch: as the agent gives its workers
# (FTRUN_RUN_STARTED), else this process's start (outside ftrun each process is the run).
RUN_STARTED = _run_started()


def tracked(root: str, tracker: str) -> int:
    """The step the tracker under root records; -1 when there is none (or it is unreadable)."""
    try:
        with open(os.path.join(root, tracker)) as f:
            return int(f.read().strip() or -1)
    except (OSError, ValueError):
        return -1


def _write_tracker(root: str, step: int, name: str = TRACKER_FILE_NAME):
    """Records step in the tracker unless this run wrote it with a newer one (an earlier run's
    is replaced whatever it names). Under an flock on root, as the agents take it
    (launcher/checkpoint/checkpoint_io.h): writers on several nodes sharing root agree."""
    tracker = os.path.join(root, name)
    lock = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tracked(root, name) > step and not checkpoint.written_before(tracker, RUN_STARTED):
            return  # an older step saved late does not hide a newer one
        tmp = f"{tracker}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(str(step))  # as DLRover and Megatron-LM write it: no newline
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, tracker)
    finally:
        os.close(lock)  # releases the lock


_STAGED = re.compile(r"^\.ftrun-step-\d+\.parts$")
# A stored checkpoint renamed for deletion (loaders never read names starting with a dot).
DELETED = re.compile(r"^\.ftrun-step-\d+\.deleted-")


def discard_staged(root: str):
    """Removes the staging areas that agents of an earlier, failed run left under root (the
    shards of a multi-node step whose other shards never arrived), so that they are never
    completed with shards of this run's timeline, and what interrupted deletions of a
    deletion strategy left. Loaders ignore both either way. A staging area changed since this
    run began (RUN_STARTED: the job's) is this run's agents' and is kept: they stage there
    while other ranks may restart, and ignore an earlier run's parts in it themselves."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return
    for name in names:
        if _STAGED.match(name) and checkpoint.written_before(os.path.join(root, name),
                                                             RUN_STARTED):
            print(f"ftrun: removing {os.path.join(root, name)}: shards of a step that an "
                  "earlier run did not store whole", file=sys.stderr, flush=True)
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        elif DELETED.match(name):  # a deletion (retention.py) that a process exit interrupted
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _link(path: str, target: str):
    """Points the script's `path` at the stored checkpoint (atomically). A real file or
    directory already at `path` is left alone, with a warning."""
    if not path or os.path.abspath(path) == os.path.abspath(target):
        return
    if os.path.lexists(path) and not os.path.islink(path):
        warn_once(f"link:{path}", f"{path} exists and is not a link; the checkpoint is at {target}")
        return
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(path)}.link-{os.getpid()}")
    os.symlink(os.path.relpath(target, parent), tmp)
    os.replace(tmp, path)


def _committed(root: str, step: int, link_path: str, link_target: str,
               tracker: str = TRACKER_FILE_NAME):
    """After the rename: the tracker and the script's path (rank 0 only)."""
    _write_tracker(root, step, tracker)
    _link(link_path, link_target)


def built(state):
    """The state a save was given: `state` itself, or what it returns when it is a function
    (the checkpointers' save_checkpoint takes one so that only the ranks that store the state
    build it). A module is callable but saved as it is, as before."""
    return state() if callable(state) and not isinstance(state, torch.nn.Module) else state


class Once:
    """built(state) the first time it is called, the same result (or exception) after: a state
    stored in memory and then on disk is built once, and a failure to build it reaches the
    disk save's agreement of the ranks."""

    def __init__(self, state):
        self._state, self._result = state, None

    def __call__(self):
        if self._result is None:
            try:
                self._result = (True, built(self._state))
            except BaseException as e:  # noqa: BLE001 (raised again by every call)
                self._result = (False, e)
        ok, value = self._result
        if not ok:
            raise value
        return value


def one_state(state):
    """`state`, unless it is a state of several files (snapshot.Files), which only the shards
    of ShardedCheckpointer may be: a DDP checkpoint is one file."""
    if isinstance(state, snapshot.Files):
        raise ValueError("DdpCheckpointer stores one state, not a snapshot.Files (several "
                         "files are for ShardedCheckpointer's shards)")
    return state


def save_one_copy(comm, root: str, step: int, name: str, state_dict, path: str):
    """DDP: rank 0 writes the one copy (replicas are equal; `state_dict` may be a function
    returning it, called on rank 0 only); every rank returns once it is complete, or raises if
    it failed anywhere."""
    error = None
    if comm.rank == 0:
        try:
            state = one_state(built(state_dict))
            final = checkpoint.save(root, step, lambda s, d: _torch_save(state, d, name),
                                    world_size=comm.world_size, reason="periodic",
                                    replace_before=RUN_STARTED)
            # A step saved before is kept as it was, with its own file name.
            kept = checkpoint.verify(final, checksums=False)
            _committed(root, step, path, only_file(final, kept, ""))
        except BaseException as e:  # noqa: BLE001 (every rank must reach the agreement, even
            error = e  # when the script's state function exits or is interrupted)
    if not comm.all_ok(error is None):
        raise error or CheckpointError(f"rank 0 failed to save step {step}; see its log")


def save_shards(comm, root: str, step: int, name: str, state_dict, path: str,
                tracker: str = TRACKER_FILE_NAME):
    """Sharded: every rank writes its shard into the step's temporary directory (`state_dict`
    may be a function returning it); rank 0 writes the manifest and renames it into place once
    every shard is complete."""
    tmp = checkpoint.temp_dir(root, step, "sharded")
    if comm.rank == 0:  # shards of an interrupted save of this step, maybe by more ranks
        shutil.rmtree(tmp, ignore_errors=True)
    comm.all_ok(True)  # nobody writes before that
    error = None
    try:
        state = built(state_dict)
        os.makedirs(tmp, exist_ok=True)
        checkpoint.write_part(tmp, shard_group(comm.rank), step,
                              lambda s, d: _torch_save(state, d, name))
    except BaseException as e:  # noqa: BLE001 (every rank must reach the agreement, even
        error = e  # when the script's state function exits or is interrupted)
    everyone = comm.all_ok(error is None)
    if comm.rank == 0:
        if everyone:
            try:
                final = checkpoint.finalize(root, tmp, step,
                                            [shard_group(r) for r in range(comm.world_size)],
                                            comm.world_size, "periodic", RUN_STARTED)
                _committed(root, step, path, final, tracker)
            except Exception as e:  # noqa: BLE001
                error = e
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if not everyone or not comm.all_ok(error is None):
        raise error or CheckpointError(f"another rank failed to save step {step}; see its log")


def shard_group(rank: int) -> str:
    return f"rank-{rank}"


def _torch_save(state_dict, directory: str, name: str):
    """torch.save of the state as `name` in directory; a snapshot.Files as one file per file,
    by their names, as the agent stores it."""
    if isinstance(state_dict, snapshot.Files):
        state_dict.check()
        for file, state in state_dict.items():
            torch.save(state, os.path.join(directory, file))
    else:
        torch.save(state_dict, os.path.join(directory, name))


def _steps(root: str):
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    return sorted((int(m.group(1)) for n in names if (m := checkpoint._FINAL.match(n))),
                  reverse=True)


def loadable_steps(root: str, tracker: str):
    """The steps stored under root that a load may take, newest first: all of them except
    those above the step the tracker names that were stored before it was last written: an
    earlier run's, whose tracker a later run lowered. A step stored after the tracker was
    written is kept (its writer stopped before updating the tracker)."""
    steps, named = _steps(root), tracked(root, tracker)
    try:
        written = os.stat(os.path.join(root, tracker)).st_mtime
    except OSError:
        return steps
    return [s for s in steps
            if named < 0 or s <= named or not checkpoint.stored_before(root, s, written)]


def stored_in_this_run(root: str, steps, run_started: float = None):
    """Those of `steps` stored under root since this run began (run_started, default this
    process's RUN_STARTED)."""
    since = RUN_STARTED if run_started is None else run_started
    return [s for s in steps if not checkpoint.stored_before(root, s, since)]


def choose(comm, root: str, check, tracker: str = TRACKER_FILE_NAME):
    """The newest checkpoint under root (loadable_steps) that every rank can restore, the same
    on every rank: (path, manifest) or (None, None). check(path) -> manifest raises
    CheckpointError for a checkpoint this rank cannot use (skipped with a warning) or
    WorldSizeError (raised)."""
    for step in comm.from_rank0(loadable_steps(root, tracker)):
        path = checkpoint.final_dir(root, step)
        manifest, error = None, None
        try:
            manifest = check(path)
        except WorldSizeError:
            raise
        except (CheckpointError, OSError) as e:
            error = e
        if comm.all_ok(error is None):
            return path, manifest
        moved = _set_aside(root, step) if isinstance(error, checkpoint.CheckpointDamaged) else ""
        print(f"ftrun: skipping checkpoint {path}: "
              f"{error or 'another rank cannot restore it (see its log)'}{moved}",
              file=sys.stderr, flush=True)
    return None, None


def dlrover_written(comm, root: str, tracker: str, name: str, shards: int = 0):
    """A checkpoint DLRover itself wrote under root, for a job moved from DLRover: the step
    its tracker records, each rank's `name` in `<root>/<step>/` saved by torch.save. Loaded
    only when root holds no ftrun checkpoint (choose() found none), so ftrun's own links
    there are not considered. shards: the world size a sharded job must have saved at
    (checked against the number of rank_<r>.pt files), 0 for one copy. The state dict, the
    same step on every rank, or None with a line saying why."""
    step = comm.from_rank0(tracked(root, tracker))
    if step < 0:
        return None
    step_dir = os.path.join(root, str(step))
    if shards:
        saved = comm.from_rank0(_count_shards(step_dir))
        if saved and saved != shards:
            raise WorldSizeError(f"{step_dir} was saved by {saved} ranks and this job has "
                                 f"{shards}: a sharded checkpoint restores only at the world "
                                 "size that saved it (resharding is not supported)")
    path = os.path.join(step_dir, name)
    state, error = None, None
    if os.path.islink(step_dir) or os.path.islink(path):
        error = "a link to an ftrun checkpoint that is not complete"
    else:
        try:
            state = _torch_load(path)
        except Exception as e:  # noqa: BLE001 (any unreadable file: skipped, as choose() does)
            error = e
    if comm.all_ok(error is None):
        print(f"ftrun: restored step {step} from {path}, as DLRover saved it ({tracker})",
              file=sys.stderr, flush=True)
        return state
    print(f"ftrun: skipping checkpoint {path} ({tracker} names step {step}): "
          f"{error or 'another rank cannot restore it (see its log)'}",
          file=sys.stderr, flush=True)
    return None


def _count_shards(step_dir: str) -> int:
    try:
        return sum(1 for n in os.listdir(step_dir) if re.fullmatch(r"rank_\d+\.pt", n))
    except OSError:
        return 0


def _set_aside(root: str, step: int) -> str:
    """Renames the damaged directory of `step` (after every rank checked it) out of the
    stored steps' names, kept for a look: an existing step directory is never overwritten,
    so a new save of that step would otherwise be kept out of storage. Returns what it
    says about it (another rank may have moved it first)."""
    aside = checkpoint.aside_dir(root, step, "damaged")
    try:
        os.rename(checkpoint.final_dir(root, step), aside)
    except OSError:
        return ""
    return f"; moved to {aside} so that a new save of step {step} can be stored"
