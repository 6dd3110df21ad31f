#!/usr/bin/env bash
# Renders the training and held-out stores of rmtl-fetch-fast (round 1; families.yaml) with its renderer:
# 64 px (the model's input size), no anti-aliasing. One core. Usage: render_data.sh [ORACLE_RUN_DIR]
# ORACLE_RUN_DIR: a running Stage-1 run whose checkpoints/step_* join the training policies.
set -eu
export MUJOCO_GL=egl OMP_NUM_THREADS=1
python "$(dirname "$0")/render_families.py" --round 1 ${1:+--learner "$1"}
