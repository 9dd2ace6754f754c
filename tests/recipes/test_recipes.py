#!/usr/bin/python3
"""Checks the operator recipes in scripts/recipes against the real ftrun binary.

Every ftrun command line in a recipe is pulled out of the file: shell lines (backslash
continuations joined, `exec`, `srun [--opt=val ...]` and `bash -c '...'` unwrapped) and
Kubernetes containers (command + args, `sh -c` strings unwrapped). The variables that a
scheduler, an operator or the user would set are replaced by sample values. Each line is
then run as `ftrun --dry-run ...` and must be accepted (exit 0). `ftrun master` has no
--dry-run, so for it every option that is used must appear in `ftrun master --help`. The
train_start and sbatch scripts are also run by bash with stand-ins for ftrun, srun and
scontrol on PATH. The ftrun stand-in adds --dry-run and calls the real binary.

Run:  FTRUN_BINARY=build/launcher/ftrun /usr/bin/python3 -m unittest discover -s tests/recipes -v
Needs Python 3 with yaml (Debian: python3-yaml). FTRUN_BINARY defaults to
<repo>/build/launcher/ftrun.
"""

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "scripts" / "recipes"
K8S = RECIPES / "k8s"
TORCHRUN_SCRIPT = RECIPES / "train_start_torchrun.sh"
MSRUN_SCRIPT = RECIPES / "train_start_msrun.sh"
SBATCH = RECIPES / "slurm" / "ftrun.sbatch"
FTRUN = Path(os.environ.get("FTRUN_BINARY") or REPO / "build" / "launcher" / "ftrun")

# Sample values of the variables the recipes read: what the Kubeflow training operator,
# Volcano's env and svc plugins, the downward API, Slurm or the user would set.
SAMPLE_ENV = {
    "WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "23456",
    "VK_TASK_INDEX": "1", "VC_TASK_INDEX": "1", "VC_WORKER_NUM": "4",
    "POD_IP": "10.0.0.2",
    "NNODES": "2", "NODE_RANK": "1", "NPROC_PER_NODE": "8", "TRAIN_SCRIPT": "train.py",
    "WORKER_NUM": "8", "LOCAL_WORKER_NUM": "4", "LOG_DIR": "msrun_log", "CLUSTER_TIME_OUT": "300",
    "SLURM_NNODES": "4", "SLURM_NODEID": "3", "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "node[001-004]",
}
SAMPLE_SCRIPT_ARGS = ["--lr", "0.1"]      # "$@"
SAMPLE_ARRAYS = {"FTRUN_EXTRA_ARGS": []}  # "${NAME[@]}"
# What training-operator >= 1.7 adds for a pod of rank 1 of 2 when spec.nprocPerNode is unset;
# ftrun reads PET_ variables, and the recipe's command line must win over them.
PYTORCHJOB_OPERATOR_ENV = {
    "PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "auto",
    "PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "23456",
}
TIMEOUT = 60

# ---------------------------------------------------------------------------------------------
# Extraction: from recipe text to ftrun argument vectors.
# ---------------------------------------------------------------------------------------------

_SHELL_VAR = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_]\w*)(?::-(?P<default>[^}]*))?\}|(?P<plain>[A-Za-z_]\w*))")
_QUOTED_LIST = re.compile(r'"\$(?:@|\{(?P<array>[A-Za-z_]\w*)\[@\]\})"')
_K8S_VAR = re.compile(r"\$\((?P<name>[A-Za-z_]\w*)\)")
_OPERATOR_CHARS = set("();<>|&")


class RecipeError(Exception):
    """A recipe line that the extraction cannot handle, e.g. an unknown variable."""


def _lookup(name, default, env):
    if name in env:
        return env[name]
    if default is not None:
        return default
    raise RecipeError(f"${name} has no sample value (add it to SAMPLE_ENV)")


