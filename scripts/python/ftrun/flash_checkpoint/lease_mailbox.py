"""The lease mailbox the agent shares with this worker (launcher/checkpoint/lease_mailbox.h
has its layout): the next save's lease, answered in page 0, and the records of the saves made
under a loan of both buffers, written in page 1. These helpers read and write those pages;
AgentMemory (memory.py) decides when.
"""
import re
import struct

_WORD = struct.Struct("<q")  # the lease mailbox: the id of the request answered
# then granted, step, the buffer's inode and size, whether both buffers are lent, the other
# buffer's inode and size
_ANSWER = struct.Struct("<7q")
_LOAN_AT = 64  # page 0: the id of the loan in force (0: none), cleared when the agent ends it
# A loan's save records (page 1 of the mailbox, lease_mailbox.h): the number of the newest
# save at _RECORDS, the record of save n at _RECORDS + 64 + (n % 2) * _RECORD_BYTES: n, step,
# inode, size, the path's length, then the path.
_RECORDS = 4096
_RECORD_BYTES = 2016
_RECORD = struct.Struct("<5q")
_MAX_PATH = _RECORD_BYTES - _RECORD.size
_CONTROLS = re.compile(rb"[\x00-\x1f\x7f]")  # what the agent refuses in a recorded path


class Loan:
    """Both of this rank's buffers, lent by the agent for saves that tell it nothing: each
    save goes into the buffer not holding the newest one and is recorded in the mailbox's
    second page (lease_mailbox.h)."""
    __slots__ = ("buffers", "inodes", "next", "saves", "key", "id")

    def __init__(self, buffers, inodes, key, loan_id):
        self.buffers, self.inodes, self.key, self.id = buffers, inodes, key, loan_id
        self.next = 0  # the leased buffer first: the other holds the newest snapshot
        self.saves = 0


class MailboxAnswer:
    """The next save's lease, answered in the lease mailbox under request id `rid`: nothing
    to wait for or drop (no message, no descriptor comes). A loan that comes with it is void
    once this process has asked the agent anything about snapshots after it (the agent ended
    the loan then): `epoch` is AgentMemory's count of such requests when it was asked for.
    `key`: the constant fields of the commit sent with the request, which the agent gives the
    saves made under that loan."""
    __slots__ = ("rid", "epoch", "key")

    def __init__(self, rid: int, epoch: int, key):
        self.rid = rid
        self.epoch = epoch
        self.key = key

    def drop(self):
        pass


def recordable(path: str):
    """`path` as a loan's record holds it (bytes), or None when the agent would refuse it
    (not absolute, control characters, too long, not encodable): that save gives the loan up
    and commits with a message instead."""
    if path.isascii() and path.isprintable():  # the usual path, checked without the regex
        return path.encode() if not path or (path[0] == "/" and len(path) <= _MAX_PATH) else None
    try:
        data = path.encode()
    except UnicodeEncodeError:
        return None
    if data and (data[:1] != b"/" or len(data) > _MAX_PATH or _CONTROLS.search(data)):
        return None
    return data


def answer(m, rid: int):
    """The answer in page 0 to request `rid`: (granted, step, inode, size, lent, other inode,
    other size), or None when the mailbox does not hold it (yet)."""
    if _WORD.unpack_from(m, 0)[0] != rid:  # the id is written last: read it first
        return None
    return _ANSWER.unpack_from(m, 8)


def loan_in_force(m) -> int:
    """The id of the loan the agent has not ended (0: none)."""
    return _WORD.unpack_from(m, _LOAN_AT)[0]


def record(m, n: int, step: int, inode: int, size: int, path: bytes):
    """Records save `n` of a loan in page 1; its number last, so that the record is whole."""
    at = _RECORDS + 64 + (n % 2) * _RECORD_BYTES
    _RECORD.pack_into(m, at, n, step, inode, size, len(path))
    m[at + _RECORD.size:at + _RECORD.size + len(path)] = path
    _WORD.pack_into(m, _RECORDS, n)
