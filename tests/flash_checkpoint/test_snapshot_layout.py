"""The layout an every-step save reuses (ftrun.flash_checkpoint.layout): the bytes it writes
read back as the state (snapshot.read, the loader of every snapshot), the numbers that change
from save to save (their kind too: an int, a float, a bool, None) come back changed, and any change of structure (a key added or removed, a
shape or dtype changed, a string changed, a container now held twice, a pickle outgrowing its
room) is noticed, so the save builds a new layout instead of writing a wrong one.

Under a real ftrun (when the binary is built), one worker saves a sequence of states into the
agent's memory through DdpCheckpointer, changing the structure between saves, and restores
each one from the agent: every restore equals the state saved.

Run as `python3 test_snapshot_layout.py worker` it is that worker.
"""
import collections
import mmap
import os
import subprocess
import sys
import tempfile
import time
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))
from ftrun.flash_checkpoint import snapshot  # noqa: E402
from ftrun.flash_checkpoint.layout import Layout  # noqa: E402

FTRUN = os.environ.get("FTRUN_BINARY") or os.path.join(HERE, "..", "..", "build", "launcher",
                                                        "ftrun")


def demo_state(step, lr=0.05):
    """The shape of the demo's state: a module's state_dict (an OrderedDict with _metadata),
    an optimizer's, and the step."""
    model = collections.OrderedDict(w=torch.randn(4, 3), b=torch.randn(4),
                                    n=torch.tensor(step, dtype=torch.int64),
                                    mask=torch.tensor([True, False, step % 2 == 0]),
                                    half=torch.randn(5).to(torch.bfloat16), seen=step)
    # A number in the attributes and one among the items: the compiled check meets them in
    # another order than the layout numbers them.
    model._metadata = collections.OrderedDict({"": {"version": 1 + step % 2}})
    opt = {"state": {0: {"momentum_buffer": torch.randn(4, 3)}},
           "param_groups": [{"lr": lr, "momentum": 0.9, "nesterov": False, "foreach": None,
                             "params": [0, 1]}]}
    return {"model": model, "opt": opt, "step": step, "note": "demo", "raw": b"\x00\x01",
            "strided": torch.randn(3, 2).t(), "conj": torch.randn(2, dtype=torch.cfloat).conj(),
            # contiguous, with a lazy negation that is not in its bytes
            "neg": torch.randn(1, dtype=torch.cfloat).conj().imag,
            "one": torch.randn(4)[::4],  # "contiguous" at a stride of 4
            "empty": torch.empty(0, 2)}


