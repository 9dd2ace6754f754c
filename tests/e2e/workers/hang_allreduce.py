#!/usr/bin/python3
"""All-reduce in a loop (torch.distributed, gloo) until one rank hangs in user code: rank
--hang-rank sleeps in slow_step() at step --hang-step while the others wait for it in
all_reduce. --helper reports progress through ftrun's helper (for --hang-timeout); without
it the script never imports ftrun. --hung FILE is created as the rank starts to hang.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def slow_step(hung):
    if hung:
        open(hung, "w").close()
    time.sleep(3600)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-step", type=int, default=5)
    p.add_argument("--helper", action="store_true")
    p.add_argument("--hung", default="")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ft = None
    if args.helper:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "..", "scripts", "python"))
        import ftrun
        ft = ftrun.connect()
    t = torch.ones(4)
    step = 0
    while True:
        if rank == args.hang_rank and step == args.hang_step:
            slow_step(args.hung)
        dist.all_reduce(t)
        if ft is not None:
            ft.report(step)
        step += 1
        time.sleep(0.05)


if __name__ == "__main__":
    main()
