"""The Python worker helper (scripts/python/ftrun), stdlib only: checkpoint integrity and
the worker end of the control protocol against a fake agent."""
import json
import os
import shutil
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts", "python"))

import ftrun  # noqa: E402
from ftrun import checkpoint  # noqa: E402


def write_state(value):
    def handler(step, directory):
        with open(os.path.join(directory, "state.txt"), "w") as f:
            f.write(f"{value} at {step}")
        os.makedirs(os.path.join(directory, "sub"), exist_ok=True)
        with open(os.path.join(directory, "sub", "more.bin"), "wb") as f:
            f.write(os.urandom(1000))
    return handler


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()

    def test_save_then_latest(self):
        ftrun.save_checkpoint(self.root, 3, write_state("a"), world_size=2)
        path = ftrun.save_checkpoint(self.root, 7, write_state("b"), world_size=2)
        self.assertEqual(os.path.basename(path), "ftrun-step-7")
        ckpt = ftrun.latest_checkpoint(self.root)
        self.assertEqual(ckpt.step, 7)
        with open(os.path.join(ckpt.part(), "state.txt")) as f:
            self.assertEqual(f.read(), "b at 7")
        self.assertEqual(ckpt.manifest["world_size"], 2)
        self.assertEqual(sorted(os.listdir(self.root)), ["ftrun-step-3", "ftrun-step-7"])

    def test_partial_and_corrupt_checkpoints_are_skipped(self):
        ftrun.save_checkpoint(self.root, 1, write_state("good"))
        bad = ftrun.save_checkpoint(self.root, 2, write_state("flipped"))
        with open(os.path.join(bad, "group-all", "state.txt"), "r+") as f:
            f.write("X")  # same size, wrong checksum
        short = ftrun.save_checkpoint(self.root, 3, write_state("short"))
        os.truncate(os.path.join(short, "group-all", "sub", "more.bin"), 10)
        os.makedirs(os.path.join(self.root, "ftrun-step-4"))  # renamed without a manifest?
        shutil.copytree(os.path.join(self.root, "ftrun-step-1"),  # a copy under a newer name
                        os.path.join(self.root, "ftrun-step-6"))
        os.makedirs(os.path.join(self.root, ".ftrun-step-5.tmp-x", "group-all"))  # interrupted
        log = open(os.devnull, "w")
        ckpt = ftrun.latest_checkpoint(self.root, log=log)
        self.assertEqual(ckpt.step, 1)
        for path, why in ((bad, "wrong checksum"), (short, "wrong size"),
                          (os.path.join(self.root, "ftrun-step-6"), "is of step 1, not of the "
                           "step 6 its directory names")):
            with self.assertRaisesRegex(ftrun.CheckpointError, why):
                checkpoint.verify(path)

    def test_files_are_checked_by_crc32_and_older_sha256_records_still_verify(self):
        path = ftrun.save_checkpoint(self.root, 1, write_state("a"))
        manifest_path = os.path.join(path, "MANIFEST.json")
        with open(manifest_path) as f:
            manifest = json.load(f)
        files = manifest["groups"][""]["files"]
        self.assertEqual(sorted(files["state.txt"]), ["crc32", "size"])
        state = os.path.join(path, "group-all", "state.txt")
        # A manifest entry without either checksum never verifies (the file intact); one
        # written before 2026-11-29 records sha256 instead of crc32, and still verifies.
        for sha256 in (False, True):
            for rel, meta in files.items():
                meta.pop("crc32", None)
                if sha256:
                    meta["sha256"] = checkpoint._sha256(os.path.join(path, "group-all", rel))
            with open(manifest_path, "w") as f:
                json.dump(manifest, f)
            if sha256:
                self.assertEqual(checkpoint.verify(path)["step"], 1)
                with open(state, "r+") as f:
                    f.write("X")
            with self.assertRaisesRegex(ftrun.CheckpointError, "state.txt has the wrong checksum"
                                        if sha256 else "state.txt has no checksum in the manifest"):
                checkpoint.verify(path)

    def test_failing_handler_leaves_nothing(self):
        def broken(step, directory):
            raise OSError("disk full")
        with self.assertRaises(OSError):
            ftrun.save_checkpoint(self.root, 9, broken)
        self.assertEqual(os.listdir(self.root), [])
        self.assertIsNone(ftrun.latest_checkpoint(self.root))

    def test_groups_write_parts_then_one_finalizes(self):
        tmp = checkpoint.temp_dir(self.root, 5, "t")
        checkpoint.write_part(tmp, "shard/0", 5, write_state("s0"))
        with self.assertRaisesRegex(ftrun.CheckpointError, "no complete part"):
            checkpoint.finalize(self.root, tmp, 5, ["shard/0", "shard/1"], 4, "fault")
        checkpoint.write_part(tmp, "shard/1", 5, write_state("s1"))
        checkpoint.finalize(self.root, tmp, 5, ["shard/0", "shard/1"], 4, "fault")
        ckpt = ftrun.latest_checkpoint(self.root)
        with open(os.path.join(ckpt.part("shard/1"), "state.txt")) as f:
            self.assertEqual(f.read(), "s1 at 5")
        with self.assertRaisesRegex(ftrun.CheckpointError, "no replica group 'x'"):
            ckpt.part("x")