def expand_shell(text, env=None, args=None, arrays=None):
    """Expands variables as one level of sh would, leaving single-quoted text alone.

    Handles $VAR, ${VAR}, ${VAR:-default}, "$@" and "${ARRAY[@]}" (each element one word).
    A variable without a sample value (and no default) raises RecipeError.
    """
    env = SAMPLE_ENV if env is None else env
    args = SAMPLE_SCRIPT_ARGS if args is None else args
    arrays = SAMPLE_ARRAYS if arrays is None else arrays
    out, i, in_single, in_double = [], 0, False, False
    while i < len(text):
        c = text[i]
        if c == "\\" and not in_single:
            out.append(text[i:i + 2])
            i += 2
            continue
        if not in_single and not in_double:
            m = _QUOTED_LIST.match(text, i)
            if m:
                name = m.group("array")
                if name is not None and name not in arrays:
                    raise RecipeError(f"array {name} has no sample value (add it to SAMPLE_ARRAYS)")
                words = args if name is None else arrays[name]
                out.append(" ".join(shlex.quote(w) for w in words))
                i = m.end()
                continue
        if c == "'" and not in_double:
            in_single = not in_single
        elif c == '"' and not in_single:
            in_double = not in_double
        elif c == "$" and not in_single:
            m = _SHELL_VAR.match(text, i)
            if m:
                value = _lookup(m.group("braced") or m.group("plain"), m.group("default"), env)
                if in_double:
                    out.append(re.sub(r'(["\\$`])', r"\\\1", value))
                else:
                    out.append(shlex.quote(value))
                i = m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def expand_k8s(text, env=None):
    """Kubernetes' own $(VAR) expansion in command and args; $$ stands for $."""
    env = SAMPLE_ENV if env is None else env
    text = _K8S_VAR.sub(lambda m: _lookup(m.group("name"), None, env), text)
    return text.replace("$$", "$")


def split_command(text):
    """Splits one (already expanded) shell command into words; stops at |, &&, ;, > and the like."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = []
    for word in lexer:
        if word and set(word) <= _OPERATOR_CHARS:
            if word[0] in "<>" and words and words[-1].isdigit():
                words.pop()  # the 2 of 2>&1
            break
        words.append(word)
    return words


def launched_argv(words, expand=expand_shell):
    """The words of the launched program, unwrapping exec, srun [--opt=val ...], VAR=value
    and sh/bash -c '...' (whose string is expanded as a new shell level)."""
    i = 0
    while i < len(words):
        if words[i] in ("exec", "nohup"):
            i += 1
        elif words[i] == "srun":
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 1
        elif re.fullmatch(r"[A-Za-z_]\w*=.*", words[i]):
            i += 1
        else:
            break
    rest = words[i:]
    if len(rest) >= 3 and os.path.basename(rest[0]) in ("sh", "bash") and rest[1] == "-c":
        return launched_argv(split_command(expand(rest[2])), expand)
    return rest


def ftrun_argv(words, expand=expand_shell):
    """The arguments after `ftrun` if these words start ftrun, else None."""
    argv = launched_argv(words, expand)
    if argv and os.path.basename(argv[0]) == "ftrun":
        return argv[1:]
    return None


def logical_lines(text):
    """(line number, text, commented) per logical line, with backslash continuations joined.

    For comment lines the leading # and blanks are removed first, so a commented command that
    is continued over several comment lines comes back as one line.
    """
    result, pending, start, pending_commented = [], None, 0, False
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        commented = stripped.startswith("#")
        content = stripped.lstrip("#").strip() if commented else stripped
        if pending is not None and commented == pending_commented:
            pending += " " + content
        else:
            if pending is not None:
                result.append((start, pending, pending_commented))
            pending, start, pending_commented = content, number, commented
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        result.append((start, pending, pending_commented))
        pending = None
    if pending is not None:
        result.append((start, pending, pending_commented))
    return result


_LAUNCH = re.compile(r"^(?:exec\s+|srun\s+(?:-\S+\s+)*)?(?:ftrun|(?:/bin/)?(?:ba)?sh\s+-c)\s")


def shell_invocations(text, commented=False, env=None, arrays=None):
    """[(line number, ftrun argv)] for the ftrun command lines of a shell script.

    commented=False: the script's own commands. commented=True: commands shown in comments
    (documented alternatives), i.e. comment lines that start with ftrun, exec ftrun,
    srun ... ftrun or sh -c.
    """
    expand = lambda s: expand_shell(s, env=env, arrays=arrays)  # noqa: E731
    found = []
    for number, line, is_comment in logical_lines(text):
        if is_comment != commented or not _LAUNCH.match(line):
            continue
        try:
            argv = ftrun_argv(split_command(expand(line)), expand)
        except ValueError:  # e.g. an apostrophe in prose; a command line never has one
            if not commented:
                raise
            continue
        if argv is not None:
            found.append((number, argv))
    return found


def original_invocations(text, tool):
    """[(line number, argv)] of the commented `torchrun ...` (or `msrun ...`) lines: the
    original lines that the recipe's ftrun lines replace. Quotes of seed documents that use
    variables without a sample value are left out."""
    found = []
    for number, line, is_comment in logical_lines(text):
        if is_comment and re.match(rf"^{tool}\s", line):
            try:
                found.append((number, split_command(expand_shell(line))[1:]))
            except RecipeError:
                pass  # a quote of a seed document (e.g. $DISTRIBUTED_ARGS), not a recipe line
    return found


def containers(node):
    """Every container (and init container) of every pod template in a parsed document."""
    if isinstance(node, dict):
        for key in ("containers", "initContainers"):
            if isinstance(node.get(key), list):
                yield from (c for c in node[key] if isinstance(c, dict))
        for value in node.values():
            yield from containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from containers(value)


def container_ftrun_argv(container, env=None):
    """The ftrun arguments of a container, None when it does not start ftrun."""
    argv = [expand_k8s(str(w), env) for w in (container.get("command") or []) +
            (container.get("args") or [])]
    expand = lambda s: expand_shell(s, env=env)  # noqa: E731
    return ftrun_argv(argv, expand)


def load_documents(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


# ---------------------------------------------------------------------------------------------
# Running ftrun.
# ---------------------------------------------------------------------------------------------


def clean_env(extra=None):
    """The caller's environment without PET_ variables (ftrun reads them), plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env.update(extra or {})
    return env


