"""The byte layout of a memory snapshot (ftrun-flash-checkpoint(7)) in the agent's memory (a
file the agent persists from it is torch.save's format, launcher/checkpoint/torch_file.h,
unless it cannot be converted: then this layout too):

    b"FTRUNSN1"  u64 little-endian header length  header (JSON)
    then, each at a 64-byte boundary: the pickled state with its tensors taken out, and the
    raw bytes of every tensor (contiguous, native byte order).

The header: {"format": 1, "step": S, "world_size": W, "bytes": total,
"pickle": [offset, length], "tensors": [[offset, dtype, shape], ...]}; a state of several
files (Files) has "files": [[name, offset, length], ...] instead of "pickle", one pickle per
file, their persistent ids indexing the one list of tensors. A state is any
picklable object; its torch.Tensor values (at any depth) are stored as raw bytes and come back
as contiguous CPU tensors. Tensors on a GPU are copied to pinned host memory on a side stream
of their device first, once the device's current stream has produced them (tested with a
stand-in of torch.cuda only: no GPU where ftrun is tested).
"""
import ctypes
import io
import json
import os
import pickle
import struct
import warnings
from concurrent.futures import ThreadPoolExecutor

import torch

MAGIC = b"FTRUNSN1"
_ALIGN = 64
_PREFIX = len(MAGIC) + 8


_BIG = 4 << 20  # tensors from this size on are copied by the pool, into huge pages
_pool = None
_libc = None


def _copies(jobs):
    """Runs the copy jobs ((bytes, callable) pairs): the large ones on a few threads (torch's
    copy_ releases the GIL, and one core does not saturate memory bandwidth)."""
    global _pool
    jobs = list(jobs)
    small = [job for size, job in jobs if size < _BIG]
    jobs = [job for size, job in jobs if size >= _BIG]
    for job in small:  # not worth a thread's wake-up
        job()
    if len(jobs) < 2:
        for job in jobs:
            job()
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)),
                                   thread_name_prefix="ftrun-snapshot")
    for future in [_pool.submit(job) for job in jobs]:
        future.result()


def _fresh(count: int, dtype) -> torch.Tensor:
    """An uninitialised tensor; a large one asks for transparent huge pages (MADV_HUGEPAGE),
    which halves the cost of touching fresh memory for the first time."""
    global _libc
    t = torch.empty(count, dtype=dtype)
    n = count * t.element_size()
    if n >= _BIG:
        try:
            _libc = _libc or ctypes.CDLL(None, use_errno=True)
            start = (t.data_ptr() + 4095) & ~4095
            _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(n - (start - t.data_ptr())),
                          14)  # MADV_HUGEPAGE
        except (OSError, AttributeError):
            pass
    return t


class SnapshotError(ValueError):
    """Bytes that are not a complete snapshot."""


_MAX_FILES = 64  # torch_file.cc's kMaxFiles


class Files(dict):
    """A state of several files: file name -> that file's state. A snapshot pickles each on
    its own, and the agent stores each as its own file of that name, in torch.save's format
    (e.g. Megatron-LM's model_optim_rng.pt and distrib_optim.pt of one rank); a checkpoint's
    part of several files loads back as a Files, from memory or storage. Two to 64 files,
    named plainly (printable ASCII, no '/', not '.' or '..', not starting with PART.json);
    only ShardedCheckpointer's shards may be one."""

    def check(self):
        for name in self:
            if (not isinstance(name, str) or not name or name in (".", "..")
                    or name.startswith("PART.json") or "/" in name
                    or not all(" " <= c <= "~" for c in name)):
                raise ValueError(f"{name!r} is not a plain file name")
        if not 2 <= len(self) <= _MAX_FILES:
            raise ValueError(f"a state of {len(self)} files: two to {_MAX_FILES} (one file is "
                             "its state itself)")


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class _Pickler(pickle.Pickler):
    def __init__(self, file, tensors):
        # Protocol 3, as layout.py's: the agent writes the pickle into torch.save's file as it
        # is (launcher/checkpoint/torch_file.h), and torch.load's weights_only unpickler (the
        # default from torch 2.6) reads none of protocol 4's opcodes (MEMOIZE, STACK_GLOBAL).
        super().__init__(file, protocol=3)
        self._tensors = tensors

    def persistent_id(self, obj):
        if isinstance(obj, torch.Tensor) and raw(obj):
            self._tensors.append(obj)
            return len(self._tensors) - 1
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, tensors):
        super().__init__(file)
        self._tensors = tensors

    def persistent_load(self, pid):
        return self._tensors[pid]


