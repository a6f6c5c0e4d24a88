#!/usr/bin/env bash
# First call on a GPU machine: the GPU tests (CUDA required) and quick single runs of the
# fast paths, before the full side-by-side harness (bench/compare.py --device cuda).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi -L; "$PY" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
ldd "$CLI" | grep "not found"
"$CLI" devices
DEVICERACE_REQUIRE_CUDA=1 timeout 240 "$ROOT/.gpu/bin/engine_gpu_tests" 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "^\[  |Failure|Expected|Which|error" | head -60
run() { # workload steps warmup lane...
    local w=$1 s=$2 k=$3; shift 3
    "$CLI" race --workload "$w" --lane "$@" --steps "$s" --warmup-steps "$k" --quiet --json "$OUT/r.json" >/dev/null 2>"$OUT/err.txt"
    "$PY" -c "import json,sys;l=json.load(open('$OUT/r.json'))['lanes'][0];print(f\"{sys.argv[1]:18} {sys.argv[2]:48} {l['status']:9} {l['samples_per_sec'] or 0:12,.0f}/s  {l['execution']}  {l['error'] or ''}\")" "$w" "$*" || cat "$OUT/err.txt"
}
run fashion-mlp 3000 100 cuda:0
run fashion-mlp 3000 100 cuda:0,graph=false
run fashion-mlp 3000 100 cuda:0,graph=false,fused=false
run fashion-cnn 2000 100 cuda:0
run fashion-cnn 2000 100 cuda:0,graph=false
run cifar-resnet32 600 50 cuda:0
run cifar-resnet32 600 50 cuda:0,graph=false
run cifar-resnet32 600 50 cuda:0,precision=bf16,channels_last=true
run davidnet 200 30 cuda:0
run davidnet 200 30 cuda:0,precision=bf16,channels_last=true
run imagenet-resnet50 60 15 cuda:0,batch=256,precision=bf16,channels_last=true
run imagenet-resnet50 60 15 cuda:0,batch=256,precision=bf16,channels_last=true,graph=false
run imdb-bilstm 600 50 cuda:0
run imdb-bilstm 100 10 cuda:0,lstm=cells
run fashion-mlp 3000 100 cuda:0,resident=false
if [[ -f "$ROOT/bench/peers/peer.py" ]]; then
    for w in fashion-mlp fashion-cnn cifar-resnet32; do
        timeout 60 "$PY" "$ROOT/bench/peers/peer.py" --workload $w --device cuda --steps 600 --warmup 50 2>&1 | tail -2
    done
fi
