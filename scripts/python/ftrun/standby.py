"""A standby interpreter of ftrun --warm-restart (ftrun(1), "Warm restart").

The agent starts it as `python [the worker's interpreter flags] standby.py --preload MODULES
(--script PATH | --module NAME) -- ARGS...` with the job's environment minus the per-attempt
variables, its stdin a Unix socket to the agent and its stdout/stderr /dev/null. It imports
the preloaded modules in a thread of lower CPU priority, says "ready", and waits. At the hand-over
the agent sends the attempt's argv, environment and working directory, and the worker's
stdin/stdout/stderr (SCM_RIGHTS); the standby says "ack", puts the process back as a fresh
`python script.py args` / `python -m module args` would have it, and runs the script in the
real __main__ module.

Wire (agent -> standby): b"FTRUNHO1", a little-endian uint32 body length, the body: NUL-
terminated fields  cwd, argc, argv..., envc, "KEY=VALUE"...; three descriptors ride on the
first byte. Standby -> agent: one line each, "ready", "broken <reason> <detail>", "ack".

Standard library only; nothing here may touch per-rank state before the hand-over.
"""
_FRESH_MAIN = dict(globals())  # __main__ as the interpreter made it, before anything runs

import os  # noqa: E402  (after the snapshot above)
import signal  # noqa: E402
import sys  # noqa: E402

_FRESH_SIGNALS = {}
for _s in signal.valid_signals():
    try:
        _FRESH_SIGNALS[_s] = signal.getsignal(_s)
    except (OSError, ValueError):
        pass
del _s

_MAGIC = b"FTRUNHO1"
_MAX_BODY = 64 << 20  # the agent's own message; bounded anyway
_EXIT_BROKEN = 3


def _send(sock, line):
    try:
        sock.sendall(line.encode("utf-8", "backslashreplace")[:4000] + b"\n")
    except OSError:
        pass


def _broken(sock, reason, detail):
    detail = " ".join(str(detail).split())  # one line
    _send(sock, f"broken {reason} {detail}")
    os._exit(_EXIT_BROKEN)


def _parse_args(argv):
    preload, nice, target, args = [], 10, None, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            args = argv[i + 1:]
            break
        if a in ("--preload", "--nice", "--script", "--module") and i + 1 < len(argv):
            v = argv[i + 1]
            if a == "--preload":
                preload = [m for m in v.split(",") if m]
            elif a == "--nice":
                nice = int(v)
            else:
                target = (a[2:], v)
            i += 2
            continue
        raise SystemExit(f"standby.py: unexpected argument {a!r}")
    if target is None:
        raise SystemExit("standby.py: --script or --module is required")
    return preload, nice, target, args


def _path0(kind, target):
    """sys.path[0] as CPython computes it for `python script.py` / `python -m module`."""
    if kind == "module":
        return os.getcwd()
    return os.path.dirname(os.path.realpath(target))


def _preload(modules, nice):
    """Imports `modules` in a thread whose CPU priority alone is lowered (a process cannot
    raise its own priority back unprivileged, so the main thread, the future worker, keeps it).
    Returns None or (reason, detail)."""
    import threading
    import traceback
    failure = []

    def run():
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid,
                           min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
        except OSError:
            pass
        for name in modules:
            try:
                __import__(name)
            except BaseException as e:  # noqa: B902  a SystemExit at import is a failure too
                last = traceback.format_exception_only(type(e), e)[-1].strip()
                failure.append(("preload_failed", f"module={name} error={last}"))
                return

    t = threading.Thread(target=run, name="ftrun-preload")
    t.start()
    t.join()
    if failure:
        return failure[0]
    torch = sys.modules.get("torch")
    if torch is not None:
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and getattr(cuda, "is_initialized", lambda: False)():
            return ("preload_touched_gpu", "a preloaded module initialised CUDA")
    return None


def _recv_exact(sock, n, fds):
    import array
    import socket
    data = bytearray()
    while len(data) < n:
        want = n - len(data)
        if fds is not None and not fds:
            msg, anc, _, _ = sock.recvmsg(want, socket.CMSG_SPACE(3 * 4))
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    a = array.array("i")
                    a.frombytes(payload[:len(payload) - len(payload) % a.itemsize])
                    fds.extend(a)
        else:
            msg = sock.recv(want)
        if not msg:
            return None
        data += msg
    return bytes(data)