def raw(t: torch.Tensor) -> bool:
    """Whether a snapshot keeps `t` as its raw bytes: a dense tensor of plain numbers. Sparse
    and quantized tensors have no such bytes (their values, indices, scales are separate
    tensors): they go into the pickle, as torch.save keeps them."""
    return t.layout is torch.strided and not t.is_quantized


def _host(t: torch.Tensor, side_streams: dict) -> torch.Tensor:
    """`t` as a contiguous CPU tensor. A GPU tensor is copied into pinned host memory on a
    side stream of its device (one per device, in `side_streams`); the caller synchronizes
    them before reading the copies (untested here: no GPU)."""
    t = t.detach()
    if t.is_cuda:
        side = side_streams.get(t.device)
        if side is None:
            side = side_streams[t.device] = torch.cuda.Stream(device=t.device)
            # The kernels that produced the state run on the device's current stream: the
            # side stream must not read before they are done.
            side.wait_stream(torch.cuda.current_stream(t.device))
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        with torch.cuda.stream(side):
            host.copy_(t, non_blocking=True)
        return host
    return t if t.is_contiguous() else t.contiguous()


class Plan:
    """What a state needs: its header, its pickle and its tensors, and the total size."""

    def __init__(self, state, step: int, world_size: int):
        self.tensors = []
        named = isinstance(state, Files)
        if named:
            state.check()
        pickles = []  # (name, bytes): one unnamed, or one per file
        for name, value in (state.items() if named else [(None, state)]):
            buf = io.BytesIO()
            _Pickler(buf, self.tensors).dump(value)
            pickles.append((name, buf.getvalue()))
        sides = {}
        self.tensors = [_host(t, sides) for t in self.tensors]
        for side in sides.values():
            side.synchronize()
        entries = []
        # The header's size depends on the offsets, which depend on the header's size: place
        # the data after a generous estimate and fix the header's length.
        estimate = _align(_PREFIX + 256 + 96 * len(self.tensors) +
                          sum(64 + 2 * len(n) for n, _ in pickles if n is not None))
        offset = estimate
        placed = []  # [name, offset, length] of each pickle
        for name, pickled in pickles:
            placed.append([name, offset, len(pickled)])
            offset = _align(offset + len(pickled))
        for t in self.tensors:
            entries.append([offset, str(t.dtype).replace("torch.", ""), list(t.shape)])
            offset = _align(offset + t.numel() * t.element_size())
        self.bytes = max(offset, estimate)

        def header():
            where = ({"files": placed} if named else
                     {"pickle": [placed[0][1], placed[0][2]]})
            return json.dumps({"format": 1, "step": step, "world_size": world_size,
                               "bytes": self.bytes, **where, "tensors": entries},
                              separators=(",", ":")).encode()

        text = header()
        if _PREFIX + len(text) > estimate:  # long shapes: move everything further out
            shift = _align(_PREFIX + len(text) + 1024) - estimate
            for e in entries:
                e[0] += shift
            for p in placed:
                p[1] += shift
            self.bytes += shift
            text = header()
        self.header = text
        self.pickles = [(at, pickled) for (_, at, _), (_, pickled) in zip(placed, pickles)]
        self.pickle_at = placed[0][1]  # where the state's bytes begin (after the header)
        self.offsets = [e[0] for e in entries]

    def write(self, buffer):
        """Copies the snapshot into `buffer` (a writable mapping of at least self.bytes)."""
        view = memoryview(buffer)
        view[:_PREFIX + len(self.header)] = MAGIC + struct.pack("<Q", len(self.header)) + \
            self.header
        for at, pickled in self.pickles:
            view[at:at + len(pickled)] = pickled
        view.release()

        def copy(t, offset):
            n = t.numel() * t.element_size()
            if n:
                # Into a view of t's type: copy_ resolves a lazy conjugation or negation (not in
                # t's bytes) and any strides (one element is "contiguous" at any stride), which
                # t's bytes viewed as uint8 would refuse.
                dst = tensor_view(buffer, offset, n, t.dtype, t.shape)
                dst.copy_(t)
                del dst
        _copies((t.numel() * t.element_size(), lambda t=t, o=o: copy(t, o))
                for t, o in zip(self.tensors, self.offsets))


