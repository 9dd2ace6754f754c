"""The worker end of ftrun's control channel (ftrun-control(7)): progress reports, the
replica group, the save handler, and the fault-time save orders of the agent.

One JSON object per line over the Unix socket in FTRUN_CONTROL_SOCKET. A background thread
reads the agent's orders and runs the save handler; the training thread only sends small
progress lines. The lines' encoding and the pending answers: control_wire.py; the worker's
rank and its log lines: worker_env.py.
"""
import collections
import contextlib
import itertools
import json
import os
import socket
import threading
import time

from . import checkpoint
from .control_wire import Encoded, PendingAnswer, _line  # noqa: F401 (Encoded: re-exported)
from .worker_env import _log, _rank, _register_stack_dump, _world_size  # noqa: F401

PROTOCOL_VERSION = 1

# Messages of collective failures caused by a peer that died (gloo, NCCL, c10d store).
_PEER_FAILURE_HINTS = ("connection closed by peer", "connection reset by peer", "broken pipe",
                       "gloo", "nccl", "socket timeout", "connection refused", "timed out")


def is_peer_failure(exc: BaseException) -> bool:
    """The default test of guard(): a RuntimeError from a collective whose peer went away."""
    return isinstance(exc, RuntimeError) and any(
        h in str(exc).lower() for h in _PEER_FAILURE_HINTS)


