#!/usr/bin/env bash
# Checks a repaired binary wheel (`make wheel`): its C extension needs only the libjpeg-turbo inside the wheel (auditwheel
# copied it into timmdata.libs/ under a new name), loads it with the system's libjpeg out of reach, and `timmdata info`
# run from the wheel says the native decoder is active. Unpacks the wheel into a temporary folder (what pip puts into
# site-packages) and imports timmdata from there; torch and the other dependencies come from the current environment.
# Usage: bash tools/wheel_check.sh [WHEEL] (default: the newest wheelhouse/timmdata-*manylinux*.whl); PY=python to choose.
set -euo pipefail
PY=${PY:-python}
case "$PY" in */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")";; esac  # absolute: later steps run elsewhere
whl=${1:-$(ls -t wheelhouse/timmdata-*manylinux*.whl 2>/dev/null | head -1)}
[ -n "$whl" ] && [ -f "$whl" ] || { echo "wheel-check: no wheel given and none in wheelhouse/: run make wheel first"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" -m zipfile -e "$whl" "$tmp/site"
so=$(ls "$tmp"/site/timmdata/_native*.so 2>/dev/null || true)
[ -n "$so" ] || { echo "wheel-check: $whl has no timmdata/_native*.so: the extension was not built into it"; exit 1; }
fail() { echo "wheel-check: FAILED: $*"; exit 1; }

echo "== $(basename "$whl")"
# 1. what the extension needs, and where the loader finds it: the bundled copy, through the extension's RPATH
echo "-- ldd timmdata/_native (libjpeg):"
ldd "$so" | grep -i jpeg | sed 's/^/   /'
ldd "$so" | grep -i jpeg | grep -q "=> $tmp/site/\(timmdata/\.\./\)\?timmdata.libs/libjpeg-" || fail "the extension's libjpeg does not resolve to timmdata.libs/"
! ldd "$so" | grep -i jpeg | grep -q "not found" || fail "a libjpeg the extension needs is not found"

# 2. the dynamic loader's own trace of loading the extension alone: every libjpeg it opens is the bundled one
LD_DEBUG=libs "$PY" -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$so" 2> "$tmp/ld.log"
grep -E "trying file=.*libjpeg|calling init: .*libjpeg" "$tmp/ld.log" | sed 's/^ *[0-9]*: */   loader: /' | sort -u
! grep -E "(trying file|calling init): .*libjpeg" "$tmp/ld.log" | grep -v "$tmp/site/\(timmdata/\.\./\)\?timmdata.libs/" | grep -q . \
  || fail "the loader opened a libjpeg outside the wheel"

# 3. timmdata info from the wheel; where possible (root, unshare) with the system's libjpeg hidden in a private mount
#    namespace, as on a machine without it
# an editable install's finder would supply a missing timmdata._native from the checkout: drop it, as in a clean venv
info='import sys; sys.meta_path = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", type(f).__module__).lower()]
import timmdata, timmdata.pixels.decode as d; from timmdata.tools.cli import main; print("imported from", timmdata.__file__)
print("extension from", getattr(d.native, "__file__", None)); sys.argv = ["timmdata", "info"]; main()'
run_info() { (cd "$tmp" && PYTHONPATH="$tmp/site" TIMMDATA_NATIVE=1 "$PY" -c "$info"); }  # not from the current folder
sys_jpeg=$(ldconfig -p 2>/dev/null | grep -o '/[^ ]*/libjpeg\.so\.[0-9.]*$' | head -1 || true)
if [ -n "$sys_jpeg" ] && [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  real=$(readlink -f "$sys_jpeg")
  export -f run_info; export tmp PY info
  unshare -m --propagation private bash -c "mount --bind /dev/null '$real' &&
    ! \"\$PY\" -c 'import ctypes; ctypes.CDLL(\"libjpeg.so.62\")' 2>/dev/null &&
    echo '-- system libjpeg hidden ($real): it no longer loads' && run_info" > "$tmp/info.txt" \
    || fail "timmdata info failed with the system libjpeg hidden (or it could not be hidden)"
else
  echo "-- (the system libjpeg is not hidden here: needs root and unshare; the checks above stand)"
  run_info > "$tmp/info.txt" || fail "timmdata info failed"
fi
sed 's/^/   /' "$tmp/info.txt"
grep -q "imported from $tmp/site/timmdata/" "$tmp/info.txt" || fail "timmdata was not imported from the unpacked wheel"
grep -q "extension from $tmp/site/timmdata/_native" "$tmp/info.txt" || fail "the C extension was not loaded from the unpacked wheel"
grep -qE "^ *C extension: +active" "$tmp/info.txt" || fail "timmdata info does not report the C extension active"
grep -qE "^ *JPEG decoder: +native" "$tmp/info.txt" || fail "timmdata info does not report the native JPEG decoder"
echo "wheel-check: OK: the extension loads the libjpeg-turbo inside the wheel; the native decoder is active"
