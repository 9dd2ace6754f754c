"""The restore step decided once for the job by the rendezvous, end to end: a real `ftrun
master`, two real ftrun agents on loopback with one torch rank each (gloo),
ShardedCheckpointer MEMORY saves every step. The master is SIGKILLed and started again (it
knows nothing of earlier rounds); the job trains on; then a rank is SIGKILLed. The new master
decides the restore step from the inventories the agents bring when they join it again and
refresh before they report their workers stopped: every rank resumes from memory at the
newest step all ranks saved + 1, zero steps lost, final weights equal to a fault-free run.

Run as `python3 test_flash_restore_decision.py train <root> <config json>` it is one rank.
"""
import json
import os
import re
import signal
import sys
import unittest

import test_flash_memory as memory
import test_flash_replica as replica
from test_flash_memory import FTRUN, Processes, assert_same_weights, free_port, progress, wait_for

STEPS = 80


def train(root, config):
    """test_flash_memory's rank, which also says its pid, so the test can SIGKILL it."""
    with open(os.path.join(root, f"pid-{os.environ['RANK']}"), "w") as f:
        f.write(str(os.getpid()))
    memory.train(root, config)


def saved(root, rank, attempt=0):
    """The steps `rank` saved to memory in `attempt`."""
    lines, current, out = progress(root, rank), None, []
    for line in lines:
        if line.startswith("start"):
            current = int(line.split()[3])
        elif line.startswith("saved") and line.endswith("True") and current == attempt:
            out.append(int(line.split()[1]))
    return out


def assert_restored_the_chosen_step(test, root, logs, want):
    """The two ranks restored step `want` from memory as the rendezvous chose, resumed at
    want + 1, and ended with the weights of a fault-free run."""
    test.assertRegex(logs, rf"ftrun: restored step {want} from memory.*, the step the "
                     "rendezvous chose")
    for r in range(2):
        starts = [l for l in progress(root, r) if l.startswith("start")]
        test.assertEqual(starts[-1].split()[1], str(want + 1), (r, starts))
    assert_same_weights(test, memory.final(root),
                        memory.FlashMemoryTest.fault_free("sharded", STEPS))


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class RestoreDecisionTest(Processes, unittest.TestCase):
    # A temporary root; the processes started are SIGKILLed at the end if still running.
    setUp = replica.ReplicaNodeLossTest.setUp

    def log(self, name):
        return replica.read(os.path.join(self.root, name))

    def newest(self, rank):
        return max(saved(self.root, rank), default=-1)

    def test_a_restarted_master_learns_the_steps_from_the_agents_and_no_step_is_lost(self):
        root, port = self.root, free_port()
        conf = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=10"
        config = json.dumps({"steps": STEPS, "kind": "sharded", "kill_rank": -1, "pause": 0.05})
        master_args = ["master", "--port", str(port), "--nnodes", "2", "--rdzv-id", "restore",
                       "--max-restarts", "5", "--rdzv-conf", conf]

        def agent(name):
            return self.start(
                ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                 f"127.0.0.1:{port}", "--rdzv-id", "restore", "--rdzv-conf", conf + ",is_host=0",
                 "--local-addr", "127.0.0.1", "--nproc-per-node", "1", "--max-restarts", "5",
                 "--monitor-interval", "0.1", "--restart-backoff", "0",
                 "--log-dir", os.path.join(root, "logs"), "--no-python", "/usr/bin/python3",
                 __file__, "train", root, config], name)

        master = self.start(master_args, "master.log")
        wait_for(lambda: "listening" in self.log("master.log"), "the master")
        a, b = agent("a.log"), agent("b.log")
        wait_for(lambda: min(self.newest(0), self.newest(1)) >= 5, "five saves on every rank")
        # The master goes; a new one knows no round and no step.
        os.killpg(master.pid, signal.SIGKILL)
        master.wait(timeout=30)
        master = self.start(master_args, "master2.log")
        wait_for(lambda: "round rebuilt from the rejoining nodes" in self.log("master2.log"),
                 "the new master to take the running round over", timeout=90)
        # Saves after the agents joined again: only the refresh before the stopped report
        # tells the new master about them.
        rejoined = max(self.newest(0), self.newest(1))
        wait_for(lambda: min(self.newest(0), self.newest(1)) >= rejoined + 5,
                 "five more saves on every rank")
        with open(os.path.join(root, "pid-1")) as f:
            os.kill(int(f.read()), signal.SIGKILL)  # no last words
        self.assertEqual(a.wait(timeout=180), 0, self.log("a.log")[-3000:])
        self.assertEqual(b.wait(timeout=60), 0, self.log("b.log")[-3000:])
        master.wait(timeout=30)

        # The newest step every rank saved before the kill ...
        want = min(self.newest(0), self.newest(1))
        self.assertGreaterEqual(want, rejoined + 5)
        # ... is what the new master decided from the agents' inventories ...
        formed = re.findall(r'round formed round=\d+ .* restore="copy=none shards=(\d+)"',
                            self.log("master2.log"))
        self.assertEqual(formed, [str(want)], self.log("master2.log")[-3000:])
        # ... and what every rank restored from memory, not from disk.
        assert_restored_the_chosen_step(self, root, self.log("a.log") + self.log("b.log"), want)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "train":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "scripts", "python"))
        train(sys.argv[2], json.loads(sys.argv[3]))
    else:
        unittest.main()
