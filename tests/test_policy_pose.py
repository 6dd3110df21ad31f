"""experiments/pixel/policy_pose.py: where a Stage-1 policy holds the gripper, from state-only rollouts."""

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEARNED = ROOT / "pipeline" / "qualify" / "qualification_learners" / "learner_oracle_learned"


def test_a_learned_policy_lifts_and_a_folder_without_a_policy_is_refused(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "pixel"))
    import policy_pose

    ck = tmp_path / "results" / "x" / "runs" / "oracle_s1" / "checkpoints" / "step_000600320"
    ck.mkdir(parents=True)
    shutil.copy(LEARNED / "model.zip", ck / "model.zip")
    out = tmp_path / "pose" / "pose.md"
    assert policy_pose.main(["--out", str(out), str(ck)]) == 0
    (row,) = json.loads(out.with_suffix(".json").read_text())
    assert row["checkpoint"] == "results/x/runs/oracle_s1/checkpoints/step_000600320"  # no machine path
    assert row["success"] >= 0.5, row  # the oracle's learned policy lifts on most full starts
    assert all(len(row[k]) == 3 and row[k][1] <= row[k][0] <= row[k][2] for k in ("distance_m", "lift_m"))
    assert "| `results/x/runs/oracle_s1/checkpoints/step_000600320` |" in out.read_text()
    with pytest.raises(SystemExit, match="holds no model.zip; give checkpoint folders"):
        policy_pose.main(["--out", str(out), str(tmp_path)])