def same(a, b):
    """Whether two states are equal: tensors by type, shape and value, the rest by type and
    value (0.0 and -0.0 told apart), OrderedDict attributes included."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, collections.OrderedDict) and not same(dict(vars(a)), dict(vars(b))):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


def write(layout, state, step, buffer):
    """Refreshes the layout with state and writes it; False when the layout does not fit."""
    tensors = layout.refresh(state, step, layout.world_size)
    pickled = None if tensors is None else layout.pickled()
    if pickled is None:
        return False
    layout.write(buffer, step, pickled, tensors)
    return True


class LayoutTest(unittest.TestCase):
    def test_reused_saves_read_back_as_their_state(self):
        state = demo_state(0)
        layout = Layout.build(state, 0, 3)
        self.assertIsNotNone(layout)
        buffers = [mmap.mmap(-1, layout.bytes) for _ in range(2)]  # the agent's two buffers
        for step, lr in ((0, 0.05), (1, 0.05), (2, 0.025), (300, -0.0), (70000, 0.0),
                         (2 ** 40, float("inf")), (3, 1e-300)):
            state = demo_state(step, lr)
            state["opt"]["param_groups"][0]["nesterov"] = step % 2 == 1
            state["opt"]["param_groups"][0]["foreach"] = None if step % 3 else True
            if step == 3:  # numbers of another kind are spliced in too
                state["step"] = 3.0
                state["opt"]["param_groups"][0]["params"] = [False, None]
            buffer = buffers[step % 2]
            self.assertTrue(write(layout, state, step, buffer), step)
            header = snapshot.read_header(buffer)
            self.assertEqual((header["step"], header["world_size"]), (step, 3))
            self.assertTrue(same(snapshot.read(buffer, header), state), step)

    def test_a_changed_structure_is_noticed(self):
        changes = {
            "a key added": lambda s: s["opt"].update(extra=1),
            "a key removed": lambda s: s.pop("note"),
            "keys reordered": lambda s: s.update(model=collections.OrderedDict(
                reversed(list(s["model"].items())))),
            "a shape changed": lambda s: s["model"].update(w=torch.randn(3, 4)),
            "a dtype changed": lambda s: s["model"].update(b=torch.randn(4).double()),
            "a tensor became a number": lambda s: s["model"].update(b=1.0),
            "a number became a tensor": lambda s: s.update(step=torch.tensor(1)),
            "a string changed": lambda s: s.update(note="other"),
            "bytes changed": lambda s: s.update(raw=b"\x02"),
            "the metadata changed": lambda s: s["model"]._metadata.update(x={"version": 2}),
            "a list grew": lambda s: s["opt"]["param_groups"][0]["params"].append(2),
            "a list became a tuple": lambda s: s["opt"].update(
                param_groups=tuple(s["opt"]["param_groups"])),
            "an int key became a str": lambda s: s["opt"].update(
                state={"0": s["opt"]["state"][0]}),
        }
        for what, change in changes.items():
            layout = Layout.build(demo_state(0), 0, 1)
            state = demo_state(1)
            change(state)
            self.assertIsNone(layout.refresh(state, 1, 1), what)
            self.assertIsNone(Layout.build(demo_state(0), 0, 1).refresh(demo_state(1), 1, 2),
                              "the world size changed")
            rebuilt = Layout.build(state, 1, 1)  # what the save does then (or Plan)
            if rebuilt is not None:
                with mmap.mmap(-1, rebuilt.bytes) as m:
                    self.assertTrue(write(rebuilt, state, 1, m), what)
                    self.assertTrue(same(snapshot.read(m), state), what)

    def test_a_step_too_long_for_the_header_needs_the_plan(self):
        layout = Layout.build({"w": torch.ones(2)}, 0, 1)
        with mmap.mmap(-1, layout.bytes) as m:
            for step in (10 ** 20 - 1, -10 ** 18):
                self.assertTrue(write(layout, {"w": torch.ones(2)}, step, m))
                self.assertEqual(snapshot.read_header(m)["step"], step)
        self.assertIsNone(layout.refresh({"w": torch.ones(2)}, 10 ** 20, 1))

    def test_a_container_held_twice_is_noticed(self):
        layout = Layout.build({"a": [1, 2], "b": [1, 2]}, 0, 1)
        self.assertIsNotNone(layout.refresh({"a": [1, 2], "b": [1, 3]}, 1, 1))
        shared = [1, 2]
        self.assertIsNone(layout.refresh({"a": shared, "b": shared}, 1, 1))

    def test_a_pickle_that_outgrows_its_room_needs_a_new_layout(self):
        layout = Layout.build({"w": torch.ones(2), "n": 1}, 0, 1)
        self.assertIsNotNone(layout.refresh({"w": torch.ones(2), "n": 2 ** 800}, 1, 1))
        self.assertIsNone(layout.pickled())

    def test_what_it_cannot_reuse_is_left_to_the_plan(self):
        for what, state in (("an object", {"w": torch.ones(2), "o": object()}),
                            ("a set", {"s": {1, 2}}),
                            ("a dict subclass", {"d": collections.defaultdict(int)}),
                            ("a sparse tensor", {"s": torch.eye(2).to_sparse()}),
                            ("a quantized tensor", {"q": torch.quantize_per_tensor(
                                torch.ones(2), 0.5, 0, torch.qint8)}),
                            ("a container held twice", {"a": [1], "b": None})):
            if what == "a container held twice":
                state["b"] = state["a"]
            self.assertIsNone(Layout.build(state, 0, 1), what)


class WalkedLayoutTest(LayoutTest):
    """The same, for structures too large for a compiled check (they are walked)."""

    def setUp(self):
        self._limit = Layout.COMPILED_NODES
        Layout.COMPILED_NODES = 0

    def tearDown(self):
        Layout.COMPILED_NODES = self._limit

    def test_the_check_is_walked(self):
        self.assertIsNone(Layout.build(demo_state(0), 0, 1)._matcher)


class CompiledLayoutTest(unittest.TestCase):
    def test_a_small_structure_gets_a_compiled_check(self):
        self.assertIsNotNone(Layout.build(demo_state(0), 0, 1)._matcher)


def worker(root):
    """Under ftrun: saves a sequence of states (the structure changing between some of them)
    into the agent's memory and restores each; prints 'layout worker ok'."""
    from ftrun.flash_checkpoint import engine
    from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType
    cp = DdpCheckpointer(os.path.join(root, "flash"))
    mem, why = engine.memory_store()
    if mem is None:
        raise SystemExit(f"no agent memory: {why}")
    for step in range(12):
        state = demo_state(step, lr=0.05 / (1 + step))
        if step >= 4:
            state["opt"]["extra"] = step  # a key added
        if step >= 6:
            state["model"]["w"] = torch.randn(5, 3)  # a shape changed
        if step >= 8:
            state["note"] = f"note {step}"  # a string changing every save
        if step == 10:
            state["big"] = torch.randn(1 << 20)  # more bytes: a larger lease
        if not cp.save_checkpoint(step, state, storage_type=StorageType.MEMORY):
            raise SystemExit(f"save {step} refused")
        got = mem.load(step, "", 1)
        if not same(got, state):
            raise SystemExit(f"step {step}: the restored state differs from the saved one")
    print("layout worker ok", flush=True)