def run_ftrun(args, env_extra=None, cwd=None):
    return subprocess.run([str(FTRUN), *args], env=clean_env(env_extra), cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


def dry_run(argv, env_extra=None):
    """Runs `ftrun --dry-run <argv>` (for a personality such as msrun: `ftrun msrun --dry-run ...`)."""
    if argv and argv[0] == "msrun":
        return run_ftrun(["msrun", "--dry-run", *argv[1:]], env_extra)
    return run_ftrun(["--dry-run", *argv], env_extra)


def describe(proc):
    return (f"exit {proc.returncode}: {shlex.join(proc.args)}\n--- stdout\n{proc.stdout}"
            f"--- stderr\n{proc.stderr}")


_msrun_state = None


def msrun_support():
    """(True, None) when this ftrun has the msrun personality with a dry run, else (False, why)."""
    global _msrun_state
    if _msrun_state is None:
        proc = run_ftrun(["msrun", "--help"])
        if proc.returncode != 0 or "--worker_num" not in proc.stdout:
            _msrun_state = (False, f"`ftrun msrun --help` exits {proc.returncode} or does not "
                            "list --worker_num")
        elif "--dry_run" not in proc.stdout and "--dry-run" not in proc.stdout:
            _msrun_state = (False, "`ftrun msrun --help` does not list --dry_run")
        else:
            _msrun_state = (True, None)
    return _msrun_state


def master_help():
    proc = run_ftrun(["master", "--help"])
    return proc


def options_of(argv):
    """The --long and -s option names used in an argument vector (values after = dropped)."""
    return [w.split("=", 1)[0] for w in argv if re.match(r"^--?[A-Za-z]", w)]


# ---------------------------------------------------------------------------------------------
# Tests.
# ---------------------------------------------------------------------------------------------


class FtrunTestCase(unittest.TestCase):
    def setUp(self):
        if not (FTRUN.is_file() and os.access(FTRUN, os.X_OK)):
            self.fail(f"ftrun binary not found at {FTRUN}: build it or set FTRUN_BINARY")

    def assertDryRunAccepts(self, argv, where, env_extra=None):
        proc = dry_run(argv, env_extra)
        self.assertEqual(proc.returncode, 0, f"{where}: ftrun rejected a recipe line\n{describe(proc)}")
        self.assertIn("the command line is valid", proc.stdout, f"{where}\n{describe(proc)}")
        return proc

    def assertMasterAccepts(self, argv, where):
        self.assertEqual(argv[0], "master")
        proc = master_help()
        self.assertEqual(proc.returncode, 0, describe(proc))
        used = options_of(argv[1:])
        self.assertTrue(used, f"{where}: ftrun master without options")
        for option in used:
            self.assertRegex(proc.stdout, rf"(?m)^\s+(?:-\w, )?{re.escape(option)}\b",
                             f"{where}: `ftrun master --help` does not list {option}")


class ExtractionTest(unittest.TestCase):
    """The extraction itself, so that a recipe check cannot pass by finding nothing."""

    def test_continuations_exec_srun_and_bash_c(self):
        text = (
            "set -euo pipefail\n"
            'exec ftrun --nnodes "$NNODES" \\\n'
            '    --node_rank "${NODE_RANK}" "${FTRUN_EXTRA_ARGS[@]}" train.py "$@" 2>&1 | tee log\n'
            "srun --kill-on-bad-exit=1 bash -c 'exec ftrun --node-rank \"$SLURM_NODEID\" \\\n"
            "    t.py \"$@\"' task \"$@\"\n"
            "#   srun ftrun --rdzv-id \"$SLURM_JOB_ID\" \\\n"
            "#       t.py\n"
            "echo ftrun\n")
        self.assertEqual(shell_invocations(text), [
            (2, ["--nnodes", "2", "--node_rank", "1", "train.py", "--lr", "0.1"]),
            (4, ["--node-rank", "3", "t.py", "--lr", "0.1"]),
        ])
        self.assertEqual(shell_invocations(text, commented=True), [(6, ["--rdzv-id", "4242", "t.py"])])

    def test_single_quotes_and_defaults(self):
        self.assertEqual(split_command(expand_shell("ftrun x.py '--local-rank=${local_rank}'")),
                         ["ftrun", "x.py", "--local-rank=${local_rank}"])
        self.assertEqual(split_command(expand_shell('ftrun --nnodes "${UNSET_X:-1:4}" x.py')),
                         ["ftrun", "--nnodes", "1:4", "x.py"])
        with self.assertRaises(RecipeError):
            expand_shell("ftrun --nnodes $NO_SUCH_VARIABLE x.py")

    def test_kubernetes_container(self):
        container = {"command": ["/bin/sh", "-c"],
                     "args": ['exec ftrun --nnodes "${WORLD_SIZE}" --node-rank $(RANK) x.py']}
        self.assertEqual(container_ftrun_argv(container), ["--nnodes", "2", "--node-rank", "1", "x.py"])
        self.assertEqual(container_ftrun_argv({"command": ["ftrun", "master", "--port", "1"]}),
                         ["master", "--port", "1"])
        self.assertIsNone(container_ftrun_argv({"command": ["python3", "x.py"]}))



class BrokenLineTest(FtrunTestCase):
    def test_a_broken_line_fails_the_dry_run(self):
        # Node rank 2 of 2 nodes, and 0 workers per node: the check must catch both.
        for broken in ('ftrun --nnodes "$WORLD_SIZE" --node-rank 2 --master-addr "$MASTER_ADDR" x.py',
                       "exec ftrun --nproc-per-node 0 x.py"):
            argv = shell_invocations(broken)[0][1]
            proc = dry_run(argv)
            self.assertEqual(proc.returncode, 2, describe(proc))
        proc = dry_run(["--nnodes", "2", "x.py"])
        self.assertEqual(proc.returncode, 0, describe(proc))


class KubernetesTest(FtrunTestCase):
    def manifests(self):
        paths = sorted(K8S.glob("*.yaml")) + sorted(K8S.glob("*.yml"))
        self.assertTrue(paths, f"no manifests in {K8S}")
        return paths

    def test_documents_parse_and_are_named(self):
        for path in self.manifests():
            with self.subTest(manifest=path.name):
                documents = load_documents(path)
                self.assertTrue(documents, "no YAML document")
                for doc in documents:
                    self.assertIsInstance(doc, dict)
                    for key in ("apiVersion", "kind", "metadata"):
                        self.assertIn(key, doc, f"a document without {key}")
                    self.assertTrue(doc["metadata"].get("name"), f"a {doc['kind']} without metadata.name")
                    for c in containers(doc):
                        self.assertTrue(c.get("name") and c.get("image"),
                                        f"{doc['kind']}: a container without name or image: {c}")

    def test_workload_selectors_match_their_pods(self):
        for path in self.manifests():
            documents = load_documents(path)
            pod_labels = [d["spec"]["template"].get("metadata", {}).get("labels", {})
                          for d in documents if d.get("apiVersion") in ("apps/v1", "batch/v1")]
            for doc in documents:
                with self.subTest(manifest=path.name, object=f"{doc['kind']}/{doc['metadata']['name']}"):
                    if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
                        selector = doc["spec"]["selector"]["matchLabels"]
                        labels = doc["spec"]["template"]["metadata"]["labels"]
                        self.assertLessEqual(selector.items(), labels.items())
                    if doc["kind"] == "Service" and doc["spec"].get("selector"):
                        selector = doc["spec"]["selector"]
                        self.assertTrue(any(selector.items() <= l.items() for l in pod_labels),
                                        f"no pod in {path.name} matches the Service's selector {selector}")

    def test_ftrun_containers_are_accepted_by_ftrun(self):
        for path in self.manifests():
            count = 0
            for doc in load_documents(path):
                env_extra = PYTORCHJOB_OPERATOR_ENV if doc["kind"] == "PyTorchJob" else None
                for container in containers(doc):
                    where = f"{path.name}: {doc['kind']}/{doc['metadata']['name']} container {container['name']}"
                    mentions = "ftrun" in " ".join(map(str, (container.get("command") or []) +
                                                   (container.get("args") or [])))
                    argv = container_ftrun_argv(container)
                    with self.subTest(where):
                        self.assertEqual(argv is not None, mentions,
                                         f"{where}: mentions ftrun but no ftrun command was found")
                        if argv is None:
                            continue
                        count += 1
                        if argv and argv[0] == "master":
                            self.assertMasterAccepts(argv, where)
                        else:
                            self.assertDryRunAccepts(argv, where, env_extra)
            self.assertGreater(count, 0, f"{path.name}: no container runs ftrun")

    def test_master_and_workers_agree(self):
        path = K8S / "ftrun-master.yaml"
        documents = load_documents(path)
        by_kind = {}
        for doc in documents:
            by_kind.setdefault(doc["kind"], []).append(doc)
        masters, agents = [], []
        for doc in documents:
            for container in containers(doc):
                argv = container_ftrun_argv(container)
                if argv is not None:
                    (masters if argv[0] == "master" else agents).append((container, argv))
        self.assertEqual(len(masters), 1)
        self.assertTrue(agents)

        def value(argv, name, default=None):
            for i, word in enumerate(argv):
                if word == name and i + 1 < len(argv):
                    return argv[i + 1]
                if word.startswith(name + "="):
                    return word.split("=", 1)[1]
            return default

        master_container, master = masters[0]
        port = value(master, "--port", "29400")
        service = by_kind["Service"][0]
        self.assertIn(int(port), [p["port"] for p in service["spec"]["ports"]])
        probe_port = master_container["readinessProbe"]["tcpSocket"]["port"]
        self.assertIn(probe_port, (int(port), port))
        secrets = {s["metadata"]["name"]: s for s in by_kind.get("Secret", [])}

        def token_ref(container):
            for var in container.get("env") or []:
                if var["name"] == "FTRUN_RDZV_TOKEN":
                    return var["valueFrom"]["secretKeyRef"]
            return None

        for container, argv in [masters[0], *agents]:
            ref = token_ref(container)
            self.assertIsNotNone(ref, f"{container['name']}: no FTRUN_RDZV_TOKEN from a Secret")
            self.assertIn(ref["name"], secrets)
            self.assertIn(ref["key"], secrets[ref["name"]].get("stringData") or
                          secrets[ref["name"]].get("data") or {})
        for _, agent in agents:
            self.assertEqual(value(agent, "--nnodes"), value(master, "--nnodes"))
            self.assertEqual(value(agent, "--rdzv-id"), value(master, "--rdzv-id"))
            self.assertIn(value(agent, "--rdzv-backend"), ("c10d", "ftrun"))
            self.assertEqual(value(agent, "--rdzv-endpoint"), f"{service['metadata']['name']}:{port}")


class ShellRecipeTest(FtrunTestCase):
    SCRIPTS = (TORCHRUN_SCRIPT, MSRUN_SCRIPT, SBATCH)

    def test_bash_syntax(self):
        for path in self.SCRIPTS:
            with self.subTest(script=path.name):
                proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True,
                                      check=False)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertIn("set -euo pipefail", path.read_text(encoding="utf-8"))

    @unittest.skipUnless(shutil.which("shellcheck"), "shellcheck is not installed")
    def test_shellcheck(self):
        for path in self.SCRIPTS:
            with self.subTest(script=path.name):
                proc = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True,
                                      text=True, check=False)
                self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def check_lines(self, path, commented=False, minimum=1):
        lines = shell_invocations(path.read_text(encoding="utf-8"), commented=commented)
        self.assertGreaterEqual(len(lines), minimum, f"{path.name}: expected ftrun lines, found {lines}")
        for number, argv in lines:
            with self.subTest(line=f"{path.name}:{number}"):
                self.assertDryRunAccepts(argv, f"{path.name}:{number}")
        return lines

    def check_one_word_change(self, path, tool, personality):
        """Each ftrun line is preceded by the original line it replaces, with the same arguments."""
        text = path.read_text(encoding="utf-8")
        originals = original_invocations(text, tool)
        lines = shell_invocations(text)
        self.assertTrue(lines)
        for number, argv in lines:
            before = [o for n, o in originals if n < number]
            with self.subTest(line=f"{path.name}:{number}"):
                self.assertTrue(before, f"no commented {tool} line before line {number}")
                expected = ([personality] if personality else []) + before[-1]
                self.assertEqual(argv, expected, f"line {number} is not the {tool} line above it "
                                 "with ftrun in front")

    def test_torchrun_script_lines(self):
        lines = self.check_lines(TORCHRUN_SCRIPT, minimum=2)  # single node and multi-node
        self.assertTrue(any("--nnodes" in argv for _, argv in lines))

    def test_torchrun_script_is_a_one_word_change(self):
        self.check_one_word_change(TORCHRUN_SCRIPT, "torchrun", None)

    def test_torchrun_script_extras(self):
        """The commented ftrun-only extras, all switched on, are accepted too."""
        text = TORCHRUN_SCRIPT.read_text(encoding="utf-8")
        block = re.search(r"FTRUN_EXTRA_ARGS=\((.*?)\n\)", text, re.S)
        self.assertIsNotNone(block, "no FTRUN_EXTRA_ARGS=( ... ) block")
        extras = []
        for line in block.group(1).splitlines():
            m = re.match(r"\s*#\s*(--\S+(?:\s+[^\s#]+)?)", line)
            if m:
                extras += shlex.split(m.group(1))
        for option in ("--max-restarts", "--fault-save", "--hang-timeout", "--event-log", "--metrics-port"):
            self.assertIn(option, extras)
        lines = shell_invocations(text, arrays={"FTRUN_EXTRA_ARGS": extras})
        for number, argv in lines:
            with self.subTest(line=number):
                proc = self.assertDryRunAccepts(argv, f"{TORCHRUN_SCRIPT.name}:{number} with the extras")
                self.assertRegex(proc.stdout, r"max restarts:\s+3\b")
                self.assertRegex(proc.stdout, r"hang timeout 300")

    def test_sbatch_lines(self):
        self.check_lines(SBATCH)
        self.check_lines(SBATCH, commented=True)  # the dynamic alternative

    def test_msrun_script_is_a_one_word_change(self):
        self.check_one_word_change(MSRUN_SCRIPT, "msrun", "msrun")

    def test_msrun_script_lines(self):
        lines = shell_invocations(MSRUN_SCRIPT.read_text(encoding="utf-8"))
        self.assertGreaterEqual(len(lines), 2)
        self.assertTrue(all(argv[0] == "msrun" for _, argv in lines))
        supported, why = msrun_support()
        self.assertTrue(supported, why)
        for number, argv in lines:
            with self.subTest(line=number):
                self.assertDryRunAccepts(argv, f"{MSRUN_SCRIPT.name}:{number}")