def tensor_view(buffer, offset: int, n: int, dtype, shape):
    """A tensor of `dtype` and `shape` over the `n` bytes of `buffer` at `offset` (where a
    snapshot keeps that tensor), for copying into: it holds an export of the buffer."""
    return torch.frombuffer(buffer, dtype=torch.uint8, count=n, offset=offset).view(dtype) \
        .view(shape)


def read_header(buffer) -> dict:
    view = memoryview(buffer)
    try:
        if len(view) < _PREFIX or bytes(view[:len(MAGIC)]) != MAGIC:
            raise SnapshotError("not an ftrun memory snapshot")
        (length,) = struct.unpack("<Q", view[len(MAGIC):_PREFIX])
        if _PREFIX + length > len(view):
            raise SnapshotError("the snapshot's header is cut short")
        header = json.loads(bytes(view[_PREFIX:_PREFIX + length]))
    except (ValueError, struct.error) as e:
        raise SnapshotError(f"a damaged snapshot header: {e}") from None
    finally:
        view.release()
    if header.get("format") != 1 or header.get("bytes", 0) > len(buffer):
        raise SnapshotError(f"a snapshot of format {header.get('format')} and "
                            f"{header.get('bytes')} bytes in {len(buffer)} bytes")
    return header


def _pread_into(fd: int, dst: torch.Tensor, offset: int, n: int):
    """Reads n bytes of `fd` at `offset` into dst's memory (the kernel's one copy)."""
    view = memoryview(dst.view(-1).view(torch.uint8).numpy())
    done = 0
    while done < n:  # a read returns at most 2 GiB - 4 KiB
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise SnapshotError(f"the snapshot ends {n - done} bytes early")
        done += got
    view.release()


def _files_of(header: dict) -> list:
    """The header's [name, offset, length] of each file, checked: distinct names, pickles
    inside the snapshot."""
    try:
        files = header["files"]
        if (len({name for name, _, _ in files}) == len(files)
                and all(type(at) is int and type(n) is int and 0 <= at <= at + n <= header["bytes"]
                        for _, at, n in files)):
            return files
    except (TypeError, ValueError):
        pass
    raise SnapshotError("a damaged list of files in the snapshot's header")


def read(buffer, header=None, fd=None):
    """The state stored in `buffer`, its tensors copied out (the buffer may go afterwards).
    With `fd` (the descriptor `buffer` maps), the tensors' bytes are read from it instead:
    the mapping's pages need not be mapped in first, and one copy is made either way."""
    header = header or read_header(buffer)
    tensors, jobs = [], []

    def copy(dst, offset, n):
        if fd is not None:
            _pread_into(fd, dst, offset, n)
            return
        src = torch.frombuffer(buffer, dtype=torch.uint8, count=n, offset=offset)
        dst.view(-1).view(torch.uint8).copy_(src)
        del src

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a read-only mapping: we only read from it
        for offset, dtype, shape in header["tensors"]:
            dt = getattr(torch, dtype, None)
            if not isinstance(dt, torch.dtype):
                raise SnapshotError(f"unknown tensor type {dtype}")
            count = 1
            for d in shape:
                count *= d
            n = count * torch.empty((), dtype=dt).element_size()
            if offset < 0 or offset + n > header["bytes"]:
                raise SnapshotError("a tensor outside the snapshot")
            dst = _fresh(count, dt)
            tensors.append(dst.reshape(shape))
            if n:
                jobs.append((n, lambda dst=dst, offset=offset, n=n: copy(dst, offset, n)))
        _copies(jobs)
    view = memoryview(buffer)
    try:
        if "files" in header:
            files = _files_of(header)
            return Files((name, _Unpickler(io.BytesIO(bytes(view[at:at + length])),
                                           tensors).load())
                         for name, at, length in files)
        at, length = header["pickle"]
        pickled = bytes(view[at:at + length])
    finally:
        view.release()
    return _Unpickler(io.BytesIO(pickled), tensors).load()
