#!/usr/bin/env bash
# Renders the training and held-out stores of rmtl-fetch-fast (round 1) with its renderer:
# 64 px (the model's input size), no anti-aliasing. One core. Usage: render_data.sh [ORACLE_RUN_DIR]
# ORACLE_RUN_DIR: a running Stage-1 run whose checkpoints/step_* join the training policies.
set -eu
export MUJOCO_GL=egl OMP_NUM_THREADS=1
S=${RMTL_DATA_DIR:-data}/stores/fast
R="rmtl render-and-embed --workers 1 --model rmtl-fetch-fast@random --render {\"msaa_samples\":0}"
P=results/oracle_structure/runs
# --- training families (seeds 0..) ---
$R --store $S/train_expert.zarr --episodes 160 --noise-levels 0.15,0.3,0.6,1.0 --stages 0,1,2,3,4 --seed 0
$R --store $S/train_random.zarr --episodes 40 --policy random --stages 0,1,2,3,4 --seed 1000
for b in hover_0.03 hover_0.15 sit_at_cube grasp_and_drop closed_jaw_approach wander; do
  $R --store $S/train_b_$b.zarr --episodes 16 --policy behaviour:$b --stages 0,1,2,3,4 --seed 2000; done
for r in oracle_sweep_level_only_s0 oracle_sweep_level_only_s1 oracle_sweep_trend_momentum_s0 \
         oracle_sweep_trend_momentum_s2 oracle_sweep_trend_momentum_drop_s0 oracle_sweep_trend_momentum_drop_s2; do
  $R --store $S/train_p_$r.zarr --episodes 12 --policy $P/$r/best/model.zip --no-deterministic --seed 3000; done
if [ $# -ge 1 ]; then
  for c in "$1"/checkpoints/step_*/; do
    $R --store $S/train_c_$(basename "$c").zarr --episodes 12 --policy "$c/model.zip" --no-deterministic --seed 4000; done
fi
# --- held-out families (seeds 900000..) ---
for b in hover_0.08 push touch_and_leave; do
  $R --store $S/heldout_b_$b.zarr --episodes 12 --policy behaviour:$b --stages 0,1,2,3,4 --seed 900000; done
for r in oracle_sweep_trend_momentum_s1 oracle_sweep_level_only_s2 oracle_sweep_trend_momentum_drop_s1; do
  $R --store $S/heldout_p_$r.zarr --episodes 12 --policy $P/$r/best/model.zip --no-deterministic --seed 910000; done
$R --store $S/heldout_expert.zarr --episodes 24 --noise-levels 0.3,1.0 --stages 0,1,2,3,4 --seed 920000
for b in hover_0.03 hover_0.15 sit_at_cube grasp_and_drop closed_jaw_approach wander; do
  $R --store $S/heldout_b_$b.zarr --episodes 8 --policy behaviour:$b --stages 0,1,2,3,4 --seed 930000; done
# Added before any trained round was gated (GATES.md, addendum): a noise-free expert for the return gate.
$R --store $S/heldout_expert_clean.zarr --episodes 24 --noise-std 0 --stages 0,1,2,3,4 --seed 940000
