# Shared helpers for the launcher scripts (sourced, not run).
log() { printf '\033[1m[devicerace]\033[0m %s\n' "$*" >&2; }
die() { printf '[devicerace] error: %s\n' "$*" >&2; exit 1; }
# OMP_WAIT_POLICY: the CLI chooses per race where it is unset (passive where live lanes share
# the cores, libgomp's spinning default where each lane runs alone: race_plan.h waitPolicyFor),
# and the window sets PASSIVE. scripts/test sets PASSIVE for the suite. The user's value wins.

# ccache, when installed (scripts/setup does): the same sources built again (a fresh clone, a
# second CI run, a sanitizer build) come from its cache. The precompiled torch header needs the
# sloppiness settings, or every torch unit misses. ccache_args prints the configure arguments.
if command -v ccache >/dev/null; then
    export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
    export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
    # A fresh clone elsewhere hits the cache too: paths under the checkout count relative to it,
    # and the working folder is not hashed (debug info may name the first clone's folder).
    if [[ -n "${ROOT:-}" ]]; then
        export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
    fi
    export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
fi
ccache_args() {
    if command -v ccache >/dev/null; then
        echo "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"
    fi
}

# Free space, in whole GiB, on the file system that holds PATH (or its nearest existing parent).
free_gib() {
    local path="$1"
    while [[ ! -e "$path" ]]; do path="$(dirname "$path")"; done
    df -Pk "$path" | awk 'NR == 2 { print int($4 / 1048576) }'
}
# need_space PATH GIB WHAT: stops with a clear message when the disk under PATH has less than GIB
# GiB free, naming what needs the room and the usual culprits (old clones and build folders in /tmp).
need_space() {
    local free
    free="$(free_gib "$1")"
    if ((free < $2)); then
        die "only $free GiB free on the disk under $1; $3 needs about $2 GiB. Old checkouts, build folders and .venv copies under /tmp are the usual cause: du -sh /tmp/* | sort -h"
    fi
}
