#!/usr/bin/env bash
# Runs (variant seed) pairs one after another on one core, each kept under results/oracle_structure/runs/.
# Usage: [CHECKPOINT_EVERY=40000] run_queue.sh STEPS "variant:seed variant:seed ..."   (from the repository root of a pinned worktree)
# Rerunning the same line resumes unfinished runs from their resume/ state and skips finished ones.
set -u
steps=$1; shift
for item in $1; do
  v=${item%%:*}; s=${item##*:}
  out=results/oracle_structure/runs/${v}_s${s}
  if [ -f "$out/summary.json" ] && [ ! -d "$out/resume" ] && grep -q "\"env_steps\": *[0-9]" "$out/summary.json" \
     && [ "$(python3 -c "import json;print(json.load(open('$out/summary.json'))['env_steps']>=$steps)")" = True ]; then
    echo "done: $out"; continue
  fi
  MUJOCO_GL=egl OMP_NUM_THREADS=1 .venv/bin/rmtl train stage1 --variant "$v" --seed "$s" --output-dir "$out" \
    --set total_timesteps="$steps" --set checkpoint_every="${CHECKPOINT_EVERY:-25000}" --set eval_every=20000 \
    --set keep_results=true --set vec_env=dummy --set torch_threads=1 --set progress_bar=false
done
