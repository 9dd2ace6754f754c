"""What DdpCheckpointer and ShardedCheckpointer share: the storage type, the memory seam (saves
into the agent's memory, the fault-time save, restoring from memory) and the job's
collectives. Checkpoints on storage are storage.py's; its names are re-exported here.
"""
import functools
import os
import sys
import threading
from collections import namedtuple
from enum import Enum, auto

import torch
import torch.distributed as dist

from .. import control
from ..checkpoint import CheckpointError
from .memory import AgentMemory, MemoryRefused
from .retention import Stored  # noqa: F401 (the checkpointers know it as engine's)
from .sources import agreed, inventory, shard_sources
# Re-exported: the checkpointers and tests know these as engine's.
from .loading import WorldSizeError, load_file, load_part, only_file, verify_shard  # noqa: F401
from .storage import (RUN_STARTED, TRACKER_FILE_NAME, Once, _link, _steps,  # noqa: F401
                      _torch_save, _warned, _write_tracker, built, choose, discard_staged,
                      dlrover_written, loadable_steps, one_state, save_one_copy, save_shards,
                      shard_group, stored_in_this_run, warn_once)


class StorageType(Enum):
    MEMORY = auto()
    DISK = auto()


_memory = None


def _forget_memory_in_child():
    # A forked child has the parent's AgentMemory but not its channel to the agent. Dropped at
    # the fork rather than checked at every save (getpid is a system call).
    global _memory
    _memory = None


os.register_at_fork(after_in_child=_forget_memory_in_child)


def memory_store():
    """(AgentMemory, None) when this worker's ftrun agent keeps memory snapshots, else
    (None, why not)."""
    global _memory
    mem = _memory
    # Every save asks: the answer stands while this process's channel to that agent is open.
    path = os.environ.get("FTRUN_CONTROL_SOCKET")
    if mem is not None and mem.socket == path and not mem.controller.closed:
        return mem, None
    if not path:
        return None, "not started by ftrun (no FTRUN_CONTROL_SOCKET)"
    if not os.environ.get("FTRUN_FLASH_MEMORY_BUDGET"):
        return None, "this ftrun agent does not keep memory snapshots"
    controller = control.connect()
    if not isinstance(controller, control.Controller):
        return None, "the ftrun agent cannot be reached"
    if _memory is None or _memory.controller is not controller:
        _memory = AgentMemory(controller)
    _memory.socket = path
    return _memory, None


_normalised = functools.lru_cache(maxsize=64)(os.path.normpath)


def absolute(path: str) -> str:
    """os.path.abspath(path), without normalising an absolute path again at every save (a
    relative one depends on the working directory: it is resolved every time)."""
    return _normalised(path) if os.path.isabs(path) else os.path.abspath(path)


def accepted_options(storage, replica_count, where: str):
    """DLRover's checkpointer options that ftrun takes without using them as DLRover does: a
    storage must be DLRover's disk storage (its deletion strategy, if any, is returned: else
    None), replica_count is ignored with a message."""
    strategy = None
    if storage is not None:
        if type(storage).__name__ not in ("PosixDiskStorage", "PosixStorageWithDeletion"):
            raise ValueError(f"ftrun's flash checkpoint writes to the file system of {where}; "
                             f"a custom storage ({type(storage).__name__}) is not supported")
        strategy = getattr(storage, "_deletion_strategy", None)
    if replica_count:
        warn_once("replica_count", "replica_count is ignored: copies on other nodes are set "
                  "with ftrun's --flash-replicas")
    return strategy


def disk_instead_of_memory(why: str):
    """Says once why MEMORY saves go to disk synchronously."""
    warn_once("memory", f"StorageType.MEMORY falls back to a synchronous DISK save: {why}")


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK") or os.environ.get("DEVICE_ID") or 0)


def node_holds_every_rank(comm) -> bool:
    """All of the job's ranks run on this node (so its agent can store a sharded checkpoint
    alone)."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or comm.world_size)
    return local == comm.world_size


# A fault-time save runs on the control channel's thread of its own, maybe while the training
# thread is in a save of its own: one save into the agent's memory at a time.
_save_lock = threading.Lock()


def _memory_save(mem, step: int, state_dict, group: str, world_size: int, target: dict,
                 persist: bool):
    wait = float(os.environ.get("FTRUN_SAVE_TIMEOUT", "180")) if persist else 0.0
    with _save_lock:
        mem.save(step, state_dict, group, world_size, target, persist, wait)


def save_to_memory(mem, step: int, state_dict, group: str, world_size: int, target: dict,
                   persist: bool) -> bool:
    """One save into the agent's memory; False (and a message) when it was not taken."""
    try:
        _memory_save(mem, step, state_dict, group, world_size, target, persist)
        return True
    except MemoryRefused as e:
        if e.busy:
            print(f"ftrun: step {step} not saved to memory: the previous snapshot is still "
                  "being written to storage", file=sys.stderr, flush=True)
        else:
            print(f"ftrun: step {step} NOT saved to memory: {e}", file=sys.stderr, flush=True)
    except (CheckpointError, OSError) as e:
        print(f"ftrun: step {step} NOT saved to memory: {e}", file=sys.stderr, flush=True)
    return False


