"""Stand-in for megatron/checkpointing.py: the same functions, names, paths and tracker
semantics (see ../README.md); torch.save and torch.load are looked up at call time, as in
Megatron-LM, which is what a flash checkpoint wrapper redirects."""
import os

import torch
import torch.distributed as dist

from megatron import get_args
from megatron.core import mpu


def ensure_directory_exists(filename):
    os.makedirs(os.path.dirname(filename), exist_ok=True)


def get_checkpoint_name(checkpoints_path, iteration, release=False, pipeline_parallel=None,
                        tensor_rank=None, pipeline_rank=None):
    directory = "release" if release else "iter_{:07d}".format(iteration)
    if pipeline_parallel is None:
        pipeline_parallel = mpu.get_pipeline_model_parallel_world_size() > 1
    if tensor_rank is None:
        tensor_rank = mpu.get_tensor_model_parallel_rank()
    if pipeline_rank is None:
        pipeline_rank = mpu.get_pipeline_model_parallel_rank()
    sub = (f"mp_rank_{tensor_rank:02d}_{pipeline_rank:03d}" if pipeline_parallel
           else f"mp_rank_{tensor_rank:02d}")
    return os.path.join(checkpoints_path, directory, sub, "model_optim_rng.pt")


def get_distributed_optimizer_checkpoint_name(model_checkpoint_name):
    return os.path.join(os.path.dirname(model_checkpoint_name), "distrib_optim.pt")


def _distributed_optimizer(args):
    return getattr(args, "use_distributed_optimizer", False)


def _save_parameter_state(optimizer, filename):
    """The distributed optimizer's parameter state, gathered on data-parallel rank 0, which
    writes it (here every data-parallel rank holds it whole: rank 0's is kept)."""
    if not dist.is_initialized() or mpu.get_data_parallel_rank() == 0:
        ensure_directory_exists(filename)
        torch.save({"param_state": optimizer.state_dict()["state"]}, filename)


def _load_parameter_state(optimizer, filename, param_groups):
    """Data-parallel rank 0 reads the file and hands each rank its part (here: the whole)."""
    mine = None
    if not dist.is_initialized() or mpu.get_data_parallel_rank() == 0:
        mine = torch.load(filename, map_location="cpu")["param_state"]
    if dist.is_initialized():
        held = [None] * dist.get_world_size()
        dist.all_gather_object(held, (mpu.get_tensor_model_parallel_rank(), mine))
        mine = next(state for tp, state in held
                    if tp == mpu.get_tensor_model_parallel_rank() and state is not None)
    optimizer.load_state_dict({"state": mine, "param_groups": param_groups})


def get_checkpoint_tracker_filename(checkpoints_path):
    return os.path.join(checkpoints_path, "latest_checkpointed_iteration.txt")


def read_metadata(tracker_filename):
    with open(tracker_filename) as f:
        text = f.read().strip()
    release = text == "release"
    iteration = 0 if release else int(text)
    assert iteration > 0 or release, f"error parsing metadata file {tracker_filename}"
    if dist.is_initialized():  # every rank takes the newest iteration any rank found
        t = torch.tensor([iteration], dtype=torch.long)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        iteration = int(t.item())
    return iteration, release


def save_checkpoint(iteration, model, optimizer, opt_param_scheduler):
    args = get_args()
    checkpoint_name = get_checkpoint_name(args.save, iteration)
    if _distributed_optimizer(args) and optimizer is not None:
        _save_parameter_state(optimizer,
                              get_distributed_optimizer_checkpoint_name(checkpoint_name))
    if not dist.is_initialized() or mpu.get_data_parallel_rank() == 0:
        state_dict = {"args": args, "checkpoint_version": 3.0, "iteration": iteration,
                      "model": model[0].state_dict()}
        if optimizer is not None:
            state_dict["optimizer"] = optimizer.state_dict()
            if _distributed_optimizer(args):  # its parameter state is in distrib_optim.pt
                state_dict["optimizer"]["state"] = {}
        if opt_param_scheduler is not None:
            state_dict["opt_param_scheduler"] = opt_param_scheduler.state_dict()
        ensure_directory_exists(checkpoint_name)
        torch.save(state_dict, checkpoint_name)
    if dist.is_initialized():
        dist.barrier()
    if not dist.is_initialized() or dist.get_rank() == 0:
        with open(get_checkpoint_tracker_filename(args.save), "w") as f:
            f.write(str(iteration))
    if dist.is_initialized():
        dist.barrier()


def load_checkpoint(model, optimizer, opt_param_scheduler, load_arg="load", strict=True):
    """The iteration loaded, 0 when there is no checkpoint (training starts from scratch)."""
    load_dir = getattr(get_args(), load_arg)
    tracker = get_checkpoint_tracker_filename(load_dir)
    if not os.path.isfile(tracker):
        return 0
    iteration, release = read_metadata(tracker)
    checkpoint_name = get_checkpoint_name(load_dir, iteration, release)
    state_dict = torch.load(checkpoint_name, map_location="cpu")
    model[0].load_state_dict(state_dict["model"], strict=strict)
    if optimizer is not None and _distributed_optimizer(get_args()):
        _load_parameter_state(optimizer,
                              get_distributed_optimizer_checkpoint_name(checkpoint_name),
                              state_dict["optimizer"]["param_groups"])
    elif optimizer is not None:
        optimizer.load_state_dict(state_dict["optimizer"])
    if opt_param_scheduler is not None:
        opt_param_scheduler.load_state_dict(state_dict["opt_param_scheduler"])
    if dist.is_initialized():
        dist.barrier()
    return 0 if release else state_dict["iteration"]
