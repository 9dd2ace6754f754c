"""Uses torch's FileTimerClient against the launcher's watchdog: rank 1 overruns its timer
and must be killed by the launcher; rank 0 releases its timer in time."""
import os
import time

from torch.distributed.elastic import timer

timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
rank = int(os.environ["RANK"])
with timer.expires(after=1.0, scope="step"):
    time.sleep(0.1 if rank == 0 else 60)
print(f"rank {rank} finished its step", flush=True)
if rank == 0:
    time.sleep(60)  # stopped by the launcher once rank 1 has failed
