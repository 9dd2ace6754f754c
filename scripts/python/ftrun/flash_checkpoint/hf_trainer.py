"""DLRover's Hugging Face names (dlrover.trainer.torch.flash_checkpoint.hf_trainer:
FlashCkptTrainer, HfDdpCheckpointer, HfDeepSpeedCheckpointer), so that a migrated script's
import fails with one line saying why and what to use instead. They subclass transformers'
Trainer, which is not where ftrun is tested, so they are not in this release."""
from .unavailable import unavailable

raise unavailable("hf_trainer", "FlashCkptTrainer, HfDdpCheckpointer, HfDeepSpeedCheckpointer",
                  "not in this release of ftrun (they could not be tested: transformers is not "
                  "where ftrun is tested)",
                  "save the model's and optimizer's state_dict from a TrainerCallback with "
                  "ftrun.flash_checkpoint.ddp.DdpCheckpointer")
