"""Reward kinds through the one RewardVecEnv: the registry, the oracle and rule-only kinds against
the shaper by hand on real env steps, rule-only's independence of any scorer, one info['reward']."""

from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv
from rmtl.errors import ConfigError
from rmtl.tasks.fetch_lift.phases import rule_phase
from rmtl.reward import RewardShaper, RewardVecEnv, ShapingConfig
from rmtl.reward.kinds import get_kind, kind_names, register_kind
from rmtl.reward.kinds.base import KindStep, RewardKind
from rmtl.reward.phase import RulePhaseSelector
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.oracle_progress import oracle_progress
from rmtl.tasks.fetch_lift.state import gripper_cube_distance

RULE = RulePhaseSelector(get_task().phases)
"""Pick-and-lift's phase rule (the distance rule), as training builds it from the task."""


def _venv(n=2, seed=3):
    venv = DummyVecEnv([lambda: FetchPickAndLiftEnv(max_episode_steps=6) for _ in range(n)])
    venv.seed(seed)
    return venv


def _end_states(obs, dones, infos):
    return np.array([i["terminal_observation"]["observation"] if d else o
                     for o, d, i in zip(obs["observation"], dones, infos)])


def test_registry_names_every_kind_and_refuses_unknown_ones():
    assert set(kind_names()) >= {"vlm", "oracle", "rule_only", "dense"}
    assert not get_kind("rule_only").needs_frames and get_kind("vlm").needs_frames
    assert get_kind("oracle").privileged and not get_kind("rule_only").privileged
    with pytest.raises(ConfigError, match="unknown reward kind 'nope'"):
        get_kind("nope")


@pytest.mark.parametrize("shaping", [ShapingConfig(), ShapingConfig(trend=True, momentum=True, drop_penalty=True),
                                     ShapingConfig(band=False, bounds="widen_only", trend=True, momentum=True,
                                                   drop_penalty=True)])
def test_oracle_reward_is_the_shaping_of_the_progress(shaping):
    env = RewardVecEnv(_venv(), get_kind("oracle")(oracle_progress, 3), RULE,
                       shaper=RewardShaper(2, shaping, num_phases=3))
    ref = RewardShaper(2, shaping, num_phases=3)
    env.reset()
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(14):
        obs, reward, dones, infos = env.step(rng.uniform(-1, 1, (2, 4)).astype(np.float32))
        states = _end_states(obs, dones, infos)
        prog = oracle_progress(states)
        phases = np.asarray(rule_phase(gripper_cube_distance(states)))
        out = ref(0.45 + 0.25 * prog[np.arange(2), phases], phases)
        ref.reset(dones)
        bonus = np.array([i["reward"]["env"] for i in infos])
        np.testing.assert_allclose(reward, out.reward + bonus, atol=1e-6)
        np.testing.assert_allclose([i["reward"]["u"] for i in infos], out.u, atol=1e-6)
        assert [i["reward"]["phase"] for i in infos] == phases.tolist()
        assert all(i["reward"]["kind"] == "oracle" for i in infos)
        ends += int(dones.sum())
    assert ends >= 2  # episode ends were scored on their terminal state
    env.close()


def test_rule_only_is_the_band_at_half_and_reads_no_scorer():
    shaping = ShapingConfig()
    kind = get_kind("rule_only")(3)
    env = RewardVecEnv(_venv(), kind, RULE, shaper=RewardShaper(2, shaping, num_phases=3))
    ref = RewardShaper(2, shaping, num_phases=3)
    env.reset()
    rng = np.random.default_rng(1)
    for _ in range(14):
        obs, reward, dones, infos = env.step(rng.uniform(-1, 1, (2, 4)).astype(np.float32))
        phases = np.asarray(rule_phase(gripper_cube_distance(_end_states(obs, dones, infos))))
        out = ref.shape_u(np.full(2, 0.5), phases)
        ref.reset(dones)
        np.testing.assert_allclose(reward, out.reward + np.array([i["reward"]["env"] for i in infos]), atol=1e-6)
        assert all("score" not in i["reward"] and "scores" not in i["reward"] for i in infos)
    env.close()
    # No scorer can reach it: its step never looks at frames, scores or the shaper's bounds.
    sh = RewardShaper(2, shaping, num_phases=3)

    def no_render(idx):
        raise AssertionError("rule_only rendered")

    step = kind.step(np.zeros((2, 25), np.float32), np.array([0, 2]), sh, no_render)
    assert np.all(sh.low == shaping.initial_low) and np.all(sh.high == shaping.initial_high)
    np.testing.assert_allclose(step.reward, [0.5 / 3 - 1, 2.5 / 3 - 1], atol=1e-6)


