#!/usr/bin/env bash
# The chaos run: installs the dependencies, builds, and runs scripts/chaos.py (a 3-agent gloo
# training job through ftrun under a seeded schedule of faults). Arguments go to chaos.py:
#   scripts/chaos.sh [--seed N] [--faults N] [--steps N] [--short] [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/chaos.py --ftrun "${FTRUN_BUILD_DIR:-build}/launcher/ftrun" "$@"
