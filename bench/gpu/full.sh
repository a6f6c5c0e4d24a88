#!/usr/bin/env bash
# One call on a lent GPU machine (bench/gpu/pack first, carry .gpu): the GPU tests with CUDA
# required, then bench/compare.py on cuda section by section (each section's table is written
# as soon as it is done, so a lease that runs out keeps the finished ones).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
PAIRS="${PAIRS:-3}"
DEVICERACE_REQUIRE_CUDA=1 timeout "${TEST_SECONDS:-120}" "$ROOT/.gpu/bin/engine_gpu_tests" \
    --gtest_filter='-Gpu.CpuAgainstCuda0' >"$OUT/gpu_tests.log" 2>&1
grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED)|Failure|Which is|error" "$OUT/gpu_tests.log" | head -40
for section in peers self data; do
    timeout "${SECTION_SECONDS:-330}" "$PY" "$ROOT/bench/compare.py" --cli "$CLI" --device cuda --short \
        --pairs "$PAIRS" --sections "$section" --markdown "$OUT/$section.md" --json "$OUT/$section.json" \
        2>"$OUT/$section.log" | tail -25
done
for r in true false; do
    "$CLI" race --workload fashion-mlp --lane "cuda:0,resident=$r" --steps 3000 --warmup-steps 100 --quiet \
        --json "$OUT/resident-$r.json" >/dev/null
done
