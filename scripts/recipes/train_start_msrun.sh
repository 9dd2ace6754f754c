#!/usr/bin/env bash
# train_start_msrun.sh: a MindSpore msrun start script with msrun replaced by "ftrun msrun".
# (With ftrun installed with FTRUN_INSTALL_PERSONALITY_LINKS=ON, `msrun` itself is ftrun and
# the original line runs unchanged.)
#
# The single-node line is the one in MindSpore's power-off (MindIO TTP) checkpoint guide:
#
#   export MS_ENABLE_TFT='{TTP:1}'
#   export MINDIO_FOR_MINDSPORE=1
#   msrun --worker_num=4 --local_worker_num=4 --master_port=10970 --join=False --log_dir=msrun_log --cluster_time_out=300 mindio_ttp_case.py
#
# The multi-node line uses the options msrun documents: --worker_num (workers in the whole
# job), --local_worker_num (workers on this node), --master_addr / --master_port (the
# scheduler, on node 0), --node_rank, --log_dir, --join, --cluster_time_out.
#
# Usage:
#   single node:  ./train_start_msrun.sh [training args ...]
#   resume:       ./train_start_msrun.sh --is_recover=1    (the guide's re-training step)
#   two nodes:    the same line on both nodes; only NODE_RANK differs:
#     node 0:     WORKER_NUM=8 LOCAL_WORKER_NUM=4 MASTER_ADDR=10.0.0.1 NODE_RANK=0 ./train_start_msrun.sh
#     node 1:     WORKER_NUM=8 LOCAL_WORKER_NUM=4 MASTER_ADDR=10.0.0.1 NODE_RANK=1 ./train_start_msrun.sh
set -euo pipefail

WORKER_NUM="${WORKER_NUM:-4}"
LOCAL_WORKER_NUM="${LOCAL_WORKER_NUM:-4}"
MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
MASTER_PORT="${MASTER_PORT:-10970}"
NODE_RANK="${NODE_RANK:-0}"
LOG_DIR="${LOG_DIR:-msrun_log}"
CLUSTER_TIME_OUT="${CLUSTER_TIME_OUT:-300}"
TRAIN_SCRIPT="${TRAIN_SCRIPT:-mindio_ttp_case.py}"

# MindIO TTP switches of the guide. With ftrun, the fault-time save can come from ftrun itself
# (see FAULT-TIME CHECKPOINTS in ftrun(1)); keep these only if train.py uses MindIO TTP.
# export MS_ENABLE_TFT='{TTP:1}'
# export MINDIO_FOR_MINDSPORE=1

# With --join=False, msrun exits right after it starts the workers; so does ftrun, but a
# detached ftrun supervisor keeps watching and restarting them (--max_restarts, an ftrun
# extension) and logs to $LOG_DIR/ftrun.log. See ftrun-msrun(1).

if [[ "$WORKER_NUM" == "$LOCAL_WORKER_NUM" ]]; then
  # Single node (the guide's line):
  #   msrun --worker_num="$WORKER_NUM" --local_worker_num="$LOCAL_WORKER_NUM" --master_port="$MASTER_PORT" \
  #       --join=False --log_dir="$LOG_DIR" --cluster_time_out="$CLUSTER_TIME_OUT" "$TRAIN_SCRIPT" "$@"
  exec ftrun msrun --worker_num="$WORKER_NUM" --local_worker_num="$LOCAL_WORKER_NUM" --master_port="$MASTER_PORT" \
      --join=False --log_dir="$LOG_DIR" --cluster_time_out="$CLUSTER_TIME_OUT" "$TRAIN_SCRIPT" "$@"
fi

# Multi-node:
#   msrun --worker_num="$WORKER_NUM" --local_worker_num="$LOCAL_WORKER_NUM" --master_addr="$MASTER_ADDR" \
#       --master_port="$MASTER_PORT" --node_rank="$NODE_RANK" --log_dir="$LOG_DIR" --join=True \
#       --cluster_time_out="$CLUSTER_TIME_OUT" "$TRAIN_SCRIPT" "$@"
exec ftrun msrun --worker_num="$WORKER_NUM" --local_worker_num="$LOCAL_WORKER_NUM" --master_addr="$MASTER_ADDR" \
    --master_port="$MASTER_PORT" --node_rank="$NODE_RANK" --log_dir="$LOG_DIR" --join=True \
    --cluster_time_out="$CLUSTER_TIME_OUT" "$TRAIN_SCRIPT" "$@"
