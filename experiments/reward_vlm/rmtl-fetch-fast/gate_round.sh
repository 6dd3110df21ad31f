#!/usr/bin/env bash
# Embeds the held-out stores with a trained round's model and computes the pre-registered gates.
# Usage: gate_round.sh MODEL_DIR ROUND [STORES_DIR]
set -eu
model=$1; round=$2; dir=${3:-${RMTL_DATA_DIR:-data}/stores/fast}
export MUJOCO_GL=egl OMP_NUM_THREADS=1
for s in "$dir"/heldout_*.zarr; do rmtl embed --store "$s" --model "$model"; done
python experiments/reward_vlm/rmtl-fetch-fast/gates.py --model "$model" --round "$round" --store "$dir"/heldout_*.zarr
