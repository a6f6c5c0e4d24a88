"""The side-by-side harness (bench/compare.py, bench/peers/peer.py, bench/build_ab.py) runs and answers as it says.

Run by ctest as: python3 test_harness.py PATH/TO/devicerace-cli PATH/TO/libdevicerace_engine.so
(the .venv python: needs torch)
"""
import json
import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEER = os.path.join(ROOT, "bench", "peers", "peer.py")
COMPARE = os.path.join(ROOT, "bench", "compare.py")
BUDGET = os.path.join(ROOT, "bench", "gpt_step_budget.py")
CLI = ENGINE = None
ENV = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1")


def short(workload, steps=30):
    return ["--workload", workload, "--device", "cpu", "--threads", "1", "--steps", str(steps), "--warmup", "5",
            "--data", "synthetic"]


class PeerServer(unittest.TestCase):
    def test_answers_each_request_in_order_and_survives_bad_ones(self):
        requests = [short("fashion-mlp"), ["--workload", "no-such-net"], short("charlstm", 12),
                    short("fashion-cnn", 8) + ["--precision", "fp16"]]
        out = subprocess.run([sys.executable, PEER, "--serve"], input="".join(json.dumps(r) + "\n" for r in requests),
                             capture_output=True, text=True, timeout=600, env=ENV)
        self.assertEqual(out.returncode, 0, out.stderr)
        answers = [json.loads(line) for line in out.stdout.splitlines()]
        self.assertEqual(len(answers), 4, out.stdout)
        self.assertTrue(answers[0]["ok"], answers[0])
        self.assertEqual(answers[0]["workload"], "fashion-mlp")
        self.assertGreater(answers[0]["samples_per_sec"], 0)
        self.assertFalse(answers[1]["ok"])
        self.assertIn("invalid choice: 'no-such-net'", answers[1]["error"])
        self.assertTrue(answers[2]["ok"], answers[2])
        self.assertEqual(answers[2]["workload"], "charlstm")
        self.assertFalse(answers[3]["ok"])
        self.assertIn("fp16 needs a CUDA device", answers[3]["error"])

    def test_cpu_requests_run_in_a_fresh_child(self):
        # Each CPU request is forked from the server: a different process every time.
        requests = [short("fashion-mlp", 10), short("fashion-mlp", 10)]
        code = ("import json, os, sys; sys.argv = [sys.argv[0], '--serve']; sys.path.insert(0, os.path.dirname(%r));"
                "import peer; real = peer.measure;"
                "peer.measure = lambda a: dict(real(a), pid=os.getpid()); sys.exit(peer.main(['--serve']))" % PEER)
        out = subprocess.run([sys.executable, "-c", code], input="".join(json.dumps(r) + "\n" for r in requests),
                             capture_output=True, text=True, timeout=300, env=ENV)
        self.assertEqual(out.returncode, 0, out.stderr)
        pids = [json.loads(line)["pid"] for line in out.stdout.splitlines()]
        self.assertEqual(len(pids), 2, out.stdout)
        self.assertNotEqual(pids[0], pids[1])


class Compare(unittest.TestCase):
    def test_quick_row_prints_the_ratio_table(self):
        out = subprocess.run([sys.executable, COMPARE, "--cli", CLI, "--quick", "--sections", "peers",
                              "--workloads", "fashion-mlp"], capture_output=True, text=True, timeout=600, env=ENV)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        rows = [line for line in out.stdout.splitlines() if line.startswith("| fashion-mlp |")]
        self.assertEqual(len(rows), 1, out.stdout)
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        dr, pt, ratio = (float(c.replace(",", "")) for c in cells[1:4])
        self.assertGreater(dr, 0)
        self.assertGreater(pt, 0)
        self.assertAlmostEqual(ratio, dr / pt, delta=0.05 * ratio)  # one pair: the ratio of the two rates
        self.assertIn("DeviceRace execution", out.stdout)

    def test_unknown_workload_is_a_clear_error(self):
        out = subprocess.run([sys.executable, COMPARE, "--cli", CLI, "--quick", "--workloads", "no-such-net"],
                             capture_output=True, text=True, timeout=120, env=ENV)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("no-such-net", out.stderr)


