#!/usr/bin/python3
"""A Megatron-shaped training script adapted to MindIO TTP exactly as MindCluster's guide adapts
Megatron's training.py and optimizer.py ("临终遗言"), with the one import changed to ftrun.ttp.
No Megatron here: the pieces the guide touches are small stand-ins with the same shape:

  * mpu: tensor-parallel groups of --tp ranks; the data-parallel groups across them, and
    get_data_parallel_all_rank() (the function the guide adds to parallel_state.py);
  * the optimizer wrapper calls ttp_start_updating_os(-1) / ttp_end_updating_os(current_step)
    around optimizer.step() (the guide's optimizer.py change);
  * train() is decorated with @ttp.ttp_to_persist and starts the controller (rank 0) and the
    processor (every rank) with its data-parallel ranks, registers the save and rename handlers
    and calls ttp_set_ckpt_args((iteration, model, optimizer, opt_param_scheduler)) after every
    iteration (the guide's training.py change);
  * save_checkpoint / load_checkpoint write and read Megatron's layout:
    <save>/iter_<7 digits>/mp_rank_<tp 2 digits>/model_optim_rng.pt and the tracker
    latest_checkpointed_iteration.txt; the TTP save handler writes iter_..._tmp and the rename
    handler publishes it, as mindio_ttp.megatron_ttp's pair does.

A rank's data depends only on (iteration, data-parallel rank), so a run that loses no step ends
with the weights of the run without faults. --kill-rank R --kill-iter K SIGKILLs rank R in the
middle of iteration K (after its forward, before the gradients are reduced) on the first attempt.
"""
import argparse
import json
import os
import signal
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                                "python"))
import ftrun.ttp as ttp  # was: import mindio_ttp.framework_ttp as ttp  # noqa: E402

TRACKER = "latest_checkpointed_iteration.txt"
_ARGS = None


def get_args():
    return _ARGS


class mpu:  # megatron.core.parallel_state, the parts the guide uses
    tp_group = dp_group = None
    tp_rank = dp_rank = 0
    dp_ranks = []

    @classmethod
    def initialize_model_parallel(cls, tp):
        world, rank = dist.get_world_size(), dist.get_rank()
        if world % tp:
            raise ValueError(f"world size {world} is not a multiple of --tp {tp}")
        for start in range(0, world, tp):  # every rank creates every group, as Megatron does
            ranks = list(range(start, start + tp))
            group = dist.new_group(ranks)
            if rank in ranks:
                cls.tp_group, cls.tp_rank = group, ranks.index(rank)
        for i in range(tp):
            ranks = list(range(i, world, tp))
            group = dist.new_group(ranks)
            if rank in ranks:
                cls.dp_group, cls.dp_rank, cls.dp_ranks = group, ranks.index(rank), ranks

    @classmethod
    def get_data_parallel_all_rank(cls):
        return cls.dp_ranks

    @classmethod
    def get_data_parallel_world_size(cls):
        return len(cls.dp_ranks)


class Optimizer:  # megatron/optimizer/optimizer.py's step(), with the guide's TTP lines
    def __init__(self, params, lr):
        self.optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
        self.current_step = 0

    def increase_step(self):
        self.current_step += 1

    def zero_grad(self):
        self.optimizer.zero_grad()

    def step(self):
        ttp.ttp_start_updating_os(-1)
        self.optimizer.step()
        if hasattr(self, "increase_step"):
            self.increase_step()
        ttp.ttp_end_updating_os(self.current_step)

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict(), "current_step": self.current_step}

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])
        self.current_step = state["current_step"]


def build_model():
    torch.manual_seed(100 + mpu.tp_rank)  # each tensor-parallel rank holds a different shard
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _iteration_dir(root, iteration, tmp=False):
    return os.path.join(root, f"iter_{iteration:07d}" + ("_tmp" if tmp else ""))


def _write_shard(directory, iteration, model, optimizer):
    path = os.path.join(directory, f"mp_rank_{mpu.tp_rank:02d}", "model_optim_rng.pt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save({"iteration": iteration, "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, path + ".part")
    os.replace(path + ".part", path)


def _write_tracker(root, iteration):
    with open(os.path.join(root, TRACKER + ".part"), "w") as f:
        f.write(str(iteration))
    os.replace(os.path.join(root, TRACKER + ".part"), os.path.join(root, TRACKER))


