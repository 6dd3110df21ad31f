"""Stage-1 callbacks and wrappers without training: curriculum fed with fake infos, phase
one-hot observation, dense reward, config and variants."""

from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

from rmtl.config import parse_overrides
from rmtl.env import ReverseCurriculum
from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv
from rmtl.errors import ConfigError
from rmtl.tasks.fetch_lift.phases import rule_phase
from rmtl.reward import RewardVecEnv
from rmtl.reward.kinds import get_kind
from rmtl.reward.phase import RulePhaseSelector
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.curriculum_stages import PAPER_STAGES
from rmtl.tasks.fetch_lift.dense_reward import dense_reward
from rmtl.tasks.fetch_lift.state import CUBE_POS, CUBE_REL_POS, CUBE_REST_HEIGHT, STATE_DIM
from rmtl.train.callbacks import CurriculumCallback
from rmtl.train.config import (
    FINAL_STAGE_RANGE,
    VARIANTS,
    DenseRewardConfig,
    Stage1Config,
    stage1_config,
)
from rmtl.train.envs.train_env import make_curriculum
from rmtl.train.envs.phase_observation import PHASE_KEY, PhaseObservation

RULE = RulePhaseSelector(get_task().phases)
"""Pick-and-lift's phase rule (the distance rule), as training builds it from the task."""


class FakeVecEnv:
    """Records env_method calls (what the curriculum callback sends to the sub-envs)."""

    def __init__(self):
        self.calls = []

    def env_method(self, name, *args, **kwargs):
        self.calls.append((name, args))


def _feed(cb, successes, num_envs=2):
    """Feed episodes ``num_envs`` at a time as if they all finished on the same vec step."""
    advanced = []
    for i in range(0, len(successes), num_envs):
        chunk = successes[i:i + num_envs]
        dones = np.ones(len(chunk), bool)
        infos = [{"is_success": s} for s in chunk]
        advanced.append(cb.feed(dones, infos, num_envs=len(chunk)))
    return advanced


def test_table1_defaults_and_variants():
    c = Stage1Config()
    assert (c.n_envs, c.n_steps, c.batch_size, c.n_epochs) == (16, 40, 64, 10)
    assert (c.learning_rate, c.gamma, c.gae_lambda, c.clip_range) == (3e-4, 0.95, 0.95, 0.2)
    assert (c.ent_coef, c.vf_coef, c.max_grad_norm) == (0.01, 0.5, 0.5)
    assert c.net_arch_pi == c.net_arch_vf == (256, 256)
    assert c.reward.alpha == 0.9 and len(get_task().reward_config(c.reward).active_views) == 6 and c.curriculum and c.phase_input
    assert FINAL_STAGE_RANGE == (0.75, 1.0)
    for name in VARIANTS:
        v = stage1_config(name)
        assert v.variant == name
    assert get_task().reward_config(stage1_config("single_prompt_single_view").reward).active_views == ("wide_view",)
    assert stage1_config("single_prompt_multi_view").reward.single_prompt
    assert stage1_config("dense_reference").reward.kind == "dense"
    assert not stage1_config("no_phase_input").phase_input
    assert not stage1_config("rmtl_level_only").reward.shaping.trend
    assert stage1_config("rule_only").reward.kind == "rule_only"
    assert stage1_config("single_prompt_banded").reward.single_prompt_band
    # RMTL's shaping is the band; the per-phase reconstruction (v1) is a labelled variant only.
    assert c.reward.shaping.band and not stage1_config("rmtl_per_phase").reward.shaping.band
    # later overrides win over the variant's, nested dicts merge
    v = stage1_config("single_prompt_multi_view", reward={"alpha": 0.5}, n_envs=4)
    assert v.reward.single_prompt and v.reward.alpha == 0.5 and v.n_envs == 4
    with pytest.raises(ConfigError, match="unknown Stage-1 variant"):
        stage1_config("nope")
    with pytest.raises(ConfigError, match="batch_size"):
        Stage1Config.make(n_envs=1, n_steps=8, batch_size=16)
    assert parse_overrides(["reward.resolution=64", "n_envs=4", "reward.views=[wide_view, side]"]) == {
        "reward": {"resolution": 64, "views": ["wide_view", "side"]}, "n_envs": 4}