def _receive(sock):
    """The hand-over: (cwd, argv, env, fds) or None when the agent closed the socket."""
    fds = []
    head = _recv_exact(sock, len(_MAGIC) + 4, fds)
    if head is None:
        return None
    if head[:len(_MAGIC)] != _MAGIC:
        _broken(sock, "bad_handover", "wrong magic")
    size = int.from_bytes(head[len(_MAGIC):], "little")
    if size > _MAX_BODY:
        _broken(sock, "bad_handover", f"body of {size} bytes")
    body = _recv_exact(sock, size, None)
    if body is None or len(fds) != 3:
        _broken(sock, "bad_handover", f"truncated, fds={len(fds)}")
    fields = body.split(b"\0")[:-1]
    try:
        cwd = fields[0]
        argc = int(fields[1])
        argv = fields[2:2 + argc]
        envc = int(fields[2 + argc])
        env = fields[3 + argc:3 + argc + envc]
    except (IndexError, ValueError):
        _broken(sock, "bad_handover", "malformed body")
    if len(argv) != argc or len(env) != envc or argc < 1:
        _broken(sock, "bad_handover", "malformed body")
    return cwd, [os.fsdecode(a) for a in argv], env, fds


def _stdio(fd, name, old, buffered_stdio):
    """A new sys.stdin/stdout/stderr over `fd`, made as CPython's create_stdio makes it (line
    buffering depends on what the descriptor is now)."""
    import io
    write = fd != 0
    raw_only = write and not buffered_stdio  # stdin is always buffered
    buf = io.open(fd, "wb" if write else "rb", buffering=0 if raw_only else -1, closefd=False)
    raw = buf if raw_only else buf.raw
    raw.name = name
    line_buffering = buffered_stdio and (raw.isatty() or fd == 2)
    text = io.TextIOWrapper(buf, encoding=old.encoding, errors=old.errors, newline="\n",
                            line_buffering=line_buffering, write_through=not buffered_stdio)
    text.mode = "w" if write else "r"
    return text


def _take_stdio(fds):
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    for target, fd in enumerate(fds):
        os.dup2(fd, target)  # inheritable, as the worker's stdio is
        os.close(fd)
    old = (sys.__stdin__, sys.__stdout__, sys.__stderr__)
    # -u or PYTHONUNBUFFERED (sys.flags does not tell): the interpreter made stdout write-through.
    buffered = not old[1].write_through
    sys.stdin = sys.__stdin__ = _stdio(0, "<stdin>", old[0], buffered)
    sys.stdout = sys.__stdout__ = _stdio(1, "<stdout>", old[1], buffered)
    sys.stderr = sys.__stderr__ = _stdio(2, "<stderr>", old[2], buffered)


def _as_the_stack_hook_leaves_it():
    """What the agent's sitecustomize (merged stacks, launcher/diagnostics/python_stack_hook)
    does at a cold start, done again for the attempt's environment, which this interpreter's
    start did not see: the stack dump goes to this attempt's directory, and the script sees
    its own PYTHONPATH."""
    try:
        import faulthandler
        sig = int(os.environ.get("FTRUN_STACK_SIGNAL", "0"))
        where = os.environ.get("FTRUN_STACK_DIR", "")
        if sig > 0 and where and os.path.isdir(where):
            dump = open(os.path.join(where, f"stack-{os.getpid()}.txt"), "a")
            faulthandler.register(sig, file=dump, all_threads=True)
    except Exception:  # noqa: BLE001 - no dump is better than a worker that does not start
        pass
    original = os.environ.pop("FTRUN_ORIGINAL_PYTHONPATH", None)
    if original is not None:
        if original:
            os.environ["PYTHONPATH"] = original
        else:
            os.environ.pop("PYTHONPATH", None)


