#!/usr/bin/env bash
# Round 5 on the 2-core CPU machine (ROUND5.md): round 4's CPU round on the cheaper renderer
# (meshes decimated 0.9, no anti-aliasing: families.yaml, round 5), with the pixel run's committed policy as its own learner.
# Usage: round5_cpu.sh OUT_DIR STORES_DIR
set -eu
export MUJOCO_GL=egl OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 PYTHONUNBUFFERED=1
python experiments/reward_vlm/rmtl-fetch-fast/round4_gpu.py --out "$1" --stores "$2" --round 5 --families 5 \
  --pixel results/pixel_fast/runs/rmtl_fast_s0 --device cpu \
  --workers 2 --batch-size 256 --train-budget-s 2700 --eval-every 500 --frame-cache-gb 3 --stages render train gate
