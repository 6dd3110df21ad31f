#!/usr/bin/env bash
# Round 4 (ROUND4.md) on the GPU machine, from the repo root, in one call of the device tool:
# unpack the GL loaders (.gl/*.deb) and the carried wheels (.dev/whl), run round4_gpu.py end to
# end at smoke size (a fault shows in seconds), then at full size; pack what it wrote into $OUT.
#   .dev/whl:   the wheels the image lacks (mujoco, gymnasium-robotics, open_clip_torch, zarr, ...)
#   .dev/pixel: policy-only copies of the pixel-reward learner's checkpoints
# round4_gpu_payload.sh builds both and lists the files to leave out of the call (64 MiB limit).
# Usage: round4_gpu.sh OUT_DIR [TRAIN_BUDGET_S]
set -u
out=$1; budget=${2:-170}
tmp=${TMPDIR:-/tmp}  # scratch outside the checkout
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $tmp/site .dev/whl/*.whl || exit 3
export PYTHONPATH=$tmp/site:$PWD PYTHONUNBUFFERED=1 MUJOCO_GL=egl OMP_NUM_THREADS=1
nvidia-smi -L; nproc
py=experiments/reward_vlm/rmtl-fetch-fast/round4_gpu.py
timeout 150 python3 $py --out $tmp/smoke --stores $tmp/smoke_stores --pixel .dev/pixel --smoke --device cuda --round 98 \
  --train-steps 20 --train-budget-s 20 --eval-every 10 --stages render train gate > "$out/smoke.log" 2>&1
rc=$?; tail -5 "$out/smoke.log"
if [ $rc -ne 0 ]; then cp $tmp/smoke/status.json "$out/smoke_status.json" 2>/dev/null; exit 4; fi
rm -f results/reward_vlm/rmtl-fetch-fast/*round98*
timeout 480 python3 $py --out $tmp/r4 --stores $tmp/r4_stores --pixel .dev/pixel --device cuda --round 4 \
  --train-budget-s "$budget" --bench-timeout-s 100 > "$out/round4.log" 2>&1  # leaves time to pack within one call
rc=$?
tar -C $tmp/r4 -czf "$out/model.tar.gz" --exclude checkpoint.pt model
tar -C $tmp/r4 -czf "$out/results.tar.gz" --exclude model .
du -sh $tmp/r4_stores; tail -30 "$out/round4.log"
exit $rc