def _restore_signals():
    for s, handler in _FRESH_SIGNALS.items():
        try:
            if signal.getsignal(s) != handler:
                signal.signal(s, handler)
        except (OSError, ValueError, TypeError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass


def _set_cmdline(argv):
    """/proc/self/cmdline as a cold start's (ps, pkill -f, monitoring see the worker): the
    argument area is rewritten in place. It always fits: the standby was started with the
    worker's script and arguments after its own. Best effort."""
    try:
        import ctypes
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
        new = b"".join(os.fsencode(a) + b"\0" for a in argv)
        if start <= 0 or len(new) > end - start:
            return
        ctypes.memmove(start, new + b"\0" * (end - start - len(new)), end - start)
    except (OSError, ValueError, IndexError, ImportError):
        pass


def _strip_traceback(tb):
    """The traceback without this file's frames (a cold start has none of them)."""
    here = os.path.realpath(__file__)
    while tb is not None and os.path.realpath(tb.tb_frame.f_code.co_filename) == here:
        tb = tb.tb_next
    return tb


def _run(main_dict, argv):
    """Runs the worker in __main__ as pymain would; returns only when it ended normally."""
    import runpy
    if argv[0] == "-m":
        sys.argv = ["-m"] + argv[2:]
        return runpy._run_module_as_main(argv[1], alter_argv=True)
    filename = os.path.join(os.getcwd(), argv[0]) if not os.path.isabs(argv[0]) else argv[0]
    try:
        with open(filename, "rb") as f:
            source = f.read()
    except OSError as e:
        print(f"{sys.executable}: can't open file {filename!r}: [Errno {e.errno}] {e.strerror}",
              file=sys.stderr)
        raise SystemExit(2)
    from importlib.machinery import SourceFileLoader
    main_dict["__file__"] = filename
    main_dict["__cached__"] = None
    main_dict["__loader__"] = SourceFileLoader("__main__", filename)
    try:
        exec(compile(source, filename, "exec"), main_dict)
    finally:
        main_dict.pop("__file__", None)
        main_dict.pop("__cached__", None)


def main(sock_fd, main_dict):
    import socket
    preload, nice, (kind, target), args = _parse_args(sys.argv[1:])
    sock = socket.socket(fileno=sock_fd)
    safe_path = getattr(sys.flags, "safe_path", False)
    if not safe_path:
        sys.path[0] = _path0(kind, target)
    sys.argv = ([target] if kind == "script" else ["-m"]) + args
    failure = _preload(preload, nice)
    if failure:
        _broken(sock, *failure)
    _send(sock, "ready")

    handover = _receive(sock)
    if handover is None:
        os._exit(0)  # retired by the agent
    cwd, argv, env, fds = handover
    _send(sock, "ack")
    sock.close()

    _take_stdio(fds)
    os.chdir(cwd)
    os.environb.clear()
    os.environb.update(e.split(b"=", 1) for e in env if b"=" in e)
    _as_the_stack_hook_leaves_it()
    _restore_signals()
    kind = "module" if argv[0] == "-m" else "script"
    if not safe_path:
        sys.path[0] = _path0(kind, argv[1] if kind == "module" else argv[0])
    sys.argv = list(argv)
    orig = getattr(sys, "orig_argv", None)
    if orig and __file__ in orig:  # the interpreter and its flags, then the worker's argv
        sys.orig_argv = orig[:orig.index(__file__)] + list(argv)
        _set_cmdline(sys.orig_argv)
    sys.modules.pop("_ftrun_standby", None)
    main_dict.clear()
    main_dict.update(_FRESH_MAIN)
    for k in ("__file__", "__cached__"):
        main_dict.pop(k, None)
    main_dict["__loader__"] = _FRESH_MAIN.get("__loader__")

    try:
        _run(main_dict, argv)
    except SystemExit:
        raise  # the interpreter handles it exactly as for a cold start
    except KeyboardInterrupt:
        raise  # so that the interpreter dies of SIGINT, as it does for a cold start
    except BaseException as e:  # noqa: B902
        tb = _strip_traceback(e.__traceback__)
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        if hasattr(sys, "last_exc"):
            sys.last_exc = e
        e.__traceback__ = tb
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        sys.excepthook(type(e), e, tb)
        raise SystemExit(1)  # after the report, exit 1 (the interpreter's code for it)


if __name__ == "__main__":
    # The socket is stdin; the worker gets the real one at the hand-over.
    _fd = os.dup(0)
    _null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(_null, 0)
    os.close(_null)
    # This file again as a module of its own, so that the code survives __main__ being
    # emptied for the worker.
    import importlib.util as _util
    _spec = _util.spec_from_file_location("_ftrun_standby", __file__)
    _mod = _util.module_from_spec(_spec)
    sys.modules["_ftrun_standby"] = _mod
    _spec.loader.exec_module(_mod)
    _mod._FRESH_MAIN, _mod._FRESH_SIGNALS = _FRESH_MAIN, _FRESH_SIGNALS
    _mod.main(_fd, sys.modules["__main__"].__dict__)
