"""Benchmark worker for ftrun's fault-time save (stdlib + the ftrun helper): every rank
reports a few steps; on the first attempt the last rank fails; the saver's handler stamps when
the order arrives and when the save is done; every rank stamps its start.

  save_worker.py DIR   -> DIR/start, DIR/exit, DIR/save lines: "<rank> <ns>"
"""
import os
import sys
import time

out = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def stamp(name, extra=""):
    with open(os.path.join(out, name), "a") as f:
        f.write(f"{rank} {time.clock_gettime_ns(time.CLOCK_REALTIME)}{extra}\n")


stamp("start")  # before the helper's imports: the time the launcher controls ends here
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts", "python"))
import ftrun  # noqa: E402
first_attempt = not os.path.exists(os.path.join(out, "failed"))


def handler(step, directory):
    stamp("save", " received")
    with open(os.path.join(directory, "state"), "w") as f:
        f.write(str(step))
    stamp("save", " done")


ft = ftrun.connect()
ft.register_save_handler(handler, os.path.join(out, "ckpt"))
for step in range(5):
    with ft.update(step):
        pass
if not first_attempt:
    sys.exit(0)
time.sleep(0.5)  # everyone has reported
if rank == world - 1:
    open(os.path.join(out, "failed"), "w").close()
    stamp("exit")
    os._exit(1)
time.sleep(60)  # stopped by the agent after the save
