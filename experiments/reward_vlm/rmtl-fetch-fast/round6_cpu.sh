#!/usr/bin/env bash
# Round 6 on the 2-core CPU machine: round 5's families plus 48,000 coverage scenes (families.yaml,
# round 6) on round 5's renderer, with the pixel run's committed policy as the learner family; a
# prompt-neutral model selected by held-out caption loss and the labelled recipe, 2,700 s of
# training each on both cores (batch 256), then both qualified (rmtl qualify).
# Usage: round6_cpu.sh OUT_DIR STORES_DIR [more round6.py options, e.g. --smoke, --stages train qualify]
set -eu
export MUJOCO_GL=egl OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 PYTHONUNBUFFERED=1
out=$1 stores=$2
shift 2
python experiments/reward_vlm/rmtl-fetch-fast/round6.py --out "$out" --stores "$stores" \
  --pixel results/pixel_fast/runs/rmtl_fast_s0 --device cpu --workers 2 --batch-size 256 \
  --train-budget-s 2700 --eval-every 500 --patience-evals 6 --frame-cache-gb 3 "$@"
