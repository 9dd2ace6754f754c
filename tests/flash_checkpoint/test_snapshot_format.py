"""The byte layout of a memory snapshot (ftrun.flash_checkpoint.snapshot): every tensor's bytes,
small and large (the large ones copied on the pool, into huge pages), dtypes, shapes, nesting
and non-tensor values come back as they were; damaged bytes are a clear error."""
import contextlib
import mmap
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts", "python"))
from ftrun.flash_checkpoint import snapshot  # noqa: E402


@contextlib.contextmanager
def written(plan):
    """The plan written into a fresh memfd: (descriptor, its mapping, the header read back)."""
    fd = os.memfd_create("ftrun-test")
    try:
        os.ftruncate(fd, plan.bytes)
        with mmap.mmap(fd, plan.bytes) as m:
            plan.write(m)
            yield fd, m, snapshot.read_header(m)
    finally:
        os.close(fd)


def round_trip(state, step=7, world_size=3, through_fd=False):
    """Written into a memfd and read back: through the mapping, or (through_fd, as the agent's
    memory is restored) with the tensors' bytes read from the descriptor."""
    with written(snapshot.Plan(state, step, world_size)) as (fd, m, header):
        return header, snapshot.read(m, header, fd=fd if through_fd else None)


class SnapshotFormatTest(unittest.TestCase):
    def test_every_tensor_and_value_comes_back(self):
        for through_fd in (False, True):
            with self.subTest(through_fd=through_fd):
                self.check_every_tensor_and_value(through_fd)

    def check_every_tensor_and_value(self, through_fd):
        big = [torch.randn(3 << 20) for _ in range(3)]  # 12 MiB each: the pool's copies
        state = {"model": {"w": torch.randn(4, 5), "b": torch.arange(7, dtype=torch.int64),
                           "half": torch.randn(9).to(torch.bfloat16),
                           "mask": torch.tensor([True, False, True])},
                 "big": big, "empty": torch.empty(0, 3), "scalar": torch.tensor(2.5),
                 "strided": torch.randn(6, 4).t(), "step": 12, "note": ("a", 1.5, None),
                 # Lazily conjugated or negated views, contiguous ones included: their bytes
                 # are not their values.
                 "conj": torch.randn(3, dtype=torch.cfloat).conj(),
                 "neg": torch.randn(1, dtype=torch.cfloat).conj().imag,
                 "negs": torch.randn(3, dtype=torch.cfloat).conj().imag,
                 "one": torch.randn(4)[::4], "column": torch.randn(2, 3)[:, :1]}
        header, got = round_trip(state, through_fd=through_fd)
        self.assertEqual((header["step"], header["world_size"]), (7, 3))
        for name in ("w", "b", "half", "mask"):
            self.assertTrue(torch.equal(got["model"][name], state["model"][name]), name)
            self.assertEqual(got["model"][name].dtype, state["model"][name].dtype)
        for g, w in zip(got["big"], big):
            self.assertTrue(torch.equal(g, w))
        self.assertEqual(got["empty"].shape, (0, 3))
        self.assertTrue(torch.equal(got["scalar"], state["scalar"]))
        self.assertTrue(torch.equal(got["strided"], state["strided"]))
        for name in ("conj", "neg", "negs", "one", "column"):
            self.assertTrue(torch.equal(got[name], state[name]), name)
            self.assertFalse(got[name].is_conj() or got[name].is_neg(), name)
        self.assertEqual((got["step"], got["note"]), (12, ("a", 1.5, None)))

    def test_sparse_and_quantized_tensors_come_back_through_the_pickle(self):
        # They have no raw bytes of their values: copying them into the buffer raised
        # "copy_() between dense and sparse Tensors is not implemented".
        dense = torch.randn(4, 5)
        state = {"sparse": torch.randn(3, 4).relu().to_sparse(),
                 "csr": torch.eye(3).to_sparse_csr(), "dense": dense,
                 "q": torch.quantize_per_tensor(torch.randn(6), 0.1, 3, torch.qint8),
                 "qc": torch.quantize_per_channel(torch.randn(2, 3), torch.tensor([0.1, 0.2]),
                                                  torch.tensor([0, 1]), 0, torch.quint8)}
        for through_fd in (False, True):
            _, got = round_trip(state, through_fd=through_fd)
            self.assertTrue(torch.equal(got["dense"], dense))
            for name in ("sparse", "csr"):
                self.assertEqual(got[name].layout, state[name].layout, name)
                self.assertTrue(torch.equal(got[name].to_dense(), state[name].to_dense()), name)
            for name in ("q", "qc"):
                self.assertEqual(got[name].dtype, state[name].dtype, name)
                self.assertTrue(torch.equal(got[name].int_repr(), state[name].int_repr()), name)
                self.assertTrue(torch.equal(got[name].dequantize(), state[name].dequantize()))

    def test_a_state_of_several_files_comes_back_file_by_file(self):
        state = snapshot.Files({"model_optim_rng.pt": {"w": torch.ones(3), "it": 4},
                                "distrib_optim.pt": {"m": [torch.arange(5)], "n": None}})
        _, back = round_trip(state, through_fd=True)
        self.assertIsInstance(back, snapshot.Files)
        self.assertEqual(list(back), ["model_optim_rng.pt", "distrib_optim.pt"])
        self.assertTrue(torch.equal(back["model_optim_rng.pt"]["w"], torch.ones(3)))
        self.assertEqual(back["model_optim_rng.pt"]["it"], 4)
        self.assertTrue(torch.equal(back["distrib_optim.pt"]["m"][0], torch.arange(5)))
        with written(snapshot.Plan(state, 7, 3)) as (_, _, header):
            self.assertEqual([f[0] for f in header["files"]], list(state))
            self.assertNotIn("pickle", header)
        for bad in ("a/b.pt", "", "..", "PART.json", "PART.json.tmp", "t\tab"):
            with self.assertRaises(ValueError, msg=bad):
                snapshot.Plan(snapshot.Files({bad: {}, "ok.pt": {}}), 1, 1)
        for count in (0, 1, 65):  # one file is its state itself
            with self.assertRaises(ValueError, msg=count):
                snapshot.Plan(snapshot.Files((f"f{i}", {}) for i in range(count)), 1, 1)
        # A forged list of files: a clear error.
        for forged in ([["a", 0, 5], ["a", 0, 5]], [["a", -1, 5]], [["a", 10, 1 << 40]],
                       [["a", 1.5, 2]], [["a", 1]], "files"):
            with self.assertRaises(snapshot.SnapshotError, msg=forged), \
                    written(snapshot.Plan(state, 7, 3)) as (_, m, header):
                snapshot.read(m, dict(header, files=forged))

    def test_a_ddp_checkpoint_is_one_state(self):
        from ftrun.flash_checkpoint.ddp import DdpCheckpointer
        import tempfile
        cp = DdpCheckpointer(tempfile.mkdtemp(prefix="ftrun-files-ddp-"))
        with self.assertRaisesRegex(ValueError, "ShardedCheckpointer"):
            cp.save_checkpoint(1, snapshot.Files({"a.pt": {}, "b.pt": {}}))

    def test_a_damaged_snapshot_is_a_clear_error(self):
        plan = snapshot.Plan({"w": torch.ones(3)}, 1, 1)
        buf = bytearray(plan.bytes)
        plan.write(buf)
        with self.assertRaisesRegex(snapshot.SnapshotError, "not an ftrun memory snapshot"):
            snapshot.read_header(b"\0" * 64)
        cut = bytearray(buf)
        cut[8:16] = (10 ** 9).to_bytes(8, "little")
        with self.assertRaisesRegex(snapshot.SnapshotError, "cut short"):
            snapshot.read_header(cut)
        with self.assertRaisesRegex(snapshot.SnapshotError, "bytes in"):
            snapshot.read_header(buf[:plan.bytes - 64])

    def test_a_descriptor_shorter_than_its_header_says_is_a_clear_error(self):
        plan = snapshot.Plan({"w": torch.ones(1 << 16)}, 1, 1)
        with written(plan) as (fd, m, header):
            os.ftruncate(fd, plan.bytes - 4096)  # the tensor's last bytes are gone
            with self.assertRaisesRegex(snapshot.SnapshotError, "ends 4096 bytes early"):
                snapshot.read(m, header, fd=fd)


if __name__ == "__main__":
    unittest.main()
