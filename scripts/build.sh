#!/usr/bin/env bash
# Configures (once) and builds ftrun and its tests into build/ (or $FTRUN_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${FTRUN_BUILD_DIR:-build}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j2
