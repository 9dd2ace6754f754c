"""ftrun.flash_checkpoint with two real ranks (torch.distributed, gloo on loopback): one
DDP copy written by rank 0 and restored by both, a shard per rank, a failed shard fails the
save on every rank, and a restore never mixes steps across ranks.

Under a real ftrun (FTRUN_BINARY, default build/launcher/ftrun), MEMORY saves go to the
agent's memory and the restore takes them from there.

Run as `python3 test_flash_checkpoint_ranks.py worker <act> <root>` it is one rank (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment) and writes its results as JSON to
<root>/<act>-<rank>.json."""
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))

RANKS = 2


def worker(act, root):
    import torch
    import torch.distributed as dist
    from ftrun.flash_checkpoint.ddp import DdpCheckpointer, StorageType
    from ftrun.flash_checkpoint.sharded import ShardedCheckpointer

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ddp = DdpCheckpointer(os.path.join(root, "ddp"))
    sharded = ShardedCheckpointer(os.path.join(root, "sharded"))
    out = {}
    built = []  # the steps whose state a function passed to save_checkpoint built here

    def state_of(step, **more):
        def build():
            built.append(step)
            return {"w": torch.full((4,), float(step)), "step": step, **more}
        # Step 1 as a dict (DLRover's form), step 2 as a function (ftrun's extension).
        return build() if step == 1 else build

    if act == "memory":
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            for step in (1, 2):
                ddp.save_checkpoint(step, state_of(step), storage_type=StorageType.MEMORY)
        out["stderr"] = err.getvalue()
    if act == "save":
        for step in (1, 2):
            ddp.save_checkpoint(step, state_of(step))
            shard = {"w": torch.full((4,), 10.0 * step + rank), "step": step, "rank": rank}
            # Every rank builds its own shard, from a function too.
            sharded.save_checkpoint(step, shard if step == 1 else lambda: built.append(
                f"shard {step}") or shard)
        try:  # rank 1's shard cannot be pickled: no rank may see step 3 as saved
            sharded.save_checkpoint(3, {"bad": (lambda: 0) if rank == 1 else 0})
            out["failed_save"] = "returned"
        except Exception as e:  # noqa: BLE001
            out["failed_save"] = str(e)
        # A state function that fails on rank 0 fails the save on every rank (none hangs).
        for what, save in (("failed_shard_fn", lambda: sharded.save_checkpoint(
                                5, (lambda: 1 / 0) if rank == 0 else {"w": torch.ones(1)})),
                           ("failed_copy_fn", lambda: ddp.save_checkpoint(6, lambda: 1 / 0))):
            try:
                save()
                out[what] = "returned"
            except Exception as e:  # noqa: BLE001
                out[what] = f"{type(e).__name__}: {e}"
    out["built"] = built
    ddp_state = ddp.load_checkpoint()
    out.update(rank=rank, ddp_step=ddp_state.get("step"), ddp_w=ddp_state["w"].tolist())
    if act != "memory":
        shard = sharded.load_checkpoint()
        out.update(shard_step=shard.get("step"), shard_rank=shard.get("rank"),
                   shard_w=shard["w"].tolist())
    if act == "load":  # a resume_path only rank 0 sees (a node-local disk): {} on both
        mine = os.path.join(root, f"resume-{rank}.pt")
        if rank == 0:
            torch.save({"w": torch.zeros(4), "step": 0}, mine)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            out["partial_resume"] = ddp.load_checkpoint(mine)
        out["partial_resume_err"] = err.getvalue()
    dist.destroy_process_group()
    with open(os.path.join(root, f"{act}-{rank}.json"), "w") as f:
        json.dump(out, f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(act, root):
    port = str(free_port())
    procs = []
    for rank in range(RANKS):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(RANKS), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, LOCAL_RANK=str(rank))
        env.pop("FTRUN_CONTROL_SOCKET", None)
        procs.append(subprocess.Popen([sys.executable, __file__, "worker", act, root], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for rank, p in enumerate(procs):
        _, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise AssertionError(f"rank exited {p.returncode}:\n{err}")
        results.append((result(root, act, rank), err))
    return results


def result(root, act, rank):
    with open(os.path.join(root, f"{act}-{rank}.json")) as f:
        return json.load(f)


FTRUN = os.environ.get("FTRUN_BINARY") or os.path.join(HERE, "..", "..", "build", "launcher",
                                                        "ftrun")


class TwoRanksTest(unittest.TestCase):
    def test_save_restore_and_never_mix_steps(self):
        root = tempfile.mkdtemp()
        for rank, (out, _) in enumerate(run_ranks("save", root)):
            self.assertEqual(out["rank"], rank)
            self.assertIn(("another rank failed to save step 3", "Can't pickle")[rank],
                          out["failed_save"])
            self.assertIn(("ZeroDivisionError", "another rank failed to save step 5")[rank],
                          out["failed_shard_fn"])
            self.assertIn(("ZeroDivisionError", "rank 0 failed to save step 6")[rank],
                          out["failed_copy_fn"])
            self.assertEqual((out["ddp_step"], out["ddp_w"]), (2, [2.0] * 4))
            # Without an agent rank 0 writes the one copy: only it builds step 2's state.
            self.assertEqual(out["built"], [1, 2, "shard 2"] if rank == 0 else [1, "shard 2"])
            self.assertEqual((out["shard_step"], out["shard_rank"]), (2, rank))
            self.assertEqual(out["shard_w"], [20.0 + rank] * 4)
        sharded = os.path.join(root, "sharded")
        self.assertEqual(sorted(n for n in os.listdir(sharded) if n.startswith("ftrun-step")),
                         ["ftrun-step-1", "ftrun-step-2"])
        ddp_step = os.path.join(root, "ddp", "ftrun-step-2")
        self.assertEqual([n for n in os.listdir(ddp_step) if n.startswith("group")],
                         ["group-all"])  # one copy for the job

        # Rank 1's shard of step 2 is corrupt, rank 0's is fine: both restore step 1.
        from ftrun import checkpoint
        manifest = checkpoint.verify(os.path.join(sharded, "ftrun-step-2"))
        part = manifest["groups"]["rank-1"]
        with open(os.path.join(sharded, "ftrun-step-2", part["dir"], "rank_1.pt"), "r+b") as f:
            f.seek(64)
            f.write(b"\0" * 8)
        results = run_ranks("load", root)
        for rank, (out, err) in enumerate(results):
            self.assertEqual((out["shard_step"], out["shard_rank"]), (1, rank))
            self.assertEqual(out["shard_w"], [10.0 + rank] * 4)
            self.assertEqual(out["ddp_step"], 2)
            self.assertIn("skipping checkpoint", err)
            self.assertEqual(out["partial_resume"], {})
            self.assertIn("nothing restored (on every rank alike)", out["partial_resume_err"])

        # A job of another size gets a clear error naming both sizes.
        from ftrun.flash_checkpoint.sharded import ShardedCheckpointer, WorldSizeError
        with self.assertRaisesRegex(WorldSizeError, "saved by 2 ranks and this job has 1"):
            ShardedCheckpointer(sharded).load_checkpoint()


    @unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
    def test_under_ftrun_memory_saves_stay_in_the_agents_memory(self):
        root = tempfile.mkdtemp()
        env = dict(os.environ, PYTHON_EXEC=sys.executable)
        for name in ("RANK", "WORLD_SIZE", "FTRUN_CONTROL_SOCKET"):
            env.pop(name, None)
        done = subprocess.run([FTRUN, "--standalone", "--nproc-per-node", str(RANKS),
                               "--log-dir", os.path.join(root, "logs"), __file__, "worker",
                               "memory", root], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stdout)
        for rank in range(RANKS):
            out = result(root, "memory", rank)
            self.assertEqual((out["ddp_step"], out["ddp_w"]), (2, [2.0] * 4))
            self.assertNotIn("falls back", out["stderr"])
            # Under the agent local rank 0 stores the copy: only it builds step 2's state.
            self.assertEqual(out["built"], [1, 2] if rank == 0 else [1])
        self.assertIn("ftrun: restored step 2 from memory", done.stdout)
        # A job that succeeded leaves nothing behind: MEMORY saves are not written to disk.
        self.assertFalse(os.path.exists(os.path.join(root, "ddp")), os.listdir(root))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        unittest.main()
