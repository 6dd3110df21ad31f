"""bench/train_fast_path.py at tiny size: the state-reading reference paths run and are reported."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_oracle_and_rule_only_paths_are_timed_and_reported(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "bench/train_fast_path.py", "--paths", "oracle", "rule_only",
                           "--rollouts", "1", "--repeats", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    d = json.loads(out.read_text())
    assert set(d["env_steps_per_s_median"]) == {"oracle", "rule_only"}
    assert all(v > 0 for v in d["env_steps_per_s_median"].values())
    kinds = {r["path"]: (r["variant"], r["reward_kind"], r["rollouts_timed"]) for r in d["runs"]}
    assert kinds == {"oracle": ("oracle_rmtl", "oracle", 1), "rule_only": ("rule_only", "rule_only", 1)}
    # Nothing to compare the pixel path with when it was not run; never a made-up ratio.
    assert d["new_over_oracle"] is None and d["speedup_uncached"] is None
    assert d["ms_per_env_step_median"]["oracle"]["embedding"] == 0
    # a whole run's wall time is predicted by part from the measured step rate and overheads
    pred = d["predicted_run_seconds"]["rule_only"]
    assert d["overheads"]["rule_only"]["eval_episode_seconds"] > 0
    assert pred["parts"]["evaluations"] > 0 and pred["parts"]["validations"] > 0
    assert pred["seconds"] > pred["parts"]["training_steps"] > 600_000 / d["env_steps_per_s_median"]["rule_only"] * 0.99
