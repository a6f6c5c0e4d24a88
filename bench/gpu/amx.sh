#!/usr/bin/env bash
# bf16 rows on a GPU machine's own CPU (bench/gpu/pack first, carry .gpu). The
# H200 machine's host is an Intel Xeon with AMX,
# the CPU those rows need and a build machine is mostly not. No GPU is used.
# PARTS picks what runs, in this order (default: all, in TOTAL seconds, default 560: one call of
# the device tool, timeout_s 600; on a build machine's AMD EPYC, where bf16 is emulated, the parts
# took 0 (peaks cached), 21, 129 and 113 s, and cifar-resnet20's first race did not end in 150):
#   machine   the CPU's model and bf16 flags, `devicerace-cli devices` (its GEMM peaks)
#   budget    char-gpt's step loop by loop in fp32 and bf16 against a race of it
#             (bench/gpt_step_budget.py --race): whether the loops leave bf16 room for 2x
#   gpt       char-gpt, fair races of fp32 and bf16 lanes on 1 and 2 threads (bench/cpu_speed.py)
#   small     fashion-mlp and fashion-cnn, the same
#   resnet    cifar-resnet20 (on Fashion-MNIST as 3x32x32), the same
# Each speed part ends with a 1-thread bf16 lane under ONEDNN_VERBOSE and MKL_VERBOSE: which
# library ran its products, on which ISA. RUNS (default 3) races per workload, as many as the
# part's time allows (bench/cpu_speed.py --budget: it starts no race that would end past it, and
# on `timeout`'s SIGTERM it still prints the runs made). Each part has its own time limit, none
# runs past TOTAL, and each refreshes $OUT, so a short lease keeps what ran.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
unset OMP_WAIT_POLICY # a fair race then spins its waits, as bench/cpu_speed.py's races do here
OUT="${OUT:-/tmp/out}"; W=/tmp/devicerace-amx; rm -rf "$W"; mkdir -p "$OUT" "$W"
PARTS="${PARTS:-machine budget gpt small resnet}"
T0=$(date +%s); TOTAL="${TOTAL:-560}"
limit() { local left=$(( TOTAL - ($(date +%s) - T0) )); echo $(( $1 < left ? $1 : left )); } # seconds
keep() { cp "$W"/*.md "$W"/*.txt "$OUT"/ 2>/dev/null; tar czf "$OUT/amx.tgz" -C "$W" . ; }
part() { [[ " $PARTS " == *" $1 "* ]] && echo "== $1 ($(date +%T))"; }
speed() { # name seconds steps workloads: races for at most seconds - 40, then the tables and evidence
    local t; t=$(limit "$2"); (( t > 30 )) || { echo "no time left for $1"; return; }
    timeout -k 5 "$t" "$PY" "$ROOT/bench/cpu_speed.py" --cli "$CLI" --lanes devicerace --threads 2 \
        --runs "${RUNS:-3}" --budget $(( t - 40 )) --steps "$3" --workloads "$4" --json "$W/speed-$1.json" \
        >"$W/speed-$1.md" 2>"$W/speed-$1.log"
    echo "exit $?"; grep -E '^- |^## |^\| DeviceRace|^Cut short|bf16 lane under|no bf16 evidence' "$W/speed-$1.md"
    tail -3 "$W/speed-$1.log"; keep
}
if part machine; then
    { grep -m1 'model name' /proc/cpuinfo; nproc
      grep -o -E 'amx[a-z_0-9]*|avx512_bf16|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
      timeout "$(limit 60)" "$CLI" devices; } 2>&1 | tee "$W/machine.txt"; keep
fi
if part budget; then
    timeout "$(limit 120)" "$PY" "$ROOT/bench/gpt_step_budget.py" --lib "$ROOT/.gpu/lib/libdevicerace_engine.so.0" \
        --cli "$CLI" --race --markdown "$W/budget.md" >"$W/budget.txt" 2>"$W/budget.log"
    echo "exit $?"; grep -E "^A race|^fp32 / bf16|^\| \*\*a step" "$W/budget.txt"; tail -3 "$W/budget.log"; keep
fi
part gpt && speed gpt 130 600 char-gpt
part small && speed small 100 600 fashion-mlp,fashion-cnn
part resnet && speed resnet 150 600 cifar-resnet20
echo "== done ($(date +%T))"
