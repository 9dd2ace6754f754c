#!/usr/bin/env bash
# Builds ftrun's libFuzzer targets (fuzz/, see fuzz/README.md) with clang into build-fuzz/
# (or $FTRUN_FUZZ_BUILD_DIR) and runs each for a bounded time, one after the other, one
# process each (the machine has 2 cores). New interesting inputs are kept in a scratch
# directory (not in the repository): $FTRUN_FUZZ_WORK, default /tmp/ftrun-fuzz/<target>/.
#
#   scripts/fuzz.sh [--seconds N] [--build-only] [TARGET ...]
#
# --seconds N   run each target N seconds (default 60)
# --build-only  configure and build, run nothing
# TARGET        fuzz_torchrun_args, fuzz_rdzv_state, ... (default: all of fuzz/CMakeLists.txt)
#
# Exit status: 0 nothing found; 1 a target found something (the crashing inputs' paths are
# printed: replay one with `build-fuzz/fuzz/<target> <file>`); 2 usage or build error.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
build_only=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --seconds=*) seconds=${1#--seconds=}; shift ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: --seconds needs a whole number" >&2; exit 2 ;; esac

all=(fuzz_torchrun_args fuzz_dlrover_args fuzz_msrun_args fuzz_rdzv_conf fuzz_control_channel
     fuzz_file_timer fuzz_rdzv_wire fuzz_rdzv_state fuzz_switchbox fuzz_probe_wire fuzz_store_wire
     fuzz_lease_mailbox fuzz_torch_file)
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

scripts/install-deps.sh --fuzz
build=${FTRUN_FUZZ_BUILD_DIR:-build-fuzz}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DFTRUN_BUILD_FUZZERS=ON -DFTRUN_BUILD_TESTS=OFF >/dev/null || exit 2
fi
cmake --build "$build" -j2 --target "${targets[@]}" || exit 2
[ "$build_only" -eq 0 ] || exit 0

work=${FTRUN_FUZZ_WORK:-/tmp/ftrun-fuzz}
found=()
for t in "${targets[@]}"; do
  dir="$work/$t"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  log="$dir/last-run.log"
  echo "fuzz.sh: $t for ${seconds}s (new inputs in $dir/corpus, log $log)"
  status=0
  # The first corpus directory receives the new inputs; the seeds are only read.
  "$build/fuzz/$t" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
      "$dir/corpus" "fuzz/corpus/$t" >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  echo "fuzz.sh: $t: ${execs:-?} runs, ${rate:-?} exec/s, ${cov:-cov: ?}, corpus $(find "$dir/corpus" -type f | wc -l) new"
  if [ "$status" -ne 0 ]; then
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "fuzz.sh: $t FOUND SOMETHING (exit $status): ${artifact:-see $log}" >&2
    grep -m3 -E 'ERROR: |runtime error|fuzz invariant' "$log" >&2 || true
    found+=("$t: ${artifact:-$log}")
  fi
done

if [ ${#found[@]} -gt 0 ]; then
  echo "fuzz.sh: findings:" >&2
  printf '  %s\n' "${found[@]}" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} target(s), ${seconds}s each: nothing found"
