#!/usr/bin/env bash
# Copy the kept runs of a worktree that runs them into this checkout's results (never checkpoints/ or tb/);
# what this checkout had of them is replaced (a finished run's resume/ goes).
# Usage: experiments/oracle_structure/sync_runs.sh /path/to/worktree
set -eu
src="$1/results/oracle_structure/runs"
dst="$(cd "$(dirname "$0")/../../results/oracle_structure" && pwd)/runs"
for run in "$src"/*/; do
  name=$(basename "$run")
  rm -rf "${dst:?}/$name"
  mkdir -p "$dst/$name"
  tar -C "$run" --exclude=./checkpoints --exclude=./tb --exclude='*.tmp' -cf - . | tar -C "$dst/$name" -xf -
done
