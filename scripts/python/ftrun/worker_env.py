"""Who this worker is, from the launcher's environment (torchrun's names, then msrun's), and
its diagnostics: lines on stderr naming its rank, and the stack dump the agent asks for.
"""
import faulthandler
import os
import sys


def _env_int(names, default):
    """The first of the variables that is set: torchrun's name, then msrun's."""
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return int(value)
    return default


def _rank():
    return _env_int(("RANK", "RANK_ID"), 0)


def _world_size():
    return _env_int(("WORLD_SIZE", "RANK_SIZE"), 1)


def _log(msg: str):
    print(f"ftrun[{_rank()}]: {msg}", file=sys.stderr, flush=True)


def _register_stack_dump():
    """The agent asks for every thread's stack with FTRUN_STACK_SIGNAL: faulthandler writes
    it to this process's own file in FTRUN_STACK_DIR (the agent merges the ranks' files), so
    the dumps of several ranks never interleave. The agent's sitecustomize hook registers the
    same file at start; registering again is harmless. Without FTRUN_STACK_DIR: stderr."""
    sig = os.environ.get("FTRUN_STACK_SIGNAL")
    if not sig:
        return
    where = os.environ.get("FTRUN_STACK_DIR")
    try:
        if where and os.path.isdir(where):
            dump = open(os.path.join(where, f"stack-{os.getpid()}.txt"), "a")
            faulthandler.register(int(sig), file=dump, all_threads=True)
            return
        faulthandler.register(int(sig), file=sys.stderr, all_threads=True)
    except (OSError, ValueError, AttributeError):  # stderr is not a file (redirected)
        faulthandler.register(int(sig), file=sys.__stderr__, all_threads=True)
