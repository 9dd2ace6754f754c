"""ftrun.flash_checkpoint.megatron (DLRover's Megatron-LM shape) end to end, against the
Megatron-LM stand-in in megatron_standin/ (Megatron-LM is not installed here; the test puts the
stand-in on PYTHONPATH): a real ftrun, two torch ranks (gloo) calling Megatron-LM's
save_checkpoint/load_checkpoint through ftrun's.

* Tensor parallel 2, a MEMORY save every iteration, a rank SIGKILLed: the job resumes from
  memory with zero iterations lost, final weights equal to a fault-free run.
* DISK saves: they land where Megatron-LM puts them (its tracker names the newest,
  iter_<N>/mp_rank_XX/model_optim_rng.pt is Megatron-LM's own file, with ftrun's "ftrun_path"
  key: torch.load reads it), and a new job (memory gone) loads them through ftrun's
  load_checkpoint, zero DISK iterations lost; so does a job that loads with Megatron-LM's own
  load_checkpoint alone. Data parallel 2 too: the rank that saved no file gets data-parallel
  rank 0's.
* An iteration saved with tensor parallel 2 and loaded with 1: both ranks get mp_rank_00's file.
* The iteration the agent stores when the job fails has Megatron-LM's paths: its own loader
  resumes from it.
* Without ftrun: DLRover's signatures, a round trip, Megatron-LM's own checkpoint, the
  distributed optimizer's file, an iteration in the form earlier versions of ftrun stored,
  and the links an earlier run made for a step it never stored removed at the next load.

Run as `python3 test_flash_megatron.py train <root> <config json>` (or `relayout <root>`) it is
one rank.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest

from test_flash_memory import FTRUN, assert_same_weights, one_step, write_final  # noqa: E402
from test_flash_replica import finals, read  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "megatron_standin")
ITERATIONS = 16


def train(root, config):
    """One rank: Megatron-style training for ITERATIONS iterations, saving after each
    (DISK at config["disk_at"], else MEMORY). progress-<rank>.txt: where each attempt started
    and what it saved; final-<rank>.json: the final weights."""
    import argparse

    import torch
    import torch.distributed as dist
    from megatron import set_args
    from ftrun.flash_checkpoint.megatron import StorageType, load_checkpoint, save_checkpoint
    if config.get("megatrons_loader"):  # what the stored files are read with: Megatron-LM alone
        from megatron.checkpointing import load_checkpoint

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tp = config.get("tp", 2)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    ckpt = os.path.join(root, "ckpt")
    set_args(argparse.Namespace(save=ckpt, load=ckpt, tensor_model_parallel_size=tp,
                                use_distributed_optimizer=config.get("distopt", False)))
    torch.manual_seed(rank % tp)  # tensor-parallel ranks differ, data-parallel ones are equal
    model = [torch.nn.Linear(16, 4)]
    opt = torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    progress = open(os.path.join(root, f"progress-{rank}.txt"), "a", buffering=1)
    start = load_checkpoint(model, opt, sched)
    progress.write(f"start {start} attempt {attempt}\n")
    for it in range(start + 1, ITERATIONS + 1):
        one_step(model[0], opt, it, rank % tp, lockstep=True)
        if attempt == 0 and it == config.get("kill_at") and rank == config.get("kill_rank"):
            os.kill(os.getpid(), signal.SIGKILL)  # mid-iteration, as test_flash_memory's
        sched.step()
        disk = it in config.get("disk_at", [])
        taken = save_checkpoint(it, model, opt, sched,
                                storage_type=StorageType.DISK if disk else StorageType.MEMORY)
        progress.write(f"saved {it} {taken}\n")
    if config.get("disk_at"):
        from ftrun.flash_checkpoint.megatron import wait_latest_checkpoint
        waited = wait_latest_checkpoint(timeout=120)  # DLRover's, at the end of training
        tracked = read(os.path.join(ckpt, "latest_checkpointed_iteration.txt"))
        progress.write(f"waited {waited} {tracked.strip()}\n")
    write_final(root, rank, model[0])


def relayout(root):
    """One rank: saves iteration 5 with tensor parallel 2 (each tensor-parallel rank's weights
    its rank + 1), then loads it with tensor parallel 1 (data parallel 2) and writes the
    loaded weight to loaded-<rank>.txt."""
    import argparse

    import torch
    import torch.distributed as dist
    from megatron import set_args
    from ftrun.flash_checkpoint import megatron as flash

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ckpt = os.path.join(root, "ckpt")
    set_args(argparse.Namespace(save=ckpt, load=ckpt, tensor_model_parallel_size=2))
    model = [torch.nn.Linear(4, 2)]
    with torch.no_grad():
        model[0].weight.fill_(rank + 1)
    assert flash.save_checkpoint(5, model, None, None)  # DISK
    assert flash.wait_latest_checkpoint(timeout=60)
    flash._checkpointers.clear()  # as a new job would start
    set_args(argparse.Namespace(save=ckpt, load=ckpt, tensor_model_parallel_size=1))
    fresh = [torch.nn.Linear(4, 2)]
    iteration = flash.load_checkpoint(fresh, None, None)
    with open(os.path.join(root, f"loaded-{rank}.txt"), "w") as f:
        f.write(f"{iteration} {fresh[0].weight.flatten()[0].item()}")
    dist.barrier()


def starts(root, rank):
    return [int(l.split()[1]) for l in read(os.path.join(root, f"progress-{rank}.txt")).split("\n")
            if l.startswith("start")]


class WithoutFtrunTest(unittest.TestCase):
    """One process outside ftrun (no torch.distributed): synchronous disk saves."""

    def setUp(self):
        sys.path.insert(0, STANDIN)
        self.addCleanup(sys.path.remove, STANDIN)
        self.root = tempfile.mkdtemp(prefix="ftrun-megatron-plain-")

    def test_dlrovers_signatures_and_a_round_trip(self):
        import argparse
        import inspect

        import torch
        from megatron import set_args
        from ftrun.flash_checkpoint import megatron as flash
        self.assertEqual(list(inspect.signature(flash.save_checkpoint).parameters),
                         ["iteration", "model", "optimizer", "opt_param_scheduler",
                          "num_floating_point_operations_so_far", "storage_type", "storage",
                          "comm_backend", "save_timeout", "replica_count"])
        self.assertEqual(list(inspect.signature(flash.load_checkpoint).parameters),
                         ["model", "optimizer", "opt_param_scheduler", "load_arg", "strict",
                          "storage", "comm_backend", "save_timeout", "replica_count"])
        self.assertEqual(list(inspect.signature(flash.wait_latest_checkpoint).parameters),
                         ["timeout"])
        ckpt = os.path.join(self.root, "ckpt")
        set_args(argparse.Namespace(save=ckpt, load=ckpt, tensor_model_parallel_size=1))
        model = [torch.nn.Linear(4, 2)]
        self.assertEqual(flash.load_checkpoint(model, None, None), 0, "nothing saved yet")
        self.assertTrue(flash.save_checkpoint(3, model, None, None,
                                              storage_type=flash.StorageType.MEMORY))
        with torch.no_grad():
            model[0].weight.add_(1.0)
        self.assertTrue(flash.save_checkpoint(4, model, None, None))  # DISK
        want = model[0].weight.clone()
        self.assertEqual(read(os.path.join(ckpt, "latest_checkpointed_iteration.txt")).strip(),
                         "4")
        self.assertTrue(os.path.isfile(os.path.join(ckpt, "iter_0000004", "mp_rank_00",
                                                    "model_optim_rng.pt")))
        fresh = [torch.nn.Linear(4, 2)]
        self.assertEqual(flash.load_checkpoint(fresh, None, None), 4)
        self.assertTrue(torch.equal(fresh[0].weight, want))
        with self.assertRaises(ValueError):
            flash.save_checkpoint(5, model, None, None, storage=object())
        # A checkpoint Megatron-LM wrote itself (no ftrun checkpoint there) still loads.
        from megatron import checkpointing
        native = os.path.join(self.root, "native")
        set_args(argparse.Namespace(save=native, load=native, tensor_model_parallel_size=1))
        checkpointing.save_checkpoint(7, fresh, None, None)
        self.assertEqual(flash.load_checkpoint(model, None, None), 7)
        self.assertTrue(torch.equal(model[0].weight, want))
        # An iteration as earlier versions of ftrun stored it: every rank's files by their path.
        older = os.path.join(self.root, "older")
        set_args(argparse.Namespace(save=older, load=older, tensor_model_parallel_size=1))
        cp = flash._checkpointer(older, "")
        state = {"args": None, "checkpoint_version": 3.0, "iteration": 6,
                 "model": {k: v + 2.0 for k, v in fresh[0].state_dict().items()}}
        self.assertTrue(cp.save_checkpoint(
            6, {"iteration": 6, "files": {"mp_rank_00/model_optim_rng.pt": state}},
            os.path.join(older, "iter_0000006", "ftrun-checkpoint")))
        self.assertEqual(flash.load_checkpoint(model, None, None), 6)
        self.assertTrue(torch.equal(model[0].weight, want + 2.0))


    def test_links_an_earlier_run_made_for_a_step_it_never_stored_go_at_the_next_load(self):
        import argparse
        import time

        import torch
        from megatron import set_args
        from ftrun.flash_checkpoint import megatron as flash
        ckpt = os.path.join(self.root, "ckpt")
        set_args(argparse.Namespace(save=ckpt, load=ckpt, tensor_model_parallel_size=1))
        model = [torch.nn.Linear(4, 2)]
        self.assertTrue(flash.save_checkpoint(4, model, None, None))  # DISK

        def link(iter_dir, name, target, age):
            os.makedirs(iter_dir, exist_ok=True)
            path = os.path.join(iter_dir, name)
            os.symlink(target, path)
            then = time.time() - age
            os.utime(path, (then, then), follow_symlinks=False)
            return path

        hour = 3600
        # An earlier run's agents linked step 9 and never stored it; this run's link step 10
        # while its last shard is on its way; beside the stored step 4, an earlier run's
        # dangling link.
        gone = os.path.join(ckpt, "iter_0000009")
        link(gone, "mp_rank_00", "../ftrun-step-9/part-0", hour)
        link(gone, "ftrun-checkpoint", "../ftrun-step-9", hour)
        os.utime(gone, (time.time() - hour,) * 2)
        pending = link(os.path.join(ckpt, "iter_0000010"), "mp_rank_00",
                       "../ftrun-step-10/part-0", 0)
        beside = link(os.path.join(ckpt, "iter_0000004"), "mp_rank_05",
                      "../ftrun-step-4/part-5", hour)
        flash._checkpointers.clear()  # as a new job would start
        fresh = [torch.nn.Linear(4, 2)]
        self.assertEqual(flash.load_checkpoint(fresh, None, None), 4)
        self.assertTrue(torch.equal(fresh[0].weight, model[0].weight))
        self.assertFalse(os.path.lexists(gone), os.listdir(ckpt))
        self.assertFalse(os.path.lexists(beside))
        self.assertTrue(os.path.islink(pending), "this run's link was removed")
        self.assertTrue(os.path.isfile(os.path.join(ckpt, "iter_0000004", "mp_rank_00",
                                                    "model_optim_rng.pt")))

    def test_the_distributed_optimizers_file_is_written_and_read_as_its_own(self):
        import argparse

        import torch
        from megatron import set_args
        from ftrun.flash_checkpoint import megatron as flash
        ckpt = os.path.join(self.root, "distopt")
        set_args(argparse.Namespace(save=ckpt, load=ckpt, tensor_model_parallel_size=1,
                                    use_distributed_optimizer=True))
        model = [torch.nn.Linear(4, 2)]
        opt = torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9)
        model[0](torch.ones(1, 4)).sum().backward()
        opt.step()
        self.assertTrue(flash.save_checkpoint(2, model, opt, None))  # DISK
        rank_dir = os.path.join(ckpt, "iter_0000002", "mp_rank_00")
        self.assertEqual(sorted(os.listdir(rank_dir)), ["PART.json", "distrib_optim.pt",
                                                        "model_optim_rng.pt"])  # + ftrun's
        fresh = [torch.nn.Linear(4, 2)]
        fresh_opt = torch.optim.SGD(fresh[0].parameters(), lr=0.1, momentum=0.9)
        self.assertEqual(flash.load_checkpoint(fresh, fresh_opt, None), 2)
        self.assertTrue(torch.equal(fresh_opt.state_dict()["state"][0]["momentum_buffer"],
                                    opt.state_dict()["state"][0]["momentum_buffer"]))

    def test_dlrovers_dist_ckpt_module_with_a_deletion_strategy(self):
        """The import the DLRover guide's Megatron-LM example uses, with its signatures; a
        deletion strategy removes old iterations with their iter_<N> links."""
        import argparse
        import inspect

        import torch
        from megatron import set_args
        from ftrun.flash_checkpoint import megatron_dist_ckpt as flash
        from ftrun.flash_checkpoint.storage import KeepLatestStepStrategy
        self.assertEqual(list(inspect.signature(flash.save_checkpoint).parameters),
                         ["iteration", "model", "optimizer", "opt_param_scheduler",
                          "num_floating_point_operations_so_far", "storage_type",
                          "comm_backend", "deletion_strategy", "save_timeout", "replica_count"])
        self.assertEqual(list(inspect.signature(flash.load_checkpoint).parameters),
                         ["model", "optimizer", "opt_param_scheduler", "load_arg", "strict",
                          "comm_backend", "deletion_strategy", "save_timeout",
                          "replica_count"])
        ckpt = os.path.join(self.root, "dist")
        set_args(argparse.Namespace(save=ckpt, load=ckpt, tensor_model_parallel_size=1))
        model = [torch.nn.Linear(4, 2)]
        self.assertEqual(flash.load_checkpoint(model, None, None), (0, 0), "nothing saved yet")
        keep = KeepLatestStepStrategy(2, ckpt)
        for it in range(1, 5):
            with torch.no_grad():
                model[0].weight.fill_(it)
            self.assertTrue(flash.save_checkpoint(it, model, None, None, 0,
                                                  deletion_strategy=keep))
        self.assertTrue(flash.wait_latest_checkpoint(timeout=60))
        self.assertEqual(sorted(n for n in os.listdir(ckpt) if n.startswith(("ftrun-step",
                                                                             "iter_"))),
                         ["ftrun-step-3", "ftrun-step-4", "iter_0000003", "iter_0000004"])
        fresh = [torch.nn.Linear(4, 2)]
        self.assertEqual(flash.load_checkpoint(fresh, None, None), (4, 0))
        self.assertTrue(torch.equal(fresh[0].weight, model[0].weight))
        # A strategy naming Megatron-LM's iter_<N> directories (given to the load only).

        class ByIterDir:
            def clean_up(self, step, delete_func):
                delete_func(os.path.join(other, f"iter_{step:07d}"))

        other = os.path.join(self.root, "dist2")
        set_args(argparse.Namespace(save=other, load=other, tensor_model_parallel_size=1))
        self.assertEqual(flash.load_checkpoint(model, None, None, deletion_strategy=ByIterDir()),
                         (0, 0))
        for it in range(1, 4):
            self.assertTrue(flash.save_checkpoint(it, model, None, None, 0))
        self.assertTrue(flash.wait_latest_checkpoint())  # and the deletions are done
        self.assertEqual(sorted(n for n in os.listdir(other) if n.startswith(("ftrun-step",
                                                                              "iter_"))),
                         ["ftrun-step-3", "iter_0000003"])

@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
class MegatronFlashCheckpointTest(unittest.TestCase):
    clean = {}

    def run_job(self, root, config, restarts=0, what="train", ok=True, nproc=2):
        env = dict(os.environ, PYTHONPATH=STANDIN)
        env.pop("FTRUN_CONTROL_SOCKET", None)
        done = subprocess.run(
            [FTRUN, "--standalone", "--nproc-per-node", str(nproc), "--max-restarts",
             str(restarts),
             "--restart-backoff", "0", "--monitor-interval", "0.05", "--log-dir",
             os.path.join(root, "logs"), "--no-python", "/usr/bin/python3", __file__, what,
             root] + ([json.dumps(config)] if what == "train" else []),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
        self.assertEqual(done.returncode == 0, ok, done.stdout[-4000:])
        return done.stdout

    def fault_free(self, tp):
        if tp not in MegatronFlashCheckpointTest.clean:
            root = tempfile.mkdtemp(prefix="ftrun-megatron-clean-")
            self.run_job(root, {"tp": tp})
            MegatronFlashCheckpointTest.clean[tp] = finals(root, 2)
        return MegatronFlashCheckpointTest.clean[tp]

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ftrun-megatron-")
        self.ckpt = os.path.join(self.root, "ckpt")

    def test_a_sigkilled_rank_resumes_from_memory_with_zero_iterations_lost(self):
        out = self.run_job(self.root, {"tp": 2, "kill_at": 9, "kill_rank": 1}, restarts=1)
        for r in range(2):
            self.assertEqual(starts(self.root, r), [0, 8], out[-3000:])
        self.assertIn("ftrun: restored step 8 from memory", out)
        self.assertIn("Megatron-LM checkpoint of iteration 8 loaded", out)
        assert_same_weights(self, finals(self.root, 2), self.fault_free(2))
        left = os.listdir(self.ckpt) if os.path.isdir(self.ckpt) else []
        self.assertEqual([n for n in left if n.startswith("iter_")], [],
                         "MEMORY saves leave no directory of Megatron-LM's behind")

    def test_the_iteration_the_agent_stores_when_the_job_fails_has_megatrons_paths(self):
        """MEMORY saves only, then a rank dies with no restart left: the agent stores the
        newest iteration with each rank's iter_<N>/mp_rank_XX link, so Megatron-LM's own
        loader resumes from it."""
        out = self.run_job(self.root, {"tp": 2, "kill_at": 9, "kill_rank": 1}, ok=False)
        self.check_megatron_layout(8, 2, False)
        out = self.run_job(self.root, {"tp": 2, "megatrons_loader": True})
        for r in range(2):
            self.assertEqual(starts(self.root, r), [0, 8], out[-3000:])
        assert_same_weights(self, finals(self.root, 2), self.fault_free(2))

    def test_a_one_rank_jobs_iterations_have_megatrons_paths(self):
        """One rank: the step's own link leads to its one file, so the mp_rank_00 links go to
        the stored step itself (a DISK save's and the one stored when the job fails)."""
        self.run_job(self.root, {"tp": 1, "disk_at": [4], "kill_at": 9, "kill_rank": 0},
                     ok=False, nproc=1)
        self.assertEqual(read(os.path.join(self.ckpt, "latest_checkpointed_iteration.txt")), "8")
        import torch
        for iteration in (4, 8):
            path = os.path.join(self.ckpt, f"iter_{iteration:07d}", "mp_rank_00",
                                "model_optim_rng.pt")
            self.assertEqual(torch.load(path, weights_only=False)["iteration"], iteration)

    def check_megatron_layout(self, iteration, tp, distopt):
        import torch
        self.assertEqual(read(os.path.join(self.ckpt, "latest_checkpointed_iteration.txt"))
                         .strip(), str(iteration))
        for r in range(tp):  # one directory per tensor-parallel rank, from data-parallel rank 0
            rel = f"mp_rank_{r:02d}/model_optim_rng.pt"
            path = os.path.join(self.ckpt, f"iter_{iteration:07d}", rel)
            # Megatron-LM's own file: torch.load reads it (weights_only=False: its args are an
            # argparse.Namespace, as in Megatron-LM's own files), with ftrun's one key added.
            state = torch.load(path, weights_only=False)
            self.assertEqual(sorted(state), ["args", "checkpoint_version", "ftrun_path",
                                             "iteration", "model", "opt_param_scheduler",
                                             "optimizer"])
            self.assertEqual(state["ftrun_path"], rel)
            optim = os.path.join(os.path.dirname(path), "distrib_optim.pt")
            self.assertEqual(os.path.exists(optim), distopt)
            if distopt:  # the momentum buffers: in distrib_optim.pt, not in model_optim_rng.pt
                self.assertEqual(state["optimizer"]["state"], {})
                param_state = torch.load(optim, weights_only=False)["param_state"]
                self.assertEqual(sorted(param_state), [0, 1])
                self.assertEqual(list(param_state[0]), ["momentum_buffer"])
            self.assertEqual(state["iteration"], iteration)
            self.assertEqual(state["checkpoint_version"], 3.0)

    def disk_saves_then_a_new_job(self, tp, distopt=False):
        self.run_job(self.root, {"tp": tp, "disk_at": [5, 10], "distopt": distopt})
        self.check_megatron_layout(10, tp, distopt)
        for r in range(2):  # each rank's wait returned with iteration 10 stored
            self.assertIn("waited True 10", read(os.path.join(self.root, f"progress-{r}.txt")))
        # A new job: no memory left; Megatron-LM's loader reads iteration 10 from disk.
        for r in range(2):
            os.unlink(os.path.join(self.root, f"final-{r}.json"))
        out = self.run_job(self.root, {"tp": tp, "distopt": distopt})
        for r in range(2):
            self.assertEqual(starts(self.root, r), [0, 10], out[-3000:])
        assert_same_weights(self, finals(self.root, 2), self.fault_free(tp))
        # Megatron-LM's loader alone (no ftrun in the load) resumes from the stored files too.
        for r in range(2):
            os.unlink(os.path.join(self.root, f"final-{r}.json"))
        out = self.run_job(self.root, {"tp": tp, "megatrons_loader": True, "distopt": distopt})
        for r in range(2):
            self.assertEqual(starts(self.root, r), [0, 10, 10], out[-3000:])
        self.assertNotIn("Megatron-LM checkpoint of iteration", out)  # not ftrun's loader
        assert_same_weights(self, finals(self.root, 2), self.fault_free(tp))

    def test_disk_saves_land_where_megatron_puts_them_and_a_new_job_loads_them(self):
        self.disk_saves_then_a_new_job(tp=2)

    def test_data_parallel_ranks_load_the_file_data_parallel_rank_0_saved(self):
        self.disk_saves_then_a_new_job(tp=1)

    def test_with_the_distributed_optimizer_both_files_are_megatrons_own(self):
        """Data-parallel rank 0 saves distrib_optim.pt beside model_optim_rng.pt: both are
        stored as Megatron-LM's files, and both loaders restore the momentum from them."""
        self.disk_saves_then_a_new_job(tp=1, distopt=True)

    def test_with_the_distributed_optimizer_a_sigkilled_rank_resumes_from_memory(self):
        out = self.run_job(self.root, {"tp": 2, "distopt": True, "kill_at": 9, "kill_rank": 1},
                           restarts=1)
        for r in range(2):
            self.assertEqual(starts(self.root, r), [0, 8], out[-3000:])
        self.assertIn("ftrun: restored step 8 from memory", out)
        assert_same_weights(self, finals(self.root, 2), self.fault_free(2))

    def test_a_changed_model_parallel_layout_loads_each_file_where_megatron_asks_for_it(self):
        """Saved with tensor parallel 2, loaded with 1: both ranks (now data parallel) get the
        file of mp_rank_00, not each the shard its rank number saved."""
        out = self.run_job(self.root, None, what="relayout")
        for r in range(2):
            self.assertEqual(read(os.path.join(self.root, f"loaded-{r}.txt")), "5 1.0",
                             out[-3000:])


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "train":
        train(sys.argv[2], json.loads(sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "relayout":
        relayout(sys.argv[2])
    else:
        unittest.main()
