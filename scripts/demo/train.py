#!/usr/bin/python3
"""A small but real torch.distributed (gloo) DDP training job for ftrun's demo and tests.

Trains a tiny MLP on a fixed synthetic regression problem; the data of a step depends only on
(step, rank), so a resumed run sees exactly the batches it would have seen. It uses ftrun's
Python helper (scripts/python/ftrun):
  * every --ckpt-every steps rank 0 writes an atomic checkpoint (ftrun.save_checkpoint);
  * every rank registers a save handler, so when a peer dies a surviving replica saves the
    last step it completed (ftrun's fault-time save) before the job restarts;
  * at start every rank resumes from the newest complete checkpoint.
--flash instead saves the whole state after every step with the flash-checkpoint API
(ftrun.flash_checkpoint.ddp.DdpCheckpointer, StorageType.MEMORY: into the ftrun agent's memory)
and resumes with its load_checkpoint(); no save handler, no periodic checkpoint.
--crash-rank R --crash-step K SIGKILLs rank R at the start of step K on the first attempt.
--global-batch G makes a step's data independent of the world size (the chaos run changes it):
the step's G samples are split evenly among the ranks, so any world size dividing G computes
the same update.
Under torchrun (no ftrun agent) the helper does nothing and only periodic checkpoints exist.

  ftrun --nproc-per-node 4 --max-restarts 2 scripts/demo/train.py --steps 60 --out /tmp/run
"""
import argparse
import hashlib
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ftrun  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--ckpt-every", type=int, default=10, help="periodic checkpoints; 0: none")
    p.add_argument("--flash", action="store_true",
                   help="save every step to memory with the flash-checkpoint API instead")
    p.add_argument("--out", required=True, help="directory for checkpoints and results")
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--crash-step", type=int, default=-1)
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step")
    p.add_argument("--flash-state-fn", action="store_true",
                   help="with --flash, pass save_checkpoint a function that builds the state "
                   "(ftrun's extension): only the rank that stores it builds it")
    p.add_argument("--flash-blocks", type=int, default=0, metavar="N",
                   help="scripts/bench.py: with --flash, run blocks of N steps in cycles of "
                   "six: saving, only building the state dicts, neither, neither, only "
                   "building, saving (so a drift of the machine's load cancels), and record "
                   "each block's time: all three are measured in the same job")
    # Fault injection for tests: a rank that stops making progress, and broken fault-time saves.
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-step", type=int, default=-1)
    p.add_argument("--broken-save", choices=["raise", "hang", "partial", "exit"], default=None,
                   help="make the fault-time save handler fail (periodic saves still work)")
    p.add_argument("--hang-save-once", default=None, metavar="FILE",
                   help="while FILE exists, the first rank to save claims it and hangs")
    p.add_argument("--global-batch", type=int, default=0,
                   help="samples per step for the whole job, split among the ranks")
    p.add_argument("--progress", default=None, metavar="FILE",
                   help="rank 0 appends '<pid> <step>' here after each completed step")
    p.add_argument("--hold", default=None, metavar="FILE",
                   help="tests: before step S, wait while FILE holds a number <= S, so a fault "
                   "driver's schedule is not outrun (progress is reported meanwhile)")
    p.add_argument("--attempt-log", default=None, metavar="FILE",
                   help="rank 0 appends one JSON line per attempt (world size, resume step)")
    return p.parse_args()


# --flash-blocks: what each block of a cycle does after its steps.
BLOCK_CYCLE = ("save", "dicts", "none", "none", "dicts", "save")


def model_fn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def batch(step, rank, size):
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(size, 8, generator=g)
    y = (x[:, :1] * 2.0 - x[:, 1:2] + 0.5 * x[:, 2:3] ** 2)
    return x, y


