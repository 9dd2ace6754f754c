#!/bin/sh
# Builds ftrun and benchmarks it against Debian's torchrun:
#   scripts/bench.sh [--runs N | --quick] [--only torchrun|variants|save|scale|flash ...]
set -e
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench.py "$@"