def register_fault_save(state_fn, group: str, world_size: int, target, persist,
                        replica_group: str = None):
    """Makes the fault-time save ("last words", ftrun-control(7)) of this rank store
    state_fn(step), the state after the step the agent names, as the memory snapshot of copy
    `group`, persisted like the script's own saves: target(step) says where, persist() whether
    at once (else when the job fails for good). state_fn is asked at the fault, with the
    update of that step ended and the next not begun: a state dict passed to an earlier save
    would hold that step's tensors but an older step's other values. Where this worker's agent
    keeps no memory snapshots, the save goes to disk by the files path instead: a checkpoint
    of copy `group` under target's root, which load_checkpoint reads like its own.
    replica_group: the ranks that hold the same state (the agent asks one of each to save)."""
    controller = control.connect()
    mem, _ = memory_store()
    if mem is None:
        def write(step, directory):
            _torch_save(state_fn(step), directory, target(step)["name"])
        controller.register_save_handler(write, target(0)["root"], replica_group)
        return

    def save(step):
        _memory_save(mem, step, state_fn(step), group, world_size, target(step), persist())
    controller.register_memory_save(save, replica_group)


# What restore_from_memory found: the step and state restored (None, None: none), and whether
# the agents' memory held any snapshot of the job at all (then a script's resume_path is not
# read: DLRover's engines read it only when memory is empty).
Restored = namedtuple("Restored", "step state held")


def restore(comm, root: str, group: str, shared: bool, resume_path: str, load_resume, check,
            saved_by_dlrover, tracker: str = TRACKER_FILE_NAME):
    """load_checkpoint's order, DLRover's engines' with ftrun's checks: the agents' memory;
    else resume_path when memory held nothing; else the newest checkpoint under root every
    rank can restore; else resume_path; else the checkpoint DLRover itself saved there (or
    {}). load_resume(path) loads resume_path on this rank, check(path) verifies a stored
    checkpoint (see choose), saved_by_dlrover() is collective. Collective."""
    got = restore_from_memory(comm, root, group, shared, tracker)
    if got.step is not None:
        return got.state
    if resume_path and not got.held:
        return resume(comm, resume_path, load_resume)
    path, manifest = choose(comm, root, check, tracker)
    if path is not None:
        return load_part(path, manifest, group)
    if resume_path:
        return resume(comm, resume_path, load_resume)
    return saved_by_dlrover() or {}


def resume(comm, path: str, load):
    """resume_path's state, decided alike on every rank: {} with one line when it is missing
    on any rank (as DLRover's storage reads nothing there); raises on every rank when any
    rank cannot load it."""
    if not comm.all_ok(os.path.exists(path)):
        warn_once(f"resume:{path}", f"no checkpoint at resume_path {path}: nothing restored"
                  + ("" if comm.world_size == 1 else " (on every rank alike)"))
        return {}
    state, error = None, None
    try:
        state = load(path)
    except Exception as e:  # noqa: BLE001 (raised on every rank below)
        error = e
    if not comm.all_ok(error is None):
        if isinstance(error, CheckpointError):
            raise error
        raise CheckpointError(f"resume_path {path}: "
                              f"{error or 'another rank cannot load it (see its log)'}")
    return state