# Stand-ins put first on PATH when a recipe script runs for real under bash.
SHIM_FTRUN = """#!/bin/sh
printf '%s\\n' "$*" >> "$SHIM_LOG"
exec "$SHIM_FTRUN_REAL" --dry-run "$@"
"""
# srun: one task, started here, with the task's own SLURM_NODEID (as srun sets it per node).
SHIM_SRUN = """#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
SLURM_NODEID="${SHIM_TASK_NODEID:-${SLURM_NODEID:-0}}"
export SLURM_NODEID
exec "$@"
"""
SHIM_SCONTROL = """#!/bin/sh
[ "$1 $2" = "show hostnames" ] || { echo "scontrol stand-in: $*" >&2; exit 2; }
printf 'node001\\nnode002\\nnode003\\nnode004\\n'
"""


class ScriptRunTest(FtrunTestCase):
    """Runs the scripts with bash, as an operator would, with ftrun in dry-run mode."""

    def run_script(self, script, env, args=()):
        with tempfile.TemporaryDirectory() as tmp:
            bindir = Path(tmp) / "bin"
            bindir.mkdir()
            for name, body in (("ftrun", SHIM_FTRUN), ("srun", SHIM_SRUN), ("scontrol", SHIM_SCONTROL)):
                (bindir / name).write_text(body, encoding="utf-8")
                (bindir / name).chmod(0o755)
            log = Path(tmp) / "ftrun-calls"
            full_env = clean_env({"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                                  "SHIM_LOG": str(log), "SHIM_FTRUN_REAL": str(FTRUN.resolve())})
            for name in ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "NPROC_PER_NODE",
                         "TRAIN_SCRIPT"):
                full_env.pop(name, None)
            full_env.update(env)
            proc = subprocess.run(["bash", str(script), *args], env=full_env, cwd=tmp,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=TIMEOUT, check=False)
            calls = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        self.assertEqual(proc.returncode, 0, describe(proc))
        self.assertEqual(len(calls), 1, f"ftrun was called {len(calls)} times: {calls}\n{describe(proc)}")
        return proc

    def test_torchrun_script_single_node(self):
        proc = self.run_script(TORCHRUN_SCRIPT, {"NPROC_PER_NODE": "4"}, ["--lr", "0.1"])
        self.assertRegex(proc.stdout, r"workers/node:\s+4\b")
        self.assertIn("single node", proc.stdout)
        self.assertIn("train.py --lr 0.1", proc.stdout)

    def test_torchrun_script_multi_node(self):
        proc = self.run_script(TORCHRUN_SCRIPT, {"MASTER_ADDR": "10.0.0.1", "NNODES": "2",
                                                 "NODE_RANK": "1"})
        self.assertIn("static, node rank 1 at 10.0.0.1:29500", proc.stdout)
        self.assertRegex(proc.stdout, r"max restarts:\s+5\b")

    def test_sbatch_gives_each_node_its_own_rank(self):
        # The batch script runs on node 0 (SLURM_NODEID=0); the task runs on node 3.
        proc = self.run_script(SBATCH, {"SLURM_JOB_NODELIST": "node[001-004]", "SLURM_NNODES": "4",
                                        "SLURM_NODEID": "0", "SLURM_JOB_ID": "4242",
                                        "SHIM_TASK_NODEID": "3"}, ["--epochs", "2"])
        self.assertRegex(proc.stdout, r"nodes:\s+4:4")
        self.assertIn("static, node rank 3 at node001:29500", proc.stdout)
        self.assertRegex(proc.stdout, r"max restarts:\s+3\b")
        self.assertIn("train.py --epochs 2", proc.stdout)


class ReadmeTest(unittest.TestCase):
    def test_every_recipe_is_described(self):
        readme = (RECIPES / "README.md").read_text(encoding="utf-8")
        for path in sorted(RECIPES.rglob("*")):
            if path.is_file() and path.name != "README.md":
                with self.subTest(recipe=path.name):
                    self.assertIn(path.name, readme)


if __name__ == "__main__":
    unittest.main()
