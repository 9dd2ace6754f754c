"""Flash-checkpoint replicas with the etcd rendezvous, end to end: a real etcd member, two real
ftrun agents on loopback (--rdzv-backend etcd) with two torch ranks each (gloo),
ShardedCheckpointer MEMORY saves every step, and the loss of a whole node (its agent and both
ranks SIGKILLed): the replacement's ranks restore their shards from the replicas the
surviving agent holds, zero steps lost, the weights of a fault-free run.

Run as `python3 test_flash_replica_etcd.py train <root> <config json>` it is one rank.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import unittest

import test_flash_replica as replica
from test_flash_replica import FTRUN, HOLD_AT, STEPS, finals, read, wait_for
from test_flash_memory import Processes, assert_same_weights, free_port

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
@unittest.skipUnless(os.access(ETCD, os.X_OK), "etcd-server is not installed")
class EtcdReplicaTest(Processes, unittest.TestCase):
    setUp = replica.ReplicaNodeLossTest.setUp
    fault_free = replica.ReplicaNodeLossTest.fault_free

    def etcd(self):
        client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        with open(os.path.join(self.root, "etcd.log"), "w") as log:
            p = subprocess.Popen(
                [ETCD, "--name", "e0", "--data-dir", os.path.join(self.root, "etcd"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"e0={peer}", "--initial-cluster-state", "new",
                 "--heartbeat-interval", "50", "--election-timeout", "500"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return client[len("http://"):]

    def test_a_lost_nodes_shards_restore_from_their_replicas_kept_through_etcd(self):
        root, endpoint = self.root, self.etcd()
        config = json.dumps({"steps": STEPS, "hold_at": HOLD_AT})

        def agent(name):
            return self.start(
                ["--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", endpoint,
                 "--rdzv-id", "etcd-replica", "--rdzv-conf", "lease_ttl=2",
                 "--local-addr", "127.0.0.1", "--nproc-per-node", "2", "--max-restarts", "5",
                 "--monitor-interval", "0.1", "--restart-backoff", "0", "--log-level", "debug",
                 "--log-dir", os.path.join(root, "logs"), "--no-python", "/usr/bin/python3",
                 replica.__file__, "train", root, config], name)

        a, b = agent("a.log"), agent("b.log")
        wait_for(lambda: all(f"saved {HOLD_AT} True" in read(os.path.join(root, f"progress-{r}.txt"))
                             for r in range(4)), f"every rank's save of step {HOLD_AT}")
        group_rank = {n: int(re.search(r"group_rank=(\d)", read(os.path.join(root, f))).group(1))
                      for n, f in (("a", "a.log"), ("b", "b.log"))}
        doomed, other, survivor_log = ((a, b, "b.log") if group_rank["a"] == 1 else
                                       (b, a, "a.log"))
        survivor_log = os.path.join(root, survivor_log)
        wait_for(lambda: all(f"replica of rank-{r} step={HOLD_AT} stored" in read(survivor_log)
                             for r in (2, 3)), "the replicas of the newest step")
        os.killpg(doomed.pid, signal.SIGKILL)  # the whole node: its agent and both ranks
        doomed.wait(timeout=30)
        replacement = agent("c.log")
        self.assertEqual(other.wait(timeout=180), 0, read(survivor_log)[-3000:])
        self.assertEqual(replacement.wait(timeout=60), 0,
                         read(os.path.join(root, "c.log"))[-3000:])
        self.assertIn("from the replica of", read(survivor_log))
        replica.assert_resumed_after(self, root, 4, HOLD_AT)
        assert_same_weights(self, finals(root, 4), self.fault_free())


if __name__ == "__main__":
    unittest.main()
