"""A rank's second connection to its ftrun agent, for snapshot requests only
(ftrun-control(7)): the saving thread sends on it and reads the answers itself, so no other
thread of the worker wakes up (and takes the GIL) for them, as the control channel's reader
thread does for every answer on the first connection. The agent answers its requests in order,
on this connection. Thread-safe (one lock); an answer nobody waits for any more is dropped and
its descriptor closed.
"""
import json
import os
import select
import socket
import threading
import time

from ..control import PROTOCOL_VERSION, _line


class SnapshotChannel:
    def __init__(self, path: str, rank: int, timeout: float = 10.0):
        """Connects and waits for the agent's welcome. Raises OSError when the agent does not
        take a snapshot connection (an older agent closes it with an error)."""
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._lock = threading.Lock()
        self._buf, self._fds = b"", []
        self._next_id = 0
        self._poll = select.poll()
        self._waiting = set()  # ids whose answers are still wanted
        self._early = {}  # id -> (answer, fd) read while waiting for another id
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(path)
            self._poll.register(self._sock, select.POLLIN)
            # An older agent, which has no snapshot connections, closes this one with an error.
            self._sock.sendall(json.dumps({"type": "snapshot_hello", "version": PROTOCOL_VERSION,
                                           "rank": rank, "pid": os.getpid()}).encode() + b"\n")
            welcome, fd = self._next(time.monotonic() + timeout)
            if fd >= 0:
                os.close(fd)
            if welcome.get("type") != "welcome":
                raise OSError(f"the agent refused a snapshot connection: {welcome}")
            # Blocking from now on (a socket with a timeout is non-blocking underneath, and
            # its sends were seen to take milliseconds here); reads wait with poll().
            self._sock.settimeout(None)
        except BaseException:
            self.close()
            raise

    def send(self, msg, before=None, answered=True):
        """Sends a request (a dict or an Encoded; `before`: one sent first in the same write,
        whose answer nobody waits for). Its Pending answer, or None when not `answered` (an
        answer that comes is dropped)."""
        with self._lock:
            self._next_id += 2
            rid = self._next_id
            text = _line(msg, rid)
            if before is not None:
                text = _line(before, rid - 1) + text
            if answered:
                self._waiting.add(rid)
            try:
                self._sock.sendall(text.encode())
            except OSError:
                self._waiting.discard(rid)
                raise
            return Pending(self, rid) if answered else None

    def _wait(self, rid: int, timeout: float = 60.0):
        """(answer, fd) of request `rid`, fd -1 when it carries none (the caller owns it).
        Raises OSError when the agent is gone or does not answer in time."""
        deadline = time.monotonic() + timeout
        with self._lock:
            try:
                while rid not in self._early:
                    answer, fd = self._next(deadline)
                    got = answer.get("id")
                    if got in self._waiting:
                        self._early[got] = (answer, fd)
                    elif fd >= 0:
                        os.close(fd)
                return self._early.pop(rid)
            finally:
                self._waiting.discard(rid)

    def request(self, msg, timeout: float = 60.0):
        """Sends a request and waits for its answer: (answer, fd) as wait() returns them."""
        return self.send(msg).wait(timeout)

    def _drop(self, rid: int):
        """Gives request `rid` up: its answer is discarded, its descriptor closed."""
        with self._lock:
            self._waiting.discard(rid)
            _, fd = self._early.pop(rid, (None, -1))
            if fd >= 0:
                os.close(fd)

    def close(self):
        for _, fd in self._early.values():
            if fd >= 0:
                os.close(fd)
        for fd in self._fds:
            os.close(fd)
        self._early, self._fds = {}, []
        self._sock.close()

    def _next(self, deadline: float):
        """The next line from the agent, with the descriptor it says it carries (or -1)."""
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self._poll.poll(left * 1000):
                raise OSError("no answer from the agent on the snapshot connection in time")
            chunk, fds, _, _ = socket.recv_fds(self._sock, 65536, 4)
            self._fds.extend(fds)  # in order: each belongs to the next line saying "fd"
            if not chunk:
                raise OSError("the agent closed the snapshot connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        answer = json.loads(line)
        if answer.get("type") == "error":
            raise OSError(f"the agent closed the snapshot connection: {answer.get('message')}")
        fd = self._fds.pop(0) if answer.get("fd") is True and self._fds else -1
        return answer, fd


class Pending:
    """A request sent on a SnapshotChannel whose answer has not been claimed yet (as the
    control channel's PendingAnswer)."""
    __slots__ = ("_channel", "_rid")

    def __init__(self, channel: SnapshotChannel, rid: int):
        self._channel, self._rid = channel, rid

    def wait(self, timeout: float = 60.0):
        return self._channel._wait(self._rid, timeout)

    def drop(self):
        self._channel._drop(self._rid)
