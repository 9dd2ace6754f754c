#!/usr/bin/env bash
# README command 1: installs the dependencies, builds ftrun, and runs a real 4-rank
# torch.distributed (gloo) training job through it, twice, each time with a fault:
#  act 1: rank 2 is killed (SIGKILL) at the start of step 25 of the first attempt; ftrun sees
#         it at once, a surviving rank saves step 24 (the last one completed; the periodic
#         checkpoint was at step 19), the group restarts and resumes at step 25.
#  act 2: flash checkpoint. The ranks save their state to the agent's memory after every step
#         (DLRover's API, StorageType.MEMORY) and nobody saves last words (--fault-save off);
#         rank 1 is SIGKILLed at the start of step 40 and the job resumes at step 40 from the
#         agent's memory.
# No step is lost in either; the final weights are compared with a fault-free run.
set -euo pipefail
cd "$(dirname "$0")/.."
demo_start=$(date +%s)
step_start=$demo_start
# Each step says what it does and, when it ends, how long it took.
steps_done=0
step() {
  local now
  now=$(date +%s)
  [ "$steps_done" -eq 0 ] || echo "   (took $((now - step_start)) s)"
  steps_done=$((steps_done + 1))
  step_start=$now
  echo "== [$1] $2"
}

step "1/5 dependencies" "Debian packages ftrun needs (installed only if missing; see scripts/install-deps.sh)"
scripts/install-deps.sh
configured=yes
[ -f "${FTRUN_BUILD_DIR:-build}/CMakeCache.txt" ] || configured=no
if [ "$configured" = no ]; then
  step "2/5 build" "configuring (cmake) and building ftrun and its tests: a few minutes the first time; progress every 10%"
else
  step "2/5 build" "building ftrun (only what changed); progress every 10%"
fi
# (POSIX awk has no clock but srand(), which returns the previous seed: the time it set.)
scripts/build.sh | awk -v start="$(date +%s)" '
  function now() { srand(); return srand() }
  /^\[[0-9]+\/[0-9]+\]/ { split(substr($1, 2), n, "/"); p = int(100 * n[1] / n[2] / 10) * 10
                           if (p != last) {
                             printf "   %3d%%  %d/%d  %ds  %s\n", p, n[1], n[2], now() - start, $NF
                             fflush(); last = p }
                           next }
  { print }'
ftrun=${FTRUN_BUILD_DIR:-build}/launcher/ftrun
out=$(mktemp -d /tmp/ftrun-demo.XXXXXX)
export PYTHON_EXEC=/usr/bin/python3   # Debian's python, which has torch

step "3/5 act 1" "ftrun --nproc-per-node 4 --max-restarts 3 train.py (rank 2 is killed in step 25)"
start=$(date +%s.%N)
"$ftrun" --nproc-per-node 4 --max-restarts 3 --log-dir "$out/logs/act1" \
  scripts/demo/train.py --steps 60 --out "$out/faulty" --crash-rank 2 --crash-step 25
end=$(date +%s.%N)
# The agent wrote the job's post-mortem page beside its logs (ftrun report).
report1=$(find "$out/logs/act1" -name report.html | head -n 1)

echo
step "4/5 reference" "the same job without a fault, for comparison"
"$ftrun" --nproc-per-node 4 --log-level warning --log-dir "$out/logs/clean" \
  scripts/demo/train.py --steps 60 --out "$out/clean" 2>/dev/null | tail -n 1

echo
step "5/5 act 2" "flash checkpoint: every step saved to the agent's memory, no last words"
echo "== ftrun --fault-save off ... train.py --flash (rank 1 is SIGKILLed in step 40)"
start2=$(date +%s.%N)
"$ftrun" --nproc-per-node 4 --max-restarts 3 --fault-save off --log-dir "$out/logs/act2" \
  scripts/demo/train.py --steps 60 --flash --out "$out/flash" --crash-rank 1 --crash-step 40
end2=$(date +%s.%N)
report2=$(find "$out/logs/act2" -name report.html | head -n 1)

/usr/bin/python3 - "$out" "$start" "$end" "$start2" "$end2" <<'PY'
import json, sys
out = sys.argv[1]
times = [float(t) for t in sys.argv[2:]]
clean = json.load(open(f"{out}/clean/result.0.json"))
ok = True
print()
for name, died, (start, end) in (("faulty", 25, times[:2]), ("flash", 40, times[2:])):
    a = json.load(open(f"{out}/{name}/result.0.json"))
    diff = max(abs(x - y) for x, y in zip(a["weights"], clean["weights"]))
    print(f"{name} run: {a['steps']} steps in {end - start:.1f} s, finished in attempt "
          f"{a['attempt']}, which resumed at step {a['resumed_at']} (a rank died in step {died}; "
          f"completed steps lost: {died - a['resumed_at']})")
    print(f"  final weights {a['checksum']} (fault-free run: {clean['checksum']}, "
          f"max difference {diff:.1e})")
    ok = ok and diff < 1e-9 and a["attempt"] == 1 and a["resumed_at"] == died
sys.exit(0 if ok else 1)
PY
echo "   (took $(($(date +%s) - step_start)) s; the whole demo $(($(date +%s) - demo_start)) s)"
echo "logs: $out/logs"
echo "post-mortem pages (open in a browser; ftrun report LOG_DIR writes one at any time):"
echo "  act 1: ${report1:-none}"
echo "  act 2: ${report2:-none}"
