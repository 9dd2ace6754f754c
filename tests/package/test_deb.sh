#!/usr/bin/env bash
# Builds the .deb with CPack, unpacks it into a scratch root (dpkg -x), and runs ftrun from
# there: --version, a one-rank job, the Python helper. Also checks the declared dependencies.
# Usage: test_deb.sh BUILD_DIR
set -euo pipefail
build=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

(cd "$build" && cpack -G DEB -B "$scratch/out" >"$scratch/cpack.log" 2>&1) ||
  { cat "$scratch/cpack.log" >&2; fail "cpack -G DEB failed"; }
deb=$(ls "$scratch"/out/ftrun_*.deb)
echo "package: $(basename "$deb")"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for want in python3 libgrpc++ libprotobuf libspdlog libfmt libboost-filesystem libc6; do
  [[ "$depends" == *"$want"* ]] || fail "Depends lacks $want"
done
dpkg-deb -x "$deb" "$scratch/root"
root=$scratch/root
for f in usr/bin/ftrun usr/share/man/man1/ftrun.1 usr/share/man/man7/ftrun-control.7 \
         usr/share/man/man7/ftrun-flash-checkpoint.7 \
         usr/lib/python3/dist-packages/ftrun/__init__.py \
         usr/lib/python3/dist-packages/ftrun/standby.py \
         usr/lib/python3/dist-packages/ftrun/flash_checkpoint/ddp.py; do
  [ -e "$root/$f" ] || fail "$f is not in the package"
done
[ -z "$(cd "$root" && find . -path '*tests*' -o -name 'fake_worker' -o -name '*.a')" ] ||
  fail "test files or static libraries are in the package"
"$root/usr/bin/ftrun" --version | grep -q '^ftrun ' || fail "ftrun --version"
out=$("$root/usr/bin/ftrun" --log-dir "$scratch/logs" --log-level warning --no-python \
      /bin/sh -c 'echo "rank=$RANK world=$WORLD_SIZE"')
[ "$out" = "rank=0 world=1" ] || fail "one-rank job printed '$out'"
PYTHONPATH="$root/usr/lib/python3/dist-packages" /usr/bin/python3 -c \
  'import ftrun; assert ftrun.latest_checkpoint("/nonexistent") is None' ||
  fail "the packaged Python helper does not import"
# --warm-restart finds the packaged standby: attempt 1 runs on it.
cat >"$scratch/w.py" <<'PY'
import os, sys, time
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    time.sleep(2)
    sys.exit(1)
PY
err=$(PYTHON_EXEC=/usr/bin/python3 "$root/usr/bin/ftrun" --log-dir "$scratch/logs" --max-restarts 1 \
      --warm-restart --preload '' "$scratch/w.py" 2>&1) || fail "warm-restart job: $err"
[[ "$err" == *"starts on standby"* ]] || fail "the packaged standby was not used: $err"
echo "PASS"
