"""scripts/checks/switchbox_probe.py where there is no CUDA (the test machines): one error
JSON line per pair, exit 2, one line on stderr. Runs with or without torch installed."""
import json
import os
import subprocess
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "checks", "switchbox_probe.py")
PYTHON = os.environ.get("FTRUN_TEST_PYTHON", "/usr/bin/python3")


def run(*args):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    return subprocess.run([PYTHON, SCRIPT, *args], env=env, capture_output=True, text=True,
                          timeout=60)


class SwitchboxProbeTest(unittest.TestCase):
    def test_no_cuda_gives_an_error_line_per_pair(self):
        p = run("--pairs", "0:1", "2:4", "--bytes", "1024")
        self.assertEqual(p.returncode, 2, p.stderr)
        lines = [json.loads(l) for l in p.stdout.splitlines()]
        self.assertEqual([l["pair"] for l in lines], ["0:1", "2:4"])
        for l in lines:
            self.assertNotIn("bandwidth_mbps", l)
            self.assertTrue(l["error"])
        err = p.stderr.splitlines()
        self.assertEqual(len(err), 1, p.stderr)
        self.assertTrue(err[0].startswith("switchbox_probe: "), err[0])
        self.assertEqual(err[0], "switchbox_probe: " + lines[0]["error"])

    def test_bad_pair_is_a_usage_error(self):
        p = run("--pairs", "0-1")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stdout, "")
        self.assertIn('bad pair "0-1" (expected A:B', p.stderr)
        self.assertEqual(run("--pairs", "3:3").returncode, 2)


if __name__ == "__main__":
    unittest.main()
