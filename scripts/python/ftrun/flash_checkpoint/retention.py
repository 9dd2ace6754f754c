"""What a script learns of its DISK saves after save_checkpoint returned, as DLRover's
checkpointers offer it: waiting until the newest is on storage (wait_latest_checkpoint), and
deleting older checkpoints by a deletion strategy (their deletion_strategy argument, with
DLRover's KeepLatestStepStrategy and KeepStepIntervalStrategy: storage.py's, where DLRover
has them).

Under an ftrun agent a DISK save returns once the state is in the agent's memory; the agent
writes it to storage in the background: the step's checkpoint <checkpoint_dir>/ftrun-step-<S>/
appears whole (renamed into place), then the tracker (dlrover_latest.txt) names it.

A strategy is given steps as DLRover's agent gives them: each time one of this checkpointer's
DISK saves is stored, the step that was the newest before it (first the newest stored step
found when the checkpointer was made, then this run's, in the order they were saved), once;
never the newest, never one being written, never older history. DLRover takes the step before
each commit from its tracker; ftrun's is lowered only by a new run's first stored step
(storage.py), so this run's stored directories are what counts. Thread: the training thread
(a strategy's deletions finish on a thread of their own).
"""
import os
import re
import shutil
import sys
import threading
import time

from .. import checkpoint
from .storage import DELETED, RUN_STARTED, _steps, stored_in_this_run, tracked


def is_stored(root: str, tracker: str, step: int) -> bool:
    """The checkpoint of `step` is complete under root and this run's tracker names it or a
    newer one (a tracker an earlier run left with higher steps, or its step directory, is not
    enough: this run's first stored step replaces them, storage.py)."""
    path = os.path.join(root, tracker)
    return (tracked(root, tracker) >= step and not checkpoint.written_before(path, RUN_STARTED)
            and os.path.isdir(checkpoint.final_dir(root, step)))


def wait(root: str, tracker: str, step: int, timeout: float, failed=None) -> bool:
    """Waits until `step` is stored under root (is_stored): True, else False after `timeout`
    seconds or as soon as failed() names why it will not be (each said on stderr). Polls the
    tracker every 20 ms at most; failed() is asked at most every half second."""
    deadline = time.monotonic() + max(0.0, float(timeout))
    delay, asked = 0.005, 0.0
    while not is_stored(root, tracker, step):
        now = time.monotonic()
        if failed is not None and now - asked >= 0.5:
            why = failed()
            asked = time.monotonic()
            if why:
                print(f"ftrun: step {step} is not on storage: {why}", file=sys.stderr,
                      flush=True)
                return False
        if now >= deadline:
            print(f"ftrun: step {step} is not on storage after {timeout} s (the tracker "
                  f"{os.path.join(root, tracker)} names step {tracked(root, tracker)})",
                  file=sys.stderr, flush=True)
            return False
        time.sleep(min(delay, max(0.0, deadline - now)))
        delay = min(delay * 2, 0.02)  # a read and stats: a late wake-up costs more than polling
    return True


class Stored:
    """A checkpointer's DISK saves after they returned: the step it may wait for (the newest
    that its agent writes in the background) and its deletion strategy (None: keep all).
    root is resolved once, here: a later chdir of the script changes nothing."""

    def __init__(self, root: str, tracker: str, strategy, companions=None):
        self._root, self._tracker = os.path.abspath(root), tracker
        self._pending = None  # (step, AgentMemory) of the newest DISK save the agent writes
        self._companions = companions
        self._retention = None
        self.use_strategy(strategy)

    def use_strategy(self, strategy):
        """Applies `strategy` from now on, unless one is applied already (or it is None)."""
        if strategy is not None and self._retention is None:
            self._retention = Retention(self._root, strategy, self._companions)

    def written(self, step: int):
        """After a DISK save of `step` that was complete on storage when it returned."""
        self._pending = None
        self._saved(step)

    def writing(self, step: int, mem):
        """After a DISK save of `step` that the agent (mem: engine's AgentMemory) writes."""
        self._pending = (step, mem)
        self._saved(step)

    def _saved(self, step: int):
        if self._retention is not None:
            self._retention.saved(step)
            self._retention.tick()

    def wait(self, timeout: float) -> bool:
        ok = True
        if self._pending is not None:
            step, mem = self._pending
            ok = wait(self._root, self._tracker, step, timeout,
                      lambda: mem.persist_failure(self._root, step))
            if ok:
                self._pending = None
        if self._retention is not None:
            self._retention.tick()
            self._retention.join()
        return ok


_STEP_NAMES = (re.compile(r"^(\d+)$"), checkpoint._FINAL,
               re.compile(r"^iter_(\d{7})$"))  # DLRover's <step>, ftrun's, Megatron-LM's


