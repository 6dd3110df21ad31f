"""bench/run_account.py: a real (tiny) run's wall time accounted by part, from the run's own logs."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_tiny_run_is_accounted_by_part_and_bad_input_is_one_line(tmp_path):
    from rmtl.train import stage1_config
    from rmtl.train.stage1 import train_stage1

    cfg = stage1_config("rule_only", n_envs=2, n_steps=32, total_timesteps=128, checkpoint_every=64, eval_every=64,
                        eval_episodes=2, vec_env="dummy", progress_bar=False, output_dir=str(tmp_path / "run"))
    run = train_stage1(cfg, resume=False)
    out = tmp_path / "acc"
    proc = subprocess.run([sys.executable, "bench/run_account.py", str(run), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = json.loads((out / "run_account.json").read_text())
    secs = row["seconds"]
    assert secs["evaluation"] > 0 and secs["checkpoints"] > 0 and secs["simulation"] > 0
    assert secs["rendering"] == 0  # rule-only renders nothing
    # the parts and the rest add up to the run's own wall time
    assert abs(sum(secs.values()) - row["wall_seconds"]) < 0.5
    assert (out / "run_account.png").stat().st_size > 1000
    bad = subprocess.run([sys.executable, "bench/run_account.py", str(tmp_path), "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [bad.stderr.strip()]
    assert "not a finished run" in bad.stderr
