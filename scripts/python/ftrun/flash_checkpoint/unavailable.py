"""The one-line ImportError of a DLRover module that ftrun does not have (fsdp.py,
deepspeed.py, hf_trainer.py): a migrated script's import says why and what to use instead,
not "No module named ..."."""


def unavailable(module: str, names: str, why: str, instead: str) -> ImportError:
    return ImportError(f"ftrun.flash_checkpoint.{module} ({names}): {why}; {instead} "
                       "(see ftrun-flash-checkpoint(7))", name=f"ftrun.flash_checkpoint.{module}")
