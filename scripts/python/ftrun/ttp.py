"""MindIO TTP's framework API ("last words") on top of ftrun's fault-time save.

A script adapted to MindIO TTP (MindCluster's guide: `import mindio_ttp.framework_ttp as ttp`)
runs under ftrun by changing that one import to `import ftrun.ttp as ttp`:

    ttp_init_controller / ttp_start_controller   nothing to do: ftrun's agent is the controller
    ttp_init_processor(rank, dp_ranks, ...)      the data-parallel ranks become the replica group
    ttp_start_processor(ip, port)                connects to this worker's agent
    ttp_register_save_ckpt_handler(f)            f(step, save_info, args) is the fault-time save
    ttp_register_rename_handler(f)               f(step, args) once every group's save is done
    ttp_set_ckpt_args(args)                      what the handlers get as `args`
    ttp_start_updating_os(-1) / ttp_end_updating_os(step)   the optimizer update in between
    @ttp_to_persist                              train() survives a peer's death to save (guard())

The current `tft_*` names of the same calls are offered too; their handlers also get the `ctx`
given at registration. Outside ftrun every call is harmless and the decorator only calls the
function. See ftrun(1), FAULT-TIME CHECKPOINTS.
"""
import functools
import hashlib
import json
import os
import sys
import tempfile
import threading

from . import control

_lock = threading.Lock()
_noted = set()


class _State:
    def __init__(self):
        self.controller = None
        self.dp_ranks = None
        self.save = None  # (func, ctx, with_ctx)
        self.rename = None  # (func, ctx, with_ctx)
        self.args = None


_state = _State()


def _note(key: str, message: str):
    """Says `message` once per process."""
    with _lock:
        if key in _noted:
            return
        _noted.add(key)
    print(f"ftrun.ttp[{control._rank()}]: {message}", file=sys.stderr, flush=True)


def _controller():
    if _state.controller is None:
        _state.controller = control.connect()
    return _state.controller


def _group() -> str:
    """The replica group's name: the same for every rank of one data-parallel group, short
    whatever the group's size."""
    if not _state.dp_ranks:
        return ""
    ranks = sorted(_state.dp_ranks)
    digest = hashlib.sha1(",".join(map(str, ranks)).encode()).hexdigest()[:10]
    return f"dp{ranks[0]}-n{len(ranks)}-{digest}"


def _root() -> str:
    """Where ftrun's own record of a fault-time save goes (the handlers write the framework's
    checkpoint wherever they like). It must be storage every node sees, as MindIO's save path
    must: FTRUN_TTP_DIR, else a directory under the system's temporary directory."""
    root = os.environ.get("FTRUN_TTP_DIR")
    if root:
        return root
    if int(os.environ.get("GROUP_WORLD_SIZE", "1") or 1) > 1:
        _note("root", "FTRUN_TTP_DIR is not set: fault-time saves of a multi-node job need "
              "it on storage every node sees")
    run = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    return os.path.join(tempfile.gettempdir(), f"ftrun-ttp-{os.getuid()}-{run}")


def _call(handler, *args):
    func, ctx, with_ctx = handler
    return func(*args, ctx) if with_ctx else func(*args)


def _save(step: int, directory: str):
    rank = control._rank()
    save_info = [{"type": 0, "ranks": [rank]}]  # this saver; the agent chose one per group
    _call(_state.save, step, save_info, _state.args)
    with open(os.path.join(directory, "ttp.json"), "w") as f:
        json.dump({"step": step, "rank": rank, "dp_ranks": _state.dp_ranks}, f)


def _complete(step: int):
    if _state.rename is not None:
        _call(_state.rename, step, _state.args)


def _register():
    if _state.controller is None or _state.save is None:
        return
    _state.controller.register_save_handler(_save, _root(), _group(), on_complete=_complete)


def _check_callable(name: str, func):
    if not callable(func):
        raise TypeError(f"{name}: func must be a callable, not {type(func).__name__}")


# ---- the controller: ftrun's agent plays it ----

def ttp_init_controller(rank=None, world_size=None, replica_num=None, enable_local_copy=False,
                        *args, **kwargs):
    _note("controller", "the TTP controller is ftrun's agent: nothing to start in the worker")


def ttp_start_controller(ip=None, port=None, *args, **kwargs):
    ttp_init_controller()


# ---- the processor: this rank ----

def ttp_init_processor(rank, dp_ranks, dp_size=None, world_size=None, replica_num=None,
                       enable_local_copy=False, *args, **kwargs):
    """dp_ranks: the global ranks of this rank's data-parallel group (ranks holding the same
    state); one of them saves the group's state at fault time."""
    ranks = [int(r) for r in dp_ranks]
    if int(rank) not in ranks:
        raise ValueError(f"ttp_init_processor: rank {rank} is not in its data-parallel ranks "
                         f"{ranks}")
    _state.dp_ranks = ranks
    if _state.controller is not None:
        _state.controller.set_replica_group(_group())
        _register()


def ttp_start_processor(master_ip=None, port=None, *args, **kwargs):
    ctrl = _controller()
    if _state.dp_ranks is not None:
        ctrl.set_replica_group(_group())
    _register()


def ttp_register_save_ckpt_handler(func):
    _check_callable("ttp_register_save_ckpt_handler", func)
    _state.save = (func, None, False)
    _register()


def ttp_register_rename_handler(func):
    _check_callable("ttp_register_rename_handler", func)
    _state.rename = (func, None, False)


def ttp_set_ckpt_args(args):
    _state.args = args


def ttp_start_updating_os(backup_step=-1):
    ctrl = _controller()
    ctrl.begin_update(ctrl.step + 1)


def ttp_end_updating_os(step):
    _controller().end_update(int(step))


def ttp_to_persist(func):
    """Decorates the framework's train(): a collective that fails because a peer died keeps
    this rank alive until the agent has had its save, then the exception goes on."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with _controller().guard():
            return func(*args, **kwargs)
    return wrapper


# ---- the current tft_* names ----

def tft_init_controller(rank=None, world_size=None, *args, **kwargs):
    ttp_init_controller()


def tft_start_controller(bind_ip=None, port=None, *args, **kwargs):
    ttp_init_controller()


def tft_init_processor(rank=None, world_size=None, *args, **kwargs):
    pass  # the data-parallel ranks come with tft_set_optimizer_replica


def tft_start_processor(master_ip=None, port=None, *args, **kwargs):
    ttp_start_processor()


def tft_set_optimizer_replica(rank, replica_info):
    """replica_info[0]["rank_list"] is this rank's data-parallel group."""
    if not replica_info or "rank_list" not in replica_info[0]:
        raise ValueError("tft_set_optimizer_replica: replica_info needs a 'rank_list'")
    if len(replica_info) > 1:
        _note("replica", "more than one optimizer type: the first one's ranks are the "
              "replica group")
    ttp_init_processor(rank, replica_info[0]["rank_list"])


def tft_register_save_ckpt_handler(func, ctx=None):
    _check_callable("tft_register_save_ckpt_handler", func)
    _state.save = (func, ctx, True)
    _register()


def tft_register_rename_handler(func, ctx=None):
    _check_callable("tft_register_rename_handler", func)
    _state.rename = (func, ctx, True)


tft_set_step_args = ttp_set_ckpt_args
tft_start_updating_os = ttp_start_updating_os
tft_end_updating_os = ttp_end_updating_os
tft_exception_handler = ttp_to_persist