def global_batch(step, rank, world, size):
    """Rows rank, rank+world, ... of the step's `size` samples: the same data for any world."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(size, 8, generator=g)
    y = (x[:, :1] * 2.0 - x[:, 1:2] + 0.5 * x[:, 2:3] ** 2)
    return x[rank::world], y[rank::world]


def flat_weights(model):
    return torch.cat([p.detach().flatten() for p in model.state_dict().values()])


def agent_cpu_seconds():
    """CPU time of this worker's parent (the ftrun agent), all its threads, for
    scripts/bench.py: from schedstat (nanoseconds; /proc's stat counts in 10 ms ticks)."""
    total = 0
    try:
        tasks = f"/proc/{os.getppid()}/task"
        for tid in os.listdir(tasks):
            with open(f"{tasks}/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass  # a thread that ended meanwhile: its time is left out
    return total / 1e9


def wait_while_held(path, step, ft):
    """--hold: wait before `step` while the number in `path` is <= step (no file, or no number
    in it: no hold). The last completed step is reported every second meanwhile, so the wait
    is not taken for a hang."""
    reported = time.monotonic()
    while True:
        try:
            with open(path) as f:
                hold = int(f.read())
        except (OSError, ValueError):
            return
        if hold > step:
            return
        time.sleep(0.01)
        if step > 0 and time.monotonic() - reported >= 1:
            ft.report(step - 1)
            reported = time.monotonic()


def checksum(weights):
    # Rounded, so that a resumed run (whose DDP gradient buckets reduce in a different order)
    # and a fault-free run print the same digest; --out holds the exact weights.
    return hashlib.sha256(weights.mul(1e6).round().numpy().tobytes()).hexdigest()[:16]


def main():
    args = parse_args()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    # float64: reduction-order differences stay near 1e-16 instead of amplifying.
    torch.set_default_dtype(torch.float64)
    root = os.path.join(args.out, "checkpoints")
    os.makedirs(args.out, exist_ok=True)

    model = DDP(model_fn())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    def write_state(step, directory):
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict()},
                   os.path.join(directory, "state.pt"))

    def fault_time_save(step, directory):
        if args.hang_save_once:
            try:
                os.rename(args.hang_save_once, f"{args.hang_save_once}.taken.{rank}")
                print(f"rank {rank}: fault-time save hangs (injected once)", flush=True)
                time.sleep(3600)
            except FileNotFoundError:
                pass
        if args.broken_save == "raise":
            raise OSError("injected: the checkpoint storage is gone")
        if args.broken_save == "exit":
            print(f"rank {rank}: exits instead of saving", flush=True)
            os._exit(0)
        if args.broken_save in ("hang", "partial"):
            with open(os.path.join(directory, "state.pt"), "wb") as f:
                f.write(b"half a checkpoint")
            print(f"rank {rank}: fault-time save hangs", flush=True)
            time.sleep(3600)
        write_state(step, directory)

    ft = ftrun.connect()
    start = 0
    flash = None
    if args.flash:
        from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType
        flash = DdpCheckpointer(os.path.join(args.out, "flash"))
        state = flash.load_checkpoint()
        if state:
            model.module.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            start = state["step"] + 1
    else:
        ft.register_save_handler(fault_time_save, root)  # every rank is a replica in DDP
    ckpt = None if args.flash else ftrun.latest_checkpoint(root)
    if ckpt is not None:
        state = torch.load(os.path.join(ckpt.part(), "state.pt"))
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = ckpt.step + 1
        ft.report(ckpt.step)
    if rank == 0:
        print(f"attempt {attempt}: world_size={world} resuming at step {start}", flush=True)
        if args.attempt_log:
            with open(args.attempt_log, "a") as f:
                f.write(json.dumps({"attempt": attempt, "world_size": world, "pid": os.getpid(),
                                    "resumed_at": start, "time": time.time()}) + "\n")
    if args.global_batch and args.global_batch % world:
        print(f"--global-batch {args.global_batch} is not a multiple of the world size {world}",
              file=sys.stderr, flush=True)
        return 2

    loss = torch.tensor(0.0)
    save_seconds = 0.0  # blocking time of the --flash saves (state_dict() calls included)
    # --flash-blocks: [kind, seconds, CPU seconds, agent CPU seconds, save seconds]
    blocks = []
    loop_started, cpu_started, agent_started = (time.monotonic(), time.process_time(),
                                                agent_cpu_seconds())
    with ft.guard():
        for step in range(start, args.steps):
            if args.hold:
                wait_while_held(args.hold, step, ft)
            if attempt == 0 and rank == args.crash_rank and step == args.crash_step:
                print(f"rank {rank}: injected crash at step {step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if attempt == 0 and rank == args.hang_rank and step == args.hang_step:
                print(f"rank {rank}: injected hang at step {step}", flush=True)
                time.sleep(3600)
            if args.flash_blocks and (step - start) % args.flash_blocks == 0:
                blocks.append([BLOCK_CYCLE[(step - start) // args.flash_blocks % 6],
                               time.perf_counter(), time.process_time(), agent_cpu_seconds(),
                               save_seconds])
            if args.global_batch:
                x, y = global_batch(step, rank, world, args.global_batch)
            else:
                x, y = batch(step, rank, args.batch)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            with ft.update(step):
                opt.step()
            if args.step_time:
                time.sleep(args.step_time)
            if rank == 0 and args.progress:
                with open(args.progress, "a") as f:
                    f.write(f"{os.getpid()} {step}\n")
            if rank == 0 and ((step + 1) % 10 == 0 or step + 1 == args.steps):
                print(f"step {step + 1}/{args.steps} loss {loss.item():.4f}", flush=True)
            kind = blocks[-1][0] if blocks else "save"
            if flash is not None and kind != "none":
                saving = time.perf_counter()

                def state(step=step):
                    return {"model": model.module.state_dict(), "opt": opt.state_dict(),
                            "step": step}
                if kind == "save":
                    flash.save_checkpoint(step, state if args.flash_state_fn else state(),
                                          storage_type=StorageType.MEMORY)
                elif not args.flash_state_fn or os.environ.get("LOCAL_RANK", "0") == "0":
                    state()  # "dicts": the state dicts the save makes this rank build
                save_seconds += time.perf_counter() - saving
            elif rank == 0 and args.ckpt_every > 0 and (step + 1) % args.ckpt_every == 0:
                ftrun.save_checkpoint(root, step, write_state)

    loop_seconds = time.monotonic() - loop_started
    ends = [b[1:] for b in blocks[1:]] + [[time.perf_counter(), time.process_time(),
                                           agent_cpu_seconds(), save_seconds]]
    blocks = [[b[0]] + [end - begun for end, begun in zip(e, b[1:])]
              for b, e in zip(blocks, ends)]
    loop_cpu = {"loop_cpu_seconds": time.process_time() - cpu_started,
                "agent_cpu_seconds": agent_cpu_seconds() - agent_started}
    weights = flat_weights(model.module)
    result = {"loop_seconds": loop_seconds, "save_seconds": save_seconds, **loop_cpu,
              "blocks": blocks,
              "rank": rank, "world_size": world, "attempt": attempt, "steps": args.steps,
              "resumed_at": start, "loss": loss.item(), "checksum": checksum(weights),
              "weights": weights.tolist()}
    with open(os.path.join(args.out, f"result.{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"done: {args.steps} steps, final loss {loss.item():.4f}, "
              f"weights {result['checksum']}", flush=True)
    # Ends here, before main()'s locals are freed: freeing the DDP module can hang torch 1.13
    # for good (its reducer drops the gloo group with the GIL held, and the group's destructor
    # waits for a gloo thread that waits for the GIL, pytorch#56297). All is written by now.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
