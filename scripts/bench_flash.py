"""The flash-checkpoint section of scripts/bench.py (`--only flash`), side by side with
torch.save: under a real ftrun,
  * the blocking time of a StorageType.MEMORY save per GiB of a rank's state (buffers reused
    after the first save), against torch.save + fsync of the same state to local disk;
  * the restore of that state from the agent's memory, per GiB;
  * the agent's own memory (RssAnon: not the snapshots, which are shared memfd pages);
  * the cost of a MEMORY save after every step on the demo model (scripts/demo/train.py, 4
    ranks): the training loop's time with --flash against no checkpoint at all, and the
    blocking time of one such save on rank 0 (the rank that saves).
Targets (issue 15): save <= 0.5 s/GiB and <= 1/4 of torch.save+fsync; restore <= 0.5 s/GiB;
every-step saves < 3 % of the training throughput.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"


def _ftrun(ftrun, args, cwd):
    done = subprocess.run([ftrun, "--log-level", "warning", *args], cwd=cwd,
                          env=dict(os.environ, PYTHON_EXEC=PYTHON), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"ftrun {' '.join(args)} failed:\n{done.stdout[-2000:]}")
    return done.stdout


def save_and_restore(ftrun, mib, runs):
    """Medians over `runs` jobs of flash_worker.py's figures for a state of `mib` MiB."""
    rows = []
    for _ in range(runs):
        d = tempfile.mkdtemp(prefix="ftrun-bench-flash-", dir="/var/tmp")
        out = _ftrun(ftrun, ["--no-python", PYTHON, os.path.join(REPO, "tests", "bench",
                                                                 "flash_worker.py"),
                             "--mib", str(mib), "--dir", d], d)
        rows.append(json.loads([l for l in out.splitlines() if l.startswith("{")][-1]))
        subprocess.run(["rm", "-rf", d], check=False)
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def every_step_cost(ftrun, runs, steps=400):
    """The demo model's training loop without checkpoints and with a MEMORY save after every
    step, runs alternated: (none, flash) lists of loop seconds, and the flash runs' blocking
    time per save on rank 0 (the one that saves; state_dict() calls included), in seconds."""
    none, flash, per_save = [], [], []
    for _ in range(runs):
        for extra, into in (([], none), (["--flash"], flash)):
            d = tempfile.mkdtemp(prefix="ftrun-bench-flash-")
            _ftrun(ftrun, ["--nproc-per-node", "4", "--log-dir", os.path.join(d, "logs"),
                           os.path.join(REPO, "scripts", "demo", "train.py"), "--steps",
                           str(steps), "--ckpt-every", "0", "--out", d, *extra], d)
            with open(os.path.join(d, "result.0.json")) as f:
                result = json.load(f)
            into.append(result["loop_seconds"])
            if extra:
                per_save.append(result["save_seconds"] / (steps - result["resumed_at"]))
            subprocess.run(["rm", "-rf", d], check=False)
    return none, flash, per_save


def run(ftrun, runs, sizes=(256, 1024)):
    print()
    print("flash checkpoint (ftrun agent memory vs torch.save + fsync to local disk), "
          f"1 rank, median of {runs} jobs")
    print("state".rjust(8) + "MEMORY save".rjust(14) + "per GiB".rjust(10) +
          "first save".rjust(12) + "torch.save+fsync".rjust(18) + "ratio".rjust(8) +
          "restore/GiB".rjust(13) + "agent anon".rjust(12) +
          "  targets: save <=0.5 s/GiB, ratio <=0.25, restore <=0.5")
    for mib in sizes:
        print(f"  measuring a {mib} MiB state", file=sys.stderr, flush=True)
        r = save_and_restore(ftrun, mib, runs)
        ratio = r["save_s"] / r["torch_save_fsync_s"]
        ok = (r["save_s_per_gib"] <= 0.5 and ratio <= 0.25 and r["restore_s_per_gib"] <= 0.5)
        print(f"{mib:>5}MiB" + f"{r['save_s']:.3f} s".rjust(14) +
              f"{r['save_s_per_gib']:.2f} s".rjust(10) + f"{r['first_save_s']:.2f} s".rjust(12) +
              f"{r['torch_save_fsync_s']:.2f} s".rjust(18) + f"{ratio:.2f}".rjust(8) +
              f"{r['restore_s_per_gib']:.2f} s".rjust(13) +
              f"{r['agent_rss_anon_mib']:.1f} MB".rjust(12) + ("  ok" if ok else "  MISSED"))
    print("  measuring every-step MEMORY saves on the demo model", file=sys.stderr, flush=True)
    steps = 400
    none, flash, per_save = every_step_cost(ftrun, runs, steps)
    cost = statistics.median(flash) / statistics.median(none) - 1
    print(f"demo model, 4 ranks on {os.cpu_count()} CPUs, {steps} steps, median of {runs} jobs "
          f"each, alternated: training loop {statistics.median(none):.2f} s without checkpoints "
          f"(a step {1e3 * statistics.median(none) / steps:.2f} ms), "
          f"{statistics.median(flash):.2f} s with a MEMORY save every step: {100 * cost:+.1f} % "
          f"(target < 3 %){'  ok' if cost < 0.03 else '  MISSED'}; a save blocks rank 0 "
          f"{1e6 * statistics.median(per_save):.0f} us (min of the jobs' means "
          f"{1e6 * min(per_save):.0f} us)")


if __name__ == "__main__":
    run(os.path.join(REPO, "build", "launcher", "ftrun"), int(sys.argv[1]) if len(sys.argv) > 1
        else 3)
