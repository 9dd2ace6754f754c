"""scripts/checks/comm_check.py with real torch.distributed (gloo): two ranks on 127.0.0.1,
started directly with the environment a torchrun worker gets. Needs Debian's python3-torch."""
import json
import os
import socket
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "checks", "comm_check.py")
PYTHON = os.environ.get("FTRUN_TEST_PYTHON", "/usr/bin/python3")
TIMEOUT = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(rank, world_size, port):
    env = dict(os.environ)
    env.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
               LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    return env


def start(rank, world_size, port, *args):
    return subprocess.Popen([PYTHON, SCRIPT, *args], env=worker_env(rank, world_size, port),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs):
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=TIMEOUT)
            out.append((p.returncode, o, e))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


class CommCheckTest(unittest.TestCase):
    def test_two_ranks_print_one_json_line_on_rank_0(self):
        port = free_port()
        args = ("--matmul-size", "64", "--allreduce-bytes", "65536", "--iters", "3",
                "--timeout", "60")
        (rc0, out0, err0), (rc1, out1, err1) = finish(
            [start(0, 2, port, *args), start(1, 2, port, *args)])
        self.assertEqual(rc0, 0, err0)
        self.assertEqual(rc1, 0, err1)
        lines = out0.splitlines()
        self.assertEqual(len(lines), 1, out0)
        rec = json.loads(lines[0])
        self.assertEqual(rec["rank"], 0)
        self.assertEqual(rec["world_size"], 2)
        self.assertEqual(rec["backend"], "gloo")
        self.assertEqual(rec["allreduce_bytes"], 65536)
        for key in ("matmul_ms", "allreduce_ms", "algbw_mbps", "busbw_mbps"):
            self.assertGreater(rec[key], 0, key)
        # n = 2: busbw = algbw * 2 (n - 1) / n = algbw
        self.assertAlmostEqual(rec["busbw_mbps"], rec["algbw_mbps"], delta=0.2)
        self.assertEqual(out1, "")

    def test_all_ranks_flag(self):
        port = free_port()
        args = ("--matmul-size", "16", "--allreduce-bytes", "1024", "--iters", "1",
                "--all-ranks")
        results = finish([start(0, 2, port, *args), start(1, 2, port, *args)])
        ranks = []
        for rc, out, err in results:
            self.assertEqual(rc, 0, err)
            ranks.append(json.loads(out)["rank"])
        self.assertEqual(ranks, [0, 1])

    def test_missing_peer_fails_with_one_line(self):
        # Rank 1 alone: nobody hosts the store at MASTER_PORT.
        (rc, out, err), = finish([start(1, 2, free_port(), "--timeout", "2")])
        self.assertEqual(rc, 1)
        self.assertEqual(out, "")
        self.assertRegex(err.splitlines()[-1], r"^comm_check: rank 1: \w+")

    def test_usage_errors(self):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        p = subprocess.run([PYTHON, SCRIPT], env=env, capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr, "comm_check: RANK is not set (run me under ftrun or torchrun)\n")
        p = subprocess.run([PYTHON, SCRIPT, "--iters", "0"], env=worker_env(0, 1, 1),
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    unittest.main()
