"""Script lanes: a user's own training command raced through the CLI, as a user would run it
(devicerace-cli race --lane ... -- python3 train.py). Real scripts (tests/scripts/): a plain
PyTorch loop unchanged, a Jupyter notebook, the same loop reporting through `import devicerace`, one that writes
TensorBoard scalars, Keras 3 fit() on JAX and on TensorFlow, a Hugging Face Trainer, a Lightning
Trainer, an unmodified DDP script as workers=2, a lane over a loopback sshd, and every fault a
user's script can bring. The figures are held against the scripts' own counts and clocks.

Run by ctest as: python3 test_script_lanes.py PATH/TO/devicerace-cli
"""
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sshd_fixture  # noqa: E402

CLI = None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "tests", "scripts")
PYTHON = os.environ.get("DEVICERACE_PYTHON") or sys.executable
# The lane's samples/s against the script's own timing of the same steps.
RATE_TOLERANCE = 0.05


def has(module):
    return importlib.util.find_spec(module) is not None


def env(**extra):
    return dict(os.environ, OMP_WAIT_POLICY="PASSIVE", **extra)


class Race:
    """One CLI race of a command; its exit status, output, summary and samples."""

    def __init__(self, lanes, command, *options, timeout=300, environment=None, cwd=SCRIPTS):
        self.dir = tempfile.mkdtemp(prefix="devicerace-script-")
        args = [CLI, "race", "--quiet", "--json", f"{self.dir}/s.json"]
        if "--repeat" not in options:  # one race's samples (a repeat set's are in its recordings)
            args += ["--jsonl", f"{self.dir}/s.jsonl"]
        for lane in lanes:
            args += ["--lane", lane.replace("{dir}", self.dir)]
        args += list(options) + ["--"] + [c.replace("{dir}", self.dir) for c in command]
        self.r = subprocess.run(args, capture_output=True, text=True, env=environment or env(), timeout=timeout,
                                cwd=cwd)
        self.summary = self.samples = None
        if os.path.exists(f"{self.dir}/s.json"):
            with open(f"{self.dir}/s.json") as f:
                self.summary = json.load(f)
            if os.path.exists(f"{self.dir}/s.jsonl"):
                with open(f"{self.dir}/s.jsonl") as f:
                    self.samples = [json.loads(line) for line in f if line.strip()]

    def lane(self, name):
        return next(l for l in self.summary["lanes"] if l["name"] == name)

    def own(self, name):
        """What the script wrote about itself in lane `name` (--out {dir}/{lane}.json)."""
        with open(f"{self.dir}/{name}.json") as f:
            return json.load(f)

    def of(self, name, kind):
        return [s for s in self.samples if s["lane"] == name and s["kind"] == kind]

    def __repr__(self):
        return f"status {self.r.returncode}\nstdout: {self.r.stdout[-3000:]}\nstderr: {self.r.stderr[-3000:]}"

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def train(*extra, steps=300):
    return [PYTHON, "train_fashion.py", "--steps", str(steps), "--out", "{dir}/{lane}.json", *extra]


class RaceTest(unittest.TestCase):
    def race(self, lanes, command, *options, **kw):
        race = Race(lanes, command, *options, **kw)
        self.addCleanup(race.cleanup)
        return race

    def assertFinished(self, race, *names):
        self.assertEqual(race.r.returncode, 0, race)
        for name in names:
            self.assertEqual(race.lane(name)["status"], "finished", race)

    def assertRateMatchesScript(self, race, name, batch):
        """The lane's measured samples/s against the script's own clock over the same steps."""
        own = race.own(name)
        rated = [s for s in race.of(name, "train") if s.get("samples_per_sec") is not None]
        measured = [s for s in rated if not s["warmup"]]
        self.assertGreaterEqual(len(measured), 3, race)
        first = rated[rated.index(measured[0]) - 1]["step"]
        last = measured[-1]["step"]
        ends = own["ends"]
        script_rate = (last - first) * batch / (ends[last - 1] - ends[first - 1])
        lane = race.lane(name)
        lane_rate = lane["measured_samples"] / lane["measured_seconds"]
        self.assertLess(abs(lane_rate / script_rate - 1), RATE_TOLERANCE, (lane_rate, script_rate, race))
        # The median interval (what the summary shows) is of the same order.
        self.assertLess(abs(lane["samples_per_sec"] / script_rate - 1), 0.3, (lane["samples_per_sec"], script_rate))


