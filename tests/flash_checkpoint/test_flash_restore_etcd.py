"""The restore step decided once for the job by the rendezvous in etcd, end to end: a real etcd
member, two real ftrun agents on loopback (--rdzv-backend etcd) with one torch rank each
(gloo), ShardedCheckpointer MEMORY saves every step, and a rank SIGKILLed (no last words).
The agents' stopped reports carry their inventories as the workers left them; the leading
agent decides from them the newest step every rank saved, every rank resumes from memory at
that step + 1, zero steps lost, and the final weights equal a fault-free run's.

The worker is test_flash_restore_decision.py's (it says its pid, so the test can kill it).
"""
import json
import os
import re
import signal
import unittest

import test_flash_replica as replica
import test_flash_replica_etcd as etcd_replica
import test_flash_restore_decision as decision
from test_flash_memory import FTRUN, Processes, wait_for

STEPS = decision.STEPS


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
@unittest.skipUnless(os.access(etcd_replica.ETCD, os.X_OK), "etcd-server is not installed")
class EtcdRestoreDecisionTest(Processes, unittest.TestCase):
    setUp = replica.ReplicaNodeLossTest.setUp
    etcd = etcd_replica.EtcdReplicaTest.etcd

    def log(self, name):
        return replica.read(os.path.join(self.root, name))

    def newest(self, rank):
        return max(decision.saved(self.root, rank), default=-1)

    def test_the_leader_decides_the_step_from_the_stopped_reports_and_no_step_is_lost(self):
        root, endpoint = self.root, self.etcd()
        config = json.dumps({"steps": STEPS, "kind": "sharded", "kill_rank": -1, "pause": 0.05})

        def agent(name):
            return self.start(
                ["--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", endpoint,
                 "--rdzv-id", "etcd-restore", "--rdzv-conf", "lease_ttl=2",
                 "--local-addr", "127.0.0.1", "--nproc-per-node", "1", "--max-restarts", "5",
                 "--monitor-interval", "0.1", "--restart-backoff", "0",
                 "--log-dir", os.path.join(root, "logs"), "--no-python", "/usr/bin/python3",
                 decision.__file__, "train", root, config], name)

        a, b = agent("a.log"), agent("b.log")
        # The first round formed with nothing in memory: only the stopped reports can tell
        # the leader about these saves (a known node's key is not read again).
        wait_for(lambda: min(self.newest(0), self.newest(1)) >= 5, "five saves on every rank")
        with open(os.path.join(root, "pid-1")) as f:
            os.kill(int(f.read()), signal.SIGKILL)  # no last words
        self.assertEqual(a.wait(timeout=120), 0, self.log("a.log")[-3000:])
        self.assertEqual(b.wait(timeout=60), 0, self.log("b.log")[-3000:])

        # The newest step every rank saved before the kill ...
        want = min(self.newest(0), self.newest(1))
        self.assertGreaterEqual(want, 5)
        # ... is what the leading agent decided (the first round: nothing held) ...
        logs = self.log("a.log") + self.log("b.log")
        formed = re.findall(r'round formed round=\d+ .* restore="([^"]*)"', logs)
        self.assertEqual(formed, ["copy=none shards=none", f"copy=none shards={want}"],
                         logs[-3000:])
        # ... and what every rank restored from memory, not from disk.
        decision.assert_restored_the_chosen_step(self, root, logs, want)


if __name__ == "__main__":
    unittest.main()
