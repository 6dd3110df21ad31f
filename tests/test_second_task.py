"""A second task defined only here proves the task seam: a 2-D reach task (a point moved
towards a target in a tiny MuJoCo scene) with two micro-tasks, its own state layout and
versioned key spec, goes through rollout + render into a store, embedding (with its own
prompts' text), the state cache keyed by its spec, the goal-baseline scores of its own
prompts, a tiny Stage-1 run on its dense reference reward with its phase one-hot,
curriculum and evaluation, a tiny Stage-1 run on the VLM reward (its two prompts, its phase
rule, K = 2) and ``rmtl query`` over its store, without package code knowing it."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rmtl.env.curriculum import CurriculumStage
from rmtl.errors import ConfigError
from rmtl.micro_tasks import MicroTaskSpec
from rmtl.tasks import Task, get_task, register_task
from storage.key_spec import KeySpec

SCENE = """
<mujoco>
  <worldbody>
    <light pos="0 0 3"/>
    <camera name="top" pos="0 0 1.6" xyaxes="1 0 0 0 1 0"/>
    <geom type="plane" size="1 1 0.1" rgba=".8 .8 .8 1"/>
    <body name="tip" pos="0 0 0.05">
      <joint name="x" type="slide" axis="1 0 0"/><joint name="y" type="slide" axis="0 1 0"/>
      <geom type="sphere" size="0.06" rgba="0.1 0.2 0.9 1"/>
    </body>
    <body name="target" mocap="true" pos="0.3 0.3 0.05">
      <geom type="sphere" size="0.05" rgba="0.9 0.1 0.1 1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
</mujoco>
"""
SPEC = """
micro_tasks:
  - {name: approach, goal: a blue ball far from a red ball}
  - {name: touch, goal: a blue ball touching a red ball}
baseline: a blue ball and a red ball on a grey floor
phase_rule:
  measure: tip-target distance (m)
  bins: [{micro_task: touch, max: 0.12}]
  otherwise: approach