def test_a_new_kind_is_one_class_and_its_registration():
    @register_kind("test_constant")
    class Constant(RewardKind):
        progress_source = "rule_band"
        num_phases = 3

        def step(self, states, phases, shaper, render):
            return KindStep(np.full(len(states), -0.25, np.float32), {"u": np.zeros(len(states))})

    try:
        env = RewardVecEnv(_venv(1), Constant(), RULE)
        env.reset()
        _, reward, _, infos = env.step(np.zeros((1, 4), np.float32))
        assert reward[0] == pytest.approx(-0.25 + infos[0]["reward"]["env"])
        assert infos[0]["reward"]["kind"] == "test_constant" and infos[0]["reward"]["u"] == 0.0
        env.close()
    finally:
        from rmtl.reward import kinds

        kinds._KINDS.pop("test_constant")


def test_shaper_must_match_the_kind():
    with pytest.raises(ConfigError, match="micro-tasks"):
        RewardVecEnv(_venv(1), get_kind("rule_only")(3), RULE, shaper=RewardShaper(1, num_phases=1))


def test_the_one_wrapper_reproduces_the_v1_wrappers_rewards():
    """Recorded with the v1 wrappers (one for the VLM reward, one for the oracle; Table-1 shaping, then
    the default), on seeded env steps: the same kinds with the same shaping pay the same rewards."""
    import json
    from pathlib import Path

    from rmtl.tasks.fetch_lift.env import EnvConfig
    from conftest import reward_stack
    from rmtl.reward import PhasedScorer, RewardConfig
    from rmtl.reward.kinds.vlm import VLMKind

    views = ("wide_view", "close_up")
    before = json.loads((Path(__file__).parent / "data" / "rewards_v1_wrappers.json").read_text())
    per_phase_v1 = ShapingConfig(band=False, bounds="widen_only", trend=True, momentum=True, drop_penalty=True)

    class SequenceSource:
        def __init__(self):
            self.calls = 0

        def __call__(self, states, render):
            self.calls += 1
            v = np.random.default_rng(self.calls).normal(size=(len(states), len(views), 8)).astype(np.float32)
            return v / np.linalg.norm(v, axis=-1, keepdims=True)

    def encoder(texts):
        v = np.stack([np.random.default_rng(sum(map(ord, t))).normal(size=8) for t in texts]).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def steps(env, n=14):
        env.reset()
        rng = np.random.default_rng(0)
        out = [env.step(rng.uniform(-1, 1, (2, 4)).astype(np.float32))[1].tolist() for _ in range(n)]
        env.close()
        return out

    cfg = get_task().reward_config(RewardConfig.make(model="PE-Core-bigG-14-448:meta", views=views, resolution=64,
                                                     shaping=per_phase_v1))
    kind = VLMKind.from_config(cfg, source=SequenceSource(), scorer=PhasedScorer.from_config(cfg, encoder))
    vlm = reward_stack(2, cfg, EnvConfig.make(max_episode_steps=6, views=views, resolution=64), seed=3, kind=kind,
                       phase_selector=RULE).venv
    oracle = RewardVecEnv(_venv(), get_kind("oracle")(oracle_progress, 3), RULE,
                          shaper=RewardShaper(2, per_phase_v1, num_phases=3))
    np.testing.assert_allclose(steps(vlm), before["vlm"], atol=1e-5)
    np.testing.assert_allclose(steps(oracle), before["oracle"], atol=1e-5)