class RecordablePathTest(unittest.TestCase):
    def test_a_save_under_a_loan_records_only_a_path_the_agent_takes(self):
        from ftrun.flash_checkpoint import lease_mailbox
        self.assertEqual(lease_mailbox.recordable(""), b"")
        self.assertEqual(lease_mailbox.recordable("/ckpt/7/rank_0.pt"), b"/ckpt/7/rank_0.pt")
        self.assertEqual(lease_mailbox.recordable("/ckpt/é"), "/ckpt/é".encode())
        long_ok = "/" + "p" * (lease_mailbox._MAX_PATH - 1)
        self.assertEqual(lease_mailbox.recordable(long_ok), long_ok.encode())
        for refused in ("ckpt/7", "/ckpt/a\nb", "/ckpt/\x7f", long_ok + "p", "/ckpt/é\x01",
                        "/" + "é" * (lease_mailbox._MAX_PATH // 2), "é/ckpt",
                        "/ckpt/" + b"\xff".decode("utf-8", "surrogateescape")):
            self.assertIsNone(lease_mailbox.recordable(refused), repr(refused))


def loan_worker(root):
    """Under ftrun: every-step saves that take a loan of both buffers, interrupted by what a
    restore asks the agent (the steps it holds: that ends the loan in the agent); each save
    after it is still the agent's newest, and the agent holds it as saved. Prints 'loan
    worker ok'."""
    from ftrun.flash_checkpoint import engine, sources
    from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType
    cp = DdpCheckpointer(os.path.join(root, "flash"))
    mem, why = engine.memory_store()
    if mem is None:
        raise SystemExit(f"no agent memory: {why}")
    states = {}
    for step in range(12):
        states[step] = demo_state(step)
        if not cp.save_checkpoint(step, states[step], storage_type=StorageType.MEMORY):
            raise SystemExit(f"save {step} refused")
        if step in (5, 8):
            lent = mem.loan_saves
            held, _ = sources.inventory(mem, "")  # a restore's question, mid-training
            if not lent or held[:1] != [step]:
                raise SystemExit(f"after save {step} ({lent} under a loan) the agent holds "
                                 f"{held}")
        time.sleep(0.01)  # a step's time: the next lease (and loan) is in the mailbox
    held = mem.steps("")
    if held[:1] != [11] or not same(mem.load(11, "", 1), states[11]):
        raise SystemExit(f"the agent holds {held}, not step 11 as saved")
    print(f"loan worker ok ({mem.loan_saves} saves under a loan)", flush=True)


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class LayoutUnderFtrunTest(unittest.TestCase):
    def run_worker(self, kind):
        with tempfile.TemporaryDirectory() as root:
            env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3")
            env.pop("FTRUN_CONTROL_SOCKET", None)
            done = subprocess.run([FTRUN, "--standalone", "--nproc-per-node", "1",
                                   "--log-dir", os.path.join(root, "logs"), "--no-python",
                                   "/usr/bin/python3", __file__, kind, root],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=120)
            self.assertEqual(done.returncode, 0, done.stdout)
            return done.stdout

    def test_every_save_restores_as_saved_while_the_structure_changes(self):
        self.assertIn("layout worker ok", self.run_worker("worker"))

    def test_a_restores_question_mid_training_loses_no_save_made_under_a_loan(self):
        self.assertIn("loan worker ok", self.run_worker("loan_worker"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2])
    elif sys.argv[1:2] == ["loan_worker"]:
        loan_worker(sys.argv[2])
    else:
        unittest.main()