"""
STEPS = 8
VIEWS = ("wide_view", "close_up")


def distance(states: np.ndarray) -> np.ndarray:
    s = np.asarray(states, dtype=np.float64)
    return np.linalg.norm(s[..., 0:2] - s[..., 2:4], axis=-1)


class ReachEnv(gym.Env):
    """Kinematic reach: the action moves the tip by up to 0.1 m per step; 8-step episodes."""

    def __init__(self, micro_tasks: MicroTaskSpec, views=("wide_view",), resolution=64, render=None):
        import mujoco

        self.model = mujoco.MjModel.from_xml_string(SCENE)
        self.data = mujoco.MjData(self.model)
        self.micro_tasks = micro_tasks
        self.observation_space = gym.spaces.Dict({"observation": gym.spaces.Box(-2, 2, (4,), np.float32)})
        self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self._renderer = None
        self._steps = 0
        self._range = (1.0, 1.0)

    def set_difficulty_range(self, lo: float, hi: float) -> None:
        self._range = (float(lo), float(hi))

    @property
    def state(self) -> np.ndarray:
        return np.concatenate([self.data.qpos[:2], self.data.mocap_pos[0, :2]]).astype(np.float32)

    def _info(self) -> dict:
        d = float(distance(self.state))
        return {"step": self._steps, "phase_rule": int(self.micro_tasks.phase(d)), "is_success": d < 0.08}

    def reset(self, *, seed=None, options=None):
        import mujoco

        super().reset(seed=seed)
        u = float((options or {}).get("difficulty", self.np_random.uniform(*self._range)))
        target = self.np_random.uniform(-0.4, 0.4, 2)
        self.data.mocap_pos[0, :2] = target
        self.data.qpos[:2] = target + u * self.np_random.uniform(-0.5, 0.5, 2) + 0.1
        mujoco.mj_forward(self.model, self.data)
        self._steps = 0
        return {"observation": self.state}, self._info()

    def step(self, action):
        import mujoco

        self.data.qpos[:2] += 0.1 * np.clip(np.asarray(action, dtype=np.float64), -1, 1)
        mujoco.mj_forward(self.model, self.data)
        self._steps += 1
        info = self._info()
        return {"observation": self.state}, float(info["is_success"]), bool(info["is_success"]), self._steps >= STEPS, info

    def render_views(self, views, resolution):
        import mujoco

        if self._renderer is None or self._renderer.height != resolution:
            self._renderer = mujoco.Renderer(self.model, resolution, resolution)
        self._renderer.update_scene(self.data, camera="top")
        return np.stack([self._renderer.render() for _ in views])


def reach_task(spec_path: Path) -> Task:
    micro = MicroTaskSpec.from_yaml(spec_path)

    def expert(noise_std: float, seed: int):
        rng = np.random.default_rng(seed)
        def act(obs):
            s = obs["observation"]
            return np.clip((s[2:4] - s[0:2]) * 10 + rng.normal(0, noise_std, 2), -1, 1).astype(np.float32)

        return act

    return Task(
        name="reach2d", make_env=lambda config=None, **kw: ReachEnv(micro, **kw),
        key_spec=KeySpec("reach2d", 1, 4, ("tip_x", "tip_y"), lambda s: s[..., 0:2]),
        layout=lambda: {"state_fields": ["tip_x", "tip_y", "target_x", "target_y"], "action_fields": ["dx", "dy"]},
        action_dim=2, micro_tasks=micro, phase_measure=distance, expert=expert,
        dense_reward=lambda states, config=None: -distance(states).astype(np.float32),
        curriculum_stages=(CurriculumStage(0.0, 0.0, 0.3, 0.5, 2), CurriculumStage(1.0, 0.7, 1.0, None, 0)),
        camera_bank={v: "the fixed overhead camera" for v in VIEWS},  # the env renders one camera under each name
    )


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    path = tmp_path_factory.mktemp("reach") / "micro_tasks.yaml"
    path.write_text(SPEC)
    register_task(reach_task(path))
    return get_task("reach2d")


def reach_text(vlm, spec: MicroTaskSpec) -> tuple[np.ndarray, np.ndarray]:
    """The task's prompts embedded fresh: goals [2, D] (each the mean of its phrasings) and baseline [D]."""
    goals = np.stack([vlm.encode_text(list(spec.goals[n])).mean(axis=0) for n in spec.names])
    return goals, vlm.encode_text(list(spec.baseline)).mean(axis=0)


@pytest.fixture(scope="module")
def store(task, tmp_path_factory, random_tiny_vlm):
    """Two reach episodes rendered (2 views, 64 px) and embedded with the random-weight tiny model."""
    from pipeline.jobs.embed import embed_store
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.rollout import RolloutConfig

    path = tmp_path_factory.mktemp("reach_store") / "reach.zarr"
    rollout = RolloutConfig.make(task="reach2d", episodes=2, stages=(0, 1), views=VIEWS, resolution=64, noise_std=0.05)
    done = render_to_store(path, rollout, progress=False)
    assert done.episodes_rendered == 2 and 4 <= done.rows <= 2 * (STEPS + 1)  # success may end an episode early
    embed_store(path, random_tiny_vlm, batch_size=32, progress=False)
    return path


