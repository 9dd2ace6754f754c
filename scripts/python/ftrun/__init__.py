"""ftrun's worker helper (standard library only).

    import ftrun
    ft = ftrun.connect()                      # a no-op object when not started by ftrun
    ft.register_save_handler(lambda step, d: torch.save(state(), f"{d}/state.pt"), root)
    ckpt = ftrun.latest_checkpoint(root)      # resume: the newest complete checkpoint
    with ft.guard():                          # survive a peer's death long enough to save
        for step in range(start, steps):
            ...forward, backward...
            with ft.update(step):             # the optimizer update: state inconsistent inside
                optimizer.step()

See ftrun-control(7) for the protocol the helper speaks.
"""
from .checkpoint import Checkpoint, CheckpointError
from .checkpoint import latest as latest_checkpoint
from .checkpoint import save as save_checkpoint
from .control import Controller, NullController, connect, is_peer_failure

__all__ = ["connect", "Controller", "NullController", "is_peer_failure", "Checkpoint",
           "CheckpointError", "latest_checkpoint", "save_checkpoint"]
