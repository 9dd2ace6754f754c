"""A snapshot layout reused from save to save (ftrun-flash-checkpoint(7), "Saving every step").

A training loop saves the same structure every step: the same keys, tensors of the same types
and shapes, a few numbers that change (the step, a learning rate). Layout records that
structure once and writes the next saves of it without pickling it again and without new
objects: it checks the state against the recorded structure (with a function compiled for that
structure; a large one is walked instead), copies each tensor straight into
its place in the mapping (views kept per mapping), and re-encodes only the numbers that
changed. The bytes are those snapshot.Plan writes (format 1, snapshot.read reads them): the
pickle is the structure's, pickled once (protocol 3, so that it has no frames whose lengths a
changed number would falsify) with each number's opcodes spliced in at its place.

Layout.build returns None for a state it cannot reuse (a value other than dict, OrderedDict,
list, tuple, a CPU tensor, int, float, bool, None, str or bytes; a container held twice):
snapshot.Plan saves those, as before. Layout.refresh returns None when the structure is not
the recorded one (a key added, a shape or dtype changed, a string changed), and pickled() None
when the numbers outgrew the room left for them: the caller then builds a new Layout. A number
may change its kind (an int, a float, a bool, None: none of them is memoized by the pickler).
Thread: the saving thread only.
"""
import collections
import ctypes
import io
import json
import operator
import pickle
import random
import struct

import torch

from . import snapshot

_PROTOCOL = 3
_NONE = type(None)
_NUMBERS = (int, float, bool, _NONE)  # exact types: never memoized by the pickler
_CONSTANTS = (str, bytes)  # memoized: a change needs a new layout
_DIGITS = 20  # the header is placed for a step and a pickle length of this many digits
_memmove = ctypes.memmove


def _encode(value) -> bytes:
    """The pickle opcodes of a number, as protocol 3 writes them (none memoizes)."""
    if value is None:
        return b"N"
    if value is True:
        return b"\x88"
    if value is False:
        return b"\x89"
    if type(value) is float:
        return b"G" + struct.pack(">d", value)
    return pickle.dumps(value, _PROTOCOL)[2:-1]  # without PROTO and STOP


class _Unsupported(Exception):
    pass


class _Ref:
    """Stands for a tensor or a number in the pickled structure."""
    __slots__ = ("pid",)

    def __init__(self, pid):
        self.pid = pid


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        return obj.pid if type(obj) is _Ref else None


# Node kinds of the recorded structure.
_TENSOR, _NUMBER, _CONSTANT, _DICT, _SEQ = range(5)


