"""Flash-checkpoint replicas across nodes, end to end: a real `ftrun master`, two real ftrun
agents on loopback with two torch ranks each (gloo), ShardedCheckpointer MEMORY saves every
step, and the loss of a whole node (its agent and both ranks SIGKILLed).

* The replaced node (a new agent, or a spare waiting beyond --nnodes all along) ranks get their shards from the replica the surviving node's agent holds
  (copied there after each save): every shard restores from memory at the newest saved step,
  zero steps lost, and the final weights equal those of a fault-free run.
* After the restore, the survivor's shards are copied to the replacement node.
(A receiver lost in the middle of a copy is tested in tests/unit/launcher/replica.)

Run as `python3 test_flash_replica.py train <root> <config json>` it is one rank (train()).
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))
FTRUN = os.environ.get("FTRUN_BINARY") or os.path.join(HERE, "..", "..", "build", "launcher",
                                                        "ftrun")
STEPS = 30
HOLD_AT = 12  # attempt 0 stops after saving this step, so the test knows the newest one


def train(root, config):
    """One rank of a sharded job: its own model (seeded by rank), a MEMORY save of its shard
    after every step. In attempt 0 every rank stops after saving step config["hold_at"] (and
    waits to be killed). progress-<rank>.txt: where each attempt started, what it saved."""
    import torch
    import torch.distributed as dist
    from ftrun.flash_checkpoint.sharded import ShardedCheckpointer, StorageType

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(rank)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cp = ShardedCheckpointer(os.path.join(root, "ckpt"))
    progress = open(os.path.join(root, f"progress-{rank}.txt"), "a", buffering=1)
    start = resume(cp, model, opt, rank, sharded=True)
    progress.write(f"start {start} attempt {attempt}\n")
    for step in range(start, config["steps"]):
        one_step(model, opt, step, rank, lockstep=True)
        saved = cp.save_checkpoint(step, {"model": model.state_dict(), "opt": opt.state_dict(),
                                          "step": step, "rank": rank},
                                   storage_type=StorageType.MEMORY)
        progress.write(f"saved {step} {saved}\n")
        if attempt == 0 and step == config.get("hold_at"):
            time.sleep(3600)
    write_final(root, rank, model)


# The flash tests' shared helpers (this directory is the script's sys.path[0]).
from test_flash_memory import Processes, assert_same_weights, free_port  # noqa: E402
from test_flash_memory import one_step, resume, write_final  # noqa: E402
from test_flash_memory import wait_for as _wait_for  # noqa: E402


def wait_for(predicate, what, timeout=90):
    _wait_for(predicate, what, timeout)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def finals(root, ranks):
    return [json.loads(read(os.path.join(root, f"final-{r}.json"))) for r in range(ranks)]


def assert_resumed_after(test, root, ranks, step):
    """Each rank's last attempt started at step + 1: nothing saved before was lost."""
    for r in range(ranks):
        starts = [l for l in read(os.path.join(root, f"progress-{r}.txt")).split("\n")
                  if l.startswith("start")]
        test.assertEqual(starts[-1].split()[1], str(step + 1), (r, starts))


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class ReplicaNodeLossTest(Processes, unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ftrun-replica-")
        self.processes_setup()

    def fault_free(self):
        root = os.path.join(self.root, "clean")
        os.makedirs(root)
        done = subprocess.run(
            [FTRUN, "--standalone", "--nproc-per-node", "4", "--log-dir",
             os.path.join(root, "logs"), "--no-python", "/usr/bin/python3", __file__, "train",
             root, json.dumps({"steps": STEPS})], env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=200)
        self.assertEqual(done.returncode, 0, done.stdout)
        return finals(root, 4)

    def test_a_lost_nodes_shards_restore_from_their_replicas_with_zero_steps_lost(self):
        self.lose_a_node(spare=False)

    def test_a_spare_promoted_into_the_lost_nodes_place_restores_its_shards(self):
        self.lose_a_node(spare=True)

    def lose_a_node(self, spare, security="", host="127.0.0.1", before_the_loss=None):
        """Two agents (2 ranks each) train; the one with group rank 1 is SIGKILLed once the
        replicas of the newest step are on the other; a new agent replaces it (started then,
        or waiting as a spare all along). security: more --rdzv-conf options of every process
        (TLS), host: the endpoint's host; before_the_loss(survivor's log) runs just before the
        node is killed."""
        root, port = self.root, free_port()
        conf = self.TWO_NODES_CONF + security
        config = json.dumps({"steps": STEPS, "hold_at": HOLD_AT})

        def agent(name):
            return self.start_agent(
                name, f"{host}:{port}", "replica", conf,
                ["--nproc-per-node", "2", "--max-restarts", "5", "--monitor-interval", "0.1",
                 "--restart-backoff", "0", "--log-level", "debug",
                 "--log-dir", os.path.join(root, "logs")], [__file__, "train", root, config])

        master = self.start_master(port, "replica", conf, ["--max-restarts", "5"])
        a = agent("a.log")
        wait_for(lambda: "replica service listening" in read(os.path.join(root, "a.log")),
                 "node a's replica service")
        b = agent("b.log")
        if spare:  # beyond --nnodes 2: it waits as a spare
            wait_for(lambda: "group_rank=" in read(os.path.join(root, "b.log")), "node b's round")
            replacement = agent("c.log")
        # Which node got which ranks: node b is the one whose workers are ranks 2 and 3, or 0
        # and 1; the test kills whichever holds ranks 2 and 3 ("the other node").
        wait_for(lambda: all(f"saved {HOLD_AT} True" in read(os.path.join(root, f"progress-{r}.txt"))
                             for r in range(4)), f"every rank's save of step {HOLD_AT}")
        logs = {"a": "a.log", "b": "b.log"}
        group_rank = {n: int(re.search(r"group_rank=(\d)", read(os.path.join(root, f))).group(1))
                      for n, f in logs.items()}
        victim = "a" if group_rank["a"] == 1 else "b"
        survivor = "b" if victim == "a" else "a"
        lost = (2, 3)  # group rank 1 runs ranks 2 and 3
        survivor_log = os.path.join(root, logs[survivor])
        # The newest step's shards of the doomed node are safe once their copies have arrived.
        wait_for(lambda: all(f"replica of rank-{r} step={HOLD_AT} stored" in read(survivor_log)
                             for r in lost), "the replicas of the newest step")
        if before_the_loss:
            before_the_loss(read(survivor_log))
        doomed = a if victim == "a" else b
        os.killpg(doomed.pid, signal.SIGKILL)  # the whole node: its agent and both ranks
        doomed.wait(timeout=30)
        if not spare:
            replacement = agent("c.log")
        other = b if victim == "a" else a
        self.assertEqual(other.wait(timeout=180), 0, read(survivor_log)[-3000:])
        self.assertEqual(replacement.wait(timeout=60), 0, read(os.path.join(root, "c.log"))[-3000:])
        master.wait(timeout=30)

        everything = read(survivor_log) + read(os.path.join(root, "c.log"))
        # Every shard of the lost node came from the replica, none from disk.
        self.assertRegex(everything, rf"ftrun: restored step {HOLD_AT} from memory \(rank 2 from "
                         r"rank \d, rank 3 from rank \d\)")
        self.assertIn("from the replica of", read(survivor_log))
        # After the restore the replacement node holds the survivor's shards in turn.
        self.assertRegex(read(os.path.join(root, "c.log")), r"replica of rank-[01] step=\d+ stored")
        assert_resumed_after(self, root, 4, HOLD_AT)
        assert_same_weights(self, finals(root, 4), self.fault_free())


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "train":
        train(sys.argv[2], json.loads(sys.argv[3]))
    else:
        unittest.main()