class UnchangedPyTorch(RaceTest):
    def test_one_and_two_threads_count_steps_samples_and_time_as_the_script_does(self):
        # Enough steps for several report intervals past the warm-up on a fast CPU (~1,000 steps/s).
        race = self.race(["cpu,threads=1", "cpu,threads=2"], train(steps=1200), "--fair")
        self.assertFinished(race, "cpu·1", "cpu·2")
        self.assertEqual(race.summary["workload"], "script")
        self.assertIn("train_fashion.py", " ".join(race.summary["command"]))
        for name, threads in (("cpu·1", 1), ("cpu·2", 2)):
            lane, own = race.lane(name), race.own(name)
            self.assertEqual(lane["steps"], own["steps"])
            self.assertEqual(lane["samples"], own["samples"])
            self.assertEqual(lane["kind"], "external")
            self.assertIsNotNone(lane["preparing_seconds"])
            self.assertGreater(lane["preparing_seconds"], 0)
            self.assertEqual(own["threads"], threads)
            self.assertEqual(own["cpus"], min(threads, os.cpu_count()))
            self.assertFalse(own["cuda"])
            self.assertEqual(own["env"]["DEVICERACE_DEVICE"], "cpu")
            self.assertEqual(own["env"]["CUDA_VISIBLE_DEVICES"], "")
            self.assertRateMatchesScript(race, name, 64)
            losses = [s["loss"] for s in race.of(name, "train") if s["loss"] is not None]
            self.assertGreater(losses[0], 2.0)  # ln 10 at the start
            self.assertLess(losses[-1], 1.0)  # and learning
            phases = lane["step_breakdown"]
            self.assertIn("optimizer", phases)
            self.assertIn("other", phases)
            # PyTorch counted one step's FLOPs (784-256-10: 818,176 a sample), so the lane has an
            # achieved FLOP/s against this machine's peak for its threads, as a built-in lane does.
            self.assertEqual(lane["flops_per_sample"], 818176)
            self.assertIn(f"{threads} thread", lane["peak_source"])
            self.assertGreater(lane["utilization"], 0)
            self.assertAlmostEqual(lane["achieved_flops_per_sec"], 818176 * lane["samples_per_sec"], delta=1)
            self.assertIn("FlopCounterMode", lane["execution"])
        self.assertIn("cpu·2", race.summary["speedup"])
        self.assertIn("FLOPs per sample counted for the script (its execution says how)", race.r.stdout)

    def test_a_recording_replays_and_exports_without_running_the_command(self):
        rec = tempfile.mkdtemp(prefix="devicerace-script-rec-")
        self.addCleanup(shutil.rmtree, rec, True)
        race = self.race(["cpu,threads=1"], train(steps=120), "--record", f"{rec}/r")
        self.assertFinished(race, "cpu·1")
        with open(f"{rec}/r/manifest.json") as f:
            self.assertIn("train_fashion.py", " ".join(json.load(f)["command"]))
        marker = os.path.join(race.dir, "cpu·1.json")
        os.remove(marker)  # a replay or an export that ran the script would write it again
        r = subprocess.run([CLI, "replay", f"{rec}/r"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("a replay never runs it", r.stdout)
        self.assertIn("cpu·1", r.stdout)
        r = subprocess.run([CLI, "export", f"{rec}/r", "--csv", f"{rec}/s.csv", "--tensorboard", f"{rec}/tb"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(f"{rec}/s.csv") as f:
            self.assertGreater(len(f.readlines()), 3)
        self.assertTrue(glob.glob(f"{rec}/tb/**/*tfevents*", recursive=True))
        self.assertFalse(os.path.exists(marker))

    def test_repeat_races_the_script_again_with_fresh_processes(self):
        race = self.race(["cpu,threads=1"], train(steps=80), "--repeat", "2")
        self.assertEqual(race.r.returncode, 0, race)
        self.assertEqual(len(race.summary["repeats"]), 2)
        for repeat in race.summary["repeats"]:
            self.assertEqual(repeat["lanes"][0]["steps"], 80)
        self.assertIn("2 repeats of the race", race.r.stdout)

    def test_a_script_lane_beside_a_built_in_lane(self):
        # --workload names the built-in lanes' network; framework=script lanes run the command,
        # and --steps stops each at the same step.
        race = self.race(["cpu,threads=1,name=engine", "cpu,threads=1,framework=script,name=mine"],
                         train(steps=100000), "--workload", "fashion-mlp", "--steps", "150", "--train-limit", "5000",
                         "--test-limit", "500", "--fair")
        self.assertFinished(race, "engine", "mine")
        self.assertEqual(race.summary["workload"], "fashion-mlp")
        self.assertEqual(race.lane("engine")["kind"], "thread")
        self.assertEqual(race.lane("mine")["kind"], "external")
        self.assertEqual(race.lane("engine")["steps"], 150)
        self.assertGreaterEqual(race.lane("mine")["steps"], 150)  # stopped at its first report past 150
        self.assertIn("mine", race.summary["speedup"])

    def test_the_evaluations_it_prints_are_the_lanes(self):
        # The script prints its test loss and accuracy at steps 300 and 600 (and again, the same
        # figures, after its last step): two evaluations at those steps, the script's own figures.
        race = self.race(["cpu,threads=1"], train("--eval-every", "300", steps=600))
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("cpu·1")
        evals = race.of("cpu·1", "eval")
        self.assertEqual([e["step"] for e in evals], [300, 600], evals)
        self.assertAlmostEqual(lane["final_test_accuracy"], own["accuracy"], places=6)
        self.assertTrue(all(e["loss"] is not None and 0 < e["loss"] < 3 for e in evals), evals)
        race = self.race(["cpu,threads=1,printed=false"], train("--eval-every", "300", steps=600))
        self.assertFinished(race, "cpu·1")
        self.assertEqual([e for e in race.of("cpu·1", "eval") if e["accuracy"] is not None], [])

    def test_lanes_race_variants_of_the_command_with_args(self):
        # args= adds this lane's own words to the command: the same script at two batch sizes.
        race = self.race(["cpu,threads=1,name=b32,args=--batch 32", "cpu,threads=1,name=b128,args=--batch '128'"],
                         train(steps=200), "--fair")
        self.assertFinished(race, "b32", "b128")
        for name, batch in (("b32", 32), ("b128", 128)):
            lane, own = race.lane(name), race.own(name)
            self.assertEqual((lane["steps"], lane["samples"]), (200, 200 * batch))
            self.assertEqual(own["samples"], 200 * batch)
            self.assertIn(f"--batch {batch}", lane["execution"])  # the lane's own command, as it ran
        bad = self.race(["cpu,args=--name 'unclosed"], train(steps=20))
        self.assertEqual(bad.r.returncode, 2, bad)
        self.assertIn("args=--name 'unclosed: No closing quotation", bad.r.stderr)

    def test_a_notebook_races_as_it_is(self):
        # A Jupyter notebook with a magic, a shell escape, help and display(): its code cells run
        # in its folder (its sibling module imports), its printed accuracy is the lane's.
        race = self.race(["cpu,threads=1"], [PYTHON, "fashion_notebook.ipynb", "600", "{dir}/own.json"])
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("own")
        self.assertEqual((lane["steps"], lane["samples"]), (own["steps"], own["samples"]))
        self.assertAlmostEqual(lane["final_test_accuracy"], own["accuracy"], places=4)
        self.assertEqual(lane["flops_per_sample"], 2 * (784 * 128 * 2 + 128 * 10 * 3))
        self.assertIn("its 4 code cells run in order in the notebook's folder, without what only IPython runs: "
                      "%matplotlib inline (cell 1), !pip install torch (cell 1), model? (cell 2)", lane["execution"])

    def test_a_slow_data_loader_makes_its_lane_input_bound(self):
        # The script waits for its DataLoader's batches, 8 ms more a batch in lane "slow": the
        # lane's data phase is the script's own wait, and that lane alone reads input-bound. Its
        # forward passes take 3 ms more: the lane's forward phase is the script's own forward.
        race = self.race(["cpu,threads=1,name=slow", "cpu,threads=1,name=fast"],
                         train("--loader", "--data-delay-ms", "8", "--delay-lane", "slow", "--forward-delay-ms", "3",
                               steps=200), "--fair")
        self.assertFinished(race, "slow", "fast")
        slow, fast = race.lane("slow"), race.lane("fast")
        self.assertTrue(slow["input_bound"], slow["step_breakdown"])
        self.assertFalse(fast["input_bound"], fast["step_breakdown"])
        self.assertIn("data", fast["step_breakdown"])
        own = race.own("slow")
        script_wait = own["data_seconds"] / own["steps"]
        self.assertGreater(script_wait, 0.008)
        self.assertLess(abs(slow["step_breakdown"]["data"] / script_wait - 1), 0.25,
                        (slow["step_breakdown"], script_wait))
        self.assertIn("input-bound", race.r.stdout)
        for lane, own in ((slow, race.own("slow")), (fast, race.own("fast"))):
            script_forward = own["forward_seconds"] / own["steps"]
            self.assertGreater(script_forward, 0.003)
            self.assertLess(abs(lane["step_breakdown"]["forward"] / script_forward - 1), 0.25,
                            (lane["name"], lane["step_breakdown"], script_forward))

    def test_instrument_off_leaves_the_script_unreported(self):
        race = self.race(["cpu,threads=1,instrument=off,quiet=20"], train(steps=50))
        self.assertEqual(race.r.returncode, 1, race)
        self.assertIn("exited (status 0) without reporting a training step", race.lane("cpu·1")["error"])


class ReportingScripts(RaceTest):
    def test_lane_step_and_evaluate_give_the_scripts_own_figures(self):
        race = self.race(["cpu,threads=1"], train("--report", "api", "--eval-every", "600", steps=1200))
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("cpu·1")
        self.assertEqual((lane["steps"], lane["samples"]), (1200, 76800))
        evals = race.of("cpu·1", "eval")
        self.assertEqual([e["step"] for e in evals], [600, 1200, 1200])
        self.assertAlmostEqual(lane["final_test_accuracy"], own["accuracy"], places=6)
        self.assertRateMatchesScript(race, "cpu·1", 64)
        # The evaluations are outside every throughput interval: no interval spans step 600.
        trains = race.of("cpu·1", "train")
        for before, after in zip(trains, trains[1:]):
            self.assertFalse(before["step"] < 600 < after["step"] and after["samples_per_sec"] is not None
                             and before["step"] >= 1, (before, after))

    def test_tensorboard_scalars_of_a_logdir(self):
        race = self.race(["cpu,threads=1,logdir={dir}/tb,batch=64,instrument=off"],
                         train("--report", "tensorboard", "--logdir", "{dir}/tb", "--eval-every", "100", steps=200))
        self.assertFinished(race, "cpu·1")
        lane = race.lane("cpu·1")
        self.assertEqual((lane["steps"], lane["samples"]), (200, 12800))
        self.assertIsNotNone(lane["final_test_accuracy"])
        self.assertGreater(len(race.of("cpu·1", "eval")), 0)
        self.assertIsNotNone(lane["samples_per_sec"])

    def test_a_logdir_that_never_gets_an_event_file(self):
        race = self.race(["cpu,threads=1,logdir={dir}/nowhere,instrument=off"], train(steps=30))
        self.assertEqual(race.r.returncode, 1, race)
        error = race.lane("cpu·1")["error"]
        self.assertIn("without reporting a training step", error)
        self.assertIn("got no event file", error)


@unittest.skipUnless(has("keras") and (has("jax") or has("tensorflow")), "Keras 3 with JAX or TensorFlow is not "
                     "installed (scripts/setup --frameworks)")
class FrameworkCallbacks(RaceTest):
    def keras(self, backend, *extra):
        if not has(backend):
            self.skipTest(f"{backend} is not installed (scripts/setup --frameworks)")
        race = self.race(["cpu,threads=1"], [PYTHON, "keras_fit.py", *extra, "--out", "{dir}/{lane}.json".replace(
            "{lane}", "cpu·1")], environment=env(KERAS_BACKEND=backend), timeout=600)
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("cpu·1")
        self.assertEqual(own["backend"], backend)
        self.assertEqual((lane["steps"], lane["samples"]), (own["steps"], own["samples"]))
        self.assertAlmostEqual(lane["final_test_accuracy"], own["val_accuracy"], places=5)
        # The FLOPs from the model's layers: 64-64-10, the first layer's input without a gradient.
        self.assertEqual(lane["flops_per_sample"], 2 * (64 * 64 * 2 + 64 * 10 * 3))
        self.assertIn("20.2 kFLOP a sample in fp32, counted from the Keras model's layers (Dense)", lane["execution"])
        self.assertGreater(lane["peak_flops_per_sec"], 0)  # the peak a longer race's utilisation divides by

    def test_keras_fit_on_jax(self):
        self.keras("jax")

    def test_keras_fit_on_tensorflow(self):
        # A subclassed model: its FLOPs from its call traced on symbolic inputs.
        self.keras("tensorflow", "--subclassed")

    def test_an_unchanged_keras_fit(self):
        # No callback in the script: DeviceRace adds its own to fit() (batch size 32, fit's
        # argument), with the same figures as the script that names it.
        self.keras("jax" if has("jax") else "tensorflow", "--unchanged")

    @unittest.skipUnless(has("jax"), "JAX is not installed (scripts/setup --frameworks)")
    def test_a_plain_jax_loop_counts_its_steps_flops(self):
        race = self.race(["cpu,threads=1"], [PYTHON, "jax_train.py", "--out", "{dir}/cpu·1.json"], timeout=600)
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("cpu·1")
        self.assertEqual((lane["steps"], lane["samples"]), (own["steps"], own["samples"]))
        self.assertAlmostEqual(lane["final_test_accuracy"], own["accuracy"], places=4)  # its printed line
        # 64-64-10 from the step's jaxpr: the data's layer without an input gradient.
        self.assertEqual(lane["flops_per_sample"], 2 * (64 * 64 * 2 + 64 * 10 * 3))
        self.assertIn("20.2 kFLOP a sample in fp32, counted from the JAX step's jaxpr (dot_general)",
                      lane["execution"])

    @unittest.skipUnless(has("transformers"), "transformers is not installed (scripts/setup --frameworks)")
    def test_hugging_face_trainer(self):
        race = self.race(["cpu,threads=1"], [PYTHON, "hf_trainer.py", "--out", "{dir}/cpu·1.json", "--dir", "{dir}"],
                         timeout=600)
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("cpu·1")
        self.assertEqual((lane["steps"], lane["samples"]), (own["steps"], own["samples"]))
        self.assertAlmostEqual(lane["final_test_loss"], own["eval_loss"], places=4)
        self.assertTrue(any(s["loss"] for s in race.of("cpu·1", "train")))

    @unittest.skipUnless(has("transformers"), "transformers is not installed (scripts/setup --frameworks)")
    def test_hugging_face_trainer_unchanged(self):
        # The same Trainer without the callback: the hooks count its steps and tokens, its
        # DataLoader's wait and one step's FLOPs, and its printed eval line (transformers 5 quotes
        # the values: {'eval_loss': '4.708', ...}) is the lane's evaluation.
        race = self.race(["cpu,threads=1"], [PYTHON, "hf_trainer.py", "--unchanged", "--steps", "60", "--out",
                                             "{dir}/cpu·1.json", "--dir", "{dir}"], timeout=600)
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("cpu·1")
        self.assertEqual(lane["steps"], own["steps"])
        self.assertEqual(lane["samples"] % lane["steps"], 0)  # the tokens of each step's batch
        self.assertAlmostEqual(lane["final_test_loss"], own["eval_loss"], delta=1e-3 * own["eval_loss"])
        self.assertGreater(lane["flops_per_sample"], 0)
        self.assertGreater(lane["utilization"], 0)
        self.assertIn("data", lane["step_breakdown"])

    @unittest.skipUnless(has("lightning"), "lightning is not installed (scripts/setup --frameworks)")
    def test_lightning_trainer(self):
        race = self.race(["cpu,threads=1"], [PYTHON, "lightning_fit.py", "--out", "{dir}/cpu·1.json"], timeout=600)
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("cpu·1")
        self.assertEqual((lane["steps"], lane["samples"]), (own["steps"], own["samples"]))
        self.assertIsNotNone(lane["final_test_accuracy"])

    @unittest.skipUnless(has("lightning"), "lightning is not installed (scripts/setup --frameworks)")
    def test_lightning_trainer_unchanged(self):
        # Without the callback: the hooks count it, and trainer.validate()'s results table
        # ("│ val_acc │ 0.1328125 │") is the lane's last evaluation, its figures exactly.
        race = self.race(["cpu,threads=1"], [PYTHON, "lightning_fit.py", "--unchanged", "--out", "{dir}/cpu·1.json"],
                         timeout=600)
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("cpu·1")
        self.assertEqual((lane["steps"], lane["samples"]), (own["steps"], own["samples"]))
        self.assertAlmostEqual(lane["final_test_accuracy"], own["val_acc"], places=6)
        self.assertAlmostEqual(lane["final_test_loss"], own["val_loss"], places=6)
        self.assertGreater(lane["flops_per_sample"], 0)


class DataParallelScript(RaceTest):
    def test_an_unmodified_ddp_script_as_workers_2(self):
        race = self.race(["cpu,threads=1,workers=2"], [PYTHON, "ddp_torch.py", "--out", "{dir}/ddp.json"])
        self.assertFinished(race, "cpu·1×2")  # named for its ranks, as a data-parallel lane
        lane = race.lane("cpu·1×2")
        with open(f"{race.dir}/ddp.json") as f:
            own = json.load(f)
        self.assertEqual(own["world"], 2)
        self.assertEqual(lane["steps"], own["steps"])
        self.assertEqual(lane["samples"], own["samples"] * 2)  # rank 0's examples x the 2 ranks


class Launchers(RaceTest):
    """A command that starts its training ranks itself, through a launcher or a spawn: the
    launcher's process closes the report pipe it inherited, so rank 0 reopens it by identity
    (devicerace/_channel.py), and the other ranks stay silent."""

    @unittest.skipUnless(has("accelerate"), "accelerate is not installed (scripts/setup --frameworks)")
    def test_accelerate_launch(self):
        race = self.race(["cpu,threads=1"], [PYTHON, "-m", "accelerate.commands.launch", "--cpu", "--num_processes",
                                             "1", "accelerate_loop.py", "--out", "{dir}/own.json"], timeout=600)
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("own")
        self.assertEqual((lane["steps"], lane["samples"]), (own["steps"], own["samples"]))
        self.assertAlmostEqual(lane["final_test_accuracy"], own["accuracy"], places=4)  # accelerator.print's line
        self.assertEqual(lane["flops_per_sample"], 2 * (784 * 256 * 2 + 256 * 10 * 3))  # the data has no gradient
        self.assertIn("data", lane["step_breakdown"])
        # A notebook given to the launcher runs as its cells, as one given to Python does.
        race = self.race(["cpu,threads=1"], [PYTHON, "-m", "accelerate.commands.launch", "--cpu", "--num_processes",
                                             "1", "fashion_notebook.ipynb", "400", "{dir}/own.json"], timeout=600)
        self.assertFinished(race, "cpu·1")
        lane, own = race.lane("cpu·1"), race.own("own")
        self.assertEqual((lane["steps"], lane["samples"]), (own["steps"], own["samples"]))
        self.assertIn("its 4 code cells run in order", lane["execution"])

    def test_torchrun_with_two_ranks(self):
        race = self.race(["cpu,threads=1"], [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                                             "ddp_torch.py", "--out", "{dir}/ddp.json"], timeout=600)
        self.assertFinished(race, "cpu·1")
        lane = race.lane("cpu·1")
        with open(f"{race.dir}/ddp.json") as f:
            own = json.load(f)
        self.assertEqual(own["world"], 2)
        self.assertEqual(lane["steps"], own["steps"])
        self.assertEqual(lane["samples"], own["samples"] * 2)  # rank 0's examples x the launcher's 2 ranks
        self.assertIn("2 ranks started by the command itself", lane["execution"])


    def test_a_script_that_spawns_its_ranks(self):
        # torch.multiprocessing.spawn: no RANK in the ranks' environment, so each rank's report
        # checks torch.distributed's rank, and rank 0 says the world size.
        race = self.race(["cpu,threads=1"], [PYTHON, "ddp_torch.py", "--spawn", "2", "--out", "{dir}/ddp.json"],
                         timeout=600)
        self.assertFinished(race, "cpu·1")
        lane = race.lane("cpu·1")
        with open(f"{race.dir}/ddp.json") as f:
            own = json.load(f)
        self.assertEqual((own["world"], lane["steps"]), (2, own["steps"]))
        self.assertEqual(lane["samples"], own["samples"] * 2)


class BadInput(RaceTest):
    def test_command_not_found_is_refused_before_the_race(self):
        race = self.race(["cpu"], ["no-such-python-here", "train.py"])
        self.assertEqual(race.r.returncode, 2, race)
        self.assertIn("no-such-python-here: command not found", race.r.stderr)

    def test_a_file_that_is_not_executable(self):
        race = self.race(["cpu"], ["./train_fashion.py"])
        self.assertEqual(race.r.returncode, 2, race)
        self.assertIn("not executable", race.r.stderr)

    def test_a_script_that_is_not_there(self):
        race = self.race(["cpu"], [PYTHON, "no_such_train.py"])
        self.assertEqual(race.r.returncode, 2, race)
        self.assertIn("no_such_train.py: no such file", race.r.stderr)

    def test_the_command_needs_a_double_dash(self):
        r = subprocess.run([CLI, "race", "--fair", PYTHON, "train.py"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("after --", r.stderr)

    def test_a_preset_never_runs_a_command(self):
        r = subprocess.run([CLI, "race", "--preset", "seed-000", "--", PYTHON, "train.py"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("never a command", r.stderr)

    def test_framework_script_without_a_command(self):
        r = subprocess.run([CLI, "race", "--workload", "fashion-mlp", "--lane", "cpu,framework=script", "--plan"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("framework=script runs the race's command, and there is none", r.stdout)


class Faults(RaceTest):
    """One race, a lane for each fault: each fails (or finishes) alone, with its own message."""

    def test_every_fault_of_a_script_fails_only_its_lane(self):
        names = ["ok", "raise", "kill", "memory", "garbage", "nan", "badreports", "nostep", "quiet"]
        lanes = [f"cpu,threads=1,name={n}" + (",quiet=8" if n == "quiet" else "") for n in names]
        race = self.race(lanes, train("--fault-by-lane", steps=120), timeout=600)
        self.assertEqual(race.r.returncode, 1, race)
        status = {n: race.lane(n)["status"] for n in names}
        error = {n: race.lane(n)["error"] or "" for n in names}
        for n in ("ok", "garbage", "nan", "badreports"):
            self.assertEqual(status[n], "finished", (n, error[n], race))
        for n in ("raise", "kill", "memory", "nostep", "quiet"):
            self.assertEqual(status[n], "failed", (n, race))
        self.assertIn("train_fashion.py failed at step 30 (exit status 1): ZeroDivisionError: division by zero "
                      "(train_fashion.py, line", error["raise"])
        self.assertIn("killed by signal 9 (SIGKILL)", error["kill"])
        self.assertRegex(error["kill"], r"at step \d+ \(out of memory\?")  # its last reported step
        self.assertIn("allocate memory", error["memory"])  # PyTorch's own words for it
        self.assertIn("exited (status 0) without reporting a training step", error["nostep"])
        self.assertIn("reported no step in 8 s; is it instrumented?", error["quiet"])
        # Its stdout is its own: the garbage lane's figures are the script's.
        self.assertEqual((race.lane("garbage")["steps"], race.lane("garbage")["samples"]), (120, 7680))
        # Non-finite losses are never plotted; bad reports are refused, the counts stay right.
        self.assertTrue(all(s["loss"] is None for s in race.of("nan", "train") if s["step"] > 31))
        self.assertEqual((race.lane("badreports")["steps"], race.lane("badreports")["samples"]), (120, 7680))
        steps = [s["step"] for s in race.of("badreports", "train")]
        self.assertEqual(steps, sorted(steps))
        # What the failed lanes recorded before they failed is kept.
        self.assertGreaterEqual(race.lane("raise")["steps"], 1)
        self.assertEqual(race.lane("ok")["steps"], 120)


@unittest.skipIf(sshd_fixture.available(), sshd_fixture.available() or "")
class RemoteScript(sshd_fixture.WithSshd, RaceTest):
    @unittest.skipUnless(shutil.which("rsync"), "rsync is not installed (scripts/setup installs it)")
    def test_copy_sends_the_folder_and_the_script_trains_there(self):
        folder = tempfile.mkdtemp(prefix="devicerace-copy-")
        self.addCleanup(shutil.rmtree, folder, True)
        shutil.copy(os.path.join(SCRIPTS, "train_fashion.py"), folder)
        remote_dir = os.path.join(os.path.expanduser("~"), os.path.basename(folder))
        self.addCleanup(shutil.rmtree, remote_dir, True)
        race = self.race([f"{self.host}/cpu,threads=1,cli={CLI},copy={folder}"],
                         [PYTHON, "train_fashion.py", "--steps", "100", "--out", "{lane}.json"],
                         environment=env(DEVICERACE_SSH_CONFIG=self.sshd.config), cwd=tempfile.gettempdir())
        name = f"{sshd_fixture.Sshd.ALIAS}·cpu·1"
        self.assertFinished(race, name)
        self.assertEqual(race.lane(name)["steps"], 100)
        with open(os.path.join(remote_dir, f"{name}.json")) as f:
            self.assertEqual(json.load(f)["threads"], 1)  # it ran in the copy, with the lane's threads

    def test_a_host_without_the_script_file(self):
        race = self.race([f"{self.host}/cpu,threads=1,cli={CLI},workdir=/"], [PYTHON, "train_fashion.py"],
                         environment=env(DEVICERACE_SSH_CONFIG=self.sshd.config))
        self.assertEqual(race.r.returncode, 2, race)
        self.assertIn("train_fashion.py: no such file in / on", race.r.stderr)
        self.assertIn("copy=DIR", race.r.stderr)

    def test_a_host_without_the_script(self):
        race = self.race([f"{self.host}/cpu,threads=1,cli={CLI},workdir=/nonexistent-devicerace"],
                         [PYTHON, "train_fashion.py"], environment=env(DEVICERACE_SSH_CONFIG=self.sshd.config))
        self.assertEqual(race.r.returncode, 2, race)
        self.assertIn("workdir /nonexistent-devicerace: no such folder", race.r.stderr)


if __name__ == "__main__":
    CLI = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
