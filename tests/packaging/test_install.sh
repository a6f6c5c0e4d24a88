#!/usr/bin/env bash
# Installs into a temporary prefix and runs devicerace-cli from there; validates the desktop
# file and the AppStream metainfo when the validators are present. With DEVICERACE_BUNDLE_TORCH
# (the default) the install carries its LibTorch/CUDA libraries: every library the programs
# load must then resolve inside the prefix or to a Debian system library, never to the build's
# torch wheel or CUDA toolkit. The .deb itself (gigabytes to compress) is built and tried on
# a machine without the wheel by scripts/test --package (tests/packaging/test_package.sh).
# Usage: test_install.sh BUILD_DIR
set -euo pipefail
BUILD="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
"$TMP/prefix/bin/devicerace-cli" devices
"$TMP/prefix/bin/devicerace-cli" presets | grep -q keras-suite
# A preset's stand-in recording installs beside it and reads as a recording.
"$TMP/prefix/bin/devicerace-cli" replay "$TMP/prefix/share/devicerace/presets/recordings/char-gpt-h100" | grep -q "H100"
test -f "$TMP/prefix/share/applications/devicerace.desktop"
test -f "$TMP/prefix/share/icons/hicolor/scalable/apps/io.github.devicerace.DeviceRace.svg"
if command -v desktop-file-validate >/dev/null; then
    desktop-file-validate "$TMP/prefix/share/applications/devicerace.desktop"
fi
if command -v appstreamcli >/dev/null; then
    appstreamcli validate --no-net "$TMP/prefix/share/metainfo/io.github.devicerace.DeviceRace.metainfo.xml"
fi
if grep -q "DEVICERACE_BUNDLE_TORCH:BOOL=ON" "$BUILD/CMakeCache.txt"; then
    "$(dirname "$0")/check_bundle.sh" "$TMP/prefix"
fi
echo "1 passed, 0 failed"