def test_second_task_renders_embeds_caches_and_scores(task, store, random_tiny_vlm):
    from pipeline.jobs.render_and_embed import build_cache
    from pipeline.stores.stored_text import text_embeddings
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.reward.prompts import PromptConfig
    from storage.cache import StateCache
    from storage.dataset import DatasetStore

    spec = task.micro_tasks
    with DatasetStore.open(store) as st:
        assert st.info["key_spec"]["id"] == "reach2d/v1" and st.state_dim == 4 and st.key_dim == 2
        assert st.info["action_dim"] == 2 and st.info["layout"]["action_fields"] == ["dx", "dy"]
        cols = st.read(fields=["state", "key", "phase_rule"])
        assert np.array_equal(cols["key"], cols["state"][:, :2])
        assert np.array_equal(cols["phase_rule"], task.phases(cols["state"]))
        assert set(np.unique(cols["phase_rule"]).tolist()) <= {0, 1}
        build_cache(st, random_tiny_vlm.model_id, "flat")
        cache = StateCache.open(st, random_tiny_vlm.model_id, persist=False)
        hit = cache.lookup(cache.state_keys(cols["state"][3:5], task.key_spec), radius=1e-6)
        assert hit.hit.all() and hit.rows.tolist() == [3, 4]
        with pytest.raises(Exception, match="stores keys with layout"):
            cache.state_keys(cols["state"][:1], get_task("fetch_lift").key_spec)  # another task's key is refused
        emb = st.embeddings(random_tiny_vlm.model_id).astype(np.float32)
        stored = text_embeddings(st, random_tiny_vlm.model_id, PromptConfig.for_micro_tasks(spec))  # embedded with the rows

    goals, baseline = reach_text(random_tiny_vlm, spec)  # the task's prompts: one goal per micro-task
    assert stored.goal_texts == (spec.goals["approach"], spec.goals["touch"]) and stored.baseline_texts == spec.baseline
    assert np.allclose(stored.goals, goals, atol=1e-3) and np.allclose(stored.baseline, baseline, atol=1e-3)
    scores = goal_baseline_scores(emb, goals, baseline, 0.9)  # [N, V, 2]
    active = np.take_along_axis(scores.mean(axis=1), task.phases(cols["state"])[:, None], axis=1)[:, 0]
    assert scores.shape == (len(cols["state"]), 2, 2) and np.isfinite(active).all()


@pytest.mark.slow
def test_second_task_trains_a_tiny_stage1_run(task, tmp_path):
    from rmtl.train.config import stage1_config
    from rmtl.train.run.csv_log import read_csv
    from rmtl.train.eval.evaluate import load_checkpoint
    from rmtl.train.stage1 import train_stage1

    cfg = stage1_config("dense_reference", task="reach2d", n_envs=2, n_steps=16, batch_size=16, n_epochs=1,
                        total_timesteps=32, checkpoint_every=32, eval_every=32, eval_episodes=2, progress_bar=False,
                        torch_threads=1, vec_env="dummy", output_dir=str(tmp_path / "run"), net_arch_pi=[16],
                        net_arch_vf=[16])
    run = train_stage1(cfg)  # the config names the task; nothing is injected
    model, meta, _ = load_checkpoint(run / "checkpoints" / "step_000000032")
    assert meta["num_timesteps"] == 32
    assert model.observation_space["phase"].shape == (2,)  # the task's two micro-tasks, not pick-and-lift's three
    assert model.observation_space["observation"].shape == (4,) and model.action_space.shape == (2,)
    ev = read_csv(run / "eval.csv")
    assert ev and ev[-1]["episodes"] == 2 and 0.0 <= ev[-1]["success_rate"] <= 1.0
    assert read_csv(run / "curriculum.csv")  # the task's curriculum stages were stepped through


class RewardCheck:
    """SB3 callback: at every step, each live env's VLM scores are the goal-baseline projection
    of its current frames onto the reach prompts (embedded fresh), averaged over the views, and
    the active phase is the reach rule's on its state (also the phase one-hot the policy sees)."""

    def __new__(cls, vlm, task):
        from stable_baselines3.common.callbacks import BaseCallback

        from rmtl.reward import RewardVecEnv
        from rmtl.reward.projection import goal_baseline_scores

        goals, baseline = reach_text(vlm, task.micro_tasks)

        class _RewardCheck(BaseCallback):
            checked = 0
            phases: set = set()

            def _on_step(self) -> bool:
                reward_env = self.training_env
                while not isinstance(reward_env, RewardVecEnv):
                    reward_env = reward_env.venv
                assert reward_env.kind.scorer.num_phases == reward_env.shaper.num_phases == 2
                obs, dones, infos = self.locals["new_obs"], self.locals["dones"], self.locals["infos"]
                for i, full in enumerate(infos):
                    info = full["reward"]
                    if dones[i]:  # scored on the terminal frame; the sub-env shows the next episode
                        continue
                    state = obs["observation"][i : i + 1]
                    assert info["phase"] == task.phases(state)[0] == np.argmax(obs["phase"][i])
                    frames = reward_env.venv.env_method("render_views", list(VIEWS), 64, indices=[i])[0]
                    emb = vlm.encode_images(frames)[None]  # [1, V, D]
                    per_view = goal_baseline_scores(emb, goals, baseline, reward_env.kind.scorer.alpha)[0]  # [V, 2]
                    assert info["scores_per_view"].shape == (len(VIEWS), 2)
                    assert np.allclose(info["scores_per_view"], per_view, atol=1e-3)
                    assert np.isclose(info["score"], per_view.mean(axis=0)[info["phase"]], atol=1e-3)
                    self.phases.add(info["phase"])
                    self.checked += 1
                return True

        return _RewardCheck()


