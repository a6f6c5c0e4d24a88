#!/usr/bin/env bash
# Installs into a temporary prefix and runs devicerace-cli from there; validates the desktop
# file and the AppStream metainfo when the validators are present; builds the .deb with CPack
# and runs the CLI from the unpacked package.   Usage: test_install.sh BUILD_DIR
set -euo pipefail
BUILD="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
"$TMP/prefix/bin/devicerace-cli" devices
"$TMP/prefix/bin/devicerace-cli" presets | grep -q keras-suite
test -f "$TMP/prefix/share/applications/devicerace.desktop"
test -f "$TMP/prefix/share/icons/hicolor/scalable/apps/io.github.devicerace.DeviceRace.svg"
if command -v desktop-file-validate >/dev/null; then
    desktop-file-validate "$TMP/prefix/share/applications/devicerace.desktop"
fi
if command -v appstreamcli >/dev/null; then
    appstreamcli validate --no-net "$TMP/prefix/share/metainfo/io.github.devicerace.DeviceRace.metainfo.xml"
fi
if command -v dpkg-deb >/dev/null; then
    (cd "$BUILD" && cpack -G DEB -B "$TMP/deb" >"$TMP/cpack.log" 2>&1) || { cat "$TMP/cpack.log"; exit 1; }
    deb=$(ls "$TMP"/deb/*.deb)
    dpkg-deb --info "$deb" | grep -E "Package|Depends"
    dpkg-deb -x "$deb" "$TMP/root"
    "$TMP/root/usr/bin/devicerace-cli" devices
    "$TMP/root/usr/bin/devicerace-cli" presets | grep -q cpu-thread-scaling
fi
echo "1 passed, 0 failed"
