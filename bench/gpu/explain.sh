#!/usr/bin/env bash
# The GPU figures in one call on a GPU machine (bench/gpu/pack first, carry .gpu).
# PARTS picks what runs, in this order (default: all):
#   machine    nvidia-smi, NVML's power reading, the CLI's device report
#   explain    Gpu.TheRaceExplainsItselfOnCuda (CUDA events, datasheet peak, NVML energy)
#   augment    fashion-cnn on real data: resident or pinned host copies, with and without
#              augment=crop-flip (data share, input-bound flag)
#   table      bench/explain/explain.py --device cuda: the breakdown's cost with events (engine
#              and PyTorch lane) and per workload the phases, % of the datasheet peak, samples/J
#   recording  a live race cuda:0 (eager), cuda:0 augmented from host copies, and the CPU, recorded
#              for the window (breakdown bars, % of peak, energy)
#   tests      the other GPU tests (regressions)
# Each part has its own time limit and refreshes $OUT (at most 8 files come back).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
OUT="${OUT:-/tmp/out}"; W=/tmp/devicerace-explain; mkdir -p "$OUT" "$W"
PARTS="${PARTS:-machine explain augment table recording tests}"
keep() { cp "$W"/*.md "$OUT"/ 2>/dev/null; tar czf "$OUT/all.tgz" -C "$W" . ; }
part() { [[ " $PARTS " == *" $1 "* ]] && echo "== $1 ($(date +%T))"; }
summary() { # one line per lane of a race's JSON
    "$PY" - "$1" <<'PYEOF'
import json, sys
for l in json.load(open(sys.argv[1]))["lanes"]:
    b = l.get("step_breakdown") or {}
    t = sum(b.values()) or 1
    print(f"{l['name']:<28} {l['status']:<9} {l.get('samples_per_sec') or 0:>10,.0f}/s "
          f"util={l.get('utilization')} J={l.get('energy_joules')} s/J={l.get('samples_per_joule')} "
          f"input_bound={l.get('input_bound')} data_share={l.get('data_share')} "
          + " ".join(f"{k}={100 * v / t:.0f}%" for k, v in b.items()) + f" | {l.get('error') or ''}")
PYEOF
}
if part machine; then
    { nvidia-smi -L; nvidia-smi --query-gpu=name,power.draw,power.limit,clocks.sm,clocks.max.sm --format=csv
      lscpu | grep -E "Model name|^CPU\(s\)"; "$CLI" devices; } 2>&1 | tee "$W/machine.txt"; keep
fi
if part explain; then
    DEVICERACE_REQUIRE_CUDA=1 timeout 90 "$ROOT/.gpu/bin/engine_gpu_tests" \
        --gtest_filter='Gpu.TheRaceExplainsItselfOnCuda' >"$W/explain_test.log" 2>&1
    grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED)|Failure|Which is|error|Expected" "$W/explain_test.log" | head -30; keep
fi
if part augment; then
    timeout 90 "$CLI" race --fair --workload fashion-cnn --steps 3000 --quiet --json "$W/augment.json" \
        --lane cuda:0,name=resident --lane cuda:0,resident=false,name=host \
        --lane cuda:0,augment=crop-flip,name=resident+aug --lane cuda:0,resident=false,augment=crop-flip,name=host+aug \
        >"$W/augment.log" 2>&1
    summary "$W/augment.json" || tail -5 "$W/augment.log"; keep
fi
if part table; then
    timeout 260 "$PY" "$ROOT/bench/explain/explain.py" --cli "$CLI" --device cuda --frameworks pytorch --pairs 3 \
        --runs 1 --json "$W/explain.json" >"$W/explain.md" 2>"$W/explain.log"
    cat "$W/explain.md"; tail -3 "$W/explain.log"; keep
fi
if part recording; then
    timeout 80 "$CLI" race --live --workload fashion-cnn --steps 1500 --eval-every auto --record "$W/rec-explain" \
        --json "$W/rec-explain.json" --quiet --lane cuda:0 --lane cuda:0,resident=false,augment=crop-flip \
        --lane cpu >"$W/rec-explain.log" 2>&1
    summary "$W/rec-explain.json" || tail -5 "$W/rec-explain.log"; du -sh "$W/rec-explain"; keep
fi
if part tests; then
    DEVICERACE_REQUIRE_CUDA=1 timeout 170 "$ROOT/.gpu/bin/engine_gpu_tests" \
        --gtest_filter='-Gpu.CpuAgainstCuda0:Gpu.TheRaceExplainsItselfOnCuda' >"$W/gpu_tests.log" 2>&1
    grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED)|Failure|Which is|error|Expected" "$W/gpu_tests.log" | head -40; keep
fi
echo "== done ($(date +%T))"