class Retention:
    """Applies a deletion strategy to the checkpoints under root (one process per job: rank 0).

    delete_func(path), as the strategy calls it: path names a step under root (<root>/<step>,
    DLRover's layout; ftrun-step-<step>; Megatron-LM's iter_<7 digits>) or is a link into a
    stored checkpoint. That step's checkpoint (<root>/ftrun-step-<step>/) is first renamed out
    of the loaders' sight, then removed with `path`, the links directly under root that point
    into it and companions(step) (the checkpointer's own paths of the step, e.g. Megatron-LM's
    iter_<N>/ of links), off the training thread. The newest step and steps being written are
    refused; other paths are removed as DLRover's delete_func removes them; root and the
    directories above it never are (compared resolved). A refusal or failure is a warning."""

    def __init__(self, root: str, strategy, companions=None):
        self._root = os.path.realpath(root)
        self._strategy = strategy
        self._companions = companions or (lambda step: [])
        before = _steps(self._root)
        self._chain = before[:1]  # each the newest in turn
        self._given = 0
        self._mine = []  # this run's DISK saves not seen stored yet, in order
        self._doomed = []
        self._thread = None
        self._swept = False  # leftovers of deletions an earlier process did not finish

    def saved(self, step: int):
        self._mine.append(int(step))

    def tick(self):
        """Gives the strategy each step that stopped being the newest since the last tick."""
        # This run's: an earlier run's directory of the same step is not this save stored.
        stored = set(stored_in_this_run(self._root, _steps(self._root)))
        # Saves are written in order: one not stored before a later one that is has failed.
        last = max((i for i, s in enumerate(self._mine) if s in stored), default=-1)
        for step in self._mine[:last + 1]:
            if step in stored and (not self._chain or self._chain[-1] != step):
                self._chain.append(step)
        del self._mine[:last + 1]
        if not self._swept:
            self._swept = True
            try:
                names = os.listdir(self._root)
            except OSError:
                names = []
            self._doomed.extend(os.path.join(self._root, n) for n in names if DELETED.match(n))
        while self._given < len(self._chain) - 1:
            step = self._chain[self._given]
            self._given += 1
            try:
                self._strategy.clean_up(step, self._delete)
            except Exception as e:  # noqa: BLE001 (the script's strategy: training goes on)
                print(f"ftrun: the deletion strategy failed on step {step}: {e!r}",
                      file=sys.stderr, flush=True)
        self._start()

    def join(self):
        """Waits until every deletion asked for so far is done."""
        while self._thread is not None:
            self._thread.join()
            self._thread = None
            self._start()

    def _delete(self, path):
        path = os.path.abspath(str(path))
        real = os.path.realpath(path)
        if not os.path.islink(path) and (real == self._root or
                                         self._root.startswith(real.rstrip("/") + "/")):
            raise ValueError(f"refusing to delete {path}: it holds the checkpoint directory")
        step = self._step_of(path)
        if step is not None:
            if step == self._chain[-1] or step in self._mine:
                raise ValueError(f"refusing to delete step {step}: it is the newest or still "
                                 "being written")
            stored = checkpoint.final_dir(self._root, step)
            if os.path.isdir(stored):
                doomed = checkpoint.aside_dir(self._root, step, "deleted")
                os.rename(stored, doomed)  # no loader sees a half-deleted checkpoint
                self._doomed.append(doomed)
                self._unlink_links_into(stored)
            for companion in self._companions(step):
                self._remove(companion)
        self._remove(path)

    def _remove(self, path: str):
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            self._doomed.append(path)

    def _step_of(self, path: str):
        """The step `path` names under root, or None."""
        if os.path.islink(path):
            first = os.path.relpath(os.path.realpath(path), self._root).split(os.sep)[0]
            m = checkpoint._FINAL.match(first)
            if m:
                return int(m.group(1))
        parent, name = os.path.split(path)
        if os.path.realpath(parent) != self._root:
            return None
        for pattern in _STEP_NAMES:
            if m := pattern.match(name):
                return int(m.group(1))
        return None

    def _unlink_links_into(self, stored: str):
        inside = stored + os.sep
        with os.scandir(self._root) as entries:
            for e in entries:
                if e.is_symlink() and (os.path.realpath(os.path.join(
                        self._root, os.readlink(e.path))) + os.sep).startswith(inside):
                    os.unlink(e.path)

    def _start(self):
        if not self._doomed or (self._thread is not None and self._thread.is_alive()):
            return
        doomed, self._doomed = self._doomed, []

        def remove():
            for path in doomed:
                shutil.rmtree(path, ignore_errors=True)
        self._thread = threading.Thread(target=remove, name="ftrun-checkpoint-deletion",
                                        daemon=True)
        self._thread.start()