class CpuSpeed(unittest.TestCase):
    """bench/cpu_speed.py's arithmetic: the peaks' medians over its probes, the goals' ratios per race,
    the FLOPs from the races' own count, its default rows."""

    @classmethod
    def setUpClass(cls):
        import importlib.util
        spec = importlib.util.spec_from_file_location("cpu_speed", os.path.join(ROOT, "bench", "cpu_speed.py"))
        cls.mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.mod)

    def test_the_bf16_table_names_the_routes_each_bf16_lane_took(self):
        routes = self.mod.bf16_routes
        self.assertEqual(routes("fused transformer step (bf16 GEMMs with fp32 results: MKL bf16 for 12 of 14 GEMM "
                                "shapes, oneDNN bf16 for 2 (the fastest timed on this CPU at 2 threads); fp32 causal "
                                "attention tiles and master weights), fused AdamW"),
                         "MKL bf16 for 12 of 14 GEMM shapes, oneDNN bf16 for 2 (the fastest timed on this CPU at 2 "
                         "threads)")
        self.assertEqual(routes("fused dense step (bf16 GEMMs with fp32 sums: fp32 for every GEMM "
                                "(DEVICERACE_BF16_ROUTE); fp32 master weights)"),
                         "fp32 for every GEMM (DEVICERACE_BF16_ROUTE)")
        self.assertEqual(routes("autograd step (not a GPT), fused Adam, bf16 autocast"), "autocast (ATen's ops)")
        self.assertEqual(routes("fused dense step (bf16 GEMMs with fp32 sums: MKL bf16 for 5 of 8 GEMM shapes, fp32 for 3 "
                                "(the fastest timed on this CPU at 1 thread); fp32 master weights), fused Adam, bf16 "
                                "emulated (this CPU has neither AMX nor AVX-512 BF16)"),
                         "MKL bf16 for 5 of 8 GEMM shapes, fp32 for 3 (the fastest timed on this CPU at 1 thread); "
                         "emulated (no bf16 units)")
        self.assertEqual(routes("fused Adam, bf16 autocast, bf16 emulated (this CPU has neither AMX nor AVX-512 BF16), "
                                "convolutions on their bf16 values in fp32 arithmetic (no bf16 units), dense layers' "
                                "bf16 GEMMs: MKL bf16 for 4 of 6 GEMM shapes, fp32 for 2 (the fastest timed on this "
                                "CPU at 1 thread), hashed dropout masks"),
                         "autocast, dense layers: MKL bf16 for 4 of 6 GEMM shapes, fp32 for 2 (the fastest timed on "
                         "this CPU at 1 thread); emulated (no bf16 units)")
        # A reason with its own ";" and parentheses stays whole.
        self.assertEqual(routes("fused transformer step (bf16 GEMMs with fp32 results: fp32 for every GEMM shape (15) "
                                "(the fastest timed on this CPU at 1 thread, caches cold as a step leaves them; with no "
                                "bf16 units another route must beat fp32 on fp32 inputs by 15%); their bf16 inputs kept "
                                "in fp32 storage, read without widening), fused AdamW, bf16 emulated (this CPU has "
                                "neither AMX nor AVX-512 BF16)"),
                         "fp32 for every GEMM shape (15) (the fastest timed on this CPU at 1 thread, caches cold as a "
                         "step leaves them; with no bf16 units another route must beat fp32 on fp32 inputs by 15%); "
                         "emulated (no bf16 units)")
        self.assertEqual(routes("fused SGD, bf16 autocast, bf16 emulated (this CPU has neither AMX nor AVX-512 BF16)"),
                         "emulated (no bf16 units)")
        self.assertEqual(routes("fused Adam, bf16 autocast, channels_last, dense layers' bf16 GEMMs: fp32 for 3 of 6 "
                                "GEMM shapes, MKL bf16 for 3 (the fastest timed on this CPU at 2 threads), hashed "
                                "dropout masks"),
                         "autocast, dense layers: fp32 for 3 of 6 GEMM shapes, MKL bf16 for 3 (the fastest timed on "
                         "this CPU at 2 threads)")
        self.assertEqual(routes("fused Adam, bf16 autocast, dense layers' bf16 GEMMs: oneDNN bf16 for every GEMM "
                                "(DEVICERACE_BF16_ROUTE), hashed dropout masks"),
                         "autocast, dense layers: oneDNN bf16 for every GEMM (DEVICERACE_BF16_ROUTE)")
        self.assertEqual(routes("fused dense step (bf16 GEMMs with fp32 sums: fp32 for every GEMM shape (6) (the "
                                "fastest timed on this CPU at 1 thread); fp32 master weights), bf16 slower than fp32 on "
                                "this CPU (bf16 peak 89 against fp32 160 GFLOP/s at 1 thread)"),
                         "fp32 for every GEMM shape (6) (the fastest timed on this CPU at 1 thread); bf16 slower than "
                         "fp32 here (bf16 peak 89 against fp32 160 GFLOP/s at 1 thread)")
        result = {"workloads": {"char-gpt": {
            "lanes": [{"lane": "DeviceRace, 2 threads", "samples_per_sec": 400.0, "execution": ""},
                      {"lane": "DeviceRace, 2 threads, bf16", "samples_per_sec": 300.0,
                       "execution": "autograd step (x), bf16 autocast"}],
            "ratios": {"bf16 / fp32, 2 threads": {"median": 0.75, "runs": [0.75]}}}}}
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.mod.print_bf16_table(result, 2)
        self.assertIn("| char-gpt | 400 | 300 | 0.75 | autocast (ATen's ops) |", out.getvalue())

    def test_a_lanes_peak_is_the_faster_of_the_gemm_and_the_convolution(self):
        peaks = {"fp32/1/2048x2048x2048": 90e9, "fp32/1/conv3x3": 200e9, "bf16/1/2048x2048x2048": 350e9,
                 "bf16/1/conv3x3": 300e9, "fp32/2/2048x2048x2048": 170e9}
        self.assertEqual(self.mod.lane_peak(peaks, "fp32", 1), 200e9)
        self.assertEqual(self.mod.lane_peak(peaks, "bf16", 1), 350e9)
        self.assertEqual(self.mod.lane_peak(peaks, "bf16", 2), 170e9)  # no bf16 figure: the fp32 one
        # bf16 slower than fp32 (an Intel Xeon's AVX-512 BF16 without AMX): held to the fp32 peak
        slower = {"fp32/1/2048x2048x2048": 160e9, "fp32/1/conv3x3": 166e9, "bf16/1/2048x2048x2048": 83e9,
                  "bf16/1/conv3x3": 89e9}
        self.assertEqual(self.mod.lane_peak(slower, "bf16", 1), 166e9)

    def test_each_peak_is_the_median_of_its_probes(self):
        probes = [{"fp32/1/a": 60e9, "fp32/2/a": 150e9}, {"fp32/1/a": 80e9, "fp32/2/a": 120e9},
                  {"fp32/1/a": 70e9, "fp32/2/a": 130e9}]
        self.assertEqual(self.mod.median_peaks(probes), {"fp32/1/a": 70e9, "fp32/2/a": 130e9})

    def test_the_goals_are_ratios_within_each_race(self):
        specs = self.mod.lanes(2)
        rates = [{"DeviceRace, 1 thread": 100, "DeviceRace, 2 threads": 160, "Keras 3 on JAX, 1 thread": 80,
                  "Keras 3 on JAX, 2 threads": 100, "PyTorch lane, 2 threads": 50},
                 {"DeviceRace, 1 thread": 200, "DeviceRace, 2 threads": 300, "Keras 3 on JAX, 1 thread": 100,
                  "Keras 3 on JAX, 2 threads": 250, "PyTorch lane, 2 threads": 0}]  # 0: a lane without a figure
        runs = [{label: ({"samples_per_sec": r[label]} if label in r else {}) for label, _, _, _ in specs}
                for r in rates]
        ratios = self.mod.goal_ratios(specs, runs, 2)
        self.assertEqual(ratios["DeviceRace / Keras-JAX, 1 thread"], [1.25, 2.0])
        self.assertEqual(ratios["DeviceRace / Keras-JAX, 2 threads"], [1.6, 1.2])
        self.assertEqual(ratios["DeviceRace 1 -> 2 threads"], [1.6, 1.5])
        self.assertEqual(ratios["DeviceRace / PyTorch lane, 2 threads"], [3.2])
        self.assertNotIn("bf16 / fp32, 1 thread", ratios)  # the bf16 lanes have no figure here
        specs = self.mod.lanes(1)  # one core: its "every core" lanes are 1-thread lanes
        runs = [{label: {"samples_per_sec": 10.0} for label, _, _, _ in specs}]
        self.assertEqual(list(self.mod.goal_ratios(specs, runs, 1)),
                         ["DeviceRace / Keras-JAX, 1 thread", "bf16 / fp32, 1 thread"])

    def test_plain_lanes_race_plain_libtorch_beside_the_pytorch_lane(self):
        specs = self.mod.lanes(2, plain=True)
        self.assertEqual({label: spec for label, spec, _, _ in specs}, {
            "plain LibTorch, 1 thread": "cpu,threads=1,fused=false",
            "plain LibTorch, 2 threads": "cpu,threads=2,fused=false",
            "PyTorch lane, 1 thread": "cpu,threads=1,framework=pytorch",
            "PyTorch lane, 2 threads": "cpu,threads=2,framework=pytorch",
            "DeviceRace, 1 thread": "cpu,threads=1", "DeviceRace, 2 threads": "cpu,threads=2"})
        runs = [{label: {"samples_per_sec": rate} for (label, _, _, _), rate in zip(specs, (90, 160, 100, 200, 180, 320))}]
        ratios = self.mod.goal_ratios(specs, runs, 2)
        self.assertEqual(ratios["plain LibTorch / PyTorch lane, 1 thread"], [0.9])
        self.assertEqual(ratios["plain LibTorch / PyTorch lane, 2 threads"], [0.8])
        self.assertEqual(ratios["fast paths / plain LibTorch, 2 threads"], [2.0])

    def test_flops_come_from_the_races_own_count(self):
        specs = self.mod.lanes(2)
        runs = [{"DeviceRace, 1 thread": {"samples_per_sec": 10.0}, "DeviceRace, 2 threads": {"error": "x"}},
                {"DeviceRace, 1 thread": {"flops_per_sample": 3209216.0}}]
        self.assertEqual(self.mod.flops_per_sample(specs, runs), 3209216.0)
        self.assertIsNone(self.mod.flops_per_sample(specs, [{"DeviceRace, 1 thread": {}}]))

    def test_cifar_resnet20_races_where_bf16_has_units(self):
        self.assertEqual(self.mod.default_workloads(False), "fashion-mlp,fashion-cnn,char-gpt")
        self.assertEqual(self.mod.default_workloads(True).split(","),
                         ["fashion-mlp", "fashion-cnn", "char-gpt", "cifar-resnet20"])

    def test_a_lease_races_devicerace_lanes_only_at_the_threads_asked(self):
        labels = [label for label, _, _, _ in self.mod.lanes(16, devicerace_only=True)]
        self.assertEqual(labels, ["DeviceRace, 1 thread", "DeviceRace, 16 threads", "DeviceRace, 1 thread, bf16",
                                  "DeviceRace, 16 threads, bf16"])
        specs = {label: spec for label, spec, _, _ in self.mod.lanes(2, devicerace_only=True)}
        self.assertEqual(specs, {"DeviceRace, 1 thread": "cpu,threads=1", "DeviceRace, 2 threads": "cpu,threads=2",
                                 "DeviceRace, 1 thread, bf16": "cpu,threads=1,precision=bf16",
                                 "DeviceRace, 2 threads, bf16": "cpu,threads=2,precision=bf16"})
        import contextlib
        import io
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):  # argparse: no race starts
            self.mod.main(["--threads", "0"])

    def test_the_bf16_evidence_names_the_isa_each_library_ran(self):
        log = "\n".join([
            "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with float16, Intel DL Boost and bfloat16 support "
            "and Intel AMX with bfloat16 and 8-bit integer support",
            "onednn_verbose,v1,primitive,exec,cpu,convolution,brg_conv_fwd:avx512_core_amx,forward_training,"
            "src:bf16::blocked:acdb::f0 wei:bf16:a:blocked:AcdB16b16a2b::f0,attr-scratchpad:user,,mb128,0.05",
            "onednn_verbose,v1,primitive,exec,cpu,convolution,brg_conv_fwd:avx512_core_amx,forward_training,"
            "src:bf16::blocked:acdb::f0 wei:bf16:a:blocked:AcdB16b16a2b::f0,attr-scratchpad:user,,mb128,0.04",
            "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:abcd::f0 "
            "dst:bf16::blocked:acdb::f0,attr-scratchpad:user,,32x1x3x3,0.01",
            "MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture Intel(R) "
            "Advanced Matrix Extensions (Intel(R) AMX) enabled processors, Lnx 2.00GHz lp64 gnu_thread",
            "MKL_VERBOSE GEMM_BF16BF16F32(N,N,128,512,784,...) 20.1us CNR:OFF Dyn:0 FastMM:1 TID:0  NThr:1",
            "MKL_VERBOSE GEMM_BF16BF16F32(N,T,128,784,512,...) 19.0us CNR:OFF Dyn:0 FastMM:1 TID:0  NThr:1",
            "MKL_VERBOSE SGEMM(N,N,10,2,128,...) 3.1us CNR:OFF Dyn:0 FastMM:1 TID:0  NThr:1",
            "cpu·1·bf16 finished"])
        ev = self.mod.isa_evidence(log)
        self.assertIn("Intel AMX with bfloat16", ev["onednn_isa"])
        self.assertEqual(ev["onednn_primitives"], {"convolution brg_conv_fwd:avx512_core_amx bf16": 2,
                                                   "reorder jit:uni f32": 1})
        self.assertIn("Intel(R) AMX", ev["mkl"])
        self.assertEqual(ev["mkl_calls"], {"GEMM_BF16BF16F32": 2, "SGEMM": 1})
        none = self.mod.isa_evidence("cpu·1·bf16 finished")
        self.assertEqual(none, {"onednn_isa": None, "onednn_primitives": {}, "mkl": None, "mkl_calls": {}})

    FAKE_CLI = """import json, os, signal, sys, time
count = os.path.join(os.path.dirname(sys.argv[0]), "races")
n = int(open(count).read()) + 1 if os.path.exists(count) else 1
open(count, "w").write(str(n))
if str(n) == os.environ.get("FAKE_TERM_ON"):  # a `timeout` firing while this race runs
    os.kill(os.getppid(), signal.SIGTERM)
    time.sleep(30)
names = [a.split("name=")[1] for a in sys.argv if "name=" in a]
lanes = [{"name": name, "samples_per_sec": 100.0 * n + i, "flops_per_sample": 1e6} for i, name in enumerate(names)]
json.dump({"lanes": lanes, "omp_wait_policy": "unset"}, open(sys.argv[sys.argv.index("--json") + 1], "w"))
"""

    def run_main(self, *argv, term_on=None):
        """cpu_speed.main on a fake CLI (each race's figures: 100 x its number), peaks not probed, a CPU
        without bf16 units:
        (what it printed, its JSON, how many races the fake CLI ran)."""
        import contextlib
        import io
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            cli = os.path.join(d, "cli")
            with open(cli, "w") as f:
                f.write(f"#!{sys.executable}\n" + self.FAKE_CLI)
            os.chmod(cli, 0o755)
            probe, self.mod.probe_peaks = self.mod.probe_peaks, lambda cores, native: {
                f"fp32/{t}/{s}": 1e11 for t in (1, cores) for s in ("2048x2048x2048", "128x784x512")}
            flags, self.mod.cpu_flags = self.mod.cpu_flags, set  # no bf16 units, whatever this CPU has
            os.environ["FAKE_TERM_ON"] = str(term_on or 0)
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                    self.mod.main(["--cli", cli, "--json", os.path.join(d, "r.json"), "--lanes", "devicerace",
                                   "--threads", "2", *argv])
            finally:
                self.mod.probe_peaks, self.mod.cpu_flags = probe, flags
                del os.environ["FAKE_TERM_ON"]
            with open(os.path.join(d, "r.json")) as f:
                result = json.load(f)
            with open(os.path.join(d, "races")) as f:
                return out.getvalue(), result, int(f.read())

    def test_a_budget_stops_starting_races_and_keeps_the_runs_made(self):
        text, result, races = self.run_main("--workloads", "fashion-mlp,fashion-cnn", "--runs", "3", "--budget", "0")
        self.assertEqual(races, 1)
        self.assertEqual(result["cut"], ["fashion-mlp: 1 of 3 runs (--budget 0 s)", "fashion-cnn: not raced"])
        self.assertIn("median of 1 runs", text)
        self.assertEqual(result["workloads"]["fashion-mlp"]["lanes"][0]["samples_per_sec"], 100.0)
        text, result, races = self.run_main("--workloads", "fashion-mlp,fashion-cnn", "--runs", "2")
        self.assertEqual((races, result["cut"]), (4, []))
        self.assertEqual(result["workloads"]["fashion-cnn"]["ratios"]["DeviceRace 1 -> 2 threads"]["runs"],
                         [301 / 300, 401 / 400])

    def test_sigterm_ends_in_the_tables_of_the_races_that_finished(self):
        text, result, races = self.run_main("--workloads", "fashion-mlp,fashion-cnn", "--runs", "2", term_on=3)
        self.assertEqual(races, 3)
        self.assertEqual(result["cut"], ["stopped by SIGTERM during a race; that race is not counted",
                                         "fashion-cnn: not raced"])
        self.assertEqual([l["runs"] for l in result["workloads"]["fashion-mlp"]["lanes"]],
                         [[100.0, 200.0], [101.0, 201.0], [102.0, 202.0], [103.0, 203.0]])  # fp32, bf16 (emulated)
        self.assertIn("## fashion-mlp", text)
        self.assertNotIn("## fashion-cnn", text)


