"""Topology-aware rank order with flash-checkpoint memory restores, end to end: a real
`ftrun master` and real ftrun agents on loopback whose switch paths come from
FTRUN_SWITCH_PATH, two torch ranks each (gloo), a sharded MEMORY save every step
(tests/flash_checkpoint/test_flash_replica.py's rank), and the loss of a whole node.

Node a (asw-1) holds group rank 0 and node b (asw-2) group rank 1. Node a is SIGKILLed and
node c (asw-3) replaces it: by switch, b now comes first, so b's workers become ranks 0 and 1
(they were 2 and 3) and c's ranks 2 and 3. The snapshot follows the rank: ranks 0 and 1
restore from the replica of a's shards that b's agent kept, ranks 2 and 3 from b's own
memory over the network; every rank resumes at the newest saved step (zero steps lost) and
ends with the weights of a fault-free run. DLRover needs a disk restore here.
"""
import json
import os
import re
import signal
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FLASH = os.path.join(HERE, "..", "flash_checkpoint")
sys.path.insert(0, FLASH)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))

import test_flash_replica as replica  # noqa: E402
from test_flash_memory import Processes, free_port  # noqa: E402

RANK_SCRIPT = os.path.join(FLASH, "test_flash_replica.py")


def group_ranks(log):
    """Every group rank the agent was given, in order."""
    return [int(g) for g in re.findall(r"group_rank=(\d+)", replica.read(log))]


@unittest.skipUnless(os.access(replica.FTRUN, os.X_OK), f"no ftrun binary at {replica.FTRUN}")
class RanksMoveWithTheTopology(Processes, unittest.TestCase):
    setUp = replica.ReplicaNodeLossTest.setUp
    fault_free = replica.ReplicaNodeLossTest.fault_free  # the same job without a fault

    def test_ranks_that_move_to_another_node_restore_from_memory_with_zero_steps_lost(self):
        root, port = self.root, free_port()
        conf = self.TWO_NODES_CONF
        config = json.dumps({"steps": replica.STEPS, "hold_at": replica.HOLD_AT})
        hold = replica.HOLD_AT

        def agent(name, switch_path):
            return self.start_agent(
                name, f"127.0.0.1:{port}", "topo", conf,
                ["--nproc-per-node", "2", "--max-restarts", "5", "--monitor-interval", "0.1",
                 "--restart-backoff", "0", "--log-level", "debug",
                 "--log-dir", os.path.join(root, "logs")], [RANK_SCRIPT, "train", root, config],
                {"FTRUN_SWITCH_PATH": switch_path})

        def log(name):
            return os.path.join(root, name)

        master = self.start_master(port, "topo", conf,
                                   ["--max-restarts", "5", "--event-log", log("events.jsonl")])
        # b joins first: the switches, not the join order, give a group rank 0.
        b = agent("b.log", "asw-2/psw-0")
        replica.wait_for(lambda: "joined" in replica.read(log("master.log")), "node b's join")
        a = agent("a.log", "asw-1/psw-0")
        replica.wait_for(lambda: all(f"saved {hold} True" in replica.read(
            os.path.join(root, f"progress-{r}.txt")) for r in range(4)),
            f"every rank's save of step {hold}")
        self.assertEqual(group_ranks(log("a.log"))[-1], 0, replica.read(log("a.log"))[-2000:])
        self.assertEqual(group_ranks(log("b.log"))[-1], 1, replica.read(log("b.log"))[-2000:])
        # a's shards (ranks 0 and 1) of the newest step are safe on b before a is lost.
        replica.wait_for(lambda: all(f"replica of rank-{r} step={hold} stored" in replica.read(
            log("b.log")) for r in (0, 1)), "the replicas of a's shards on b")
        os.killpg(a.pid, signal.SIGKILL)  # the whole node: its agent and both ranks
        a.wait(timeout=30)
        c = agent("c.log", "asw-3/psw-0")
        self.assertEqual(b.wait(timeout=180), 0, replica.read(log("b.log"))[-3000:])
        self.assertEqual(c.wait(timeout=60), 0, replica.read(log("c.log"))[-3000:])
        master.wait(timeout=30)

        # The ranks moved: b (asw-2) is now first, c (asw-3) second.
        self.assertEqual(group_ranks(log("b.log"))[-1], 0, replica.read(log("b.log"))[-3000:])
        self.assertEqual(group_ranks(log("c.log"))[-1], 1, replica.read(log("c.log"))[-3000:])
        self.assertIn('"switch_paths":["asw-2/psw-0","asw-3/psw-0"]',
                      replica.read(log("events.jsonl")))
        # Every rank's shard came from memory: ranks 0 and 1 from the replica on b, ranks 2 and
        # 3 (now on c) from b's own snapshot; none from disk.
        everything = replica.read(log("b.log")) + replica.read(log("c.log"))
        restored = re.search(rf"ftrun: restored step {hold} from memory \(.*rank 2 from "
                             r"rank [01], rank 3 from rank [01]\)", everything)
        self.assertIsNotNone(restored, everything[-3000:])
        print(restored.group(0), file=sys.stderr)
        self.assertNotIn("not restoring", everything)
        replica.assert_resumed_after(self, root, 4, hold)
        replica.assert_same_weights(self, replica.finals(root, 4), self.fault_free())


if __name__ == "__main__":
    unittest.main()
