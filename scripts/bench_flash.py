"""The flash-checkpoint section of scripts/bench.py (`--only flash`), side by side with
torch.save: under a real ftrun,
  * the blocking time of a StorageType.MEMORY save per GiB of a rank's state (buffers reused
    after the first save), against torch.save + fsync of the same state to local disk;
  * the restore of that state from the agent's memory, per GiB;
  * DISK saves of it: the blocking time and the time until the agent has it on storage
    (wait_latest_checkpoint), against torch.save + fsync to new files kept (as the agent's
    are) and over a removed file's pages;
  * the agent's own memory (RssAnon: not the snapshots, which are shared memfd pages);
  * the cost of a MEMORY save after every step on the demo model (scripts/demo/train.py, 4
    ranks): short blocks of steps that save, only build the state dicts, or do neither
    alternate inside the same jobs (the machine is shared: whole jobs compared with each other
    differ by more than the effect); the time the saving blocks added over all cycles, with
    an interval from resamples of whole jobs, split into torch's share (the state_dict()
    calls) and ftrun's, and the bench's own noise (two blocks that do the same); beside it the
    per-save costs: the blocking time of rank 0 (the rank that saves), the agent's CPU per
    save and the CPU of all the processes per step.
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


# The fewest jobs whose resamples give an interval (bench.py --runs 7, its default, does):
# resampling few jobs makes the interval narrower than the truth, below 6 far too narrow.
MIN_JOBS = 6
# What every_step_cost sums per kind of block, in this order.
SECONDS, ALL_CPU, AGENT_CPU, BLOCKED, RANK0_CPU = range(5)


def every_step_cost(ftrun, block=25, cycles=25, state_fn=False):
    """One job of the demo model's training loop (4 ranks) in blocks of `block` steps that,
    after each step, save the state to memory (S), only build its state dicts (D: what any
    checkpointer needs, torch's share), or do neither (N): cycles of six blocks, S D N N D S (a
    slow drift of the shared machine's load cancels out of each cycle). The first cycle is left
    out (the first save builds its layout and maps its buffers). Returns one dict per cycle,
    the figures summed over its two blocks of each kind (seconds, ranks' CPU + the agent's,
    the agent's CPU, rank 0's blocking seconds, rank 0's CPU), and under "none 1" and "none 2"
    the seconds of each of its two adjacent N blocks alone (what the bench cannot tell from
    noise). state_fn: the saves
    pass a function that builds the state (train.py --flash-state-fn: only the saving rank
    builds it, in D blocks too) instead of DLRover's state dict built on every rank."""
    out = []
    steps = block * 6 * cycles
    d = tempfile.mkdtemp(prefix="ftrun-bench-flash-")
    _ftrun(ftrun, ["--nproc-per-node", "4", "--log-dir", os.path.join(d, "logs"),
                   os.path.join(REPO, "scripts", "demo", "train.py"), "--steps", str(steps),
                   "--ckpt-every", "0", "--out", d, "--flash", "--flash-blocks", str(block)]
           + (["--flash-state-fn"] if state_fn else []), d)
    results = []
    for rank in range(4):
        with open(os.path.join(d, f"result.{rank}.json")) as f:
            results.append(json.load(f))
    subprocess.run(["rm", "-rf", d], check=False)
    blocks = results[0]["blocks"]
    for first in range(6, len(blocks) - 5, 6):
        cycle = {"none 1": [blocks[first + 2][1]], "none 2": [blocks[first + 3][1]]}
        for b in range(first, first + 6):
            kind, seconds, rank0_cpu, agent_cpu, save_seconds = blocks[b]
            ranks_cpu = sum(r["blocks"][b][2] for r in results)
            total = cycle.setdefault(kind, [0.0] * 5)
            for i, v in enumerate((seconds, ranks_cpu + agent_cpu, agent_cpu, save_seconds,
                                   rank0_cpu)):
                total[i] += v
        out.append(cycle)
    return out


def added_time(jobs, longer, shorter, resamples=2000):
    """(estimate, 2.5th, 97.5th percentile) of how much longer the training loop ran in the
    blocks of kind `longer` than in those of kind `shorter`, as a fraction: their total
    seconds over all cycles of all jobs (what the throughput sees), with an interval from
    resamples of whole jobs (a job's cycles share its placement of ranks on CPUs, so they
    are not independent of each other)."""
    def ratio(picked):
        cycles = [c for job in picked for c in job]
        return (sum(c[longer][SECONDS] for c in cycles) /
                sum(c[shorter][SECONDS] for c in cycles) - 1)

    rng = random.Random(15)
    values = sorted(ratio(rng.choices(jobs, k=len(jobs))) for _ in range(resamples))
    return ratio(jobs), values[int(0.025 * resamples)], values[int(0.975 * resamples) - 1]


def print_every_step_cost(ftrun, runs, block=25, cycles=25):
    """Both ways of passing the state, in alternate jobs: DLRover's (a state dict built on
    every rank) and ftrun's function (built by the saving rank only)."""
    count = max(runs, 2)
    print(f"  measuring every-step MEMORY saves on the demo model ({count} jobs of each form)",
          file=sys.stderr, flush=True)
    jobs, loads = {False: [], True: []}, [load_average()]
    for _ in range(count):
        for state_fn in jobs:
            jobs[state_fn].append(every_step_cost(ftrun, block, cycles, state_fn))
    loads.append(load_average())
    for state_fn, form in ((False, "a state dict built on every rank (DLRover's form)"),
                           (True, "a function that builds the state on the saving rank only")):
        print(f"demo model, 4 ranks on {os.cpu_count()} CPUs, save_checkpoint given {form}, in "
              f"{count} jobs: {sum(map(len, jobs[state_fn]))} cycles of {block}-step blocks "
              "that save after every step (S), only build the state dicts the save needs (D) "
              f"or neither (N), S D N N D S; load average {loads[0]} before, {loads[-1]} after")
        _print_cost(jobs[state_fn], block)


def _print_cost(jobs, block):
    rows = [c for job in jobs for c in job]
    steps = 2 * block  # of each kind in a cycle

    print("  how much longer the training loop ran with the first kind of block than with the "
          "second, over all cycles:")
    for what, a, b, target in (("every-step saves (S against N)", "save", "none",
                                " (target < 3 %)"),
                               ("  the state dicts alone (D against N, torch's share)", "dicts",
                                "none", ""),
                               ("  the saves beyond the dicts (S against D, ftrun's share)",
                                "save", "dicts", ""),
                               ("  the noise (a cycle's 2nd N block against its 1st: one block "
                                "against one)", "none 2", "none 1", "")):
        cost, lo, hi = added_time(jobs, a, b)
        if len(jobs) >= MIN_JOBS:
            interval = f"95 % interval {100 * lo:+.1f} .. {100 * hi:+.1f} %"
        else:  # see MIN_JOBS
            interval, hi = f"no interval from {len(jobs)} jobs: {MIN_JOBS} needed", None
        verdict = ""
        if target:
            if hi is None:
                verdict = "  ok (estimate only)" if cost < 0.03 else "  missed (estimate only)"
            else:
                verdict = ("  ok" if hi < 0.03 else "  MISSED" if lo >= 0.03 else
                           "  not shown either way (the interval holds 3 %)")
        print(f"  {what}: {100 * cost:+.1f} % ({interval}){target}{verdict}")

    def per_step(kind, i):
        return statistics.median(r[kind][i] for r in rows) / steps

    def added(i):
        return statistics.median(r["save"][i] - r["none"][i] for r in rows) / steps

    step_without = per_step("none", SECONDS)
    blocking = per_step("save", BLOCKED)
    dicts = per_step("dicts", BLOCKED)
    agent, saver, extra = added(AGENT_CPU), added(RANK0_CPU), added(ALL_CPU)
    cpu_without = per_step("none", ALL_CPU)
    print(f"  a step takes {1e3 * step_without:.2f} ms without saves; a save blocks rank 0 "
          f"{1e6 * blocking:.0f} us ({1e6 * dicts:.0f} us of it the state_dict() calls; "
          f"{100 * blocking / step_without:.1f} % of a step) and costs rank 0 {1e6 * saver:.0f} "
          f"us of CPU (all its threads), the agent {1e6 * agent:.0f} us (medians over cycles)")
    print(f"  CPU per step, 4 ranks + agent: {1e6 * cpu_without:.0f} us without saves, "
          f"{1e6 * (cpu_without + extra):.0f} us with: {1e6 * extra:+.0f} us, "
          f"{100 * extra / cpu_without:+.1f} % (medians over cycles; what the saves cost the "
          "throughput while the ranks keep the CPUs busy)")


def run(ftrun, runs, sizes=(256, 1024)):
    print()
    print("flash checkpoint (ftrun agent memory vs torch.save + fsync to local disk), "
          f"1 rank, median of {runs} jobs")
    print("state".rjust(8) + "MEMORY save".rjust(14) + "per GiB".rjust(10) +
          "first save".rjust(12) + "torch.save+fsync".rjust(18) + "ratio".rjust(8) +
          "restore/GiB".rjust(13) + "agent anon".rjust(12) +
          "  targets: save <=0.5 s/GiB, ratio <=0.25, restore <=0.5")
    rows = {}
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
        rows[mib] = r
    print("DISK saves of the same state (the agent writes it in torch.save's format, fsync, "
          "rename, tracker; each step a new file, the older ones kept), against torch.save + "
          "fsync by the rank itself to new files kept alike, and over a removed file's pages")
    print("state".rjust(8) + "DISK save (blocking)".rjust(22) + "on storage after".rjust(18) +
          "torch.save+fsync kept".rjust(23) + "ratio".rjust(7) + "over removed".rjust(14))
    for mib, r in rows.items():
        print(f"{mib:>5}MiB" + f"{r['disk_save_s']:.3f} s".rjust(22) +
              f"{r['disk_stored_s']:.2f} s".rjust(18) +
              f"{r['torch_save_fsync_kept_s']:.2f} s".rjust(23) +
              f"{r['disk_stored_s'] / r['torch_save_fsync_kept_s']:.2f}".rjust(7) +
              f"{r['torch_save_fsync_s']:.2f} s".rjust(14))
    print_every_step_cost(ftrun, runs)

if __name__ == "__main__":
    run(os.path.join(REPO, "build", "launcher", "ftrun"), int(sys.argv[1]) if len(sys.argv) > 1
        else 3)
