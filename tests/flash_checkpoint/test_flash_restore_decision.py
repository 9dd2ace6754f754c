"""The restore step decided once for the job by the rendezvous, end to end: a real `ftrun
master`, two real ftrun agents on loopback with two torch ranks each (gloo),
ShardedCheckpointer MEMORY saves every step. The master is SIGKILLed and started again (it
knows nothing of earlier rounds), then a rank is SIGKILLed: the new master decides the restore
step from the inventories the agents bring when they join again and before they report their
workers stopped, and every rank resumes at the newest saved step + 1 from memory, zero steps
lost, final weights equal to a fault-free run.

Run as `python3 test_flash_restore_decision.py train <root> <config json>` it is one rank.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest

import test_flash_replica as replica
from test_flash_replica import FTRUN, HOLD_AT, STEPS, finals, read, wait_for
from test_flash_memory import assert_same_weights, free_port


def train(root, config):
    """test_flash_replica's rank (attempt 0 stops after saving step hold_at), which also says
    its pid, so the test can SIGKILL it."""
    with open(os.path.join(root, f"pid-{os.environ['RANK']}"), "w") as f:
        f.write(str(os.getpid()))
    replica.train(root, config)


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class RestoreDecisionTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ftrun-restore-")
        self.env = dict(os.environ)
        self.env.pop("FTRUN_CONTROL_SOCKET", None)
        self.procs = []

    tearDown = replica.ReplicaNodeLossTest.tearDown
    start = replica.ReplicaNodeLossTest.start

    def log(self, name):
        return read(os.path.join(self.root, name))

    def test_a_restarted_master_learns_the_steps_from_the_agents_and_no_step_is_lost(self):
        root, port = self.root, free_port()
        conf = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=10"
        config = json.dumps({"steps": STEPS, "hold_at": HOLD_AT})
        master_args = ["master", "--port", str(port), "--nnodes", "2", "--rdzv-id", "restore",
                       "--max-restarts", "5", "--rdzv-conf", conf]

        def agent(name):
            return self.start(
                ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                 f"127.0.0.1:{port}", "--rdzv-id", "restore", "--rdzv-conf", conf + ",is_host=0",
                 "--local-addr", "127.0.0.1", "--nproc-per-node", "2", "--max-restarts", "5",
                 "--monitor-interval", "0.1", "--restart-backoff", "0",
                 "--log-dir", os.path.join(root, "logs"), "--no-python", "/usr/bin/python3",
                 __file__, "train", root, config], name)

        master = self.start(master_args, "master.log")
        wait_for(lambda: "listening" in self.log("master.log"), "the master")
        a, b = agent("a.log"), agent("b.log")
        wait_for(lambda: all(f"saved {HOLD_AT} True" in read(os.path.join(root, f"progress-{r}.txt"))
                             for r in range(4)), f"every rank's save of step {HOLD_AT}")
        # The master goes; a new one knows no round and no step.
        os.killpg(master.pid, signal.SIGKILL)
        master.wait(timeout=30)
        master = self.start(master_args, "master2.log")
        wait_for(lambda: "round rebuilt from the rejoining nodes" in self.log("master2.log"),
                 "the new master to take the running round over")
        with open(os.path.join(root, "pid-3")) as f:
            os.kill(int(f.read()), signal.SIGKILL)  # no last words
        self.assertEqual(a.wait(timeout=180), 0, self.log("a.log")[-3000:])
        self.assertEqual(b.wait(timeout=60), 0, self.log("b.log")[-3000:])
        master.wait(timeout=30)

        # The new master decided the step from the agents' inventories ...
        self.assertRegex(self.log("master2.log"),
                         rf'round formed round=\d+ .* restore="copy=none shards={HOLD_AT}"')
        # ... and every rank restored that step from memory, not from disk.
        agents = self.log("a.log") + self.log("b.log")
        self.assertIn(f"ftrun: restored step {HOLD_AT} from memory (the rendezvous' choice)",
                      agents)
        for r in range(4):
            starts = [l for l in read(os.path.join(root, f"progress-{r}.txt")).split("\n")
                      if l.startswith("start")]
            self.assertEqual(starts[-1].split()[1], str(HOLD_AT + 1), (r, starts))
        assert_same_weights(self, finals(root, 4), replica.ReplicaNodeLossTest.fault_free(self))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "train":
        train(sys.argv[2], json.loads(sys.argv[3]))
    else:
        unittest.main()
