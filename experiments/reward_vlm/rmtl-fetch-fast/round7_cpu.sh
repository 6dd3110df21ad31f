#!/usr/bin/env bash
# Round 7 of the prompt-neutral stand-in on the 2-core CPU (results/reward_vlm/rmtl-fetch-fast/ROUND7.md):
# round 6's image tower locked, a text tower from random weights trained on lift-focused compositional
# captions (captions=compositional_lift), on four stores rendered on round 6's renderer and embedded with
# round 6 (the locked tower's embeddings are read from the stores), then qualified.
# Usage: round7_cpu.sh STORES_DIR OUT_DIR   (stages: render, train, qualify; a rendered store is kept)
set -eu
export MUJOCO_GL=egl OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 PYTHONUNBUFFERED=1
stores=$1 out=$2
R="--model rmtl-fetch-fast-r6 --resolution 64 --render.msaa-samples 0 --render.mesh-reduction 0.9 --workers 2 --set cache_kind=flat"
render() { [ -e "$stores/$1.zarr" ] || rmtl render-and-embed --store "$stores/$1.zarr" "${@:2}" $R; }
render train_coverage_0 --policy coverage --episodes 5000 --seed 7000000
render train_expert_0 --episodes 80 --noise-levels 0.15,0.3,0.6,1.0 --seed 0
render train_b_sit_at_cube --policy behaviour:sit_at_cube --episodes 32 --seed 2000
render train_b_grasp_and_drop --policy behaviour:grasp_and_drop --episodes 32 --seed 2000
rmtl train-reward-vlm --model rmtl-fetch-fast --init rmtl-fetch-fast-r6 --tune text --reset-text-tower true \
  --captions compositional_lift --baseline-balance 0 --select-by caption_loss --patience-evals 6 \
  --steps 6000 --time-budget-s 1200 --batch-size 256 --lr 1e-3 --warmup-steps 200 --soft-sigma 0.03 \
  --eval-every 250 --checkpoint-every 250 --seed 0 --device cpu \
  --store "$stores/train_coverage_0.zarr" --store "$stores/train_expert_0.zarr" \
  --store "$stores/train_b_sit_at_cube.zarr" --store "$stores/train_b_grasp_and_drop.zarr" --out "$out/model"
# The qualification set with round 7 marked as trained on what round 6's image tower was.
python - "$out" <<'PY'
import sys, yaml
from pathlib import Path
from pipeline.qualify import FAMILIES_FILE
spec = yaml.safe_load(FAMILIES_FILE.read_text())
model = str(Path(sys.argv[1]) / "model")
for fam in spec["families"].values():
    if str(fam.get("policy", "")).endswith(".zip"):  # the learners ship beside the shipped file
        fam["policy"] = str(FAMILIES_FILE.parent / fam["policy"])
    if "rmtl-fetch-fast-r6" in fam.get("trained_on", []):
        fam["trained_on"] = [*fam["trained_on"], model]
(Path(sys.argv[1]) / "qualification_families.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
PY
rmtl qualify --model "$out/model" --families "$out/qualification_families.yaml" --out "$out/qualify"