class Controller:
    """Connected to this worker's agent. Thread-safe."""

    def __init__(self, path: str):
        self.rank = _rank()
        self.world_size = _world_size()
        self.save_timeout = float(os.environ.get("FTRUN_SAVE_TIMEOUT", "180"))
        self._send_lock = threading.Lock()
        # Held while the optimizer updates the state and while a save reads it.
        self._state_lock = threading.RLock()
        self._updating = 0  # begin_update calls not yet ended (training thread only)
        self._handler = None
        self._memory_saver = None  # see register_memory_save
        self._root = None
        self._on_complete = None
        self._group = ""
        self._step = -1
        self._saves_done = threading.Condition()
        self._saves_finished = 0
        self._closed = False
        self._fds = collections.deque()  # descriptors received, not yet claimed by a line
        self._ids = itertools.count(1)
        self._answers = {}  # request id -> [threading.Event, answer, fd]
        self._answers_lock = threading.Lock()
        # Before the hello: a rank that said it is signalled for its stacks.
        _register_stack_dump()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        self._send({"type": "hello", "version": PROTOCOL_VERSION, "rank": self.rank,
                    "pid": os.getpid()})
        self._reader = threading.Thread(target=self._read, name="ftrun-control", daemon=True)
        self._reader.start()

    # ---- what the training script calls ----

    def register_save_handler(self, handler, root: str, group: str = None, on_complete=None):
        """handler(step, directory) writes this rank's copy of the training state into
        directory; root is where checkpoints live. group: see set_replica_group.
        on_complete(step), if given, runs on the one rank that completes a fault-time
        checkpoint, after every group's part is in place (MindIO's rename step)."""
        self._handler = handler
        self._root = root
        self._on_complete = on_complete
        if group is not None:
            self._group = group
        self._send({"type": "handler", "enabled": True, "group": self._group})

    def register_memory_save(self, saver, group: str = None):
        """The fault-time save goes to the agent's memory instead of files (the flash
        checkpointers register it for the script: ftrun-flash-checkpoint(7)). saver(step)
        stores the state after `step` as a complete memory snapshot, or raises. It runs with
        the state lock held (never in the middle of an update) on a thread of its own: a memory
        save waits for the agent's answers, which the reader thread delivers. A copy is
        complete once committed, so the order to finalize has nothing left to do. Takes
        precedence over a handler registered with register_save_handler. group: see
        set_replica_group."""
        self._memory_saver = saver
        if group is not None:
            self._group = group
        self._send({"type": "handler", "enabled": True, "group": self._group})

    @property
    def group(self) -> str:
        """This rank's replica group ("" : all ranks)."""
        return self._group

    def set_replica_group(self, group: str):
        """Ranks holding identical state share a group name ("" : all ranks, plain DDP)."""
        self._group = group
        self._send({"type": "group", "group": group})

    @contextlib.contextmanager
    def update(self, step: int):
        """Wrap the optimizer update of `step`: the state is inconsistent inside it."""
        self.begin_update(step)
        try:
            yield
        except BaseException:
            self._updating -= 1  # the update broke off: the state stays "updating"
            self._state_lock.release()
            raise
        self.end_update(step)

    def begin_update(self, step: int):
        """The optimizer starts updating toward `step` (pair it with end_update; update()
        does both). A fault-time save waits until the update ends."""
        self._state_lock.acquire()
        self._updating += 1
        self._send({"type": "progress", "step": step, "updating": True})

    def end_update(self, step: int):
        """The state is complete after `step`; releases what begin_update took."""
        self._step = step
        self._send({"type": "progress", "step": step, "updating": False})
        if self._updating > 0:  # an end without a begin only reports
            self._updating -= 1
            self._state_lock.release()

    @property
    def step(self) -> int:
        """The newest step whose update ended (-1: none yet)."""
        return self._step

    def report(self, step: int):
        """The state is complete after `step` (when no update() wraps the update)."""
        self._step = step
        self._send({"type": "progress", "step": step, "updating": False})

    @contextlib.contextmanager
    def guard(self, is_peer_failure=is_peer_failure):
        """Wrap the training loop. When a collective fails because a peer died, stay alive:
        tell the agent, serve its save order, and wait to be stopped instead of crashing."""
        try:
            yield
            self._send({"type": "finished"})  # from now on, silence is not a hang
        except BaseException as e:
            if not is_peer_failure(e) or self._closed:
                raise
            _log(f"collective failed ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
                 "waiting for the agent")
            self._send({"type": "peer_failed", "error": str(e)[:1000]})
            deadline = time.monotonic() + self.save_timeout + 60
            # The agent stops this process (SIGTERM) once the round's save is over.
            while time.monotonic() < deadline and not self._closed:
                time.sleep(0.1)
            raise

    def close(self):
        self._send({"type": "finished"})
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.close()

    @property
    def closed(self) -> bool:
        """True once the agent's channel is gone."""
        return self._closed

    def post(self, msg, before=None) -> int:
        """Sends a request whose answer nobody waits for (it is dropped when it comes), after
        `before` (the same kind of request) in the same write; returns msg's id. Each a dict
        or an Encoded. Raises OSError when the agent's channel is closed."""
        if self._closed:
            raise OSError("the agent's control channel is closed")
        rid = next(self._ids)
        text = _line(msg, rid)
        self._send_lines(text if before is None else _line(before, next(self._ids)) + text)
        if self._closed:
            raise OSError("the agent's control channel is closed")
        return rid

    def request(self, msg: dict, timeout: float = 60.0):
        """Sends a request (an "id" is added) and waits for the agent's answer: (answer, fd),
        fd -1 when the answer carries none (the caller owns it otherwise). Raises OSError
        when the agent is gone or does not answer in time."""
        return self.request_async(msg).wait(timeout)

    def request_async(self, msg, before=None) -> "PendingAnswer":
        """Sends a request now; its answer is waited for later (PendingAnswer.wait), so the
        round trip overlaps with the caller's own work. `before`: a message whose answer
        nobody waits for, sent first in the same write. Each a dict or an Encoded."""
        rid = next(self._ids)
        pending = PendingAnswer(self, rid, msg.kind if isinstance(msg, Encoded)
                                else msg.get("type"))
        with self._answers_lock:
            self._answers[rid] = pending.slot
        if not self._closed:
            if before is None:
                self._send_lines(_line(msg, rid))
            else:
                self._send_lines(_line(before, next(self._ids)) + _line(msg, rid))
        if self._closed:  # nothing will answer: wait() says so at once
            pending.slot[0].set()
        return pending

    # ---- the channel ----

    def _send(self, *msgs: dict):
        self._send_lines("".join(json.dumps(m, separators=(",", ":")) + "\n" for m in msgs))

    def _send_lines(self, text: str):
        line = text.encode()
        with self._send_lock:
            if self._closed:
                return
            try:
                self._sock.sendall(line)
            except OSError:
                self._closed = True  # the agent is gone; training goes on without it

    def _read(self):
        buf = b""
        while True:
            try:
                chunk, fds, _, _ = socket.recv_fds(self._sock, 65536, 4)
            except OSError:
                chunk, fds = b"", []
            self._fds.extend(fds)  # in order: each belongs to the next line saying "fd"
            if not chunk:
                self._closed = True
                with self._answers_lock:
                    for slot in self._answers.values():
                        slot[0].set()
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    self._handle(json.loads(line))
                except Exception as e:  # never let an order take the worker down
                    _log(f"control message failed: {e}")

    def _handle(self, msg: dict):
        kind = msg.get("type")
        fd = self._fds.popleft() if msg.get("fd") is True and self._fds else -1
        with self._answers_lock:
            slot = self._answers.get(msg.get("id")) if kind.startswith("snapshot") else None
            if slot is not None:
                slot[1], slot[2] = msg, fd
                slot[0].set()
                return
        if fd >= 0:
            os.close(fd)  # nobody waits for it any more
        if kind == "save":
            self._save(int(msg["id"]), int(msg["step"]), msg.get("group", ""),
                       bool(msg.get("finalize")), msg.get("tag", str(msg["id"])))
        elif kind == "finalize":
            self._finalize(int(msg["id"]), int(msg["step"]), msg.get("groups", [""]),
                           msg.get("tag", str(msg["id"])))
        elif kind == "error":
            _log(f"the agent closed the control channel: {msg.get('message')}")

    def _save(self, save_id: int, step: int, group: str, finalize: bool, tag: str):
        if self._memory_saver is not None:
            threading.Thread(target=self._answer_save, name="ftrun-fault-save", daemon=True,
                             args=(save_id, step, "the agent's memory", self._memory_saver,
                                   True)).start()
            return

        def to_disk(step):
            if self._handler is None or self._root is None:
                raise RuntimeError("no save handler registered")
            os.makedirs(self._root, exist_ok=True)
            tmp = checkpoint.temp_dir(self._root, step, tag)
            os.makedirs(tmp, exist_ok=True)
            checkpoint.write_part(tmp, group, step, self._handler)
            if finalize:
                checkpoint.finalize(self._root, tmp, step, [group], self.world_size, "fault")
                self._completed(step)
        self._answer_save(save_id, step, "", to_disk)

    def _answer_save(self, save_id: int, step: int, where: str, save, newer_ok=False):
        """Runs save(step) under the state lock and answers the agent's order. newer_ok: a
        state that moved on since the progress the order is based on (its update ended while
        the order was on its way) is saved at its own step instead: a memory snapshot carries
        its step, and the restore takes the newest step every copy holds."""
        ok, error = True, ""
        started = time.monotonic()
        to = f" to {where}" if where else ""
        try:
            with self._state_lock:  # never in the middle of an optimizer update
                if newer_ok and self._step > step:
                    _log(f"fault-time save of step {step}: the state is at step {self._step} "
                         "by now, which is saved instead")
                    step = self._step
                if self._step != step:
                    raise RuntimeError(f"the state is at step {self._step}, not {step}")
                save(step)
            _log(f"fault-time save of step {step}{to} done in {time.monotonic() - started:.2f}s")
        except Exception as e:
            ok, error = False, f"{type(e).__name__}: {e}"
            _log(f"fault-time save of step {step}{to} failed: {error}")
        self._send({"type": "saved", "id": save_id, "ok": ok, "error": error})

    def _completed(self, step: int):
        if self._on_complete is not None:
            self._on_complete(step)

    def _finalize(self, save_id: int, step: int, groups, tag: str):
        ok, error = True, ""
        try:
            if self._memory_saver is None:  # memory copies are complete once committed
                tmp = checkpoint.temp_dir(self._root, step, tag)
                checkpoint.finalize(self._root, tmp, step, groups, self.world_size, "fault")
                self._completed(step)
        except Exception as e:
            ok, error = False, f"{type(e).__name__}: {e}"
        self._send({"type": "saved", "id": save_id, "finalize": True, "ok": ok, "error": error})


