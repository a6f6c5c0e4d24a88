#!/usr/bin/env bash
# The GPU figures in one call on a GPU machine (bench/gpu/pack first, carry .gpu).
# PARTS picks what runs, in this order (default: all but profile):
#   checks      machine facts, GEMM peaks and the SDPA kernels per precision (gpt_checks.py)
#   tests       the GPU tests with CUDA required (TESTS: a gtest filter)
#   peers       bench/compare.py's char-gpt rows against the PyTorch peer (char-gpt-6l in bf16)
#   recordings  char-gpt-6l bf16 to a validation-loss figure; char-gpt as gpt-cpu-vs-gpu runs it
#   self        DeviceRace against itself: bf16/fp32, graph/eager
#   profile     the step's GPU time by kernel family (gpt_profile.py)
# Each part has its own time limit and refreshes $OUT (the device tool returns at most 8 files),
# so a short lease keeps what ran.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
OUT="${OUT:-/tmp/out}"; W=/tmp/devicerace-gpt; mkdir -p "$OUT" "$W"
PARTS="${PARTS:-checks tests peers recordings self}"
PAIRS="${PAIRS:-3}"
WORKLOADS="${WORKLOADS:-char-gpt,char-gpt-6l}"
keep() { cp "$W"/*.md "$OUT"/ 2>/dev/null; tar czf "$OUT/all.tgz" -C "$W" . ; }
part() { [[ " $PARTS " == *" $1 "* ]] && echo "== $1 ($(date +%T))"; }
if part checks; then
    { nvidia-smi -L; "$CLI" devices; } 2>&1 | tee "$W/machine.txt"
    timeout 60 "$PY" "$ROOT/bench/gpu/gpt_checks.py" >"$W/checks.json" 2>"$W/checks.log"; cat "$W/checks.json"; keep
fi
if part tests; then
    DEVICERACE_REQUIRE_CUDA=1 timeout 120 "$ROOT/.gpu/bin/engine_gpu_tests" \
        --gtest_filter="${TESTS:--Gpu.CpuAgainstCuda0}" >"$W/gpu_tests.log" 2>&1
    grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED)|Failure|Which is|error|Expected" "$W/gpu_tests.log" | head -40; keep
fi
if part peers; then
    timeout 170 "$PY" "$ROOT/bench/compare.py" --cli "$CLI" --device cuda --workloads "$WORKLOADS" \
        --sections peers --pairs "$PAIRS" --markdown "$W/peers.md" --json "$W/peers.json" 2>"$W/peers.log" | tail -8
    keep
fi
if part recordings; then
    timeout 100 "$CLI" race --workload char-gpt-6l --lane cuda:0,precision=bf16 --steps 2500 --eval-every 250 \
        --record "$W/rec-char-gpt-6l" --json "$W/char-gpt-6l.json" --quiet >"$W/char-gpt-6l.log" 2>&1
    tail -4 "$W/char-gpt-6l.log"; keep
    timeout 40 "$CLI" race --workload char-gpt --lane cuda:0 --steps 2000 --eval-every auto \
        --record "$W/rec-char-gpt" --json "$W/char-gpt.json" --quiet >"$W/char-gpt.log" 2>&1
    tail -4 "$W/char-gpt.log"; keep
fi
if part self; then
    timeout 110 "$PY" "$ROOT/bench/compare.py" --cli "$CLI" --device cuda --workloads "$WORKLOADS" \
        --sections self --pairs 2 --short --markdown "$W/self.md" --json "$W/self.json" 2>"$W/self.log" | tail -8
    keep
fi
if part profile; then
    timeout 120 "$PY" "$ROOT/bench/gpu/gpt_profile.py" >"$W/profile.json" 2>"$W/profile.log"
    "$PY" -c "import json,sys;[print(p['precision'],p['optimizer'],round(p['wall_ms_per_step'],2),'ms wall',round(p['gpu_ms_per_step'],2),'ms GPU',{k:round(v,2) for k,v in p['families_ms'].items()}) for p in json.load(open(sys.argv[1]))]" "$W/profile.json" || tail -5 "$W/profile.log"
    keep
fi
echo "== done ($(date +%T))"
