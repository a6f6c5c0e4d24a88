#!/usr/bin/env python3
"""Other people's training scripts, unchanged, as DeviceRace script lanes: the examples of a
pytorch/examples checkout (https://github.com/pytorch/examples; none of it is in this repository)
raced one lane each, with what each lane got: its steps, speed, FLOPs a sample and share of the
peak, the evaluation it read from what the script printed, or the failure it said.

The checkout is never written to: each example's folder is copied into a scratch folder, beside
the data the examples read. Their MNIST is this machine's Fashion-MNIST (IDX files in the layout
torchvision's MNIST reads, so nothing is downloaded); the word language model's corpus is Debian's
fortunes (`fortunes-min` or `fortunes`), split 80/10/10 by line, 6,000 lines to train on.

    .venv/bin/python bench/third_party_scripts.py --examples DIR [--only mnist,vae] [--threads 2] \\
        [--quickstart FILE] [--json FILE]

--quickstart adds a row for a copy of PyTorch's quickstart tutorial
(pytorch/tutorials beginner_source/basics/quickstart_tutorial.py), whose FashionMNIST is this
machine's; --examples may then be left out.

Needs torchvision in .venv (`pip install torchvision==0.26.0 --no-deps` beside torch 2.11).
Prints a Markdown table naming the CPU; the lanes run one at a time.
"""
import argparse
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "support"))
from host import cpu_model  # noqa: E402

PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
CLI = os.environ.get("DEVICERACE_CLI", os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli"))
FASHION = os.environ.get("DEVICERACE_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
FORTUNES = "/usr/share/games/fortunes"

# (name, the example's folder, its arguments, the race's options, what it shows). Step limits keep
# each under about two minutes on two cores; "{data}" is the scratch data folder.
EXAMPLES = [
    ("mnist", "mnist", ["main.py", "--epochs", "1"], [], "a CNN, Adadelta; its test line read"),
    ("mnist_rnn", "mnist_rnn", ["main.py", "--epochs", "1"], ["--steps", "300"], "nn.LSTM (oneDNN's fused layer)"),
    ("vae", "vae", ["main.py", "--epochs", "1"], [], "a VAE; a loss of its own beside BCE"),
    ("mnist_hogwild", "mnist_hogwild", ["main.py", "--epochs", "1", "--num-processes", "2"], [],
     "2 trainer processes on one shared model"),
    ("siamese_network", "siamese_network", ["main.py", "--epochs", "1"], ["--steps", "100"], "ResNet-18 on pairs"),
    ("dcgan", "dcgan", ["main.py", "--dataset", "mnist", "--dataroot", "{data}", "--niter", "1", "--outf", "out"],
     ["--steps", "60"], "a GAN: two optimizers, DataLoader workers"),
    ("word_language_model", "word_language_model", ["main.py", "--data", "{data}/fortunes", "--epochs", "1"], [],
     "weights updated by hand (no torch.optim)"),
    ("word_language_model Transformer", "word_language_model",
     ["main.py", "--data", "{data}/fortunes", "--epochs", "1", "--model", "Transformer", "--lr", "5"], [],
     "nn.TransformerEncoder, by hand"),
    ("regression", "regression", ["main.py"], [], "a polynomial fit by hand, until its loss is small"),
    ("mnist_forward_forward", "mnist_forward_forward",
     ["main.py", "--epochs", "60", "--train_size", "5000", "--test_size", "1000"], [],
     "forward-forward: a loss of its own per layer"),
    ("time_sequence_prediction", "time_sequence_prediction", ["train.py", "--steps", "2"], [],
     "LBFGS; its data file is made by generate_sine_wave.py"),
]


# PyTorch's quickstart tutorial: (name, what it shows); its file is --quickstart's.
QUICKSTART = ("quickstart_tutorial", "PyTorch's quickstart: its figures below a \"Test Error:\" heading")


def prepare_data(scratch):
    """The examples' data in the scratch folder: Fashion-MNIST as torchvision's MNIST/raw and
    FashionMNIST/raw, the fortunes corpus as train/valid/test.txt. Returns the folder."""
    data = os.path.join(scratch, "data")
    raw = os.path.join(data, "MNIST", "raw")
    os.makedirs(raw)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        path = os.path.join(FASHION, name)
        if os.path.exists(path + ".gz"):
            with gzip.open(path + ".gz") as src, open(os.path.join(raw, name), "wb") as dst:
                shutil.copyfileobj(src, dst)
        elif os.path.exists(path):
            shutil.copy(path, raw)
        else:
            raise SystemExit(f"no Fashion-MNIST {name} in {FASHION} (DEVICERACE_FASHION_MNIST names the folder)")
    shutil.copytree(raw, os.path.join(data, "FashionMNIST", "raw"))
    lines = []
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        if os.path.isfile(path) and not path.endswith((".dat", ".u8")):
            with open(path, encoding="utf-8", errors="replace") as f:
                lines += [l for l in f if l.strip() != "%"]
    if lines:
        corpus = os.path.join(data, "fortunes")
        os.makedirs(corpus)
        n = len(lines)
        parts = {"train.txt": lines[:n * 8 // 10][:6000], "valid.txt": lines[n * 8 // 10:n * 9 // 10][:1000],
                 "test.txt": lines[n * 9 // 10:][:1000]}
        for name, part in parts.items():
            with open(os.path.join(corpus, name), "w", encoding="utf-8") as f:
                f.writelines(part)
    return data


def race(examples, folder, args, options, data, threads, out):
    """One lane of the example, its summary lane (dict) and the CLI's exit status."""
    work = os.path.join(out, folder)
    if not os.path.isdir(work):
        shutil.copytree(os.path.join(examples, folder), work)
        if not os.path.exists(os.path.join(work, "data")):
            os.symlink(data, os.path.join(work, "data"))  # "./data/" (forward-forward)
        if folder == "time_sequence_prediction":
            subprocess.run([PYTHON, "generate_sine_wave.py"], cwd=work, check=False, capture_output=True)
    summary = os.path.join(out, f"{folder}-{len(os.listdir(out))}.json")
    command = [CLI, "race", "--quiet", "--json", summary, "--lane", f"cpu,threads={threads}", *options, "--",
               PYTHON, *(a.replace("{data}", data) for a in args)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=900, check=False)
    lane = {}
    if os.path.exists(summary):
        with open(summary, encoding="utf-8") as f:
            lane = json.load(f)["lanes"][0]
    lane["wall"] = time.monotonic() - started
    return lane, done.returncode, done.stdout + done.stderr


def figure(v, fmt):
    return "–" if v is None else fmt.format(v)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", help="a pytorch/examples checkout")
    parser.add_argument("--quickstart", help="a copy of PyTorch's quickstart_tutorial.py")
    parser.add_argument("--only", default="", help="comma-separated names of the table's rows")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="write the lanes' summaries here")
    opts = parser.parse_args()
    if not opts.examples and not opts.quickstart:
        parser.error("name a pytorch/examples checkout (--examples), the quickstart (--quickstart), or both")
    only = set(filter(None, opts.only.split(",")))
    chosen = [e for e in EXAMPLES if opts.examples and (not only or e[0] in only or e[1] in only)]
    scratch = tempfile.mkdtemp(prefix="devicerace-third-party-")
    quickstart_root = os.path.join(scratch, "quickstart-source")
    if opts.quickstart:
        # its folder holds only the tutorial (raced from a copy, beside ./data, as the examples)
        os.makedirs(os.path.join(quickstart_root, "quickstart"))
        shutil.copy(opts.quickstart, os.path.join(quickstart_root, "quickstart"))
        chosen.append((QUICKSTART[0], "quickstart", [os.path.basename(opts.quickstart)], [], QUICKSTART[1]))
    try:
        data = prepare_data(scratch)
        print(f"pytorch/examples as script lanes, cpu·{opts.threads}, one lane at a time; {cpu_model()}, "
              f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
        print("| example | what it shows | status | steps | samples/s | steps/s | FLOPs a sample | % of peak | "
              "evaluation read | where a step's time goes |")
        print("|---|---|---|---:|---:|---:|---:|---:|---|---|")
        results = []
        for name, folder, args, options, shows in chosen:
            root = quickstart_root if name == QUICKSTART[0] else opts.examples
            if not os.path.isdir(os.path.join(root, folder)):
                print(f"| {name} | {shows} | not in the checkout | | | | | | | |")
                continue
            lane, code, output = race(root, folder, args, options, data, opts.threads, scratch)
            results.append({"example": name, "exit": code, "lane": lane})
            status = lane.get("status", f"no summary (exit {code}): {output.strip()[-200:]}")
            if lane.get("error"):
                status += f": {lane['error'][:160]}"
            evaluation = ", ".join(x for x in (figure(lane.get("final_test_accuracy"), "acc {:.4f}"),
                                               figure(lane.get("final_test_loss"), "loss {:.4g}")) if x != "–")
            phases = lane.get("step_breakdown") or {}
            total = sum(phases.values())
            where = " · ".join(f"{k} {v / total:.0%}" for k, v in phases.items() if total and v / total >= 0.01)
            print(f"| {name} | {shows} | {status} | {lane.get('steps', '–')} | "
                  f"{figure(lane.get('samples_per_sec'), '{:,.0f}')} | {figure(lane.get('steps_per_sec'), '{:.1f}')} | "
                  f"{figure(lane.get('flops_per_sample'), '{:.3g}')} | "
                  f"{figure(lane.get('utilization') and lane['utilization'] * 100, '{:.1f}%')} | "
                  f"{evaluation or '–'} | {where or '–'} |", flush=True)
        if opts.json:
            with open(opts.json, "w", encoding="utf-8") as f:
                json.dump({"cpu": cpu_model(), "threads": opts.threads, "results": results}, f, indent=1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
