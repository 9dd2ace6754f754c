"""Model-parallel ranks: tensor parallelism over consecutive ranks only (no pipeline)."""
import torch.distributed as dist

from ..global_vars import get_args


def _rank():
    return dist.get_rank() if dist.is_initialized() else 0


def _tp():
    return getattr(get_args(), "tensor_model_parallel_size", 1)


def get_tensor_model_parallel_rank():
    return _rank() % _tp()


def get_tensor_model_parallel_world_size():
    return _tp()


def get_pipeline_model_parallel_rank():
    return 0


def get_pipeline_model_parallel_world_size():
    return 1


def get_data_parallel_rank():
    return _rank() // _tp()
