#!/usr/bin/env bash
# The .deb on a machine that never built DeviceRace: builds the package with CPack, moves the
# build's torch wheel (.venv) out of the way, unpacks the package into a temporary root and runs
# from there `devicerace-cli devices`, a 20-step race, a race with a process lane, and the
# window's --screenshot. The wheel is put back however this ends. Slow (gigabytes of CUDA
# libraries to compress): run by `scripts/test --package`, not by the default suite.
# Usage: test_package.sh BUILD_DIR
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$(cd "$(dirname "$0")" && pwd)"
TMP="$(mktemp -d)"
VENV="$ROOT/.venv"
HIDDEN="$ROOT/.venv.hidden-by-test_package"
restore() {
    if [ -d "$HIDDEN" ] && [ ! -e "$VENV" ]; then mv "$HIDDEN" "$VENV"; fi
    rm -rf "$TMP"
}
trap restore EXIT

start=$(date +%s)
(cd "$BUILD" && cpack -G DEB -B "$TMP/deb" >"$TMP/cpack.log" 2>&1) || { tail -50 "$TMP/cpack.log"; exit 1; }
deb=$(ls "$TMP"/deb/*.deb)
echo "package: $(basename "$deb"), $(du -h "$deb" | cut -f1), built in $(( $(date +%s) - start )) s"
dpkg-deb --info "$deb" | grep -E "Package|Installed-Size|Depends"
dpkg-deb -x "$deb" "$TMP/root"
"$HERE/check_bundle.sh" "$TMP/root/usr"

# No torch wheel from here on: the package must bring what it loads.
mv "$VENV" "$HIDDEN"
export DEVICERACE_PYTHON=/nonexistent/python  # the C++ lanes must not need one
CLI="$TMP/root/usr/bin/devicerace-cli"
env -u LD_LIBRARY_PATH "$CLI" devices
env -u LD_LIBRARY_PATH OMP_WAIT_POLICY=PASSIVE "$CLI" race --workload fashion-mlp --steps 20 --train-limit 2000 \
    --test-limit 200 --quiet --lane cpu,threads=1 --lane cpu,threads=1,isolate=process,name=process \
    --json "$TMP/race.json"
/usr/bin/python3 -c 'import json, sys
lanes = json.load(open(sys.argv[1]))["lanes"]
assert all(l["status"] == "finished" for l in lanes), lanes' "$TMP/race.json"
if [ -x "$TMP/root/usr/bin/devicerace" ]; then
    env -u LD_LIBRARY_PATH QT_QPA_PLATFORM=offscreen HOME="$TMP" OMP_WAIT_POLICY=PASSIVE \
        "$TMP/root/usr/bin/devicerace" --workload fashion-mlp --steps 20 --lane cpu,threads=1 \
        --screenshot "$TMP/shot.png"
    test -s "$TMP/shot.png"
fi
echo "1 passed, 0 failed"
