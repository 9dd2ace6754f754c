"""Every launch line of tests/corpus/launch_lines.txt, read by ftrun's dry run and by torch's
own parser (Debian's torch 1.13), must come out the same: nodes, workers per node,
rendezvous, run id, restarts, node rank and the worker's exact command. msrun's lines (no
torch parser) are checked against msrun's rule: every option takes a value, the first other
word is the task script, and it and its arguments reach the worker unchanged.

Debian's torch is torch 1.13, whose parser knows only the --a_b spellings of torchrun 1.13's
options. The test gives it what the newest torchrun's parser adds (the --a-b spellings, the
options added since, dlrover-run's options, which dlrover-run adds to torch's parser the
same way) and the newest argparse's rule that an abbreviation matching two spellings of one
option is not ambiguous; nothing else of it is changed.
Run by ctest with FTRUN_BINARY set; needs /usr/bin/python3 with torch.
"""
import contextlib
import io
import json
import os
import re
import shlex
import string
import subprocess
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "launch_lines.txt")
FTRUN = os.environ.get("FTRUN_BINARY", "ftrun")

# What the start scripts' variables hold; RUN_ID and HEAD_NODE_ADDR are unset on purpose.
SHELL_ENV = {
    "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "PORT": "29501", "NNODES": "2",
    "NODE_RANK": "1", "GPUS": "8", "GPUS_PER_NODE": "8", "NGPU": "8", "NUM_GPUS": "2",
    "NODE_NUM": "2", "NUM_TRAINERS": "4", "LOG_RANK": "0", "CONFIG_FILE": "./llama3_8b.toml",
    "PRETRAIN_CHKPT": "mae_pretrain.pth", "IMAGENET_DIR": "/data/imagenet",
}
SHELL_ENV["DISTRIBUTED_ARGS"] = (
    "--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --node_rank $NODE_RANK "
    "--master_addr $MASTER_ADDR --master_port $MASTER_PORT")

LAUNCHERS = [
    (["torchrun"], "torchrun", []),
    (["python", "-m", "torch.distributed.run"], "torchrun", ["torch.distributed.run"]),
    (["python", "-m", "torch.distributed.launch"], "launch", ["torch.distributed.launch"]),
    (["dlrover-run"], "dlrover", ["dlrover-run"]),
    (["msrun"], "msrun", ["msrun", "--dry-run"]),
]


def expand(text):
    """$VAR and ${VAR} as a shell expands them (unset: nothing); ${local_rank} stays."""
    def sub(m):
        name = m.group(1) or m.group(2)
        if name == "local_rank":
            return m.group(0)
        return expand(SHELL_ENV.get(name, ""))
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, text)


def read_corpus():
    lines = []
    with open(CORPUS) as f:
        for n, raw in enumerate(f, 1):
            raw = raw.strip()
            if not raw or raw.startswith("#"):
                continue
            parts = [p.strip() for p in raw.split(" | ")]
            repo, command = parts[0], parts[1]
            expect = parts[2][len("expect "):] if len(parts) > 2 else ""
            words = shlex.split(expand(command))
            env = {}
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                key, _, value = words.pop(0).partition("=")
                env[key] = value
            if words and words[0] == "python3":
                words[0] = "python"
            for prefix, kind, ftrun_prefix in LAUNCHERS:
                if words[:len(prefix)] == prefix:
                    lines.append((n, repo, command, kind, ftrun_prefix, words[len(prefix):], expect,
                                  env))
                    break
            else:
                raise AssertionError(f"line {n}: unknown launcher in {command!r}")
    return lines


def both_spellings(parser):
    for action in list(parser._actions):
        for s in list(action.option_strings):
            if not s.startswith("--"):
                continue
            for other in (s[:2] + s[2:].replace("_", "-"), s[:2] + s[2:].replace("-", "_")):
                if other not in parser._option_string_actions:
                    action.option_strings.append(other)
                    parser._option_string_actions[other] = action
    plain = parser._get_option_tuples

    def one_per_option(option_string):  # newest argparse: spellings of one option agree
        seen, out = set(), []
        for t in plain(option_string):
            if id(t[0]) not in seen:
                seen.add(id(t[0]))
                out.append(t)
        return out
    parser._get_option_tuples = one_per_option
    return parser


def torch_parser(kind):
    from torch.distributed.run import get_args_parser
    p = get_args_parser()
    # Added to torchrun after 1.13 (see ftrun(1) and the torchrun reference).
    for name in ("--local_addr", "--logs_specs", "--local_ranks_filter", "--signals_to_handle",
                 "--event_log_handler", "--numa_binding", "--duplicate_stdout_filters",
                 "--duplicate_stderr_filters"):
        p.add_argument(name, default=None)
    p.add_argument("--shutdown_timeout", type=int, default=None)
    p.add_argument("--virtual_local_rank", action="store_true")
    if kind == "launch":
        p.add_argument("--use_env", action="store_true")
    if kind == "dlrover":
        for flag in ("--network_check", "--comm_perf_test", "--exclude_straggler", "--auto_config",
                     "--auto_tunning", "--save_at_breakpoint", "--switchbox_check",
                     "--numa_affinity"):
            p.add_argument(flag, action="store_true")
        for name, typ in (("--precheck", int), ("--node_unit", int), ("--accelerator", str),
                          ("--training_port", int), ("--min_bandwidth", float),
                          ("--min_channels", int), ("--membind_policy", str),
                          ("--ucp_device_type", str)):
            p.add_argument(name, type=typ, default=None)
        p.add_argument("--box_pairs", nargs="+", default=None)
    return both_spellings(p)


