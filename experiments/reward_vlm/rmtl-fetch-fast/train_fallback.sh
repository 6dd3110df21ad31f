#!/usr/bin/env bash
# The fallback of FALLBACK_RULE.md (gated as "round 3"): rmtl-fetch-fast's architecture from random
# weights, trained with the shipped recipe's graded captions, which contain the evaluated prompts,
# on round 2's training stores. One core, 2,400 s of optimisation. Usage: train_fallback.sh OUT_DIR STORE...
set -eu
out=$1; shift
args=()
for s in "$@"; do args+=(--store "$s"); done
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=egl rmtl train-reward-vlm "${args[@]}" --out "$out" \
  --set model=rmtl-fetch-fast --set captions=graded \
  --set steps=6000 --set time_budget_s=2400 --set batch_size=256 --set lr=0.001 --set warmup_steps=150 \
  --set eval_every=250 --set checkpoint_every=250 --set soft_sigma=0.03 --set seed=0 --set device=cpu \
  --set frame_cache_gb=2.0