def sanitized(library):
    """The sanitizer runtime a library links (libtsan, libasan), or None: Python cannot load such a
    library with ctypes ("cannot allocate memory in static TLS block")."""
    try:
        out = subprocess.run(["ldd", library], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((name for name in ("libtsan", "libasan") if name in out), None)


class GptStepBudget(unittest.TestCase):
    """bench/gpt_step_budget.py finds every loop it times in the built library (by mangled name) and
    adds them up; --ab puts two libraries side by side; --race sets the sum against a race's step."""

    def setUp(self):
        runtime = sanitized(ENGINE)
        if runtime:
            self.skipTest(f"the engine library links {runtime} (a sanitizer build), which Python cannot load")

    def run_budget(self, *extra):
        out = subprocess.run([sys.executable, BUDGET, "--lib", ENGINE, "--precision", "fp32", "--reps", "1", *extra],
                             capture_output=True, text=True, timeout=600, env=ENV)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        return out.stdout

    def test_the_budget_names_every_group_and_sums_them(self):
        text = self.run_budget()
        names = ("GEMMs", "attention", "elementwise", "norms", "loss", "optimizer")
        for group in names:
            self.assertRegex(text, rf"\n\| {group} \| [0-9.]+ \| [0-9.]+% \|")
        total = float(text.split("| **all** | **")[1].split("**")[0])
        groups = sum(float(line.split("|")[2]) for line in text.splitlines()
                     if line.startswith("| ") and line.split("|")[1].strip() in names)
        self.assertAlmostEqual(total, groups, delta=0.01 * total)

    def test_the_budget_is_set_against_a_race(self):
        text = self.run_budget("--race", "--race-steps", "6", "--cli", CLI)
        line = next(line for line in text.splitlines() if line.startswith("A race's fp32 step: **"))
        step = float(line.split("**")[1].split()[0])
        share = float(line.split("**")[3].rstrip("%"))
        self.assertGreater(step, 0)
        self.assertGreater(share, 0)  # the same step's work, timed two ways: no bound on noise asserted
        self.assertIn("optimizer", line)

    def test_a_library_against_itself_reads_near_one(self):
        text = self.run_budget("--ab", ENGINE)
        ratio = float(text.split("| **the loops of a step** |")[1].split("|")[2].strip(" *"))
        self.assertGreater(ratio, 0.5)  # the same code both ways: only timing noise between them
        self.assertLess(ratio, 2.0)


class BuildAb(unittest.TestCase):
    """bench/build_ab.py: one build against itself gives a row per lane with both rates and their ratio."""

    def test_a_build_against_itself_gives_each_lane_both_rates_and_their_ratio(self):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "build_ab.py"), "--a", CLI, "--b", CLI,
                              "--runs", "2", "--workloads", "fashion-mlp", "--steps", "40", "--lanes", "cpu,threads=1"],
                             capture_output=True, text=True, timeout=600, env=ENV)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        rows = [line for line in out.stdout.splitlines() if line.startswith("| fashion-mlp")]
        self.assertEqual(len(rows), 1, out.stdout)
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        self.assertEqual(cells[1], "`cpu,threads=1`")
        a, b, ratio = (float(c.replace(",", "")) for c in cells[2:5])
        self.assertGreater(a, 0)
        self.assertGreater(b, 0)
        low, high = (float(x) for x in cells[5].split("–"))
        self.assertLessEqual(low, ratio)
        self.assertLessEqual(ratio, high)
        self.assertIn("the builds alternating", out.stdout)

    def test_a_missing_build_is_a_clear_error(self):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "build_ab.py"), "--a", "/no/such/cli",
                              "--b", CLI], capture_output=True, text=True, timeout=60, env=ENV)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("not an executable: /no/such/cli", out.stderr)


if __name__ == "__main__":
    CLI = sys.argv.pop(1)
    ENGINE = sys.argv.pop(1)
    unittest.main()
