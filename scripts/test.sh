#!/usr/bin/env bash
# README command 2: installs the dependencies, checks that every C++ file is formatted,
# builds, and runs the whole test suite (unit, integration and end-to-end with Debian's
# torch). Extra arguments go to ctest,
# e.g. scripts/test.sh -L unit.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/check-format.sh
scripts/build.sh
ctest --test-dir "${FTRUN_BUILD_DIR:-build}" --output-on-failure -j2 "$@"
