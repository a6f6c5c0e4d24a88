"""The engine's workload schema, as the Python lane programs read it: every workload's definition
and the constants the trainers share. The engine is the one source: a race's config message
carries the lane's workload (`workload_info`) and the constants (protocol 1.2), and a program run
on its own (the benchmark's peers, the tests) reads the whole schema from
`devicerace-cli workloads --schema`. Nothing here is copied from the engine by hand.

No framework and no numpy: the worker protocol (devicerace_worker.py) and the script lane import
it too, under whatever interpreter a user's script runs with.
"""
import json
import os
import shutil
import subprocess
from collections.abc import Mapping

SCHEMA_VERSION = 1
_HERE = os.path.dirname(os.path.abspath(__file__))


class SchemaError(Exception):
    """The schema cannot be read; the message says what to do."""


def lane_view(entry):
    """An engine schema entry as the lane programs use it: short keys (batch, lr, wd, momentum,
    schedule, classes, vocabulary, tokens, binary, epochs, lstm, lm, clip, dataset, shape,
    optimizer, rule, network, synthetic_train/test, parameters)."""
    rule = entry["update_rule"]
    return dict(
        name=entry["name"], dataset=entry["dataset"], shape=tuple(entry["input_shape"]), batch=entry["batch"],
        lr=entry["lr"], wd=entry["weight_decay"], momentum=entry["momentum"], schedule=entry["schedule"],
        classes=entry["classes"], vocabulary=entry["vocabulary"], tokens=entry["input"] == "tokens",
        binary=entry["task"] == "binary", epochs=entry["epochs"], lstm="lstm" in entry["lane_keys"],
        lm=entry["tokens_per_sample"] or 0, clip=rule["clip_norm"], optimizer=rule["kind"], rule=rule,
        network=dict(entry["network"]), synthetic_train=entry["synthetic"]["train"],
        synthetic_test=entry["synthetic"]["test"], parameters=entry["parameters"])


_entries = {}  # name -> lane_view
_constants = {}
_complete = False  # every workload is here (the whole schema was read)
_installed = False  # a config installed its lane's entry: the CLI is not asked


def install(entry=None, constants=None):
    """What a config message carries: the lane's workload entry (or None) and the constants."""
    global _installed
    if entry:
        _entries[entry["name"]] = lane_view(entry)
    if constants:
        _constants.update(constants)
    _installed = _installed or bool(entry) or bool(constants)


def cli_path():
    """The devicerace-cli to read the schema from: $DEVICERACE_CLI, one on PATH, the source tree's
    release build, or the one installed beside these programs (share/devicerace/lanes -> bin)."""
    candidates = [os.environ.get("DEVICERACE_CLI"), shutil.which("devicerace-cli"),
                  os.path.join(_HERE, "..", "..", "build", "release", "app", "cli", "devicerace-cli"),
                  os.path.join(_HERE, "..", "..", "..", "bin", "devicerace-cli")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


def load_schema(cli=None):
    """Reads the whole schema from `devicerace-cli workloads --schema` (once)."""
    global _complete
    if _complete:
        return
    cli = cli or cli_path()
    if not cli:
        raise SchemaError("no devicerace-cli found to read the workload schema from (set DEVICERACE_CLI, or build "
                          "DeviceRace: scripts/build)")
    try:
        r = subprocess.run([cli, "workloads", "--schema"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SchemaError(f"{cli} workloads --schema: {e}") from None
    if r.returncode != 0:
        raise SchemaError(f"{cli} workloads --schema exited {r.returncode}: {r.stderr.strip()[-300:]}")
    schema = json.loads(r.stdout)
    if schema.get("schema") != SCHEMA_VERSION:
        raise SchemaError(f"{cli}: workload schema {schema.get('schema')}, these lane programs read "
                          f"{SCHEMA_VERSION}")
    for entry in schema["workloads"]:
        _entries[entry["name"]] = lane_view(entry)
    _constants.update(schema["constants"])
    _complete = True


def _ensure():
    if not _installed:
        load_schema()


class _Workloads(Mapping):
    """name -> lane_view, filled from the config or, on first use without one, from the CLI."""

    def __getitem__(self, name):
        _ensure()
        return _entries[name]

    def __iter__(self):
        _ensure()
        return iter(sorted(_entries))

    def __len__(self):
        _ensure()
        return len(_entries)


WORKLOADS = _Workloads()


def constant(key):
    """One of the engine's shared constants: step_buffer, synthetic_pool_bytes,
    divergence_factor, max_threads_per_cpu, report_seconds."""
    if key not in _constants:
        load_schema()
    return _constants[key]
