"""The control channel's requests as the worker sends them (ftrun-control(7)): one JSON object
per line, with the request's id, and the answers a request waits for.
"""
import json
import os
import threading


class Encoded:
    """A request encoded once by its sender (the flash checkpoint's every-step messages skip
    json.dumps): `text` is a JSON object without its closing brace, to which the controller
    adds the request's "id"; `kind` is its "type"."""
    __slots__ = ("kind", "text")

    def __init__(self, kind: str, text: str):
        self.kind, self.text = kind, text


def _line(msg, rid: int) -> str:
    if isinstance(msg, Encoded):
        return f'{msg.text},"id":{rid}}}\n'
    return json.dumps(dict(msg, id=rid), separators=(",", ":")) + "\n"


class PendingAnswer:
    """A request sent to the agent whose answer has not been claimed yet."""

    def __init__(self, controller, rid: int, kind: str):
        self.slot = [threading.Event(), None, -1]
        self._controller, self._rid, self._kind = controller, rid, kind

    def wait(self, timeout: float = 60.0):
        """(answer, fd) as Controller.request returns them; raises OSError likewise."""
        c = self._controller
        try:
            if not self.slot[0].wait(timeout) or self.slot[1] is None:
                raise OSError(f"no answer from the agent to '{self._kind}'"
                              + (" (the channel closed)" if c._closed else f" in {timeout:g}s"))
            return self.slot[1], self.slot[2]
        finally:
            self._forget()

    def drop(self):
        """Gives the request up: an answer that came (or comes) is discarded, its
        descriptor closed."""
        self._forget()
        if self.slot[0].is_set() and self.slot[2] >= 0:
            os.close(self.slot[2])
            self.slot[2] = -1

    def _forget(self):
        with self._controller._answers_lock:
            self._controller._answers.pop(self._rid, None)
