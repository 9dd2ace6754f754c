"""The flash-checkpoint section of scripts/bench.py (`--only flash`), side by side with
torch.save: under a real ftrun,
  * the blocking time of a StorageType.MEMORY save per GiB of a rank's state (buffers reused
    after the first save), against torch.save + fsync of the same state to local disk;
  * the restore of that state from the agent's memory, per GiB;
  * the agent's own memory (RssAnon: not the snapshots, which are shared memfd pages);
  * the cost of a MEMORY save after every step on the demo model (scripts/demo/train.py, 4
    ranks): short blocks of steps with and without saves alternate inside the same jobs, and
    the median of the pairs' ratios is printed with its spread and the load average (the
    machine is shared: whole jobs compared with each other differ by more than the effect);
    beside it the stable per-save costs: the blocking time of rank 0 (the rank that saves),
    the agent's CPU per save and the CPU of all the processes per step.
Targets (issue 15): save <= 0.5 s/GiB and <= 1/4 of torch.save+fsync; restore <= 0.5 s/GiB;
every-step saves < 3 % of the training throughput.
"""
import json
import os
import random
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


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def every_step_cost(ftrun, jobs, block=25, pairs=24):
    """The demo model's training loop (4 ranks) with and without a MEMORY save after every
    step, measured in the same jobs: blocks of `block` steps alternate in ABBA order (with,
    without, without, with, ...: a slow drift of the shared machine's load cancels), and each
    neighbouring pair gives one ratio. The first pair of a job is left out (the first save
    builds its layout and maps its buffers). Returns the pairs: (seconds with, seconds without,
    the ranks' CPU + the agent's with / without, the agent's CPU with - without, rank 0's
    blocking seconds in the block with, rank 0's CPU (all its threads) with - without), and
    the load averages seen before and after."""
    out, loads = [], [load_average()]
    steps = block * 2 * pairs
    for _ in range(jobs):
        d = tempfile.mkdtemp(prefix="ftrun-bench-flash-")
        _ftrun(ftrun, ["--nproc-per-node", "4", "--log-dir", os.path.join(d, "logs"),
                       os.path.join(REPO, "scripts", "demo", "train.py"), "--steps", str(steps),
                       "--ckpt-every", "0", "--out", d, "--flash", "--flash-blocks", str(block)],
               d)
        results = []
        for rank in range(4):
            with open(os.path.join(d, f"result.{rank}.json")) as f:
                results.append(json.load(f))
        subprocess.run(["rm", "-rf", d], check=False)
        blocks = results[0]["blocks"]
        for i in range(2, len(blocks) - 1, 2):
            pair = {}
            for b in (i, i + 1):
                saves, seconds, _, agent_cpu, save_seconds = blocks[b]
                ranks_cpu = sum(r["blocks"][b][2] for r in results)
                pair[saves] = (seconds, ranks_cpu + agent_cpu, agent_cpu, save_seconds,
                               blocks[b][2])
            out.append((pair[True][0], pair[False][0], pair[True][1], pair[False][1],
                        pair[True][2] - pair[False][2], pair[True][3],
                        pair[True][4] - pair[False][4]))
        loads.append(load_average())
    return out, loads


def spread(values, resamples=2000):
    """(median, first quartile, third quartile, 2.5th and 97.5th percentile of the median over
    bootstrap resamples)."""
    rng = random.Random(15)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(resamples))
    q1, _, q3 = statistics.quantiles(values, n=4)
    return (statistics.median(values), q1, q3, medians[int(0.025 * resamples)],
            medians[int(0.975 * resamples) - 1])


def print_every_step_cost(ftrun, runs, block=25, pairs=24):
    jobs = max(runs, 2)
    print(f"  measuring every-step MEMORY saves on the demo model ({jobs} jobs)",
          file=sys.stderr, flush=True)
    rows, loads = every_step_cost(ftrun, jobs, block, pairs)
    cost, q1, q3, lo, hi = spread([with_ / without - 1 for with_, without, *_ in rows])
    step_without = statistics.median(without for _, without, *_ in rows) / block
    print(f"demo model, 4 ranks on {os.cpu_count()} CPUs, in {jobs} jobs: {len(rows)} pairs of "
          f"{block}-step blocks with and without a MEMORY save every step (ABBA order); "
          f"load average {loads[0]} before, {loads[-1]} after")
    print(f"  every-step saves cost {100 * cost:+.1f} % of the training loop's time (median of "
          f"the pairs' ratios; quartiles {100 * q1:+.1f} .. {100 * q3:+.1f} %, 95 % interval of "
          f"the median {100 * lo:+.1f} .. {100 * hi:+.1f} %; target < 3 %)"
          f"{'  ok' if hi < 0.03 else '  ok (median)' if cost < 0.03 else '  MISSED'}")
    blocking = statistics.median(r[5] for r in rows) / block
    cpu_with = statistics.median(r[2] for r in rows) / block
    cpu_without = statistics.median(r[3] for r in rows) / block
    agent = statistics.median(r[4] for r in rows) / block
    extra = statistics.median(r[2] - r[3] for r in rows) / block
    saver = statistics.median(r[6] for r in rows) / block
    print(f"  a step takes {1e3 * step_without:.2f} ms without saves; a save blocks rank 0 "
          f"{1e6 * blocking:.0f} us (state_dict() calls included: {100 * blocking / step_without:.1f} "
          f"% of a step) and costs rank 0 {1e6 * saver:.0f} us of CPU (all its threads), the "
          f"agent {1e6 * agent:.0f} us")
    print(f"  CPU per step, 4 ranks + agent: {1e6 * cpu_without:.0f} us without saves, "
          f"{1e6 * cpu_with:.0f} us with: +{1e6 * extra:.0f} us, {100 * extra / cpu_without:+.1f} % "
          "(what the saves cost the throughput while the ranks keep the CPUs busy)")


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
    print_every_step_cost(ftrun, runs)

if __name__ == "__main__":
    run(os.path.join(REPO, "build", "launcher", "ftrun"), int(sys.argv[1]) if len(sys.argv) > 1
        else 3)
