#!/bin/sh
# Builds ftrun and benchmarks it against Debian's torchrun: scripts/bench.sh [--runs N | --quick]
set -e
cd "$(dirname "$0")/.."
[ -f build/CMakeCache.txt ] || cmake -S . -B build -G Ninja
cmake --build build -j2
exec /usr/bin/python3 scripts/bench.py "$@"
