#!/usr/bin/env bash
# Builds what round4_gpu.sh carries to the GPU machine, from the repo root, on a machine where
# pip and apt can download: .gl/ (the GL loaders) and .dev/ (the wheels the machine's image
# lacks, for its Python 3.12, and policy-only copies of the pixel learner's checkpoints).
# Both folders are ignored (.gitignore). What travels is limited to 64 MiB, so the
# call also needs a tree without the shipped weights and the results it does not read: the
# files listed by `round4_gpu_payload.sh --prune-list` (remove them for the call, then
# `git checkout -- .`). Measured: 17.8 MB of tree + 42.1 MB of .dev + 0.4 MB of .gl.
# Usage: round4_gpu_payload.sh CHECKPOINTS_DIR | --prune-list
set -eu
here=results/reward_vlm/rmtl-fetch-fast
if [ "${1:-}" = "--prune-list" ]; then
  runs="oracle_sweep_level_only_s0 oracle_sweep_level_only_s1 oracle_sweep_level_only_s2 oracle_sweep_trend_momentum_s0
        oracle_sweep_trend_momentum_s1 oracle_sweep_trend_momentum_s2 oracle_sweep_trend_momentum_drop_s0
        oracle_sweep_trend_momentum_drop_s1 oracle_sweep_trend_momentum_drop_s2 oracle_rmtl_s0 oracle_rmtl_s1
        oracle_rmtl_s2 rule_only_s0 rule_only_s1 rule_only_s2 oracle_no_curriculum_s0 oracle_no_curriculum_s1
        oracle_no_curriculum_s2 oracle_no_phase_input_s0 oracle_no_phase_input_s1 oracle_no_phase_input_s2
        oracle_rmtl_s0_rule_continued"
  keep=$(for r in $runs; do echo "results/oracle_structure/runs/$r/best/"; done; echo results/oracle_structure/stage2_worker/)
  git ls-files | grep -v -E '^(rmtl|pipeline|storage|flows|bench)/|^experiments/reward_vlm/rmtl-fetch-fast/|^pyproject.toml$|^\.gitignore$|^'"$here"'/' \
    | grep -v -F "$keep" ; git ls-files rmtl/vlm/weights
  exit 0
fi
ckpts=$1
tmp=${TMPDIR:-/tmp}  # scratch outside the checkout
mkdir -p .gl .dev/whl .dev/pixel $tmp/amd64/partial
o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=$tmp/amd64"
apt-get $o update -qq
(cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
plat=""
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1 manylinux_2_31 manylinux_2_34; do
  plat="$plat --platform ${p}_x86_64"; done
# What the image lacks of the round's import closure (found with PYTHONPROFILEIMPORTTIME=1 on a smoke run).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat -d .dev/whl \
  mujoco==3.11.0 gymnasium==1.4.0 gymnasium-robotics==1.4.2 pettingzoo==1.27.0 Farama-Notifications==0.0.6 \
  glfw==2.11.0 cffi==2.1.1 pycparser==3.12 PyOpenGL==3.1.10 open_clip_torch==3.3.0 ftfy==6.3.1 wcwidth==0.9.4 \
  stable-baselines3==2.9.2 zarr==3.1.6 numcodecs==0.16.6 donfig==0.8.1.post1 google-crc32c==1.9.0 \
  fast-simplification==0.2.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 typing-extensions
# gymnasium-robotics without the assets of robots the round never loads (26 MB -> 1.6 MB).
t=$(mktemp -d); whl=$(ls .dev/whl/gymnasium_robotics-*.whl)
(cd "$t" && unzip -q "$OLDPWD/$whl" && rm -rf gymnasium_robotics/envs/assets/adroit_hand gymnasium_robotics/envs/assets/kitchen_franka \
  && rec=$(ls -d *.dist-info)/RECORD && python3 -c "
import os, sys
p = sys.argv[1]
open(p + '.new', 'w').writelines(l for l in open(p) if os.path.exists(l.split(',')[0]))
os.replace(p + '.new', p)" "$rec" && rm "$OLDPWD/$whl" && zip -qr "$OLDPWD/$whl" .)
rm -rf "$t"
# The round's own learner: its checkpoints without optimiser state.
python3 -c "
import sys
from pathlib import Path
from rmtl.train.eval.committed import write_policy
for ck in sorted(Path(sys.argv[1]).glob('step_*')):
    write_policy(ck, Path('.dev/pixel') / ck.name, 'cpu')" "$ckpts"
du -sh .gl .dev
