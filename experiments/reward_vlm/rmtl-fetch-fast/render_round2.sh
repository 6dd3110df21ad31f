#!/usr/bin/env bash
# Renders the stores of round 2: every family of render_data.sh (round 1's training and held-out
# families at the same seeds; its optional ORACLE_RUN_DIR is not given, as the oracle_rmtl_s0
# checkpoints of round 1 are gone), plus two training families:
#   train_p_stage2_worker: the oracle-trained Stage-2 worker (oracle_rmtl at 560k, a strong learner);
#   train_c_r1_<step>:     each checkpoint of the round's own learner, an RMTL Stage-1 run on the
#                          round-1 model's pixel reward (LEARNER_RUN_DIR).
# Sampled actions, 12 episodes each, seed 4000. One core; prints a timestamp per section.
# Usage: render_round2.sh LEARNER_RUN_DIR
set -eu
export MUJOCO_GL=egl OMP_NUM_THREADS=1
S=${RMTL_DATA_DIR:-data}/stores/fast
R="rmtl render-and-embed --workers 1 --model rmtl-fetch-fast@random --render {\"msaa_samples\":0}"
here=$(dirname "$0")
echo "start $(date -u +%FT%TZ)"
bash "$here/render_data.sh"
echo "round-1 families done $(date -u +%FT%TZ)"
$R --store $S/train_p_stage2_worker.zarr --episodes 12 --policy results/oracle_structure/stage2_worker/model.zip \
  --no-deterministic --seed 4000
for c in "$1"/checkpoints/step_*/; do
  step=$(basename "$c" | sed 's/^step_0*//')
  $R --store $S/train_c_r1_$step.zarr --episodes 12 --policy "$c/model.zip" --no-deterministic --seed 4000; done
echo "done $(date -u +%FT%TZ)"
