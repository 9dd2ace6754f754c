"""Uses torch's FileTimerClient against the launcher's watchdog: rank 1 overruns its timer
and must be killed by the launcher; rank 0 releases its timer in time.

Rank 1 takes its timer only once rank 0 has finished its step (a marker file next to the
timer file): else, on a loaded machine, rank 1's timer can expire while rank 0 is still
importing torch, and the job is stopped before rank 0 ever runs its step."""
import os
import time

from torch.distributed.elastic import timer

timer_file = os.environ["TORCHELASTIC_TIMER_FILE"]
rank_0_done = timer_file + ".rank0-done"
timer.configure(timer.FileTimerClient(timer_file))
rank = int(os.environ["RANK"])
if rank == 1:
    deadline = time.monotonic() + 60
    while not os.path.exists(rank_0_done) and time.monotonic() < deadline:
        time.sleep(0.02)
with timer.expires(after=1.0, scope="step"):
    time.sleep(0.1 if rank == 0 else 60)
print(f"rank {rank} finished its step", flush=True)
if rank == 0:
    open(rank_0_done, "w").close()
    time.sleep(60)  # stopped by the launcher once rank 1 has failed
