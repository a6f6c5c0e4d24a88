"""What every lane program of a DeviceRace workload shares, without any framework: the engine's
workloads and constants (engine_schema.py reads them from the engine), the learning-rate
schedules and the Fashion-MNIST and text readers (numpy only).

torch_networks.py (PyTorch; run by pytorch_lane.py) builds its networks from these entries;
keras_lane.py (Keras 3 on JAX, TensorFlow or PyTorch) builds its own from the same entries, so
neither lane imports the other's framework. The benchmark's PyTorch peers (bench/peers/) import
it from here; it imports nothing from bench/. Installed with the lane programs in
share/devicerace/lanes.
"""
import gzip
import math
import os

import numpy as np

from engine_schema import WORKLOADS, constant, install, load_schema  # noqa: F401  (re-exported)

_CONSTANTS = {"STEP_BUFFER": "step_buffer", "SYNTHETIC_POOL_BYTES": "synthetic_pool_bytes",
              "REPORT_SECONDS": "report_seconds"}


def __getattr__(name):
    """STEP_BUFFER, SYNTHETIC_POOL_BYTES, REPORT_SECONDS: the engine's values (engine_schema)."""
    if name in _CONSTANTS:
        return constant(_CONSTANTS[name])
    raise AttributeError(f"module 'workload_table' has no attribute '{name}'")


def schedule_factor(schedule, step, total):
    """The engine's scheduleFactor (models.cpp): the learning rate's multiplier at `step`."""
    f = step / total if total > 0 else 0.0
    if schedule == "step":  # x0.1 at 4/9, 6/9, 8/9 of the run
        return 1.0 if f < 4.0 / 9 else 0.1 if f < 6.0 / 9 else 0.01 if f < 8.0 / 9 else 0.001
    if schedule == "onecycle":  # piecewise linear through (0, 0), (5/24, 1), (1, 0)
        peak = 5.0 / 24.0
        return f / peak if f < peak else max(0.0, (1.0 - f) / (1.0 - peak))
    if schedule == "cosine":  # nanoGPT: linear warm-up over 5%, then a cosine down to 0.1
        warm, floor = 0.05, 0.1
        if f < warm:
            return (step + 1) / (warm * total + 1)
        ratio = min(1.0, (f - warm) / (1.0 - warm))
        return floor + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (1.0 - floor)
    return 1.0


# ---------------------------------------------------------------------------------------------
# Text (engine text_data.cpp loadTextCorpus, data_choice.cpp's windows per workload).
# ---------------------------------------------------------------------------------------------

def text_corpus():
    return os.environ.get("DEVICERACE_TEXT_CORPUS", "/usr/share/games/fortunes")


def text_windows(w, data_dir):
    """(length, stride, lowercase, only_files) as the engine cuts the corpus for workload `w`."""
    if w["lm"]:
        return w["shape"][0], w["lm"], False, ()
    stock = not data_dir and "DEVICERACE_TEXT_CORPUS" not in os.environ
    return w["shape"][0], 3, True, (("fortunes", "literature", "riddles") if stock else ())


def load_text(path, length, stride, lowercase, only_files, train_limit, test_limit):
    """The engine's loadTextCorpus: the regular files of a folder (sorted, fortune's .dat
    indexes and symlinks left out) or one file, UTF-8, the alphabet sorted by code point, the
    last 10% the test split; windows of `length` ids every `stride` characters. Returns
    (train (N, length) int64, test, alphabet as a list of strings)."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path)
                       if (not only_files or n in only_files) and not n.endswith(".dat")
                       and os.path.isfile(os.path.join(path, n)) and not os.path.islink(os.path.join(path, n)))
    elif os.path.exists(path):
        files = [path]
    else:
        raise FileNotFoundError(f"{path}: no such file or folder; expected a UTF-8 text corpus")
    text = []
    for f in files:
        with open(f, "rb") as fh:
            chunk = fh.read().decode("utf-8")
        text.append(chunk)
    text = "".join(text)
    if lowercase:
        text = "".join(c.lower() if ord(c) < 0x80 else c for c in text)
    if len(text) < length * 20:
        raise ValueError(f"{path}: {len(text)} characters is too little text for {length}-character windows")
    alphabet = sorted(set(text))
    index = {c: i for i, c in enumerate(alphabet)}
    ids = np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))
    split = len(ids) * 9 // 10

    def windows(lo, hi, limit):
        starts = np.arange(lo, hi - length, stride)
        if limit:
            starts = starts[:limit]
        return ids[starts[:, None] + np.arange(length)[None, :]]

    return windows(0, split, train_limit), windows(split, len(ids), test_limit), alphabet

# ---------------------------------------------------------------------------------------------
# Data (engine dataset.cpp).
# ---------------------------------------------------------------------------------------------


def fashion_dir():
    return os.environ.get("DEVICERACE_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def read_idx(folder, stem):
    """An IDX file as a uint8 numpy array (plain or .gz, the plain one first, like the engine)."""
    for path in (os.path.join(folder, stem), os.path.join(folder, stem + ".gz")):
        if os.path.exists(path):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                raw = bytearray(f.read())
            ndim = raw[3]
            dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise FileNotFoundError(f"{folder}: missing {stem} (or {stem}.gz); set DEVICERACE_FASHION_MNIST, "
                            "pass --data-dir or use --data synthetic")


def physical_cores():
    """The engine's default CPU thread count: distinct (physical id, core id) pairs."""
    cores, phys = set(), "0"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "physical id":
                    phys = value
                elif key == "core id":
                    cores.add((phys, value))
    except OSError:
        pass
    logical = os.cpu_count() or 1
    return max(1, min(len(cores) or logical, logical))
