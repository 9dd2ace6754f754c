"""scripts/demo.sh's first run on a fresh machine says what it does: which step runs, which
packages it installs (one line per package set up), the build's progress, and how long each
step took. The real demo.sh, install-deps.sh and build.sh run in a copy of scripts/ with the
slow parts replaced by stand-ins on PATH (dpkg-query says two packages are missing, apt-get
sets them up, cmake prints ninja's progress) and a stand-in ftrun that writes the results a
training run without lost steps would; the real demo (torch, minutes) is what README's first
command runs.
"""
import os
import re
import shutil
import stat
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")

STANDINS = {
    # Two of install-deps.sh's packages are missing, the others installed.
    "dpkg-query": """#!/bin/sh
for last; do :; done
case "$last" in cmake|etcd-server) echo not-installed ;; *) echo installed ;; esac
""",
    "apt-get": """#!/bin/sh
[ "$1" = update ] && exit 0
echo "Reading package lists..."
echo "Setting up cmake (3.25.1-1) ..."
echo "Setting up etcd-server (3.4.23-4) ..."
""",
    # `cmake -S` configures (output discarded by build.sh); `cmake --build` prints ninja's lines.
    "cmake": """#!/bin/sh
[ "$1" = --build ] || exit 0
i=1
while [ $i -le 20 ]; do echo "[$i/20] Building CXX object f$i.cc.o"; i=$((i + 1)); done
""",
}

# What train.py writes at the end, for a run that resumed where the rank died, and the
# agent's post-mortem page.
FTRUN = """#!/bin/sh
out= step=0 logs=
while [ $# -gt 0 ]; do
  case "$1" in --out) out=$2 ;; --crash-step) step=$2 ;; --log-dir) logs=$2 ;; esac
  shift
done
mkdir -p "$out" "$logs/run"
touch "$logs/run/report.html"
attempt=1; [ "$step" = 0 ] && attempt=0
printf '{"weights": [0.5], "checksum": "c0ffee", "steps": 60, "attempt": %s, "resumed_at": %s}' \\
  "$attempt" "$step" > "$out/result.0.json"
echo "done"
"""


def executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


class FirstRun(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ftrun-demo-test-")
        self.addCleanup(shutil.rmtree, self.root, True)

    def test_says_each_step_what_it_installs_the_build_progress_and_the_times(self):
        tree = os.path.join(self.root, "tree")
        os.makedirs(os.path.join(tree, "scripts"))
        for name in ("demo.sh", "install-deps.sh", "build.sh"):
            shutil.copy(os.path.join(SCRIPTS, name), os.path.join(tree, "scripts", name))
        bin_dir = os.path.join(self.root, "bin")
        os.makedirs(bin_dir)
        for name, text in STANDINS.items():
            executable(os.path.join(bin_dir, name), text)
        build = os.path.join(self.root, "build")  # no CMakeCache.txt: a first build
        os.makedirs(os.path.join(build, "launcher"))
        executable(os.path.join(build, "launcher", "ftrun"), FTRUN)
        env = dict(os.environ, PATH=bin_dir + ":" + os.environ["PATH"], FTRUN_BUILD_DIR=build)
        if os.getuid() != 0:
            executable(os.path.join(bin_dir, "sudo"), '#!/bin/sh\nexec "$@"\n')
        r = subprocess.run(["bash", os.path.join(tree, "scripts", "demo.sh")], env=env,
                           capture_output=True, text=True, timeout=120)
        out = r.stdout
        self.assertEqual(r.returncode, 0, out + r.stderr)
        steps = re.findall(r"^== \[(\d)/5 [^]]+\] ", out, re.M)
        self.assertEqual(steps, ["1", "2", "3", "4", "5"], out)
        # What it installs, before it installs it, and each package as it is set up.
        self.assertIn("install-deps: 2 Debian packages missing: cmake etcd-server", out)
        self.assertRegex(out, r"\[1\] cmake\s*\n\s*\[2\] etcd-server")
        # A first build says so, and shows its progress by tenths with the time so far.
        self.assertRegex(out, r"== \[2/5 build\] configuring \(cmake\)")
        progress = re.findall(r"^\s+(\d+)%\s+(\d+)/20\s+\d+s\s+\S+$", out, re.M)
        self.assertEqual([int(p) for p, _ in progress], list(range(0, 101, 10))[1:], out)
        # How long each step took, and the whole demo.
        self.assertEqual(len(re.findall(r"^\s+\(took \d+ s", out, re.M)), 5, out)
        self.assertRegex(out, r"the whole demo \d+ s")
        self.assertIn("completed steps lost: 0", out)


if __name__ == "__main__":
    unittest.main()
