#!/usr/bin/env bash
# Checks that an installed tree (a prefix, or an unpacked .deb's usr/) is self-contained: every
# library its programs and bundled libraries load resolves inside the tree or to a Debian system
# library (/lib, /usr/lib), none to a torch wheel (.venv) or a CUDA toolkit (/usr/local), and no
# RUNPATH names a path outside the tree. Usage: check_bundle.sh PREFIX
set -euo pipefail
PREFIX="$(cd "$1" && pwd)"
fail=0
shopt -s nullglob
files=("$PREFIX"/bin/devicerace* "$PREFIX"/lib/devicerace/*.so* "$PREFIX"/lib/*/devicerace/*.so*)
for f in "${files[@]}"; do
    runpath=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(R\(UN\)\?PATH).*\[\(.*\)\]/\2/p')
    IFS=: read -ra parts <<<"$runpath"
    for p in "${parts[@]}"; do
        case "$p" in
            '$ORIGIN'*|'${ORIGIN}'*|"") ;;
            *) echo "FAIL: $f has RUNPATH $p outside the tree"; fail=1 ;;
        esac
    done
done
for f in "$PREFIX"/bin/devicerace*; do
    while read -r line; do
        case "$line" in
            *"not found"*)
                case "$line" in libcuda.so*) ;; *) echo "FAIL: $f: $line"; fail=1 ;; esac ;;
            *"=> $PREFIX"/*|*"=> /lib/"*|*"=> /usr/lib/"*|*"=> /lib64/"*|linux-vdso*|/lib64/*) ;;
            *"=>"*) echo "FAIL: $f loads from outside the tree: $line"; fail=1 ;;
        esac
    done < <(env -u LD_LIBRARY_PATH ldd "$f")
done
count=$(ls "$PREFIX"/lib/devicerace/ "$PREFIX"/lib/*/devicerace/ 2>/dev/null | grep -c '\.so' || true)
size=$(du -sh "$PREFIX" | cut -f1)
echo "bundle: $count libraries, $size installed"
exit $fail