def torch_expectation(kind, argv):
    """What torch makes of a line: the fields ftrun's dry run prints, or SystemExit."""
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint
    from torch.distributed.run import parse_min_max_nnodes
    args = torch_parser(kind).parse_args(argv)
    min_nodes, max_nodes = parse_min_max_nnodes(args.nnodes)
    backend, endpoint, run_id = args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id
    if args.standalone:
        backend, run_id = "standalone", None
    if backend == "static":
        min_nodes = max_nodes  # ftrun's static backend waits for all (a warning says so)
        host, port = parse_rendezvous_endpoint(
            endpoint or f"{args.master_addr}:{args.master_port}", -1)
    elif backend == "c10d":
        host, port = parse_rendezvous_endpoint(endpoint, 29400)
    else:
        host = port = None
    if kind == "dlrover" and args.node_unit:
        # dlrover-run's rule: a round's node count is a multiple of --node_unit.
        unit = args.node_unit
        min_nodes = max(unit, (min_nodes + unit - 1) // unit * unit)
    words = []
    if not args.no_python:
        words += ["-u"] + (["-m"] if args.module else [])
    words.append(args.training_script)
    if kind == "launch" and not args.use_env:
        words.append("--local_rank=${local_rank}")
    words += args.training_script_args
    words = [string.Template(w).safe_substitute(local_rank=0) for w in words]
    return {
        "min_nodes": min_nodes, "max_nodes": max_nodes, "nproc_per_node": args.nproc_per_node,
        "rdzv_backend": backend, "endpoint": (host, port), "run_id": run_id,
        "max_restarts": args.max_restarts,
        "node_rank": args.node_rank if backend == "static" else None,
        "worker_args": words,
    }


@contextlib.contextmanager
def environment(extra):
    """The line's VAR=value prefixes, for torch's parser (it reads PET_* when built)."""
    saved = dict(os.environ)
    os.environ.update(extra)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_ftrun(prefix, argv, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env.update(env_extra)
    return subprocess.run([FTRUN, *prefix, *argv], env=env, capture_output=True, text=True,
                          timeout=60)


def dry_run_json(stdout):
    for line in stdout.splitlines():
        if line.startswith("  as json:"):
            return json.loads(line.split(":", 1)[1])
    raise AssertionError("no 'as json' line in:\n" + stdout)


def ftrun_fields(out, kind):
    host, _, port = out["rdzv_endpoint"].rpartition(":")
    argv = out["worker0_argv"]
    return {
        "min_nodes": out["min_nodes"], "max_nodes": out["max_nodes"],
        "nproc_per_node": out["nproc_per_node"], "rdzv_backend": out["rdzv_backend"],
        "endpoint": (host.strip("[]"), int(port)) if out["rdzv_backend"] != "standalone"
        else (None, None),
        "run_id": out["run_id"] if out["rdzv_backend"] != "standalone" else None,
        "max_restarts": int(out["max_restarts"]),
        "node_rank": int(out["node_rank"]) if out["rdzv_backend"] == "static" else None,
        "worker_args": argv[1:] if argv[0].startswith("python") else argv,
    }


def msrun_split(argv):
    """msrun's parser: every option takes a value (--a=b or --a b); then the task script."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 1 if "=" in argv[i] else 2
    return argv[i:]


def script_and_args(worker_args):
    """The script (or program) and its arguments in a worker's words after the program."""
    if worker_args[0] != "-u":
        return worker_args
    return worker_args[2:] if worker_args[1] == "-m" else worker_args[1:]


class Corpus(unittest.TestCase):
    def test_corpus_has_lines_of_every_launcher(self):
        kinds = [line[3] for line in read_corpus()]
        repos = {line[1] for line in read_corpus()}
        self.assertGreaterEqual(len(repos), 50)
        for kind in ("torchrun", "launch", "dlrover", "msrun"):
            self.assertGreaterEqual(kinds.count(kind), 4, kind)
        self.assertGreaterEqual(len(kinds), 100)

    def test_every_line_comes_out_right(self):
        for n, repo, command, kind, prefix, argv, expect, env in read_corpus():
            with self.subTest(line=n, repo=repo), environment(env):
                extra = dict(env, **({"PET_DRY_RUN": "1"} if kind != "msrun" else {}))
                proc = run_ftrun(prefix, argv, extra)
                if expect.startswith("usage-error:"):
                    self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
                    self.assertIn(expect[len("usage-error:"):].strip(), proc.stderr)
                    self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
                    if kind == "msrun":
                        continue
                    # torch reads the empty value as empty and the next word normally.
                    args = torch_parser(kind).parse_args(argv)
                    self.assertTrue("" in (args.rdzv_id, args.master_addr), vars(args))
                    self.assertEqual(args.nnodes, "2")
                    continue
                self.assertEqual(proc.returncode, 0, f"{command}\n{proc.stdout}{proc.stderr}")
                out = dry_run_json(proc.stdout)
                if kind == "msrun":
                    task = msrun_split(argv)
                    words = out["worker0_argv"]
                    self.assertEqual(words[-len(task):], task, command)
                    continue
                got = ftrun_fields(out, kind)
                if expect == "torch-rejects":
                    with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
                        torch_parser(kind).parse_args(argv)
                    self.assertEqual(script_and_args(got["worker_args"]),
                                     argv[argv.index(script_and_args(got["worker_args"])[0]):])
                    continue
                want = torch_expectation(kind, argv)
                if expect == "torch-drops-dashdash":
                    tail = script_and_args(want["worker_args"])
                    written = argv[argv.index(tail[0]):]
                    self.assertNotEqual(tail, written)
                    want["worker_args"] = want["worker_args"][:-len(tail)] + written
                self.assertEqual(got, want, command)


if __name__ == "__main__":
    unittest.main()
