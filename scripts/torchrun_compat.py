#!/usr/bin/python3
"""Debian's torchrun (torch 1.13) under Python 3.11, for side-by-side runs with ftrun.

Out of the box it dies at once: Python 3.11's IntFlag no longer yields the zero and
all-bits members when iterated, so torch's Std.from_str("0") finds nothing and returns None.
This wrapper gives Std.from_str a direct conversion, then runs torch.distributed.run.
Usage: /usr/bin/python3 scripts/torchrun_compat.py <torchrun arguments>
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _std_from_str(cls, spec):
    if re.fullmatch(r"[0-3]", spec):
        return cls(int(spec))
    if re.fullmatch(r"(\d:[0-3],)*\d:[0-3]", spec):
        pairs = (item.split(":") for item in spec.split(","))
        return {int(rank): cls(int(value)) for rank, value in pairs}
    raise ValueError(f"{spec} does not match a redirect/tee value or mapping")


api.Std.from_str = classmethod(_std_from_str)

if __name__ == "__main__":
    from torch.distributed.run import main

    sys.exit(main())
