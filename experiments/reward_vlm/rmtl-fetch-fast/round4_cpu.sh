#!/usr/bin/env bash
# Round 4 on the 2-core CPU machine (ROUND4.md, "Where no GPU machine is lent"): render every
# family on both cores, train for 2,700 s on both cores (batch 256), gate the held-out families.
# Usage: round4_cpu.sh OUT_DIR STORES_DIR PIXEL_POLICIES_DIR
set -eu
export MUJOCO_GL=egl OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 PYTHONUNBUFFERED=1
python experiments/reward_vlm/rmtl-fetch-fast/round4_gpu.py --out "$1" --stores "$2" --pixel "$3" --device cpu \
  --workers 2 --batch-size 256 --train-budget-s 2700 --eval-every 500 --frame-cache-gb 3 --stages render train gate
