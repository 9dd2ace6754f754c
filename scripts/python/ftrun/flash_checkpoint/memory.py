"""Memory snapshots kept by the ftrun agent (ftrun-flash-checkpoint(7)).

The agent owns the memory (a memfd per buffer, two buffers per rank): a save asks it for a
buffer ("snapshot_begin"), receives the buffer's descriptor, maps it once and keeps the
mapping (buffers are reused from save to save, so their pages are already there), copies the
state in and commits it ("snapshot_commit"). Until the commit the agent's newest snapshot is
the previous one, so a process killed in the middle of a save loses nothing that was complete.
A restore asks which steps the agent holds ("snapshot_steps") and maps the chosen one
("snapshot_get").

Every-step saves of the one copy ("" group) take their next lease ahead, answered in the
agent's lease mailbox, and from the third save on a loan of both buffers with it: the saves
then alternate between the two and record themselves in the mailbox instead of committing
(no message at all), until a save does not fit the loan or any request about snapshots gives
it back (lease_mailbox.h; ftrun-control(7), snapshot_mailbox).
"""
import json
import mmap
import os
import sys
import threading
import time

from ..checkpoint import CheckpointError
from ..control import Encoded
from . import lease_mailbox, snapshot
from .layout import Layout


# Target fields that change from save to save (the step is in them): not in the commit's
# cached prefix.
_VARYING = ("path", "part_link")


class MemoryRefused(CheckpointError):
    """The agent did not take the snapshot (busy, or it does not fit its budget)."""

    def __init__(self, message: str, busy: bool):
        super().__init__(message)
        self.busy = busy


