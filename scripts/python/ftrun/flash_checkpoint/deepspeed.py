"""DLRover's DeepSpeed names (dlrover.trainer.torch.flash_checkpoint.deepspeed:
DeepSpeedCheckpointer), so that a migrated script's import fails with one line saying why and
what to use instead. They drive DeepSpeed's engine, which is not where ftrun is tested, so they
are not in this release: they could not be tested."""
from .unavailable import unavailable

raise unavailable("deepspeed", "DeepSpeedCheckpointer",
                  "not in this release of ftrun (it could not be tested: DeepSpeed is not "
                  "where ftrun is tested)",
                  "save each rank's ZeRO shard with ftrun.flash_checkpoint.sharded."
                  "ShardedCheckpointer, or the whole state with ftrun.flash_checkpoint.ddp."
                  "DdpCheckpointer")