def restore_from_memory(comm, root: str, group: str, shared: bool = False,
                        tracker: str = TRACKER_FILE_NAME):
    """The newest state the job can restore from its agents' memory, if that is at least as
    new as the newest checkpoint this run stored on disk (an earlier run's steps are older than
    anything in memory, whatever their numbers): Restored(step, state, held), step and state None
    when there is none. Collective. The step
    is the one the rendezvous decided for the round from every node's memory (the agent says
    it with its steps); where it decided none (a single node, etcd) the ranks agree on the
    newest they all can restore. A rank that cannot load it sends them all to disk.

    Not `shared` (shards): every rank's shard must be available at the step, from its own
    node's memory or from a replica another node's agent holds (--flash-replicas); a rank
    whose node lacks its shard (a replaced node) gets it from the lowest rank whose node holds
    the replica. `shared` (the one copy of a DDP job): one rank holding it is enough; ranks
    whose node lacks it get it from the lowest rank that has it. Either way over the job's own
    network."""
    mem, _ = memory_store()
    comm.all_ok(True)  # every rank's save of this job has returned (its snapshot committed)
    answers = comm.gather((*inventory(mem, group), RUN_STARTED))
    everyone = [steps for steps, _, _ in answers]
    held_any = any(everyone)
    decided = agreed([d for _, d, _ in answers])
    # The rendezvous gives every agent the job's start; the earliest the ranks have still counts
    # where it does not (an older server: each node's agent has its own start, and a node that
    # joined late would take this run's disk steps for an earlier run's).
    run_started = min(started for _, _, started in answers)
    if decided is not None and decided < 0:
        # The rendezvous found no step in the members' memory.
        return Restored(None, None, held_any)
    # sources[r]: for each step, the ranks that can load rank r's copy of it.
    if shared:
        sources = {s: [r for r, held in enumerate(everyone) if s in held]
                   for s in set().union(*everyone)}
        candidates = set(sources)
    else:
        sources, candidates = shard_sources(comm, mem, everyone, decided)
    if decided is not None:
        if decided not in candidates:
            if comm.rank == 0:
                print(f"ftrun: step {decided}, which the rendezvous chose to restore, is no "
                      "longer in memory; trying disk", file=sys.stderr, flush=True)
            return Restored(None, None, held_any)
        candidates = {decided}
    on_disk = comm.from_rank0(
        stored_in_this_run(root, loadable_steps(root, tracker), run_started)[:1])
    if not candidates or (on_disk and on_disk[0] > max(candidates)):
        return Restored(None, None, held_any)
    step = max(candidates)
    # (rank that loads, group it loads, rank it serves), the same list on every rank.
    if shared:
        holders = sources[step]
        loads = [(r, group, r) for r in holders]
        moves = [(holders[0], r) for r in range(comm.world_size) if r not in holders]
    else:
        loads, moves = [], []
        for r in range(comm.world_size):
            src = r if step in everyone[r] else sources[r][step][0]
            loads.append((src, shard_group(r), r))
            if src != r:
                moves.append((src, r))
    state, served, error = None, {}, None
    for src, g, owner in loads:
        if src != comm.rank:
            continue
        try:
            loaded = mem.load(step, g, comm.world_size)
        except (CheckpointError, OSError) as e:
            error = e
            break
        if owner == comm.rank:
            state = loaded
        served[owner] = loaded
    if not comm.all_ok(error is None):
        print(f"ftrun: not restoring step {step} from memory: "
              f"{error or 'another rank cannot (see its log)'}; trying disk", file=sys.stderr,
              flush=True)
        return Restored(None, None, held_any)
    if shared and moves:
        state = comm.share(state, moves[0][0], [r for _, r in moves])
    else:
        for src, owner in moves:
            got = comm.share(served.get(owner), src, [owner])
            if comm.rank == owner:
                state = got
    if comm.rank == 0:
        how = ", ".join(f"rank {r} from rank {s}" for s, r in moves)
        if shared and moves:
            how = f"ranks {[r for _, r in moves]} from rank {moves[0][0]}"
        chosen = ", the step the rendezvous chose" if decided is not None else ""
        print(f"ftrun: restored step {step} from memory" + (f" ({how})" if how else "") + chosen,
              file=sys.stderr, flush=True)
    return Restored(step, state, held_any)


class Comm:
    """The job's ranks as seen by the checkpointer: torch.distributed when it is initialised
    (small collectives on a gloo group), else this process alone."""

    def __init__(self, comm_backend: str = ""):
        self.active = dist.is_available() and dist.is_initialized()
        if not self.active:
            launched = control._world_size()
            if launched > 1:  # every process would think it is rank 0 of 1
                raise RuntimeError(f"this process is one of {launched} ranks (WORLD_SIZE): "
                                   "create the checkpointer after "
                                   "torch.distributed.init_process_group")
            self.rank, self.world_size, self._group = 0, 1, None
            return
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        backend = comm_backend or "gloo"
        # CPU tensors need gloo; new_group is collective, and every rank builds a checkpointer.
        self._group = None if dist.get_backend() == backend else dist.new_group(backend=backend)

    def all_ok(self, ok: bool) -> bool:
        """True when ok is true on every rank. Collective."""
        if not self.active:
            return ok
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self._group)
        return bool(flag.item())

    def gather(self, value) -> list:
        """Every rank's value, in rank order, on every rank. Collective."""
        if not self.active:
            return [value]
        out = [None] * self.world_size
        dist.all_gather_object(out, value, group=self._group)
        return out

    def share(self, value, src: int, to: list):
        """src's value on the ranks `to` (the others keep theirs). Collective."""
        ranks = sorted({src, *to})
        group = dist.new_group(ranks=ranks, backend="gloo")  # every rank must call it
        if self.rank in ranks:
            box = [value]
            dist.broadcast_object_list(box, src=src, group=group)
            value = box[0]
        return value

    def from_rank0(self, value):
        """Rank 0's value on every rank. Collective."""
        if not self.active:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]