class AgentMemory:
    """This worker's access to its agent's snapshot memory. Thread-safe enough for one
    checkpointer per process (the requests are answered in order)."""

    def __init__(self, controller):
        self.controller = controller
        self.socket = None  # the control socket's path it was found by (engine.memory_store)
        # st_ino -> mmap of that buffer, kept from save to save (every buffer is a memfd of
        # the agent: one device; the lease mailbox names a buffer by its inode too)
        self._maps = {}
        self._said = set()
        # The next save's lease: (PendingAnswer, or lease_mailbox.MailboxAnswer when it is answered in the
        # mailbox, step, group, bytes).
        self._ahead = None
        self._mailbox = None  # the agent's lease mailbox (lease_mailbox.h), both pages
        self._mailbox_asked = False
        self.mailbox_leases = 0  # saves whose lease came through the mailbox (tests)
        self._layouts = {}  # group -> Layout of its last save (reused while it fits)
        self._commit_key, self._commit_prefix = None, ""
        self._loan = None  # lease_mailbox.Loan while the agent lends this rank both buffers
        self._loan_lock = threading.Lock()
        self._epoch = 0  # requests about snapshots sent (each ends a loan in the agent)
        self.loan_saves = 0  # saves made under a loan (tests)

    # ---- saving ----

    def save(self, step: int, state, group: str, world_size: int, target: dict = None,
             persist: bool = False, wait_seconds: float = 0.0):
        """Stores `state` as the snapshot of `step` of the copy `group`. target: where the
        agent persists it (root, path, name, tracker), now if `persist`, else only when the
        job fails for good. A busy buffer (being written to storage) is waited for up to
        wait_seconds, then MemoryRefused(busy=True); a state over the budget raises
        MemoryRefused naming it."""
        layout, plan, tensors, pickled = self._layouts.get(group), None, None, None
        if layout is not None:
            tensors = layout.refresh(state, step, world_size)
            pickled = None if tensors is None else layout.pickled()
        if pickled is None:  # the first save of this structure, or it changed
            layout = self._new_layout(group, state, step, world_size)
            if layout is not None:
                tensors = layout.refresh(state, step, world_size)
                pickled = layout.pickled()
            if pickled is None:
                layout, plan = None, snapshot.Plan(state, step, world_size)
        size = (layout or plan).bytes
        target = target or {}

        def write(buffer):
            if layout is not None:
                layout.write(buffer, step, pickled, tensors)
            else:
                plan.write(buffer)
        # A lease taken ahead may come with a loan, and is an ordinary lease still when this
        # save does not fit the loan.
        lease = self._lease_taken_ahead(group, size) if self._loan is None else None
        if self._loan is not None and self._save_lent(step, group, world_size, target, persist,
                                                      size, write):
            return
        if lease is None:
            fd, begun = self._lease(step, group, size, wait_seconds)
            try:
                buffer = self._mapping(fd, size)
            finally:
                os.close(fd)
        else:
            buffer, begun = lease
        write(buffer)
        commit = self._commit(step, begun, persist, world_size, size, target)
        # Not waited for: once sent, the agent reads it even if this process dies the next
        # moment (the socket keeps it), and it handles it before any later request of ours.
        # A refusal (which only a broken protocol causes) is logged by the agent.
        if group == "":
            self._take_lease_ahead(step + 1, group, size, commit)
        else:
            self.controller.post(commit)

    def _save_lent(self, step, group, world_size, target, persist, size, write) -> bool:
        """The save under the loan (write(buffer) copies the state in); False (and the loan
        given up, so the caller's request ends it in the agent too) when this save does not
        fit it."""
        with self._loan_lock:
            loan = self._loan
            if loan is None:
                return False
            path = lease_mailbox.recordable(target.get("path", ""))
            buffer = loan.buffers[loan.next]
            m = self._mailbox
            if (group != "" or persist or len(buffer) < size or path is None
                    or "part_link" in target  # a record carries none
                    or self._constant_fields(world_size, target) != loan.key
                    or lease_mailbox.loan_in_force(m) != loan.id):  # the agent ended it
                self._loan = None
                return False
            write(buffer)
            n = loan.saves + 1
            lease_mailbox.record(m, n, step, loan.inodes[loan.next], size, path)
            loan.saves, loan.next = n, 1 - loan.next
            self.loan_saves += 1
            return True

    def request(self, message: dict, timeout: float = 60.0):
        """A request about snapshots to the agent ((answer, fd) as Controller.request), the
        loan given up first: sent under the loan lock, so a loan asked for by a save on
        another thread is either asked before it (and ended by it) or after."""
        with self._loan_lock:
            self._loan = None
            self._epoch += 1
            pending = self.controller.request_async(message)
        return pending.wait(timeout)

    @staticmethod
    def _constant_fields(world_size: int, target: dict):
        fields = target.copy()  # a dict compares at C speed (its order does not matter)
        for varying in _VARYING:
            fields.pop(varying, None)
        return world_size, fields

    def _new_layout(self, group: str, state, step: int, world_size: int):
        self._layouts.pop(group, None)  # its views of the mappings go with it
        layout = Layout.build(state, step, world_size)
        if layout is not None:
            self._layouts[group] = layout
        return layout

    def _commit(self, step: int, begun: int, persist: bool, world_size: int, size: int,
                target: dict):
        """The commit message, encoded from a prefix kept while its constant fields stay."""
        key = (persist, size, self._constant_fields(world_size, target))
        if self._commit_key != key:
            fixed = {"type": "snapshot_commit", "persist": persist, "world_size": world_size,
                     "bytes": size, "answer": False}
            fixed.update((k, v) for k, v in target.items() if k not in _VARYING)
            self._commit_key = key
            self._commit_prefix = json.dumps(fixed, separators=(",", ":"))[:-1]
        text = f'{self._commit_prefix},"step":{step}'
        for varying in _VARYING:
            if varying in target:
                text += f',"{varying}":' + json.dumps(target[varying])
        if begun != step:
            text += f',"begun":{begun}'
        return Encoded("snapshot_commit", text)

    def _lease(self, step: int, group: str, size: int, wait_seconds: float):
        """(fd, step the lease names) of a buffer for a save of `size` bytes, asked for now."""
        deadline = time.monotonic() + wait_seconds
        while True:
            answer, fd = self.request({"type": "snapshot_begin", "step": step,
                                                  "bytes": size, "group": group})
            if answer.get("type") == "snapshot_lease" and fd >= 0:
                return fd, step
            if fd >= 0:
                os.close(fd)
            busy = bool(answer.get("busy"))
            if not busy or time.monotonic() >= deadline:
                raise MemoryRefused(answer.get("error") or f"unexpected answer {answer}", busy)
            time.sleep(0.02)

    # The one copy of a DDP job ("" group) asks for its next buffer as soon as a save is
    # committed, so the next save finds it waiting instead of paying a round trip to the
    # agent. Not for shards: the lease makes the older of the rank's two snapshots
    # unrestorable until the next commit, and shards are restored only at a step every rank
    # still holds, which one rank dying mid-save must leave in place.
    # The answer comes in the agent's lease mailbox when it has one (no wake-up of this
    # process's reader thread, no descriptor passed: most of a small save's cost), else as a
    # message.
    def _take_lease_ahead(self, step: int, group: str, size: int, commit: dict):
        """Sends `commit` and the next save's lease request in one write."""
        self._drop_lease_ahead()
        mailbox = self._lease_mailbox()
        begin = Encoded("snapshot_begin", f'{{"type":"snapshot_begin","step":{step},'
                        f'"bytes":{size},"group":{json.dumps(group)}'
                        + (',"mailbox":true,"loan":true' if mailbox is not None else ""))
        if mailbox is not None:
            with self._loan_lock:  # see request()
                rid = self.controller.post(begin, before=commit)
                answer = lease_mailbox.MailboxAnswer(rid, self._epoch, self._commit_key[2])
                self._ahead = (answer, step, group, size)
            return
        self._ahead = (self.controller.request_async(begin, before=commit), step, group, size)
        if self.controller.closed:  # as post() says it: the commit did not reach the agent
            raise OSError("the agent's control channel is closed")

    def _lease_taken_ahead(self, group: str, size: int):
        """(mapping, step the lease names) of the lease asked for after the last save, when it
        was granted and fits this save; else None (the caller asks again, which abandons the
        lease taken ahead)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        pending, step, lease_group, lease_size = ahead
        if lease_group != group or lease_size < size:
            pending.drop()
            return None
        if isinstance(pending, lease_mailbox.MailboxAnswer):
            return self._mailbox_lease(pending, step, size)
        try:
            answer, fd = pending.wait(60.0)
        except OSError:
            return None
        if answer.get("type") == "snapshot_lease" and fd >= 0:
            try:
                return self._mapping(fd, size), step
            finally:
                os.close(fd)
        if fd >= 0:
            os.close(fd)
        return None

    def _mailbox_lease(self, pending: lease_mailbox.MailboxAnswer, step: int, size: int):
        """The lease of request `pending` as the mailbox holds it: granted, and a buffer this
        process has mapped whole; else None (not answered yet, refused, or a new buffer). A
        loan that comes with it is taken (self._loan) when both buffers are mapped here."""
        answer = lease_mailbox.answer(self._mailbox, pending.rid)
        if answer is None:
            return None
        granted, leased_step, inode, buffer_size, lent, other, other_size = answer
        buffer = self._maps.get(inode)
        if (not granted or leased_step != step or buffer is None or len(buffer) < size
                or len(buffer) != buffer_size):
            return None
        self.mailbox_leases += 1
        lent_buffer = self._maps.get(other) if lent else None
        if lent_buffer is not None and len(lent_buffer) == other_size:
            with self._loan_lock:
                if pending.epoch == self._epoch:  # else the agent ended it already
                    self._loan = lease_mailbox.Loan((buffer, lent_buffer), (inode, other), pending.key,
                                       pending.rid)
        return buffer, step

    def _lease_mailbox(self):
        """The agent's lease mailbox, asked for once (None: an agent without one)."""
        if self._mailbox is None and not self._mailbox_asked:
            self._mailbox_asked = True
            answer, fd = self.request({"type": "snapshot_mailbox"})
            if fd >= 0:
                try:
                    if answer.get("type") == "snapshot_mailbox":
                        # Writable: a loan's saves are recorded in its second page.
                        self._mailbox = mmap.mmap(fd, int(answer["bytes"]), mmap.MAP_SHARED,
                                                  mmap.PROT_READ | mmap.PROT_WRITE)
                finally:
                    os.close(fd)
        return self._mailbox

    def _drop_lease_ahead(self):
        ahead, self._ahead = getattr(self, "_ahead", None), None
        if ahead is not None:
            ahead[0].drop()

    def _mapping(self, fd: int, size: int):
        st = os.fstat(fd)
        key = st.st_ino
        m = self._maps.get(key)
        if m is not None and len(m) >= size:
            return m
        if m is not None:
            for layout in self._layouts.values():
                layout.forget(m)  # its views would keep the mapping open
            self._maps.pop(key).close()
        m = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                      mmap.PROT_READ | mmap.PROT_WRITE)
        self._maps[key] = m
        return m

    # ---- restoring ----

    def steps(self, group: str):
        """The steps of copy `group` complete in the agent's memory, newest first."""
        answer, fd = self.request({"type": "snapshot_steps", "group": group})
        if fd >= 0:
            os.close(fd)
        return [int(s) for s in answer.get("steps", [])]

    def persist_failure(self, root: str, step: int):
        """Why the agent did not write `step` (or a newer one) to the checkpoint directory
        root: its error when its newest failed write there is of that step or newer and none
        succeeded since, else None (also when the agent cannot be asked)."""
        try:
            answer, fd = self.request({"type": "snapshot_steps", "group": "", "root": root},
                                      timeout=2.0)
        except OSError:
            return None
        if fd >= 0:
            os.close(fd)
        failed = answer.get("persist_failed_step")
        if failed is None or int(failed) < step:
            return None
        return f"the agent could not write step {failed}: {answer.get('persist_error')}"

    def load(self, step: int, group: str, world_size: int):
        """The state of `step` of copy `group`. Raises CheckpointError when the agent does not
        hold it or it does not fit this job (world size)."""
        answer, fd = self.request({"type": "snapshot_get", "step": step, "group": group})
        if answer.get("type") != "snapshot" or fd < 0:
            if fd >= 0:
                os.close(fd)
            raise CheckpointError(answer.get("error") or f"unexpected answer {answer}")
        try:
            size = int(answer.get("bytes", 0))
            # Only the header and the pickle are read through the mapping; the tensors are
            # read from the descriptor straight into their memory (snapshot.read).
            m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        except BaseException:
            os.close(fd)
            raise
        try:
            header = snapshot.read_header(m)
            if header.get("step") != step:
                raise CheckpointError(f"the snapshot handed over is of step {header.get('step')},"
                                      f" not {step}")
            saved_by = header.get("world_size")
            if group.startswith("rank-") and saved_by != world_size:
                raise CheckpointError(f"the memory snapshot of step {step} was saved by "
                                      f"{saved_by} ranks and this job has {world_size}: a "
                                      "sharded snapshot restores only at the world size that "
                                      "saved it")
            return snapshot.read(m, header, fd=fd)
        except snapshot.SnapshotError as e:
            raise CheckpointError(f"the memory snapshot of step {step}: {e}") from None
        finally:
            m.close()
            os.close(fd)

    def say(self, key: str, message: str):
        """Prints a message about the memory path once per key."""
        if key not in self._said:
            self._said.add(key)
            print(f"ftrun: {message}", file=sys.stderr, flush=True)
