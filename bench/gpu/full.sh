#!/usr/bin/env bash
# One call on a GPU machine (bench/gpu/pack first, carry .gpu): the GPU tests with CUDA
# required, then bench/compare.py on cuda section by section. Each finished step refreshes
# $OUT (the tables as .md, everything else in all.tgz: the device tool returns at most 8 files),
# so a lease that runs out keeps what was done.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
OUT="${OUT:-/tmp/out}"; W=/tmp/devicerace-gpu; mkdir -p "$OUT" "$W"
PAIRS="${PAIRS:-3}"
keep() { cp "$W"/*.md "$OUT"/ 2>/dev/null; tar czf "$OUT/all.tgz" -C "$W" . ; }
DEVICERACE_REQUIRE_CUDA=1 timeout "${TEST_SECONDS:-120}" "$ROOT/.gpu/bin/engine_gpu_tests" \
    --gtest_filter='-Gpu.CpuAgainstCuda0' >"$W/gpu_tests.log" 2>&1
grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED)|Failure|Which is|error" "$W/gpu_tests.log" | head -40
keep
for section in peers self data; do
    timeout "${SECTION_SECONDS:-330}" "$PY" "$ROOT/bench/compare.py" --cli "$CLI" --device cuda --short \
        --pairs "$PAIRS" --sections "$section" --markdown "$W/$section.md" --json "$W/$section.json" \
        2>"$W/$section.log" | tail -25
    keep
done
for r in true false; do
    "$CLI" race --workload fashion-mlp --lane "cuda:0,resident=$r" --steps 3000 --warmup-steps 100 --quiet \
        --json "$W/resident-$r.json" >/dev/null
    "$PY" -c "import json,sys;l=json.load(open(sys.argv[1]))['lanes'][0];print(sys.argv[1],l['status'],l['samples_per_sec'],l['execution'])" "$W/resident-$r.json"
done
keep
