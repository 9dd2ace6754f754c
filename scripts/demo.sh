#!/usr/bin/env bash
# README command 1: installs the dependencies, builds ftrun, and runs a real 4-rank
# torch.distributed (gloo) training job through it. Rank 2 is killed (SIGKILL) at the start of
# step 25 of the first attempt; ftrun sees it at once, a surviving rank saves step 24 (the
# last one completed; the periodic checkpoint was at step 19), the group restarts and resumes
# at step 25: no step is lost. The final weights are then compared with a fault-free run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
ftrun=${FTRUN_BUILD_DIR:-build}/launcher/ftrun
out=$(mktemp -d /tmp/ftrun-demo.XXXXXX)
export PYTHON_EXEC=/usr/bin/python3   # Debian's python, which has torch

echo "== ftrun --nproc-per-node 4 --max-restarts 3 train.py (rank 2 is killed in step 25)"
start=$(date +%s.%N)
"$ftrun" --nproc-per-node 4 --max-restarts 3 --log-dir "$out/logs" \
  scripts/demo/train.py --steps 60 --out "$out/faulty" --crash-rank 2 --crash-step 25
end=$(date +%s.%N)

echo
echo "== the same job without a fault, for comparison"
"$ftrun" --nproc-per-node 4 --log-level warning --log-dir "$out/logs" \
  scripts/demo/train.py --steps 60 --out "$out/clean" 2>/dev/null | tail -n 1

/usr/bin/python3 - "$out" "$start" "$end" <<'PY'
import json, sys
out, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
a = json.load(open(f"{out}/faulty/result.0.json"))
b = json.load(open(f"{out}/clean/result.0.json"))
diff = max(abs(x - y) for x, y in zip(a["weights"], b["weights"]))
print()
print(f"faulty run: {a['steps']} steps in {end - start:.1f} s, finished in attempt {a['attempt']}, "
      f"which resumed at step {a['resumed_at']} (rank 2 died in step 25; completed steps lost: "
      f"{25 - a['resumed_at']})")
print(f"final weights {a['checksum']} (fault-free run: {b['checksum']}, max difference {diff:.1e})")
sys.exit(0 if diff < 1e-9 and a["attempt"] == 1 and a["resumed_at"] == 25 else 1)
PY
echo "logs: $out/logs"
