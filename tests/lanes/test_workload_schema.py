"""The Python lane programs read the engine's workload schema (`devicerace-cli workloads --schema`,
and the config message's workload_info): every PyTorch network has the parameter count the engine
gives it, so does every Keras network where Keras is installed (less the documented LSTM biases),
the lane view keeps every field the lanes read, and no lane program holds a copy of the table.
Nothing here is typed in by hand: the expected figures are the engine's.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lane_harness import LANES, PYTHON, cli, schema  # noqa: E402
import engine_schema  # noqa: E402  (lanes/python, on the path through lane_harness)


class SchemaTest(unittest.TestCase):
    def test_the_schema_lists_every_workload_of_the_cli(self):
        s = schema()
        self.assertEqual(s["schema"], engine_schema.SCHEMA_VERSION)
        listed = subprocess.run([cli(), "workloads", "--json"], capture_output=True, text=True, check=True).stdout
        self.assertEqual([w["name"] for w in json.loads(listed)], [w["name"] for w in s["workloads"]])
        self.assertEqual(json.loads(listed), s["workloads"], "workloads --json is the schema's entries")
        self.assertEqual(set(s["constants"]),
                         {"step_buffer", "synthetic_pool_bytes", "divergence_factor", "max_threads_per_cpu",
                          "report_seconds"})

    def test_the_lane_view_has_every_field_the_lanes_read(self):
        for entry in schema()["workloads"]:
            w = engine_schema.lane_view(entry)
            for key in ("batch", "lr", "wd", "momentum", "schedule", "classes", "vocabulary", "tokens", "binary",
                        "epochs", "lstm", "lm", "clip", "dataset", "shape", "optimizer", "rule", "network",
                        "synthetic_train", "synthetic_test"):
                self.assertIn(key, w, entry["name"])
            self.assertGreater(w["synthetic_train"], 0, entry["name"])
        by_name = {e["name"]: engine_schema.lane_view(e) for e in schema()["workloads"]}
        self.assertEqual(by_name["char-gpt"]["lm"], by_name["char-gpt"]["network"]["context"])
        self.assertEqual(by_name["cifar-resnet56"]["network"], {"depth": 56})
        self.assertTrue(by_name["imdb-bilstm"]["binary"] and by_name["imdb-bilstm"]["lstm"])
        self.assertEqual(by_name["davidnet"]["optimizer"], "sgd-nesterov")

    def test_no_lane_program_copies_the_table(self):
        """The workloads' defaults and the engine's constants appear in no lane program: a
        description, a `WORKLOADS = {` literal or a constant's value would be a copy."""
        descriptions = [w["description"] for w in schema()["workloads"]]
        for name in sorted(os.listdir(LANES)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(LANES, name), encoding="utf-8") as f:
                text = f.read()
            self.assertNotRegex(text, r"(?m)^WORKLOADS\s*=\s*\{", name)
            self.assertNotRegex(text, r"(?m)^(STEP_BUFFER|SYNTHETIC_POOL_BYTES|DIVERGENCE_FACTOR|MAX_THREADS_PER_CPU|"
                                      r"SYNTHETIC_TRAIN|SYNTHETIC_TEST|REPORT_SECONDS)\s*=", name)
            for d in descriptions:
                self.assertNotIn(d, text, name)

    def test_every_pytorch_network_has_the_engines_parameter_count(self):
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import torch_networks as tn; "
                "print(json.dumps({n: tn.count_parameters(tn.build_model(n)) for n in tn.MODELS}))")
        counts = self.run_counting(code)
        engine = {w["name"]: w["parameters"] for w in schema()["workloads"]}
        self.assertEqual(set(counts), set(engine), "the PyTorch lane builds every workload of the engine")
        for name, parameters in engine.items():
            self.assertEqual(counts[name], parameters, name)

    def test_every_keras_network_has_the_engines_parameter_count(self):
        if importlib.util.find_spec("keras") is None:
            self.skipTest("Keras is not installed (scripts/setup --frameworks)")
        code = ("import json, os, sys; sys.path.insert(0, sys.argv[1]); os.environ.setdefault('KERAS_BACKEND', 'jax'); "
                "import keras_lane as kl; problem = kl.load_framework(os.environ['KERAS_BACKEND']); "
                "assert not problem, problem; import workload_table as wt; "
                "print(json.dumps({n: kl.parameter_count(kl.build_model(n, dict(wt.WORKLOADS[n]))) "
                "for n in kl.BUILDERS}))")
        counts = self.run_counting(code)
        merged = {"imdb-bilstm": 2 * 4 * 64, "charlstm": 4 * 128}  # keras_lane.MERGED_BIAS, said in its text
        for w in schema()["workloads"]:
            self.assertEqual(counts[w["name"]] + merged.get(w["name"], 0), w["parameters"], w["name"])

    def run_counting(self, code):
        env = dict(os.environ, DEVICERACE_CLI=cli())
        r = subprocess.run([PYTHON, "-c", code, LANES], capture_output=True, text=True, env=env, timeout=500)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        return json.loads(r.stdout.strip().splitlines()[-1])

    def test_a_lane_reads_the_workload_from_its_config_not_the_cli(self):
        """With the config's workload_info installed, the lane programs never run the CLI."""
        entry = next(w for w in schema()["workloads"] if w["name"] == "char-gpt")
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import engine_schema as es; "
                "es._HERE = '/nonexistent'; es.install(json.loads(sys.argv[2]), json.loads(sys.argv[3])); import workload_table as wt; "
                "print(wt.WORKLOADS['char-gpt']['network']['layers'], wt.STEP_BUFFER, len(wt.WORKLOADS))")
        env = dict(os.environ, DEVICERACE_CLI="/nonexistent/devicerace-cli", PATH="/usr/bin:/bin")
        r = subprocess.run([PYTHON, "-c", code, LANES, json.dumps(entry), json.dumps(schema()["constants"])],
                           capture_output=True, text=True, env=env, timeout=60, cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr[-1000:])
        self.assertEqual(r.stdout.split(), [str(entry["network"]["layers"]),
                                            str(schema()["constants"]["step_buffer"]), "1"])

    def test_without_a_schema_the_message_says_what_to_do(self):
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import engine_schema as es; es._HERE = '/nonexistent'\n"
                "try:\n    es.load_schema()\nexcept es.SchemaError as e:\n    print(e)")
        env = dict(os.environ, DEVICERACE_CLI="/nonexistent/devicerace-cli", PATH="/usr/bin:/bin")
        r = subprocess.run([PYTHON, "-c", code, LANES], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr[-1000:])
        self.assertRegex(r.stdout, re.escape("no devicerace-cli found") + ".*DEVICERACE_CLI")


if __name__ == "__main__":
    unittest.main()