def test_each_reward_kind_has_its_own_config_and_switching_kind_replaces_the_section():
    from rmtl.reward.kinds.vlm import RewardConfig
    from rmtl.reward.kinds.oracle import OracleRewardConfig
    from rmtl.reward.kinds.rule_only import RuleOnlyRewardConfig

    for name in VARIANTS:  # a saved config reloads to the same object, its reward of the same class
        v = stage1_config(name)
        assert Stage1Config.make(**v.model_dump(mode="json")) == v
    assert isinstance(stage1_config("rmtl").reward, RewardConfig)
    assert isinstance(stage1_config("rule_only").reward, RuleOnlyRewardConfig)
    assert stage1_config("rule_only").reward.u == 0.5
    assert isinstance(stage1_config("dense_reference").reward, DenseRewardConfig)
    # --set reward.kind=oracle: the oracle's config, no VLM field merged into it
    oracle = stage1_config("rmtl", **parse_overrides(["reward.kind=oracle"]))
    assert isinstance(oracle.reward, OracleRewardConfig) and oracle.reward == stage1_config("oracle_rmtl").reward
    # a VLM field on another kind is refused in one line, never ignored
    with pytest.raises(ConfigError, match=r"reward\.model='x': Extra inputs are not permitted"):
        stage1_config("oracle_rmtl", **parse_overrides(["reward.model=x"]))
    with pytest.raises(ConfigError, match="unknown reward kind 'nope'; known kinds: degraded_oracle, dense, hybrid, oracle, rule_only, vlm"):
        stage1_config("rmtl", reward={"kind": "nope"})
    # back to the default kind: the VLM defaults, not the oracle's shaping
    back = stage1_config("oracle_sweep_level_only", reward={"kind": "vlm"})
    assert back.reward == stage1_config("rmtl").reward


def test_curriculum_callback_advances_on_successes():
    env = FakeVecEnv()
    cb = CurriculumCallback(ReverseCurriculum(PAPER_STAGES, window=10), env=env)
    cb._on_training_start()
    assert env.calls == [("set_difficulty_range", (0.0, 0.08))]
    # Stage 0 needs 50 episodes and >= 50% over the window of 10: failures never advance.
    assert not any(_feed(cb, [False] * 60))
    assert cb.curriculum.stage_index == 0
    adv = _feed(cb, [True] * 10)
    assert any(adv) and cb.curriculum.stage_index == 1
    assert env.calls[-1] == ("set_difficulty_range", (0.08, 0.25))
    # 60 failures + 5 successes fill the window of 10 at 50%: advance on episode 65.
    assert cb.episodes_per_stage[:2] == [65, 5] and cb.successes_per_stage[:2] == [5, 5]
    assert cb.steps_per_stage[0] == 66  # env steps counted per vec step (2 envs) while in stage 0
    assert cb.advances[0]["stage"] == 1
    # state round trip (checkpointed with the model)
    state = cb.state_dict()
    cb2 = CurriculumCallback(ReverseCurriculum(PAPER_STAGES, window=10))
    cb2.load_state_dict(state)
    assert cb2.curriculum.stage_index == 1 and cb2.episodes_per_stage == cb.episodes_per_stage
    # Through all gates to the final stage, which never advances.
    for k in range(1, 4):
        _feed(cb, [True] * PAPER_STAGES[k].min_episodes)
    assert cb.curriculum.stage_index == 4 and env.calls[-1] == ("set_difficulty_range", FINAL_STAGE_RANGE)
    assert not any(_feed(cb, [True] * 50))


def test_no_curriculum_starts_at_final_stage():
    off, on = stage1_config("no_curriculum"), stage1_config("rmtl")
    cur = make_curriculum(PAPER_STAGES, curriculum=off.curriculum, window=off.curriculum_window)
    assert cur.is_final and (cur.stage.d_min, cur.stage.d_max) == FINAL_STAGE_RANGE
    assert make_curriculum(PAPER_STAGES, curriculum=on.curriculum, window=on.curriculum_window).stage_index == 0


def _states(distance, lift):
    s = np.zeros((len(distance), STATE_DIM), np.float32)
    s[:, CUBE_REL_POS] = np.stack([np.asarray(distance), np.zeros(len(distance)), np.zeros(len(distance))], -1)
    s[:, CUBE_POS.start + 2] = CUBE_REST_HEIGHT + np.asarray(lift)
    return s