class FakeAgent:
    """A Unix socket server playing the agent: records lines, sends orders."""

    def __init__(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "agent.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.lines = []
        self.conn = None
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        self.conn, _ = self.server.accept()
        buf = b""
        while True:
            chunk = self.conn.recv(4096)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self.lines.append(json.loads(line))

    def send(self, msg):
        self.conn.sendall((json.dumps(msg) + "\n").encode())

    def wait_for(self, pred, timeout=5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in list(self.lines):
                if pred(m):
                    return m
            time.sleep(0.01)
        raise AssertionError(f"not received; got {self.lines}")


class ControlTest(unittest.TestCase):
    def setUp(self):
        self.agent = FakeAgent()
        os.environ.update(FTRUN_CONTROL_SOCKET=self.agent.path, RANK="3", WORLD_SIZE="4")
        self.root = tempfile.mkdtemp()

    def tearDown(self):
        os.environ.pop("FTRUN_CONTROL_SOCKET")

    def test_without_an_agent_everything_is_a_no_op(self):
        os.environ.pop("FTRUN_CONTROL_SOCKET")
        ft = ftrun.connect()
        self.assertIsInstance(ft, ftrun.NullController)
        with ft.guard(), ft.update(1):
            ft.register_save_handler(write_state("x"), self.root)
        os.environ["FTRUN_CONTROL_SOCKET"] = self.agent.path

    def test_hello_progress_and_a_fault_time_save(self):
        ft = ftrun.connect()
        hello = self.agent.wait_for(lambda m: m["type"] == "hello")
        self.assertEqual((hello["version"], hello["rank"], hello["pid"]), (1, 3, os.getpid()))
        ft.register_save_handler(write_state("w"), self.root, group="dp")
        self.agent.wait_for(lambda m: m["type"] == "handler" and m["group"] == "dp")
        with ft.update(41):
            self.agent.wait_for(lambda m: m == {"type": "progress", "step": 41, "updating": True})
        self.agent.wait_for(lambda m: m == {"type": "progress", "step": 41, "updating": False})
        self.agent.send({"type": "save", "id": 2, "step": 41, "group": "dp", "finalize": True,
                         "tag": "0-2"})
        ack = self.agent.wait_for(lambda m: m["type"] == "saved")
        self.assertEqual((ack["id"], ack["ok"]), (2, True), ack)
        ckpt = ftrun.latest_checkpoint(self.root)
        self.assertEqual(ckpt.step, 41)
        self.assertEqual(ckpt.manifest["reason"], "fault")
        with open(os.path.join(ckpt.part("dp"), "state.txt")) as f:
            self.assertEqual(f.read(), "w at 41")

    def test_an_encoded_request_reaches_the_agent_as_its_dict_would(self):
        from ftrun.control import Encoded
        ft = ftrun.connect()
        ft.post(Encoded("snapshot_commit", '{"type":"snapshot_commit","path":"/a \\"b\\"",'
                                           '"step":7'))
        pending = ft.request_async(Encoded("snapshot_begin", '{"type":"snapshot_begin","step":8'),
                                   before={"type": "snapshot_commit", "step": 8})
        commit = self.agent.wait_for(lambda m: m.get("step") == 7)
        self.assertEqual(commit, {"type": "snapshot_commit", "path": '/a "b"', "step": 7,
                                  "id": commit["id"]})
        begin = self.agent.wait_for(lambda m: m["type"] == "snapshot_begin")
        self.assertEqual(begin["step"], 8)
        kinds = [(m["type"], m["step"]) for m in self.agent.lines if "step" in m]
        self.assertEqual(kinds[-2:], [("snapshot_commit", 8), ("snapshot_begin", 8)])  # in order
        self.agent.send({"type": "snapshot_lease", "id": begin["id"], "step": 8})
        answer, fd = pending.wait(5)
        self.assertEqual((answer["type"], fd), ("snapshot_lease", -1))

    def save_at(self, ft, at, asked, save_id=7):
        """The state is at step `at` and the agent orders a save of `asked`: its answer."""
        ft.report(at)
        self.agent.wait_for(lambda m: m.get("step") == at)
        self.agent.send({"type": "save", "id": save_id, "step": asked, "group": "",
                         "finalize": True})
        return self.agent.wait_for(lambda m: m["type"] == "saved" and m["id"] == save_id)

    def assert_save_of_step_6_refused_at_step_5(self, ft):
        ack = self.save_at(ft, 5, 6)
        self.assertFalse(ack["ok"])
        self.assertIn("at step 5, not 6", ack["error"])

    def test_save_of_another_step_is_refused(self):
        ft = ftrun.connect()
        ft.register_save_handler(write_state("w"), self.root)
        self.assert_save_of_step_6_refused_at_step_5(ft)
        self.assertIsNone(ftrun.latest_checkpoint(self.root))

    def test_a_memory_fault_save_may_wait_for_the_agent_and_needs_no_finalize(self):
        ft = ftrun.connect()
        saved = []

        def to_memory(step):  # as a flash checkpointer's: asks the agent, waits for its answer
            answer, _ = ft.request({"type": "snapshot_begin", "step": step}, timeout=5)
            saved.append((step, answer["type"]))
        ft.register_save_handler(write_state("w"), self.root)
        ft.register_memory_save(to_memory, group="")
        self.agent.wait_for(lambda m: m["type"] == "handler" and m["group"] == "")
        ft.report(9)
        self.agent.wait_for(lambda m: m.get("step") == 9)
        self.agent.send({"type": "save", "id": 4, "step": 9, "group": "", "finalize": False})
        begin = self.agent.wait_for(lambda m: m["type"] == "snapshot_begin")
        self.agent.send({"type": "snapshot_lease", "id": begin["id"], "step": 9})
        ack = self.agent.wait_for(lambda m: m["type"] == "saved")
        self.assertEqual((ack["id"], ack["ok"]), (4, True), ack)
        self.assertEqual(saved, [(9, "snapshot_lease")])
        self.agent.send({"type": "finalize", "id": 4, "step": 9, "groups": [""]})
        done = self.agent.wait_for(lambda m: m["type"] == "saved" and m.get("finalize"))
        self.assertTrue(done["ok"], done)
        self.assertIsNone(ftrun.latest_checkpoint(self.root), "the memory save wrote no files")

    def test_a_memory_fault_save_of_another_step_is_refused_without_asking_the_state(self):
        ft = ftrun.connect()
        asked = []
        ft.register_memory_save(asked.append)
        self.assert_save_of_step_6_refused_at_step_5(ft)
        self.assertEqual(asked, [])

    def test_a_memory_fault_save_of_a_step_the_state_has_passed_saves_the_newer_one(self):
        # The order was planned on step 5's progress; the update of 6 ended while it was on
        # its way. A snapshot of 6 carries its step (the restore takes what every copy holds),
        # better than none: the files of a disk save must be of the step asked (above).
        ft = ftrun.connect()
        asked = []
        ft.register_memory_save(asked.append)
        ack = self.save_at(ft, 6, 5, save_id=8)
        self.assertEqual((ack["id"], ack["ok"]), (8, True), ack)
        self.assertEqual(asked, [6])

    def test_a_disk_fault_save_of_a_step_the_state_has_passed_is_refused(self):
        ft = ftrun.connect()
        ft.register_save_handler(write_state("w"), self.root)
        ack = self.save_at(ft, 6, 5, save_id=9)
        self.assertFalse(ack["ok"])
        self.assertIn("at step 6, not 5", ack["error"])
        self.assertIsNone(ftrun.latest_checkpoint(self.root))

    def test_guard_reports_a_peer_failure_and_waits(self):
        ft = ftrun.connect()
        ft.save_timeout = 0.2  # how long it waits past the save (plus a minute in real use)
        t0 = time.monotonic()
        with self.assertRaises(RuntimeError):
            with ft.guard():
                threading.Timer(0.3, ft.close).start()  # the agent goes away: stop waiting
                raise RuntimeError("[gloo] Connection closed by peer [127.0.0.1]:1234")
        self.assertGreater(time.monotonic() - t0, 0.25)
        self.agent.wait_for(lambda m: m["type"] == "peer_failed" and "gloo" in m["error"])

    def test_guard_lets_other_errors_through_at_once(self):
        ft = ftrun.connect()
        with self.assertRaises(ValueError):
            with ft.guard():
                raise ValueError("a bug in the training script")

    def test_the_end_of_the_loop_and_close_say_finished(self):
        ft = ftrun.connect()
        with ft.guard():
            ft.report(3)
        self.agent.wait_for(lambda m: m == {"type": "finished"})
        n = sum(1 for m in self.agent.lines if m["type"] == "finished")
        ft.close()
        self.agent.wait_for(lambda m: m["type"] == "finished" and
                            sum(1 for x in self.agent.lines if x["type"] == "finished") > n)

    def test_msrun_names_for_rank_and_world_size(self):
        os.environ.pop("RANK")
        os.environ.pop("WORLD_SIZE")
        os.environ.update(RANK_ID="5", RANK_SIZE="8")
        try:
            ft = ftrun.connect()
            self.assertEqual((ft.rank, ft.world_size), (5, 8))
            hello = self.agent.wait_for(lambda m: m["type"] == "hello")
            self.assertEqual(hello["rank"], 5)
        finally:
            os.environ.pop("RANK_ID")
            os.environ.pop("RANK_SIZE")
            os.environ.update(RANK="3", WORLD_SIZE="4")

    def test_stack_dump_signal_is_registered(self):
        code = ("import os, signal, sys, time; sys.path.insert(0, %r); os.environ['RANK']='0';"
                "import ftrun; ft = ftrun.connect(); time.sleep(5)") % os.path.join(
                    HERE, "..", "..", "..", "scripts", "python")
        env = dict(os.environ, FTRUN_STACK_SIGNAL="36", RANK="0")
        p = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE,
                             text=True)
        self.agent.wait_for(lambda m: m["type"] == "hello" and m["rank"] == 0)
        os.kill(p.pid, 36)
        # faulthandler's stack dump, waited for on stderr (the child sleeps on meanwhile).
        err, deadline = "", time.monotonic() + 10
        while "(most recent call first)" not in err and time.monotonic() < deadline:
            ready, _, _ = select.select([p.stderr], [], [], deadline - time.monotonic())
            if not ready:
                break
            line = p.stderr.readline()
            if not line:
                break
            err += line
        p.kill()
        p.communicate()
        self.assertIn("(most recent call first)", err)

    def test_stack_dump_goes_to_its_own_file_in_the_stack_dir(self):
        code = ("import os, signal, sys, time; sys.path.insert(0, %r); os.environ['RANK']='0';"
                "import ftrun; ft = ftrun.connect(); time.sleep(5)") % os.path.join(
                    HERE, "..", "..", "..", "scripts", "python")
        with tempfile.TemporaryDirectory() as where:
            env = dict(os.environ, FTRUN_STACK_SIGNAL="36", FTRUN_STACK_DIR=where, RANK="0")
            p = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE,
                                 text=True)
            self.agent.wait_for(lambda m: m["type"] == "hello" and m["rank"] == 0)
            os.kill(p.pid, 36)
            dump, text, deadline = os.path.join(where, f"stack-{p.pid}.txt"), "", \
                time.monotonic() + 10
            while "(most recent call first)" not in text and time.monotonic() < deadline:
                time.sleep(0.05)
                with open(dump) as f:
                    text = f.read()
            p.kill()
            _, err = p.communicate()
            self.assertIn("(most recent call first)", text)
            self.assertNotIn("(most recent call first)", err)


if __name__ == "__main__":
    unittest.main()
