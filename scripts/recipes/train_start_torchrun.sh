#!/usr/bin/env bash
# train_start_torchrun.sh: a torchrun start script with torchrun replaced by ftrun.
#
# It follows the PyTorch train_start.sh of the MindCluster resumable-training adaptation guide.
# The guide builds its arguments from the environment like this:
#
#   DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT --max_restarts 5 --monitor_interval 10 "
#   torchrun $DISTRIBUTED_ARGS ${boot_file_path}${boot_file} ${train_param} && tee ${output_url}/log
#
# Here the arguments are written out on the ftrun line and every variable is quoted. Only
# the first word changes: torchrun -> ftrun.
#
# Usage:
#   single node:  NPROC_PER_NODE=8 ./train_start_torchrun.sh [training args ...]
#   two nodes:    run the same line on both nodes; only NODE_RANK differs:
#     node 0:     MASTER_ADDR=10.0.0.1 NNODES=2 NODE_RANK=0 ./train_start_torchrun.sh [training args ...]
#     node 1:     MASTER_ADDR=10.0.0.1 NNODES=2 NODE_RANK=1 ./train_start_torchrun.sh [training args ...]
# MASTER_ADDR is node 0's address. MASTER_PORT is the port where node 0's ftrun hosts the
# rendezvous; the workers get another free port as their MASTER_PORT, as with torchrun.
set -euo pipefail

MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
MASTER_PORT="${MASTER_PORT:-29500}"
NNODES="${NNODES:-1}"
NODE_RANK="${NODE_RANK:-0}"
NPROC_PER_NODE="${NPROC_PER_NODE:-8}"   # GPUS_PER_NODE in the guide
TRAIN_SCRIPT="${TRAIN_SCRIPT:-train.py}"

# ftrun-only extras. Uncomment the ones you want; torchrun does not have these options.
# They come after the torchrun arguments, so an extra such as --max-restarts overrides the
# guide's --max_restarts 5 (for a repeated option, the last value wins). An empty array under
# set -u needs bash >= 4.4.
FTRUN_EXTRA_ARGS=(
  # --max-restarts 3              # job-wide: after a worker failure on any node, restart every node, at most 3 times
  # --fault-save on               # on a failure, surviving ranks first save the newest complete step (the default; train.py must use the ftrun Python helper)
  # --hang-timeout 300            # a rank that reported progress and then nothing for 300 s counts as failed (its Python stacks are dumped first)
  # --event-log /var/log/ftrun/events.jsonl  # append one JSON object per lifecycle event (start, failure, restart, save, end)
  # --metrics-port 9100           # serve Prometheus metrics at http://<this node>:9100/metrics
)

if [[ "$NNODES" == 1 ]]; then
  # Single node: the short form.
  #   torchrun --nproc_per_node "$NPROC_PER_NODE" "$TRAIN_SCRIPT" "$@"
  exec ftrun --nproc_per_node "$NPROC_PER_NODE" "${FTRUN_EXTRA_ARGS[@]}" "$TRAIN_SCRIPT" "$@"
fi

# Multi-node, static rendezvous: the guide's line, including its optional graceful
# fault-tolerance step (--max_restarts 5 --monitor_interval 10).
#   torchrun --nproc_per_node "$NPROC_PER_NODE" --nnodes "$NNODES" --node_rank "$NODE_RANK" \
#       --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --max_restarts 5 --monitor_interval 10 \
#       "$TRAIN_SCRIPT" "$@"
exec ftrun --nproc_per_node "$NPROC_PER_NODE" --nnodes "$NNODES" --node_rank "$NODE_RANK" \
    --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --max_restarts 5 --monitor_interval 10 \
    "${FTRUN_EXTRA_ARGS[@]}" "$TRAIN_SCRIPT" "$@"