def save_checkpoint(iteration, model, optimizer, opt_param_scheduler):
    """Megatron's periodic save: one rank per tensor-parallel shard writes it."""
    root = get_args().save
    if mpu.dp_rank == 0:
        _write_shard(_iteration_dir(root, iteration), iteration, model, optimizer)
    dist.barrier()
    if dist.get_rank() == 0:
        _write_tracker(root, iteration)
    dist.barrier()


def ttp_save_checkpoint(step, save_info, args):
    """The TTP save handler (mindio_ttp.megatron_ttp's role): the chosen replica writes its
    shard of the newest complete iteration into iter_<step>_tmp."""
    iteration, model, optimizer, _ = args
    if iteration != step:
        raise RuntimeError(f"the args are at iteration {iteration}, the save is of step {step}")
    _write_shard(_iteration_dir(get_args().save, step, tmp=True), step, model, optimizer)


def rename_save_result(step, args):
    """The TTP rename handler: once every shard is saved, publish iter_<step>."""
    root = get_args().save
    final = _iteration_dir(root, step)
    if not os.path.exists(final):
        os.rename(_iteration_dir(root, step, tmp=True), final)
    _write_tracker(root, step)


def load_checkpoint(model, optimizer, opt_param_scheduler):
    root = get_args().load
    try:
        with open(os.path.join(root, TRACKER)) as f:
            iteration = int(f.read())
    except FileNotFoundError:
        return 0
    path = os.path.join(_iteration_dir(root, iteration), f"mp_rank_{mpu.tp_rank:02d}",
                        "model_optim_rng.pt")
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["iteration"]


def train_step(model, optimizer, iteration):
    args = get_args()
    g = torch.Generator().manual_seed(iteration * 1000 + mpu.dp_rank)
    x = torch.randn(16, 8, generator=g)
    y = x.sum(dim=1, keepdim=True).sin()
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if attempt == 0 and iteration == args.kill_iter and dist.get_rank() == args.kill_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    # Reduce gradients over the data-parallel group.
    for p in model.parameters():
        dist.all_reduce(p.grad, group=mpu.dp_group)
        p.grad /= mpu.get_data_parallel_world_size()
    # all rank need to barrier (the guide's addition)
    torch.distributed.barrier()
    optimizer.step()
    return loss.item()


@ttp.ttp_to_persist
def train(model, optimizer, opt_param_scheduler, iteration):
    args = get_args()
    # begin to init ttp processor & controller (the guide's lines)
    cur_rank = torch.distributed.get_rank()
    world_size: int = torch.distributed.get_world_size()
    masterIp = os.getenv('MASTER_ADDR')
    port = int(os.getenv('TTP_PORT'))
    dp_ranks = mpu.get_data_parallel_all_rank()
    if cur_rank == 0:
        controller_ip = os.getenv('XDL_IP')
        ttp.ttp_init_controller(cur_rank, world_size, len(dp_ranks) // 2, False)
        ttp.ttp_start_controller(controller_ip, port)
    ttp.ttp_init_processor(cur_rank, dp_ranks, len(dp_ranks), world_size, len(dp_ranks) // 2,
                           False)
    ttp.ttp_start_processor(masterIp, port)
    ttp.ttp_register_save_ckpt_handler(ttp_save_checkpoint)
    ttp.ttp_register_rename_handler(rename_save_result)
    while iteration < args.train_iters:
        train_step(model, optimizer, iteration)
        iteration += 1
        ttp.ttp_set_ckpt_args((iteration, model, optimizer, opt_param_scheduler))
        if args.save_interval and iteration % args.save_interval == 0:
            save_checkpoint(iteration, model, optimizer, opt_param_scheduler)
    return iteration


def main():
    global _ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--train-iters", type=int, default=20)
    p.add_argument("--save-interval", type=int, default=5)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--save", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-iter", type=int, default=-1)
    _ARGS = p.parse_args()
    _ARGS.load = _ARGS.save
    dist.init_process_group("gloo")
    mpu.initialize_model_parallel(_ARGS.tp)
    model = build_model()
    optimizer = Optimizer(model.parameters(), lr=0.05)
    iteration = load_checkpoint(model, optimizer, None)
    rank = dist.get_rank()
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    print(f"rank {rank} attempt {attempt}: resuming at iteration {iteration}", flush=True)
    iteration = train(model, optimizer, None, iteration)
    os.makedirs(_ARGS.out, exist_ok=True)
    weights = [w for t in model.state_dict().values() for w in t.flatten().tolist()]
    with open(os.path.join(_ARGS.out, f"result.{rank}.json"), "w") as f:
        json.dump({"iteration": iteration, "weights": weights}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
