# Shared helpers for the launcher scripts (sourced, not run).
log() { printf '\033[1m[devicerace]\033[0m %s\n' "$*" >&2; }
die() { printf '[devicerace] error: %s\n' "$*" >&2; exit 1; }
# Two OpenMP threads spin-waiting against another busy process can collapse
# throughput (measured); passive waiting avoids it. The user's value wins.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
