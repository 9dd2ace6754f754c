"""What a script learns of its DISK saves after save_checkpoint returned, as DLRover's
checkpointers offer it: waiting until the newest is on storage (wait_latest_checkpoint), and
deleting older checkpoints by a deletion strategy (their deletion_strategy argument, with
DLRover's KeepLatestStepStrategy and KeepStepIntervalStrategy).

Under an ftrun agent a DISK save returns once the state is in the agent's memory; the agent
writes it to storage in the background and records the step in the tracker
(<checkpoint_dir>/dlrover_latest.txt) once the checkpoint is complete. Both read that tracker.
A strategy is given each complete step older than the one the tracker names, once, oldest
first, as DLRover's agent gives it the step before each new one; it never sees the newest.
Thread: the training thread (a strategy's deletions finish on a thread of their own).
"""
import os
import re
import shutil
import sys
import threading
import time

from .. import checkpoint

__all__ = ["CheckpointDeletionStrategy", "KeepLatestStepStrategy", "KeepStepIntervalStrategy"]


def tracked(root: str, tracker: str) -> int:
    """The step the tracker under root records; -1 when there is none (or it is unreadable)."""
    try:
        with open(os.path.join(root, tracker)) as f:
            return int(f.read().strip() or -1)
    except (OSError, ValueError):
        return -1


def wait(root: str, tracker: str, step: int, timeout: float, failed=None) -> bool:
    """Waits until the tracker under root records `step` or a newer one: True, else False
    after `timeout` seconds or as soon as failed() names why the step will not be stored
    (each said on stderr). failed() is asked at most every half second."""
    deadline = time.monotonic() + max(0.0, float(timeout))
    delay, asked = 0.005, 0.0
    while tracked(root, tracker) < step:
        now = time.monotonic()
        if failed is not None and now - asked >= 0.5:
            asked = now
            why = failed()
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
        delay = min(delay * 2, 0.2)
    return True


class CheckpointDeletionStrategy:
    """DLRover's interface: clean_up(step, delete_func) may delete the checkpoint of `step` by
    calling delete_func(<checkpoint_dir>/<step>)."""

    def clean_up(self, step: int, delete_func):
        raise NotImplementedError


class KeepStepIntervalStrategy(CheckpointDeletionStrategy):
    """Keeps the steps that are multiples of keep_interval (and the newest); deletes the
    others once a newer step is stored."""

    def __init__(self, keep_interval: int, checkpoint_dir: str):
        self._keep_interval = keep_interval
        self._checkpoint_dir = checkpoint_dir

    def clean_up(self, step, delete_func):
        if step % self._keep_interval != 0:
            delete_func(os.path.join(self._checkpoint_dir, str(step)))


class KeepLatestStepStrategy(CheckpointDeletionStrategy):
    """Keeps the newest max_to_keep steps (at least one) and deletes older ones."""

    def __init__(self, max_to_keep: int, checkpoint_dir: str):
        self._max_to_keep = max(max_to_keep, 1)
        self._checkpoint_dir = checkpoint_dir
        self._steps = []

    def clean_up(self, step, delete_func):
        self._steps.append(step)
        if len(self._steps) == self._max_to_keep:
            delete_func(os.path.join(self._checkpoint_dir, str(self._steps.pop(0))))


class Stored:
    """A checkpointer's DISK saves after they returned: the step it may wait for (the newest
    that its agent writes in the background) and its deletion strategy (None: keep all)."""

    def __init__(self, root: str, tracker: str, strategy, companions=None):
        self._root, self._tracker = root, tracker
        self._pending = None  # (step, AgentMemory) of the newest DISK save the agent writes
        self._companions = companions
        self._retention = None
        self.use_strategy(strategy)

    def use_strategy(self, strategy):
        """Applies `strategy` from now on, unless one is applied already (or it is None)."""
        if strategy is not None and self._retention is None:
            self._retention = Retention(self._root, self._tracker, strategy, self._companions)

    def written(self):
        """After a DISK save that was complete on storage when it returned."""
        self._pending = None
        self.tick()

    def writing(self, step: int, mem):
        """After a DISK save of `step` that the agent (mem: engine's AgentMemory) writes."""
        self._pending = (step, mem)
        self.tick()

    def tick(self):
        if self._retention is not None:
            self._retention.tick()

    def wait(self, timeout: float) -> bool:
        ok = True
        if self._pending is not None:
            step, mem = self._pending
            root = os.path.abspath(self._root)
            ok = wait(root, self._tracker, step, timeout,
                      lambda: mem.persist_failure(root, step))
            if ok:
                self._pending = None
        if self._retention is not None:
            self._retention.tick()
            self._retention.join()
        return ok


_DELETED = re.compile(r"^\.ftrun-step-\d+\.deleted-")


class Retention:
    """Applies a deletion strategy to the checkpoints under root (one process per job: rank 0).

    delete_func(path), as the strategy calls it: path is <root>/<step> (DLRover's layout), or
    any path that is a link into a stored checkpoint. The stored checkpoint of that step
    (<root>/ftrun-step-<step>/, only when older than the tracker's step) is first renamed
    out of the loaders' sight, then removed with `path` and the links directly under root
    that point into it, and companions(step) (the checkpointer's own paths of that step, e.g.
    Megatron-LM's iter_<N>/ of links), off the training thread. Other paths are removed as DLRover's
    delete_func removes them; root and its parents never are. A failure is a warning."""

    def __init__(self, root: str, tracker: str, strategy, companions=None):
        self._root = os.path.abspath(root)
        self._companions = companions or (lambda step: [])
        self._tracker = tracker
        self._strategy = strategy
        self._given = set()
        self._newest = -1
        self._doomed = []
        self._thread = None
        self._swept = False  # leftovers of deletions an earlier process did not finish

    def tick(self):
        """Gives the strategy the complete steps older than the tracker's it has not seen."""
        self._newest = tracked(self._root, self._tracker)
        if self._newest < 0:
            return
        try:
            names = os.listdir(self._root)
        except OSError:
            return
        steps = sorted(int(m.group(1)) for n in names if (m := checkpoint._FINAL.match(n)))
        if not self._swept:
            self._swept = True
            self._doomed.extend(os.path.join(self._root, n) for n in names if _DELETED.match(n))
        for step in steps:
            if step < self._newest and step not in self._given:
                self._given.add(step)
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
        if self._root == path or self._root.startswith(path.rstrip("/") + "/"):
            raise ValueError(f"refusing to delete {path}: it holds the checkpoint directory")
        step = self._step_of(path)
        if step is not None and step < self._newest:
            stored = checkpoint.final_dir(self._root, step)
            if os.path.isdir(stored):
                doomed = os.path.join(self._root, f".ftrun-step-{step}.deleted-{os.getpid()}-"
                                                  f"{time.monotonic_ns()}")
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
        if os.path.islink(path):
            target = os.path.relpath(os.path.realpath(path), self._root)
            m = checkpoint._FINAL.match(target.split(os.sep)[0])
            return int(m.group(1)) if m else None
        parent, name = os.path.split(path)
        return int(name) if parent == self._root and name.isdigit() else None

    def _unlink_links_into(self, stored: str):
        inside = stored + os.sep
        with os.scandir(self._root) as entries:
            for e in entries:
                if e.is_symlink() and (os.path.normpath(
                        os.path.join(self._root, os.readlink(e.path))) + os.sep).startswith(inside):
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
