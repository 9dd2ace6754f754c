"""The GPU path of a memory snapshot (ftrun.flash_checkpoint.snapshot), with a stand-in of
torch.cuda: there is no GPU where ftrun is tested, so this checks the order of the calls and
the bytes, not a device. A state holding tensors that say they are on cuda:0 (their memory is
really the host's; reading their device pointer fails) is copied into pinned host memory on a
side stream that first waits for the device's current stream, the side stream is synchronized
before the snapshot is written, and the snapshot reads back as the state. The every-step
layout refuses such a state (it would copy device memory as host bytes), so it goes this way.
"""
import contextlib
import os
import sys
import unittest
from unittest import mock

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))
from ftrun.flash_checkpoint import snapshot  # noqa: E402
from ftrun.flash_checkpoint.layout import Layout  # noqa: E402


class OnCuda(torch.Tensor):
    """A host tensor that says it lives on cuda:0; its data pointer is not the host's."""

    @property
    def is_cuda(self):
        return True

    @property
    def is_cpu(self):
        return False

    @property
    def device(self):
        return torch.device("cuda", 0)

    def data_ptr(self):
        raise AssertionError("a device pointer was read on the host")


def on_cuda(t):
    return t.as_subclass(OnCuda)


class FakeCuda:
    """torch.cuda's stream calls and torch.empty's pin_memory, recorded in `events`."""

    def __init__(self):
        self.events = []
        self.pinned = 0
        fake = self

        class Stream:
            def __init__(self, device=None):
                self.device = torch.device("cuda", 0) if device is None else torch.device(device)
                fake.events.append(("stream", str(self.device)))

            def wait_stream(self, other):
                fake.events.append(("wait", other))

            def synchronize(self):
                fake.events.append(("synchronize", str(self.device)))

        self.Stream = Stream

    def current_stream(self, device=None):
        return f"current {torch.device(device)}"

    @contextlib.contextmanager
    def stream(self, side):
        self.events.append(("enter", str(side.device)))
        yield
        self.events.append(("exit", str(side.device)))

    def patches(self):
        real_empty = torch.empty

        def empty(*args, pin_memory=False, **kwargs):
            self.pinned += bool(pin_memory)
            return real_empty(*args, **kwargs)
        return [mock.patch.object(torch.cuda, "Stream", self.Stream),
                mock.patch.object(torch.cuda, "current_stream", self.current_stream),
                mock.patch.object(torch.cuda, "stream", self.stream),
                mock.patch.object(torch, "empty", empty)]


class GpuSnapshotTest(unittest.TestCase):
    def state(self):
        torch.manual_seed(0)
        return {"w": on_cuda(torch.randn(64, 32)), "b": on_cuda(torch.randn(32)),
                "t": on_cuda(torch.randn(8, 4)).t(), "cpu": torch.arange(5), "step": 7}

    def test_gpu_tensors_go_through_pinned_memory_on_a_side_stream_that_waits(self):
        state, fake = self.state(), FakeCuda()
        with contextlib.ExitStack() as patches:
            for p in fake.patches():
                patches.enter_context(p)
            plan = snapshot.Plan(state, step=7, world_size=2)
        self.assertEqual(fake.pinned, 3, "a pinned host buffer per GPU tensor")
        kinds = [e[0] for e in fake.events]
        self.assertEqual(fake.events[:2], [("stream", "cuda:0"), ("wait", "current cuda:0")])
        self.assertEqual(kinds.count("stream"), 1, "one side stream per device")
        self.assertEqual(kinds.count("enter"), 3)
        self.assertEqual(fake.events[-1], ("synchronize", "cuda:0"))
        self.assertLess(max(i for i, k in enumerate(kinds) if k == "exit"), len(kinds) - 1)

        buffer = bytearray(plan.bytes)
        plan.write(buffer)
        back = snapshot.read(buffer)
        self.assertEqual(back["step"], 7)
        for key in ("w", "b", "t", "cpu"):
            self.assertEqual(type(back[key]), torch.Tensor, key)
            self.assertTrue(torch.equal(back[key], torch.Tensor.as_subclass(state[key],
                                                                            torch.Tensor)), key)

    def test_without_gpu_tensors_no_stream_is_made(self):
        fake = FakeCuda()
        with contextlib.ExitStack() as patches:
            for p in fake.patches():
                patches.enter_context(p)
            snapshot.Plan({"w": torch.randn(3)}, step=1, world_size=1)
        self.assertEqual((fake.events, fake.pinned), ([], 0))

    def test_the_every_step_layout_refuses_a_state_on_a_gpu(self):
        self.assertIsNone(Layout.build(self.state(), 7, 2))
        self.assertIsNotNone(Layout.build({"w": torch.randn(3), "step": 7}, 7, 2))


if __name__ == "__main__":
    unittest.main()