def test_dense_reward_values():
    cfg = DenseRewardConfig()
    r = dense_reward(_states([0.5, 0.1, 0.02, 0.02, 0.02], [0.0, 0.05, 0.0, 0.01, 0.05]), cfg)
    np.testing.assert_allclose(r, [-0.5, -0.1, -0.02, -0.02 + 0.25, -0.02 + 0.5], atol=1e-5)
    assert np.all(np.diff(dense_reward(_states([0.6, 0.3, 0.1, 0.03], [0, 0, 0, 0]), cfg)) > 0)


def test_phase_observation_and_dense_wrapper():
    venv = DummyVecEnv([lambda: FetchPickAndLiftEnv(max_episode_steps=3) for _ in range(2)])
    dense = get_kind("dense")(lambda st: dense_reward(st, DenseRewardConfig()), 3)
    venv = PhaseObservation(RewardVecEnv(venv, dense, RULE), RULE, 3)
    assert venv.observation_space[PHASE_KEY].shape == (3,)
    venv.seed(0)
    obs = venv.reset()
    rng = np.random.default_rng(0)
    for _ in range(3):
        d = np.linalg.norm(obs["observation"][:, CUBE_REL_POS], axis=-1)
        np.testing.assert_array_equal(obs[PHASE_KEY].argmax(-1), rule_phase(d))
        assert np.all(obs[PHASE_KEY].sum(-1) == 1)
        obs, reward, dones, infos = venv.step(rng.uniform(-1, 1, (2, 4)).astype(np.float32))
        for i, info in enumerate(infos):
            assert reward[i] == pytest.approx(info["reward"]["reward"] + info["reward"]["env"], abs=1e-6)
            if dones[i]:
                term = info["terminal_observation"]
                assert PHASE_KEY in term
                dt = np.linalg.norm(term["observation"][CUBE_REL_POS])
                assert term[PHASE_KEY].argmax() == rule_phase(dt)
                assert info["reward"]["reward"] == pytest.approx(float(dense_reward(term["observation"][None], DenseRewardConfig())[0]), abs=1e-5)
    assert dones.all()
    venv.close()


def test_final_evaluation_of_a_run_that_never_trained_this_start(tmp_path):
    """A run resumed at its total trains no step (SB3 never sets the callback's model): the final
    evaluation still runs, once, on the model it is given, and appends its row."""
    from types import SimpleNamespace

    from rmtl.train.callbacks import PeriodicEvalCallback

    seen = []

    def evaluate(model):
        seen.append(model.num_timesteps)
        return SimpleNamespace(episodes=4, successes=3, success_rate=0.75, ci_low=0.3, ci_high=0.95, mean_length=20.0)

    cb = PeriodicEvalCallback(evaluate, every=20_000, csv_path=tmp_path / "eval.csv")
    model = SimpleNamespace(num_timesteps=600_320)
    assert cb.evaluate_final(model).success_rate == 0.75
    assert seen == [600_320] and cb.evaluate_final(model) is None  # not twice at one step
    assert (tmp_path / "eval.csv").read_text().splitlines()[-1].startswith("600320,4,3,0.75,")


def test_final_evaluation_done_by_an_earlier_start_is_not_repeated(tmp_path):
    """A start stopped after its final evaluation and resumed at its total does not evaluate again
    (one row per step in eval.csv); a run whose last row is at another step does."""
    from types import SimpleNamespace

    from rmtl.train.callbacks import PeriodicEvalCallback

    header = "timesteps,episodes,successes,success_rate,ci_low,ci_high,mean_length,eval_seconds,time\n"
    (tmp_path / "eval.csv").write_text(header + "600320,50,31,0.62,0.48,0.74,24.5,8.7,2026-12-07T18:56:30\n")
    calls = []
    cb = PeriodicEvalCallback(lambda m: calls.append(m), every=20_000, csv_path=tmp_path / "eval.csv")
    assert cb.evaluate_final(SimpleNamespace(num_timesteps=600_320)) is None and calls == []
    assert len((tmp_path / "eval.csv").read_text().splitlines()) == 2
    cb2 = PeriodicEvalCallback(lambda m: calls.append(m) or SimpleNamespace(
        episodes=1, successes=0, success_rate=0.0, ci_low=0.0, ci_high=0.9, mean_length=40.0),
        every=20_000, csv_path=tmp_path / "eval.csv")
    cb2.evaluate_final(SimpleNamespace(num_timesteps=640_000))
    assert len(calls) == 1 and (tmp_path / "eval.csv").read_text().splitlines()[-1].startswith("640000,1,0,")

