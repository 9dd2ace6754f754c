#!/usr/bin/env bash
# Builds ftrun with sanitizers and runs the unit and integration tests under them.
#   scripts/sanitize.sh [asan|tsan|all] [ctest args ...]     (default: asan)
# asan: AddressSanitizer + UndefinedBehaviorSanitizer, in build-asan/;
# tsan: ThreadSanitizer, in build-tsan/.
# Every sanitized process (the test binaries, every ftrun they start, the fake workers) writes
# its reports into a fresh directory; the run fails if any report is there, so a report from a
# process whose exit code a test expects to be non-zero is not missed. Suppressions live in
# scripts/sanitizers/*.supp, each with the reason it is a false positive.
#
# tsan: Debian's gRPC, protobuf and Abseil are not built with TSan. The build makes their
# headers match the libraries (see CMakeLists.txt), interceptors called from those libraries
# are ignored (ignore_noninstrumented_modules), and a race with a gRPC frame in its stacks is
# not judged, because gRPC's ordering of its threads is invisible to TSan
# (scripts/sanitizers/tsan.supp says what this gives up).
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=asan
case "${1:-}" in
  asan|tsan) kinds=$1; shift ;;
  all) kinds="asan tsan"; shift ;;
esac
scripts/install-deps.sh
supp=$PWD/scripts/sanitizers
# Sanitizer options for every process started from here on; reports go into $1.
sanitizer_options() {
  export ASAN_OPTIONS="log_path=$1/asan:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="log_path=$1/ubsan:print_stacktrace=1:halt_on_error=1"
  export TSAN_OPTIONS="log_path=$1/tsan:suppressions=$supp/tsan.supp:halt_on_error=0:second_deadlock_stack=1:ignore_noninstrumented_modules=1"
}
status=0
for kind in $kinds; do
  build=build-$kind
  flag=address
  [ "$kind" = tsan ] && flag=thread
  # -O0 -g1 (line tables for the reports' stacks, asserts on): three times faster to compile
  # than -O2 -g, and the code under test is not compute-bound.
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" \
      -DFTRUN_SANITIZE=$flag >/dev/null
  fi
  # What the unit and integration tests run (not the e2e tests or the benchmark tools); the
  # stack collector's tests too (they ptrace and signal real processes); the snapshot memory,
  # replica and store units (memfds, threads and bytes from a peer). The agent's state machine
  # and the report's units are left out for CI's time: the integration tests run that code in
  # the sanitized ftrun.
  cmake --build "$build" -j2 --target ftrun fake_worker launcher_unit_tests stacks_unit_tests \
    rendezvous_unit_tests checkpoint_unit_tests replica_unit_tests store_unit_tests \
    integration_tests fuzz_replay sanitizer_canary
  # First, a deliberate bug per sanitizer must be reported with these very options and
  # suppressions: a clean run below then means that nothing was found, not that nothing
  # could be.
  if [ "$kind" = tsan ]; then
    canaries=("race|data race")
  else
    canaries=("use-after-free|heap-use-after-free" "overflow|signed integer overflow")
  fi
  for canary in "${canaries[@]}"; do
    bug=${canary%%|*}
    expect=${canary#*|}
    cdir=$(mktemp -d "/tmp/ftrun-$kind-canary.XXXXXX")
    sanitizer_options "$cdir"
    "$build/tests/sanitizer_canary" "$bug" >/dev/null 2>&1 || true
    if ! cat "$cdir"/* 2>/dev/null | grep -q "$expect"; then
      echo "== $kind: the deliberate $bug in tests/support/sanitizer_canary.cc was not" \
           "reported (\"$expect\"): the sanitizer setup is broken"
      exit 1
    fi
    echo "== $kind: the deliberate $bug is reported, as it must be"
    rm -rf "$cdir"
  done
  reports=$(mktemp -d "/tmp/ftrun-$kind-reports.XXXXXX")
  sanitizer_options "$reports"
  echo "== $kind: unit and integration tests (reports in $reports)"
  ctest --test-dir "$build" --output-on-failure -j2 -L 'unit|integration' "$@" || status=1
  if compgen -G "$reports/*" >/dev/null; then
    echo "== $kind: sanitizer reports:"
    for f in "$reports"/*; do echo "--- $f"; cat "$f"; done
    status=1
  else
    echo "== $kind: no sanitizer report"
    rm -rf "$reports"
  fi
  unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS
done
exit $status
