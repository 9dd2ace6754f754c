"""The parsed arguments, as Megatron-LM keeps them (set once by the training script)."""
_ARGS = None


def set_args(args):
    global _ARGS
    _ARGS = args


def get_args():
    assert _ARGS is not None, "arguments are not set"
    return _ARGS
