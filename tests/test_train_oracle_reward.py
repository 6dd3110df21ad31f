"""The oracle-scored diagnostic: its progress geometry, and that its variants are RMTL's but for the scorer."""

from __future__ import annotations

import numpy as np
import pytest

from rmtl.tasks.fetch_lift.phases import ALIGN, APPROACH, GRASP
from rmtl.reward.shaping import ShapingConfig
from rmtl.tasks.fetch_lift.oracle_progress import OracleProgressConfig, oracle_progress
from rmtl.tasks.fetch_lift.state import CUBE_POS, CUBE_REL_POS, CUBE_REST_HEIGHT, GRIPPER_POS, STATE_DIM

CUBE = np.array([1.3, 0.75, CUBE_REST_HEIGHT])


def state(gripper, cube=CUBE) -> np.ndarray:
    s = np.zeros(STATE_DIM, dtype=np.float32)
    s[GRIPPER_POS], s[CUBE_POS] = gripper, cube
    s[CUBE_REL_POS] = np.asarray(cube) - np.asarray(gripper)
    return s


def test_progress_is_one_at_each_goal_and_falls_with_distance_to_it():
    cfg = OracleProgressConfig()
    above = CUBE + [0, 0, cfg.approach_height]
    lifted = CUBE + [0, 0, cfg.lift_target]
    p = oracle_progress(np.stack([state(above), state(CUBE), state(lifted, lifted)]))
    assert p[0, APPROACH] == pytest.approx(1.0, abs=1e-5) and p[1, ALIGN] == pytest.approx(1.0, abs=1e-5)
    assert p[2, GRASP] == pytest.approx(1.0, abs=1e-5) and p[1, GRASP] == pytest.approx(0.0, abs=1e-5)  # at the cube, not lifted
    far = oracle_progress(np.stack([state(above + [0.1 * k, 0, 0]) for k in range(6)]))
    assert np.all(np.diff(far[:, APPROACH]) < 0) and np.all(far[2:, ALIGN] == 0.0)  # align is 0 beyond 0.15 m
    # a lifted cube far from the gripper (knocked up, not held) is no grasp progress
    assert oracle_progress(state(CUBE + [0.2, 0, 0], lifted))[0, GRASP] == 0.0
    assert np.all((p >= 0) & (p <= 1))


def test_oracle_variants_differ_from_rmtl_only_in_the_scorer():
    from rmtl.train.config import ORACLE_VARIANTS, stage1_config

    rmtl = stage1_config("rmtl").model_dump()
    level_only = {"trend": False, "momentum": False, "drop_penalty": False}
    table1 = {"trend": True, "momentum": True, "drop_penalty": True}
    per_phase_v1 = {"band": False, "bounds": "widen_only", **table1}
    twins = {"oracle_rmtl": stage1_config("rmtl"), "oracle_no_curriculum": stage1_config("no_curriculum"),
             "oracle_no_phase_input": stage1_config("no_phase_input"),
             "oracle_sweep_level_only": stage1_config("rmtl_level_only"),
             "oracle_sweep_trend_momentum": stage1_config("rmtl", reward={"shaping": {**table1, "drop_penalty": False}}),
             "oracle_sweep_trend_momentum_drop": stage1_config("rmtl_trend_momentum"),
             "oracle_per_phase": stage1_config("rmtl_per_phase"),
             "oracle_per_phase_level_only": stage1_config("rmtl", reward={"shaping": {**per_phase_v1, **level_only}})}
    assert set(twins) == set(ORACLE_VARIANTS)
    for name, twin in twins.items():
        a, b = stage1_config(name).model_dump(), twin.model_dump()
        assert a["reward"]["kind"] == "oracle" and b["reward"]["kind"] == "vlm"
        diff = {k for k in a if a[k] != b[k]}
        assert diff == {"variant", "reward"}, (name, diff)
        # within the reward, only the kind: every field the oracle's config shares with the VLM's is the twin's
        shared = (set(a["reward"]) & set(b["reward"])) - {"kind"}
        assert shared == {"shaping", "add_env_reward"}, (name, shared)
        assert {k: a["reward"][k] for k in shared} == {k: b["reward"][k] for k in shared}, name
    assert stage1_config("oracle_rmtl").reward.shaping == stage1_config("rmtl").reward.shaping == ShapingConfig()
    assert stage1_config("oracle_rmtl").reward.progress == OracleProgressConfig()
    assert "progress" not in rmtl["reward"]  # the VLM run's config holds no oracle fields


def test_a_task_without_oracle_progress_is_refused_in_one_line():
    import dataclasses

    from rmtl.errors import ConfigError
    from rmtl.tasks import get_task
    from rmtl.train.config import stage1_config
    from rmtl.train.envs.train_env import build_train_env

    task = dataclasses.replace(get_task(), name="no_oracle", oracle_progress=None)
    cfg = stage1_config("oracle_rmtl", n_envs=1, n_steps=64, vec_env="dummy")
    with pytest.raises(ConfigError, match="task 'no_oracle' defines no oracle progress"):
        build_train_env(cfg.env_stack(), task)
