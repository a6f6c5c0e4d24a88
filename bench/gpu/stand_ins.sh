#!/usr/bin/env bash
# One call on a GPU machine (bench/gpu/pack first, carry .gpu): the recordings and checks only a
# GPU can make. PARTS picks what runs, in this order (default: all):
#   stand-ins  the GPU lane of every preset race of CPU cores against "best-gpu" that ships no
#              recording, raced alone on cuda:0 with the race's own length, data and seed, and
#              recorded: stand-ins.tgz holds one folder a race, rec/PRESET[--RACE]-GPU (the
#              race's title when the preset has several; char-gpt-h100's style). To ship one, copy
#              it into resources/presets/recordings/ and name it in that race's "stand_in".
#   scripts    script lanes on CUDA: examples/fashion_mlp.py unchanged on cuda:0 beside cpu (the
#              GPU lane's peak memory from PyTorch's allocator, its FLOPs from FlopCounterMode
#              against the GPU's datasheet peak), a script that raises on cuda:0 beside one
#              that finishes (the other lane's result is kept), and the example notebook under
#              torchrun (a launcher's rank 0 reporting; the GPU's NVML energy)
# Each part has its own time limit and refreshes $OUT (at most 8 files come back).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
OUT="${OUT:-/tmp/out}"; W=/tmp/devicerace-stand-ins; mkdir -p "$OUT" "$W/rec"
PARTS="${PARTS:-stand-ins scripts}"
DEVICE="${DEVICE:-cuda:0}" # DEVICE=cpu: a dry run of the plumbing on a machine without a GPU
keep() { cp "$W"/*.txt "$OUT"/ 2>/dev/null; tar czf "$OUT/stand-ins.tgz" -C "$W" . ; }
part() { [[ " $PARTS " == *" $1 "* ]] && echo "== $1 ($(date +%T))"; }
summary() { # one line per lane of a race's JSON
    "$PY" - "$1" <<'PYEOF'
import json, sys
for l in json.load(open(sys.argv[1]))["lanes"]:
    mem = l.get("peak_memory_bytes")
    print(f"{l['name']:<20} {l['status']:<9} {l.get('samples_per_sec') or 0:>10,.0f}/s "
          f"{l.get('steps_per_sec') or 0:>8,.1f} steps/s acc={l.get('final_test_accuracy')} "
          f"peak_mem={mem if mem is None else f'{mem / 1e6:.1f} MB'} flops/sample={l.get('flops_per_sample')} "
          f"util={l.get('utilization')} data={l.get('data_share')} energy={l.get('energy_joules')} "
          f"| {l.get('error') or ''}")
PYEOF
}
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
SHORT="$(grep -oE '[A-Z]?[0-9]{2,4}[A-Z]?' <<<"${GPU#NVIDIA }" | head -1)"; SHORT="${SHORT:-GPU}"
echo "GPU: $GPU (lanes named $SHORT)"
if part stand-ins; then
    # PRESET--RACE and the race's options, for each race of CPU lanes against "best-gpu" alone.
    "$PY" - "$ROOT/resources/presets" >"$W/races.txt" <<'PYEOF'
import json, pathlib, re, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    p = json.loads(f.read_text())
    for r in p["races"]:
        if "best-gpu" not in r["lanes"] or "stand_in" in r:
            continue
        name = p["name"]
        if len(p["races"]) > 1:
            name += "--" + re.sub(r"[^a-z0-9]+", "-", r.get("title", r["workload"]).lower()).strip("-")
        args = ["--workload", r["workload"]]
        for key, flag in (("epochs", "--epochs"), ("steps", "--steps"), ("data", "--data"), ("seed", "--seed"),
                          ("target_accuracy", "--target-accuracy")):
            if key in r:
                args += [flag, str(r[key])]
        print(name, " ".join(args))
PYEOF
    cat "$W/races.txt"
    while read -r name args; do
        # shellcheck disable=SC2086
        timeout "${RACE_SECONDS:-150}" "$CLI" race $args --lane "$DEVICE,name=$SHORT" --quiet \
            --record "$W/rec/$name-${SHORT,,}" --json "$W/rec/$name.json" >"$W/rec/$name.log" 2>&1
        echo "$name (rc $?): $(summary "$W/rec/$name.json" 2>/dev/null || tail -2 "$W/rec/$name.log")" | tee -a "$W/stand-ins.txt"
        du -sh "$W/rec/$name-${SHORT,,}" | tee -a "$W/stand-ins.txt"; keep
    done <"$W/races.txt"
fi
if part scripts; then
    timeout 150 "$CLI" race --fair --steps 400 --json "$W/script.json" --lane "$DEVICE" --lane cpu,threads=4 \
        -- "$PY" "$ROOT/examples/fashion_mlp.py" --data "$DEVICERACE_FASHION_MNIST" >"$W/script.log" 2>&1
    { echo "fashion_mlp.py, cuda:0 against cpu·4 (rc $?)"; summary "$W/script.json" || tail -5 "$W/script.log"; } | tee "$W/scripts.txt"
    cat >"$W/dies_on_cuda.py" <<'PYEOF'
import os, torch
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(64, 10).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(200):
    x = torch.randn(32, 64, device=device)
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if device == "cuda" and step == 50:
        raise RuntimeError("the script's own failure on the GPU, at step 50")
PYEOF
    timeout 120 "$CLI" race --live --json "$W/dies.json" --lane "$DEVICE" --lane cpu,threads=2 \
        -- "$PY" "$W/dies_on_cuda.py" >"$W/dies.log" 2>&1
    { echo "a script that raises on cuda:0 beside cpu·2 (rc $?, 1 expected)"; summary "$W/dies.json" || tail -5 "$W/dies.log"; } | tee -a "$W/scripts.txt"
    # The same example as a notebook, started through torchrun (one rank): the launcher's rank 0
    # reports; the GPU lane's NVML energy, FLOPs and peak memory (energy= must not be None there).
    FASHION_MNIST="$DEVICERACE_FASHION_MNIST" timeout 150 "$CLI" race --fair --steps 400 --json "$W/launch.json" \
        --lane "$DEVICE" --lane cpu,threads=4 -- "$PY" -m torch.distributed.run --nproc-per-node 1 \
        "$ROOT/examples/fashion_mlp.ipynb" >"$W/launch.log" 2>&1
    { echo "fashion_mlp.ipynb under torchrun, $DEVICE against cpu·4 (rc $?)"; summary "$W/launch.json" || tail -5 "$W/launch.log"; } | tee -a "$W/scripts.txt"
    # cuDNN's fused recurrent layers under the script counter (devicerace/_torch.py's
    # _cudnn_rnn formulas, unchecked without a GPU): counted against the figure worked out by hand.
    PYTHONPATH="$ROOT/lanes/python" timeout 120 "$PY" - >>"$W/scripts.txt" 2>&1 <<'PY'
import torch, torch.nn.functional as F
from devicerace import _torch
B, T, I, H = 4, 28, 28, 64
for kind, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
    rnn = getattr(torch.nn, kind)(I, H, num_layers=2, batch_first=True, bidirectional=True).cuda()
    head = torch.nn.Linear(2 * H, 10).cuda()
    counter = _torch._flop_counter()(display=False)
    with counter:
        out, _ = rnn(torch.rand(B, T, I, device="cuda"))
        F.cross_entropy(head(out[:, -1]), torch.zeros(B, dtype=torch.long, device="cuda")).backward()
    g = gates * H
    expected = 2 * T * 2 * (g * (I + H) + g * 3 * H) * 3 + 2 * 2 * H * 10 * 3
    got = counter.get_total_flops() / B
    print(f"cuDNN {kind} FLOPs a sample: counted {got:.0f}, by hand {expected} ({'ok' if got == expected else 'DIFFERS'})")
PY
    keep
fi
echo "== done ($(date +%T))"
