"""Stand-in for Megatron-LM (see ../README.md): its package exports get_args."""
from .global_vars import get_args, set_args  # noqa: F401
