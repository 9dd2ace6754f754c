"""ftrun/standby.py (--warm-restart's standby interpreter) against a fake agent: the hand-over
wire, and a script run as a cold `python -u script.py` would run it (stdlib only, no torch)."""
import array
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
STANDBY = os.path.realpath(os.path.join(HERE, "..", "..", "..", "scripts", "python", "ftrun",
                                        "standby.py"))
PY = sys.executable

SCRIPT = r'''
import json, os, signal, sys
out = {"argv": sys.argv, "file": __file__, "name": __name__, "path0": sys.path[0],
       "cwd": os.getcwd(), "env": os.environ.get("RANK"), "json_loaded": "json" in sys.modules,
       "sigint": getattr(signal.getsignal(signal.SIGINT), "__name__", None),
       "keys": sorted(k for k in globals() if k.startswith("__"))}
print(json.dumps(out), flush=True)
if sys.argv[1] == "raise":
    raise ValueError("boom")
sys.exit(int(sys.argv[1]))
'''


def frame(cwd, argv, env):
    fields = [cwd.encode(), str(len(argv)).encode()] + [a.encode() for a in argv]
    fields += [str(len(env)).encode()] + [f"{k}={v}".encode() for k, v in env.items()]
    body = b"".join(f + b"\0" for f in fields)
    return b"FTRUNHO1" + len(body).to_bytes(4, "little") + body


class Standby:
    def __init__(self, preload, target, args=()):
        self.agent, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [PY, "-u", STANDBY, "--preload", preload, "--script", target, "--", *args],
            stdin=theirs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", "/bin")})
        theirs.close()
        self.agent.settimeout(30)
        self.buf = b""

    def line(self):
        while b"\n" not in self.buf:
            chunk = self.agent.recv(4096)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def hand_over(self, cwd, argv, env, out, err):
        fds = array.array("i", [0, out.fileno(), err.fileno()])
        data = frame(cwd, argv, env)
        self.agent.sendmsg([data[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
        self.agent.sendall(data[1:])


class StandbyTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.script = os.path.join(self.dir, "work.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)

    def standby(self, preload, args=()):
        s = Standby(preload, self.script, args)
        self.addCleanup(s.agent.close)
        return s

    def run_worker(self, arg):
        s = self.standby("json", ["x"])
        self.assertEqual(s.line(), "ready")
        out = open(os.path.join(self.dir, "out"), "w+")
        err = open(os.path.join(self.dir, "err"), "w+")
        self.addCleanup(out.close)
        self.addCleanup(err.close)
        s.hand_over(self.dir, [self.script, arg], {"RANK": "5", "PATH": "/bin"}, out, err)
        self.assertEqual(s.line(), "ack")
        code = s.proc.wait(timeout=30)
        out.seek(0)
        err.seek(0)
        return code, json.loads(out.readline()), err.read()

    def test_runs_the_script_as_a_cold_interpreter_would(self):
        code, seen, _ = self.run_worker("7")
        self.assertEqual(code, 7)
        cold = subprocess.run([PY, "-u", self.script, "7"], capture_output=True, text=True,
                              cwd=self.dir, env={"RANK": "5", "PATH": "/bin"})
        self.assertEqual(cold.returncode, 7)
        expected = json.loads(cold.stdout)
        expected["json_loaded"] = True  # preloaded: the one intended difference
        self.assertEqual(seen, expected)

    def test_an_uncaught_exception_prints_the_scripts_traceback_and_exits_1(self):
        code, _, err = self.run_worker("raise")
        self.assertEqual(code, 1)
        self.assertIn("Traceback (most recent call last):", err)
        self.assertIn(f'File "{self.script}", line 9, in <module>', err)
        self.assertIn("ValueError: boom", err)
        self.assertNotIn("standby.py", err)

    def test_a_module_that_fails_to_import_is_reported_and_the_standby_exits(self):
        s = self.standby("json,ftrun_no_such_module")
        line = s.line()
        self.assertTrue(line.startswith("broken preload_failed module=ftrun_no_such_module "
                                        "error=ModuleNotFoundError"), line)
        self.assertEqual(s.proc.wait(timeout=30), 3)

    def test_a_standby_the_agent_lets_go_exits_quietly(self):
        s = self.standby("")
        self.assertEqual(s.line(), "ready")
        s.agent.close()
        self.assertEqual(s.proc.wait(timeout=30), 0)

    def test_a_malformed_hand_over_is_refused(self):
        s = self.standby("")
        self.assertEqual(s.line(), "ready")
        s.agent.sendall(b"NOTMAGIC\0\0\0\0")
        self.assertTrue(s.line().startswith("broken bad_handover"))
        self.assertEqual(s.proc.wait(timeout=30), 3)


if __name__ == "__main__":
    unittest.main()