class NullController:
    """Not started by ftrun (no FTRUN_CONTROL_SOCKET): every call does nothing, so a script
    written for ftrun still runs under torchrun or alone."""

    rank = _rank()
    world_size = _world_size()

    step = -1
    group = ""

    def register_save_handler(self, handler, root, group=None, on_complete=None):
        pass

    def register_memory_save(self, saver, group=None):
        pass

    def set_replica_group(self, group):
        pass

    @contextlib.contextmanager
    def update(self, step):
        yield

    def begin_update(self, step):
        pass

    def end_update(self, step):
        self.step = step

    def report(self, step):
        pass

    @contextlib.contextmanager
    def guard(self, is_peer_failure=is_peer_failure):
        yield

    def close(self):
        pass


_shared = (None, None, None)  # (pid, socket path, controller): one connection per process
_shared_lock = threading.Lock()


def connect():
    """The controller of this worker: connected to its ftrun agent when there is one. Every
    call in a process returns the same one while it is open (the agent keeps one connection
    per rank; the flash checkpointers share it with the script)."""
    global _shared
    path = os.environ.get("FTRUN_CONTROL_SOCKET")
    if not path:
        return NullController()
    with _shared_lock:
        pid, shared_path, controller = _shared
        if (pid, shared_path) == (os.getpid(), path) and not controller._closed:
            return controller
        try:
            controller = Controller(path)
        except OSError as e:
            _log(f"cannot reach the agent at {path} ({e}); running without it")
            return NullController()
        _shared = (os.getpid(), path, controller)
        return controller