class Layout:
    def __init__(self):
        self._tensors = []  # (dtype, shape) in the pickle's persistent-id order
        self._parts = []  # pickle segments, each number's opcodes between two of them
        self._number_values = []
        self._containers = 0
        self._nodes = 0
        self._views = {}  # id(mapping) -> (mapping, [destination tensor or None])

    # ---- building ----

    @classmethod
    def build(cls, state, step: int, world_size: int):
        """The layout of `state`, or None when it cannot be reused (snapshot.Plan then)."""
        self = cls()
        self.world_size = world_size
        # Markers: numbers no state holds, found again in the pickle (each exactly once).
        self._marker_base = (1 << 62) | (random.getrandbits(40) << 20)
        try:
            self._root, skeleton = self._compile(state, set())
        except (_Unsupported, RecursionError):
            return None
        buf = io.BytesIO()
        _Pickler(buf, protocol=_PROTOCOL).dump(skeleton)
        pickled = buf.getvalue()
        places, count = [], len(self._number_values)
        for j in range(count):
            code = pickle.dumps(self._marker_base + j, _PROTOCOL)[2:-1] + pickle.BINPERSID
            at = pickled.find(code)
            if at < 0 or pickled.find(code, at + 1) >= 0:
                return None
            places.append((at, len(code), j))
        places.sort()
        self._parts, self._slot_part, last = [], [0] * count, 0
        for at, n, j in places:
            self._parts.append(pickled[last:at])
            self._slot_part[j] = len(self._parts)
            self._parts.append(_encode(self._number_values[j]))
            last = at + n
        self._parts.append(pickled[last:])
        self._place(len(pickled))
        self._compile_matcher()
        return self

    def _compile(self, obj, seen):
        """(node, skeleton) of obj; raises _Unsupported."""
        self._nodes += 1
        t = type(obj)
        if t in _NUMBERS:
            j = len(self._number_values)
            self._number_values.append(obj)
            return (_NUMBER, j), _Ref(self._marker_base + j)
        if isinstance(obj, torch.Tensor):
            if not obj.is_cpu or not snapshot.raw(obj):
                raise _Unsupported  # a quantized dtype never matches again: checked once
            k = len(self._tensors)
            self._tensors.append((obj.dtype, tuple(obj.shape)))
            return (_TENSOR, k, obj.dtype, obj.shape), _Ref(k)
        if t in _CONSTANTS:
            return (_CONSTANT, obj), obj
        if id(obj) in seen:
            raise _Unsupported  # a container held twice: the pickle shares it
        seen.add(id(obj))
        self._containers += 1
        if t is dict or t is collections.OrderedDict:
            keys = list(obj)
            key_types = None
            if any(type(k) is not str for k in keys):
                if any(type(k) not in (int, str) for k in keys):
                    raise _Unsupported
                key_types = [type(k) for k in keys]
            children, skeleton = [], t()
            for k, v in obj.items():
                node, skeleton[k] = self._compile(v, seen)
                children.append(node)
            attrs = None
            if t is collections.OrderedDict:  # a state_dict's _metadata lives in its __dict__
                attrs, skel_attrs = self._compile(vars(obj), seen)
                vars(skeleton).update(skel_attrs)
            return (_DICT, t, keys, key_types, children, attrs, self._flat(children)), skeleton
        if t is list or t is tuple:
            children, skeleton = [], []
            for v in obj:
                node, s = self._compile(v, seen)
                children.append(node)
                skeleton.append(s)
            return (_SEQ, t, len(children), children, self._flat(children)), t(skeleton)
        raise _Unsupported

    def _flat(self, children):
        """For a container of numbers only: the list of their current values (compared at
        C speed) and their slots; else None."""
        if children and all(c[0] == _NUMBER for c in children):
            slots = [c[1] for c in children]
            return [self._number_values[j] for j in slots], slots
        return None

    def _place(self, pickle_length: int):
        """Offsets: header, pickle (with room to grow), tensors."""
        entries = [[0, str(dt).replace("torch.", ""), list(shape)] for dt, shape in self._tensors]
        self._room = pickle_length + 64 + pickle_length // 8
        self.pickle_at = snapshot._align(snapshot._PREFIX + 256 + 96 * len(entries))
        while True:
            offset = snapshot._align(self.pickle_at + self._room)
            self._sizes, self._small = [], []  # bytes; copied by one memmove when contiguous
            for e, (dt, shape) in zip(entries, self._tensors):
                e[0] = offset
                n = torch.Size(shape).numel() * torch.empty((), dtype=dt).element_size()
                self._sizes.append(n)
                self._small.append(0 < n < snapshot._BIG and not dt.is_complex)
                offset = snapshot._align(offset + n)
            self.bytes = offset
            self._offsets = [e[0] for e in entries]
            tail = (f',"world_size":{self.world_size},"bytes":{self.bytes},"pickle":'
                    f'[{self.pickle_at},')
            self._head = ('{"format":1,"step":', tail,
                          '],"tensors":' + json.dumps(entries, separators=(",", ":")) + "}")
            longest = len(self._header(10 ** _DIGITS - 1, 10 ** _DIGITS - 1))
            if snapshot._PREFIX + longest <= self.pickle_at:
                return
            self.pickle_at = snapshot._align(snapshot._PREFIX + longest + 64)

    def _header(self, step: int, pickle_length: int) -> bytes:
        a, b, c = self._head
        return f"{a}{step}{b}{pickle_length}{c}".encode()

    # ---- reusing ----

    def refresh(self, state, step: int, world_size: int):
        """The tensors of `state` in layout order when its structure is the recorded one (the
        numbers that changed are re-encoded), else None."""
        if world_size != self.world_size or not -10 ** (_DIGITS - 1) < step < 10 ** _DIGITS:
            return None
        if self._matcher is not None:
            return self._matcher(state)
        tensors, containers = [], []
        if not self._match(state, self._root, tensors, containers):
            return None
        if len(containers) != self._containers or len(set(containers)) != len(containers):
            return None  # a container held twice now
        return tensors

    def _number(self, value, j) -> bool:
        """Takes `value` for number slot j: False when it is not a number (a new layout is
        needed); a number of another kind is spliced in too (none is memoized)."""
        old = self._number_values[j]
        if value is old:
            return True
        t = type(value)
        if t not in _NUMBERS:
            return False
        if t is int and type(old) is int and value == old:
            return True
        self._number_values[j] = value  # floats: re-encoded even when equal (0.0 and -0.0)
        self._parts[self._slot_part[j]] = _encode(value)
        return True

    # The check of a state against the recorded structure is compiled into one Python function
    # per layout (straight-line code, one test per key list, tensor and number): walking the
    # recorded tree (_match) cost a small model's every-step save more than its copies and
    # everything else in the worker together (67 us of 110 us). Compiling costs about 0.15 ms
    # per node, once per structure, and grows faster than the node count for large functions:
    # a structure of more than COMPILED_NODES is walked (its copies dominate its saves anyway).
    COMPILED_NODES = 256

    def _compile_matcher(self):
        self._matcher = None
        if self._nodes > self.COMPILED_NODES:
            return
        lines, names, tensors, containers = [], {}, [], []

        def const(value, prefix):
            name = f"{prefix}{len(names)}"
            names[name] = value
            return name

        counter = iter(range(1 << 62))

        def emit(node, var):
            kind = node[0]
            if kind == _TENSOR:
                _, _, dtype, shape = node
                lines.append(f"if not isinstance({var}, Tensor) or {var}.dtype is not "
                             f"{const(dtype, 'D')} or {var}.shape != {const(shape, 'S')} or "
                             f"not {var}.is_cpu or {var}.layout is not strided: return None")
                tensors.append(var)
            elif kind == _NUMBER:
                j = node[1]
                lines.append(f"if {var} is not num[{j}] and not upd({var}, {j}): return None")
            elif kind == _CONSTANT:
                lines.append(f"if type({var}) is not {const(type(node[1]), 'T')} or "
                             f"{var} != {const(node[1], 'C')}: return None")
            else:
                containers.append(var)
                lines.append(f"if type({var}) is not {const(node[1], 'T')}: return None")
                if kind == _DICT:
                    _, _, keys, key_types, children, attrs, _ = node
                    lines.append(f"if list({var}) != {const(keys, 'K')}: return None")
                    if key_types is not None:
                        lines.append(f"if list(map(type, {var})) != {const(key_types, 'K')}: "
                                     "return None")
                    if attrs is not None:
                        a = f"v{next(counter)}"
                        lines.append(f"{a} = vars({var})")
                        emit(attrs, a)
                    source = f"{var}.values()"
                else:
                    _, _, length, children, _ = node
                    lines.append(f"if len({var}) != {length}: return None")
                    source = var
                if children:
                    kids = [f"v{next(counter)}" for _ in children]
                    lines.append(f"{', '.join(kids)}, = {source}")
                    for child, kid in zip(children, kids):
                        emit(child, kid)

        emit(self._root, "state")
        if len(containers) > 1:  # a container held twice now: the pickle would share it
            lines.append(f"if len({{{', '.join(f'id({c})' for c in containers)}}}) != "
                         f"{len(containers)}: return None")
        lines.append(f"return [{', '.join(tensors)}]")
        source = ("def match(state, num=num, upd=upd, isinstance=isinstance, type=type, "
                  "Tensor=Tensor, strided=strided, vars=vars, list=list, len=len, id=id):\n" +
                  "".join(f"    {line}\n" for line in lines))
        scope = dict(names, num=self._number_values, upd=self._number, Tensor=torch.Tensor,
                     strided=torch.strided)
        exec(compile(source, "<ftrun snapshot layout>", "exec"), scope)  # noqa: S102
        self._matcher = scope["match"]

    def _match(self, obj, node, tensors, containers) -> bool:
        kind = node[0]
        if kind == _TENSOR:
            return self._tensor(obj, node, tensors)
        if kind == _NUMBER:
            return obj is self._number_values[node[1]] or self._number(obj, node[1])
        if kind == _CONSTANT:
            return type(obj) is type(node[1]) and obj == node[1]
        if type(obj) is not node[1]:
            return False
        containers.append(id(obj))
        if kind == _DICT:
            _, _, keys, key_types, children, attrs, flat = node
            if list(obj) != keys or (key_types is not None and
                                     list(map(type, obj)) != key_types):
                return False
            if attrs is not None and not self._match(vars(obj), attrs, tensors, containers):
                return False
            values = obj.values()
        else:
            _, _, length, children, flat = node
            if len(obj) != length:
                return False
            values = obj
        if flat is not None:
            current, slots = flat
            values = list(values)
            if all(map(operator.is_, values, current)):
                return True
            for i, (v, j) in enumerate(zip(values, slots)):
                if not self._number(v, j):
                    return False
                current[i] = v
            return True
        numbers = self._number_values
        # The leaves inline: a call per number or tensor would cost more than the check.
        for v, child in zip(values, children):
            kind = child[0]
            if kind == _NUMBER:
                if v is not numbers[child[1]] and not self._number(v, child[1]):
                    return False
            elif kind == _TENSOR:
                if not self._tensor(v, child, tensors):
                    return False
            elif not self._match(v, child, tensors, containers):
                return False
        return True

    @staticmethod
    def _tensor(obj, node, tensors) -> bool:
        if not isinstance(obj, torch.Tensor) or obj.dtype is not node[2] or \
                obj.shape != node[3] or not obj.is_cpu or obj.layout is not torch.strided:
            return False
        tensors.append(obj)
        return True

    # ---- writing ----

    def pickled(self):
        """The pickle of the state last refreshed, or None when it outgrew its room."""
        data = b"".join(self._parts)
        return data if len(data) <= self._room else None

    def write(self, buffer, step: int, pickled: bytes, tensors):
        """Writes the snapshot of `step` into `buffer` (a writable mapping of >= self.bytes
        bytes, kept open while this layout lives: its views stay)."""
        header = self._header(step, len(pickled))
        buffer[:snapshot._PREFIX + len(header)] = (snapshot.MAGIC + struct.pack("<Q", len(header))
                                                   + header)
        buffer[self.pickle_at:self.pickle_at + len(pickled)] = pickled
        views = self._views.get(id(buffer))
        if views is None or views[0] is not buffer:
            dsts = [None if n == 0 else snapshot.tensor_view(buffer, o, n, dt, shape)
                    for n, o, (dt, shape) in zip(self._sizes, self._offsets, self._tensors)]
            views = (buffer, dsts, [0 if d is None else d.data_ptr() for d in dsts])
            self._views[id(buffer)] = views
        big, rest = [], []
        for dst, at, src, n, small in zip(views[1], views[2], tensors, self._sizes, self._small):
            if small and src.is_contiguous() and not src.is_neg():
                # A small tensor's bytes as they are: one memmove costs a tenth of a copy_
                # call (a lazy negation or, for complex ones, conjugation is not in the bytes:
                # copy_ resolves it).
                _memmove(at, src.data_ptr(), n)
            elif n >= snapshot._BIG:
                big.append((n, lambda dst=dst, src=src: dst.copy_(src.detach())))
            elif n:
                rest.append((dst, src))
        if rest:
            with torch.no_grad():
                for dst, src in rest:
                    dst.copy_(src)
        if big:
            snapshot._copies(big)  # the large ones on the pool, as snapshot.Plan copies them

    def forget(self, buffer):
        """Drops the views of `buffer` (before it is closed)."""
        views = self._views.get(id(buffer))
        if views is not None and views[0] is buffer:
            del self._views[id(buffer)]  # the views' exports of the mapping go with them
