#!/usr/bin/env bash
# The engine's GPT and attention loops (and the CPU loops they call) built alone with
# -fsanitize=address,undefined into tests/sanitizers/kernels_driver.cpp, and run: ~2 minutes on a
# 2-core VM, where the full ASan build takes 13–45 and CI skips it on slow machines.
# Usage: tests/sanitizers/sanitize_kernels.sh [OUTDIR]   (scripts/test --sanitize kernels)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-$ROOT/build/sanitize-kernels}"
TORCH="$("$ROOT/.venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
mkdir -p "$OUT"
# The engine's own flags for these files (engine/CMakeLists.txt), with the sanitizers and -O1 -g.
FLAGS=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -fno-math-errno -fno-trapping-math -mprefer-vector-width=512 -Wno-psabi
       -I"$ROOT/engine/include" -I"$ROOT/engine/src" -isystem "$TORCH/include"
       -isystem "$TORCH/include/torch/csrc/api/include" -DFMT_HEADER_ONLY=1
       -DDEVICERACE_GENERIC_TILES_AS_AVX512=1) # the generic attention tiles in AVX-512's shape, checked against AVX2's
objects=()
for src in engine/src/kernels/gpt_kernels.cpp engine/src/kernels/attention_kernels.cpp \
           engine/src/kernels/cpu_kernels.cpp tests/sanitizers/kernels_driver.cpp; do
    obj="$OUT/$(basename "$src" .cpp).o"
    echo "[sanitize-kernels] $src"
    g++ "${FLAGS[@]}" -c "$ROOT/$src" -o "$obj"
    objects+=("$obj")
done
g++ -fsanitize=address,undefined "${objects[@]}" -L"$TORCH/lib" -ltorch_cpu -lc10 -Wl,-rpath,"$TORCH/lib" \
    -o "$OUT/kernels_driver"
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" "$OUT/kernels_driver"
