#!/usr/bin/python3
"""A rank of scripts/bench.py's merged-stacks section: reports 10 steps through ftrun's
helper, then (first attempt only) the last rank hangs in slow_step() while the others wait
in wait_for_peers(), as ranks stuck in a collective would; the next attempt exits 0."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts", "python"))
import ftrun  # noqa: E402


def slow_step():
    time.sleep(3600)


def wait_for_peers():
    time.sleep(3600)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ft = ftrun.connect()
    for step in range(10):
        ft.report(step)
        time.sleep(0.05)
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        if rank == world - 1:
            slow_step()
        wait_for_peers()
    ft.close()


if __name__ == "__main__":
    main()