@pytest.mark.slow
def test_second_task_trains_on_its_vlm_reward(task, tmp_path, random_tiny_vlm):
    from rmtl.train.config import stage1_config
    from rmtl.train.eval.evaluate import load_checkpoint
    from rmtl.train.stage1 import train_stage1

    cfg = stage1_config("rmtl", task="reach2d", n_envs=2, n_steps=16, batch_size=16, n_epochs=1, total_timesteps=32,
                        checkpoint_every=32, eval_every=32, eval_episodes=2, progress_bar=False, torch_threads=1,
                        vec_env="dummy", output_dir=str(tmp_path / "run"), net_arch_pi=[16], net_arch_vf=[16],
                        reward={"model": "rmtl-fetch-tiny@random", "views": list(VIEWS), "resolution": 64,
                                "batch_size": 16})
    check = RewardCheck(random_tiny_vlm, task)
    run = train_stage1(cfg, vlm=random_tiny_vlm, callbacks=[check])
    assert check.checked >= 16
    model, meta, _ = load_checkpoint(run / "checkpoints" / "step_000000032")
    assert meta["num_timesteps"] == 32 and model.observation_space["phase"].shape == (2,)
    goals = meta["reward_prompts"]["micro_task_goals"]  # the prompts the reward scored, recorded with the run
    assert list(goals) == ["approach", "touch"] and goals["touch"] == list(task.micro_tasks.goals["touch"])
    with pytest.raises(ConfigError, match="'grasp', which is not a micro-task of the task"):  # goals of other micro-tasks are refused in one line
        train_stage1(cfg.replace(output_dir=str(tmp_path / "bad"), reward={
            **cfg.reward.model_dump(), "prompts": {"micro_task_goals": {"approach": "x", "grasp": "y"}}}),
            vlm=random_tiny_vlm)


def test_second_task_query(task, store, tmp_path, capsys):
    import json

    from rmtl.cli import run

    out = tmp_path / "q"
    assert run(["query", "--store", str(store), "--out", str(out), "--radii", "0,0.01"]) == 0
    printed = capsys.readouterr().out
    assert "tip-target distance" in printed and "touch score" in printed and "Cache hit rate" in printed
    res = json.loads((out / "queries.json").read_text())
    assert res["task"] == "reach2d" and res["phases"] == ["approach", "touch"] and res["quality"] is None
    assert set(res["correlation"]) == {"approach", "touch"}
    assert sum(res["correlation"][p]["count"] for p in ("approach", "touch")) == res["rows"]
    assert res["prompts"]["micro_task_goals"]["touch"] == list(task.micro_tasks.goals["touch"])
    for name in ("correlation.png", "per_view_variance.png", "cache_radius.png"):
        assert (out / name).stat().st_size > 5000
    # its spec has no single goal apart from the baseline: the single-vs-micro flatness is skipped, not failed
    assert res["flatness"] is None and not (out / "flatness.png").exists() and "flatness: skipped" in printed


def test_second_task_has_no_behaviours(task):
    from pipeline.jobs.rollout import RolloutConfig

    assert dict(task.behaviours) == {}  # the Task default: a task need not script any
    with pytest.raises(ConfigError, match="unknown behaviour 'push' of task reach2d; known behaviours: none"):
        RolloutConfig.make(task="reach2d", policy="behaviour:push")
