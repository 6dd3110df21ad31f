#!/usr/bin/env bash
# Trains rmtl-fetch-fast (both towers from random weights, prompt-neutral compositional captions)
# on every training store of a round. One core. Usage: train.sh OUT_DIR STORE...
set -eu
out=$1; shift
args=()
for s in "$@"; do args+=(--store "$s"); done
OMP_NUM_THREADS=1 MUJOCO_GL=egl rmtl train-reward-vlm "${args[@]}" --out "$out" \
  --set model=rmtl-fetch-fast --set captions=compositional --set baseline_balance=0 --set select_by=last \
  --set steps=4000 --set time_budget_s=2700 --set batch_size=256 --set lr=0.001 --set warmup_steps=150 \
  --set eval_every=250 --set checkpoint_every=250 --set soft_sigma=0.03 --set seed=0 --set device=cpu \
  --set frame_cache_gb=2.0
