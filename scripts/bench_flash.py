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
    step, runs alternated. {"none"|"flash": [per job: (loop seconds, CPU seconds of the 4
    ranks' loops, CPU seconds of the agent meanwhile, blocking seconds per save on rank 0)]}:
    rank 0 is the one that saves; its blocking time includes the state_dict() calls."""
    out = {"none": [], "flash": []}
    for _ in range(runs):
        for extra, kind in (([], "none"), (["--flash"], "flash")):
            d = tempfile.mkdtemp(prefix="ftrun-bench-flash-")
            _ftrun(ftrun, ["--nproc-per-node", "4", "--log-dir", os.path.join(d, "logs"),
                           os.path.join(REPO, "scripts", "demo", "train.py"), "--steps",
                           str(steps), "--ckpt-every", "0", "--out", d, *extra], d)
            results = []
            for rank in range(4):
                with open(os.path.join(d, f"result.{rank}.json")) as f:
                    results.append(json.load(f))
            r0 = results[0]
            out[kind].append((r0["loop_seconds"], sum(r["loop_cpu_seconds"] for r in results),
                              r0["agent_cpu_seconds"],
                              r0["save_seconds"] / (steps - r0["resumed_at"])))
            subprocess.run(["rm", "-rf", d], check=False)
    return out


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
    jobs = every_step_cost(ftrun, runs, steps)

    def median(kind, i):
        return statistics.median(job[i] for job in jobs[kind])
    cost = median("flash", 0) / median("none", 0) - 1
    print(f"demo model, 4 ranks on {os.cpu_count()} CPUs, {steps} steps, median of {runs} jobs "
          f"each, alternated: training loop {median('none', 0):.2f} s without checkpoints "
          f"(a step {1e3 * median('none', 0) / steps:.2f} ms), {median('flash', 0):.2f} s with "
          f"a MEMORY save every step: {100 * cost:+.1f} % (target < 3 %)"
          f"{'  ok' if cost < 0.03 else '  MISSED'}")
    ranks = 1e6 * (median("flash", 1) - median("none", 1)) / steps
    agent = 1e6 * (median("flash", 2) - median("none", 2)) / steps
    print(f"  a save blocks rank 0 {1e6 * median('flash', 3):.0f} us (state_dict() calls "
          f"included); CPU per step, ranks + agent: {1e6 * median('none', 1) / steps:.0f} + "
          f"{1e6 * median('none', 2) / steps:.0f} us without saves, "
          f"{1e6 * median('flash', 1) / steps:.0f} + {1e6 * median('flash', 2) / steps:.0f} us "
          f"with: a save costs {ranks:.0f} us of the ranks' CPU and {agent:.0f} us of the "
          f"agent's")


if __name__ == "__main__":
    run(os.path.join(REPO, "build", "launcher", "ftrun"), int(sys.argv[1]) if len(sys.argv) > 1
        else 3)
