#!/usr/bin/env bash
# Renders the stores of round 2 (families.yaml): every family of round 1 (its training and held-out
# families at the same seeds; its optional ORACLE_RUN_DIR is not given, as the oracle_rmtl_s0
# checkpoints of round 1 are gone), plus two training families:
#   train_p_stage2_worker: the oracle-trained Stage-2 worker (oracle_rmtl at 560k, a strong learner);
#   train_c_r1_<step>:     each checkpoint of the round's own learner, an RMTL Stage-1 run on the
#                          round-1 model's pixel reward (LEARNER_RUN_DIR).
# Sampled actions, 12 episodes each, seed 4000. One core; prints a timestamp per family.
# Usage: render_round2.sh LEARNER_RUN_DIR
set -eu
export MUJOCO_GL=egl OMP_NUM_THREADS=1
python "$(dirname "$0")/render_families.py" --round 2 --learner "$1"
