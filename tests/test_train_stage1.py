"""Stage-1 smoke tests: every variant trains a few hundred steps (2 envs, 2 views at 64 px,
rmtl-fetch-tiny with random weights; the dense reference renders nothing), checkpoints
load, evaluation runs, a resumed run continues from its checkpoint, the report renders."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from rmtl.errors import ConfigError
from rmtl.train.config import VARIANTS, stage1_config
from rmtl.train.variants import VARIANT_REGISTRY, variant_kind

pytestmark = pytest.mark.slow  # every test trains (Stage-1 runs of each variant at smoke size)

VIEWS = ["wide_view", "close_up"]
MODEL = "rmtl-fetch-tiny@random"
SMOKE_STEPS = 128  # 4 PPO updates of 2 envs x 16 steps
SHAPING_ONLY = ("rmtl_per_phase", "rmtl_level_only", "oracle_per_phase", "oracle_per_phase_level_only",
                "oracle_sweep_level_only", "oracle_sweep_trend_momentum", "oracle_sweep_trend_momentum_drop",
                "oracle_no_phase_input", "rule_only_no_curriculum")


def smoke_steps(variant: str) -> int:
    """Shaping variants differ from rmtl only in ShapingConfig (tested in test_reward_shaping): 2 updates."""
    return 64 if variant in SHAPING_ONLY else SMOKE_STEPS


def small(variant: str, out, **kw):
    """A variant at smoke-test size; 16-step episodes so episodes finish (curriculum, terminal frames)."""
    base = dict(
        n_envs=2, n_steps=16, batch_size=16, n_epochs=2, total_timesteps=SMOKE_STEPS,
        checkpoint_every=64, eval_every=64, eval_episodes=2, progress_bar=False, torch_threads=1,
        output_dir=str(out), vec_env="dummy",
        env={"views": VIEWS, "resolution": 64, "max_episode_steps": 16},
    )
    if variant_kind(VARIANT_REGISTRY[variant]) == "vlm":  # the model and views are the VLM reward's fields
        base["reward"] = {"model": MODEL, "views": VIEWS, "resolution": 64, "batch_size": 16}
    for k, v in kw.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return stage1_config(variant, **base)


class PhaseCheck:
    """SB3 callback: the phase one-hot the policy sees is the phase the VLM reward used for
    that state (terminal observation for an env that just finished)."""

    def __new__(cls):
        from stable_baselines3.common.callbacks import BaseCallback

        class _PhaseCheck(BaseCallback):
            checked = 0
            mismatches = 0
            episode_ends = 0

            def _on_step(self) -> bool:
                obs, dones, infos = self.locals["new_obs"], self.locals["dones"], self.locals["infos"]
                for i, info in enumerate(infos):
                    phase = info["terminal_observation"]["phase"] if dones[i] else obs["phase"][i]
                    self.episode_ends += int(dones[i])
                    self.checked += 1
                    self.mismatches += int(np.argmax(phase) != info["reward"]["phase"])
                return True

        return _PhaseCheck()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, random_tiny_vlm):
    """Every variant trained once at smoke size (shared by the checks below)."""
    from rmtl.train.stage1 import train_stage1

    root = tmp_path_factory.mktemp("stage1")
    out = {}
    for name in VARIANTS:
        cfg = small(name, root / name, total_timesteps=smoke_steps(name))
        extra = [PhaseCheck()] if name == "rmtl" else []
        out[name] = train_stage1(cfg, vlm=random_tiny_vlm if cfg.reward.kind == "vlm" else None, callbacks=extra)
        if extra:
            out["phase_check"] = extra[0]
    return out


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_trains_checkpoints_and_evaluates(runs, variant):
    from rmtl.train.eval.evaluate import evaluate_checkpoint, load_checkpoint
    from rmtl.train.run.csv_log import read_csv

    d = runs[variant]
    n = smoke_steps(variant)
    assert (d / "config.yaml").is_file() and (d / "run.json").is_file()
    assert json.loads((d / "run.json").read_text())["config"]["variant"] == variant
    steps = sorted(p.name for p in (d / "checkpoints").glob("step_*"))
    assert steps == [f"step_{k:09d}" for k in range(64, n + 1, 64)]
    assert (d / "checkpoints" / "latest.txt").read_text() == f"step_{n:09d}"
    model, meta, _ = load_checkpoint(d)
    assert model.num_timesteps == n and meta["variant"] == variant
    assert ("phase" in model.observation_space.spaces) == stage1_config(variant).phase_input
    ev = read_csv(d / "eval.csv")
    assert [r["timesteps"] for r in ev] == list(range(64, n + 1, 64))
    res = evaluate_checkpoint(d / "checkpoints" / "step_000000064", episodes=2, seed=5)
    assert res.episodes == 2 and 0.0 <= res.ci_low <= res.success_rate <= res.ci_high <= 1.0
    assert res.num_timesteps == 64
    progress = read_csv(d / "progress_000000000.csv")
    keys = set().union(*progress)
    assert {"time/env_steps_per_s", "curriculum/stage", "rollout/success_rate", "time/ms_per_step_simulation"} <= keys
    # evaluations and checkpoints are timed apart from the rollout's own parts
    assert any(float(r.get("time/ms_per_step_evaluation") or 0) > 0 for r in progress)
    if n > 64:  # a checkpoint before the last rollout (the final one is saved after the log)
        assert any(float(r.get("time/ms_per_step_checkpoints") or 0) > 0 for r in progress)
    kind = stage1_config(variant).reward.kind
    assert json.loads((d / "checkpoints" / f"step_{n:09d}" / "meta.json").read_text())["reward"]["kind"] == kind
    if kind == "dense":
        assert {"reward/reward", "reward/env"} <= keys and "reward/u" not in keys
    elif kind in ("oracle", "rule_only"):
        assert {"reward/reward", "reward/u", "reward/level"} <= keys
        assert ("reward/score" in keys) == (kind == "oracle")  # rule-only has no scorer
        assert not any(float(r.get("time/ms_per_step_rendering") or 0) for r in progress)  # no rendering
    else:
        assert {"reward/reward", "reward/score", "reward/u", "time/ms_per_step_rendering",
                "time/ms_per_step_embedding"} <= keys
    summary = json.loads((d / "summary.json").read_text())
    assert summary["env_steps"] == n
    cur = summary["curriculum"]
    assert sum(cur["steps_per_stage"]) == n
    assert cur["curriculum"]["stage_index"] == (0 if stage1_config(variant).curriculum else 4)
    assert sum(cur["episodes_per_stage"]) == n // 16  # 2 envs x 16-step episodes


def test_evaluation_is_seeded(runs):
    from rmtl.train.eval.evaluate import evaluate_checkpoint

    a = evaluate_checkpoint(runs["rmtl"], episodes=2, seed=3)
    b = evaluate_checkpoint(runs["rmtl"], episodes=2, seed=3)
    assert a.to_dict() == b.to_dict() and a.difficulty_range == (0.75, 1.0)


def test_resume_continues_from_checkpoint(tmp_path):
    from rmtl.train.eval.evaluate import load_checkpoint
    from rmtl.train.run.csv_log import read_csv
    from rmtl.train.stage1 import train_stage1

    d = train_stage1(small("dense_reference", tmp_path / "r", total_timesteps=96, checkpoint_every=64, eval_every=64))
    model, _, _ = load_checkpoint(d)
    assert model.num_timesteps == 96
    w96 = model.policy.state_dict()["action_net.weight"].clone()
    d2 = train_stage1(small("dense_reference", tmp_path / "r", total_timesteps=160, checkpoint_every=64, eval_every=64))
    assert d2 == d and (d / "progress_000000096.csv").is_file() and (d / "run_resume_000000096.json").is_file()
    model2, meta, _ = load_checkpoint(d)
    assert model2.num_timesteps == 160 and meta["num_timesteps"] == 160
    assert not torch.equal(w96, model2.policy.state_dict()["action_net.weight"])
    assert [r["timesteps"] for r in read_csv(d / "eval.csv")] == [64, 96, 128, 160]
    cur = json.loads((d / "summary.json").read_text())["curriculum"]
    assert sum(cur["steps_per_stage"]) == 160  # carried over from the checkpoint
    # A different config in the same directory is refused.
    with pytest.raises(ConfigError, match="different config"):
        train_stage1(small("dense_reference", tmp_path / "r", total_timesteps=192, gamma=0.9))


def test_report(runs, tmp_path):
    from rmtl.train.run.csv_log import read_csv
    from rmtl.train.report.stage1 import stage1_report

    paths = stage1_report([runs[v] for v in ("rmtl", "single_prompt_multi_view", "dense_reference")], tmp_path / "rep")
    for key in ("success_vs_steps_png", "curriculum_levels_png", "final_success_csv", "final_success_md"):
        assert paths[key].is_file() and paths[key].stat().st_size > 0
    table = read_csv(paths["final_success_csv"])
    assert [r["variant"] for r in table] == ["rmtl", "single_prompt_multi_view", "dense_reference"]
    assert all(r["env_steps"] == SMOKE_STEPS for r in table)
    levels = read_csv(paths["curriculum_levels_csv"])
    assert len(levels) == 3 * 5 and sum(r["env_steps"] for r in levels if r["variant"] == "rmtl") == SMOKE_STEPS


def test_phase_obs_matches_reward_phase(runs):
    """Checked on every step of the RMTL smoke run, across episode ends."""
    chk = runs["phase_check"]
    assert chk.checked == SMOKE_STEPS and chk.episode_ends > 0 and chk.mismatches == 0


def test_cli_commands(runs, tmp_path, capsys):
    """The commands rmtl.cli runs (train stage1, eval, report)."""
    from rmtl.cli import run

    assert run(["train", "stage1", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert all(f in help_text for f in ("--variant", "--config", "--set", "--n-envs", "--reward.model", "--fresh",
                                        "--steps = --total-timesteps"))
    assert run(["eval", str(runs["dense_reference"]), "--episodes", "1", "--out", str(tmp_path / "e.json")]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["episodes"] == 1
    assert run(["report", str(runs["rmtl"]), "--out", str(tmp_path / "rep"), "--no-select"]) == 0
    assert (tmp_path / "rep" / "success_vs_steps.png").is_file()
    capsys.readouterr()
    # training through the CLI: a dense run resumed to more steps with --set overrides
    args = ["train", "stage1", "--variant", "dense_reference", "--steps", "32", "--out", str(tmp_path / "d"),
            "--no-progress", "--set", "n_envs=2", "--set", "n_steps=16", "--set", "batch_size=16",
            "--set", "n_epochs=1", "--set", "eval_episodes=1", "--set", "env.max_episode_steps=16"]
    assert run(args) == 0
    assert "32 env steps" in capsys.readouterr().out


def test_python_call_rounds_steps_up_to_whole_rollouts_as_the_cli_does(tmp_path, capsys):
    """A Python call of train_stage1 gets the CLI's rounding to whole rollouts (Stage1Config's
    validator) and its one line, once."""
    from rmtl.cli import run
    from rmtl.train.config import Stage1Config
    from rmtl.train.stage1 import train_stage1

    line = "--steps 40 rounds up to 64 env steps: PPO trains in whole rollouts of n_envs*n_steps = 2*16 = 32 steps"
    d = train_stage1(small("dense_reference", tmp_path / "py", total_timesteps=40, eval_every=0, eval_episodes=1))
    assert capsys.readouterr().out.count(line) == 1
    args = ["train", "stage1", "--variant", "dense_reference", "--steps", "40", "--out", str(tmp_path / "cli"),
            "--no-progress", "--set", "n_envs=2", "--set", "n_steps=16", "--set", "batch_size=16",
            "--set", "eval_episodes=1", "--set", "vec_env=dummy", "--set", "env.max_episode_steps=16"]
    assert run(args) == 0
    assert capsys.readouterr().out.count(line) == 1
    for run_dir in (d, tmp_path / "cli"):
        assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 64
        assert Stage1Config.from_yaml(run_dir / "config.yaml").total_timesteps == 64


def test_cached_reward_path(random_tiny_vlm, tmp_path):
    """RMTL on the FAISS state cache (rmtl.reward.cached_source): lookups, misses rendered and appended."""
    from pipeline.jobs.embed import embed_store
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.rollout import RolloutConfig
    from rmtl.train.run.csv_log import read_csv
    from rmtl.train.stage1 import train_stage1

    store = tmp_path / "s.zarr"
    render_to_store(store, RolloutConfig.make(episodes=1, stages=(0,), views=VIEWS, resolution=64), progress=False)
    embed_store(store, random_tiny_vlm, progress=False)  # the very VLM the reward uses (@random weights differ per load)
    cfg = small("rmtl", tmp_path / "run", total_timesteps=32, eval_every=0, eval_episodes=1,
                cache={"store": str(store), "radius": 0.002, "grow": True})
    d = train_stage1(cfg, vlm=random_tiny_vlm)
    stats = json.loads((d / "summary.json").read_text())["cache_stats"]
    assert stats["states"] == 32 and stats["appended"] == stats["rendered"] == 32 - stats["hits"] > 0
    keys = set().union(*read_csv(d / "progress_000000000.csv"))
    assert {"cache/hit_rate", "cache/rollout_hit_rate", "time/ms_per_step_cache_lookup"} <= keys


def test_fast_path_with_atlas_workers_and_overlay(random_tiny_vlm, tmp_path):
    """RMTL on the fast path at tiny size: worker processes, an atlas catalogue, misses
    appended to the run's overlay off the rollout path, audits of hits; and a run refuses
    an atlas rendered by another renderer."""
    from pipeline.jobs.embed import embed_store
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.rollout import RolloutConfig
    from rmtl.errors import StoreError
    from rmtl.train.stage1 import train_stage1
    from storage.dataset import DatasetStore

    atlas = tmp_path / "atlas.zarr"
    render_to_store(atlas, RolloutConfig.make(episodes=2, stages=(0,), views=VIEWS, resolution=64), progress=False)
    embed_store(atlas, random_tiny_vlm, progress=False)
    cfg = small("rmtl", tmp_path / "run", total_timesteps=64, eval_every=0, eval_episodes=1, vec_env="workers",
                workers=2, cache={"atlas": [str(atlas)], "radius": 0.05, "audit_every": 1})
    d = train_stage1(cfg, vlm=random_tiny_vlm)
    stats = json.loads((d / "summary.json").read_text())["cache_stats"]
    assert stats["states"] == 64 and stats["hits"] + stats["rendered"] == 64
    assert 0 < stats["appended"] <= stats["rendered"]  # the summary is written while the writer may still run
    with DatasetStore.open(d / "overlay.zarr") as ov:  # closed: every queued batch is in
        assert ov.num_rows + stats["dropped"] == stats["rendered"]
        assert ov.embedded_rows(random_tiny_vlm.model_id) == ov.num_rows
    if stats["hits"]:
        assert stats["audited_hits"] >= 1 and stats["audit_score_mae_on_hits"] >= 0
    other = cfg.replace(output_dir=str(tmp_path / "run2"), env={**cfg.env.model_dump(), "render": {"msaa_samples": 0}})
    with pytest.raises(StoreError, match="rendered by renderer .* but this run renders with"):
        train_stage1(other, vlm=random_tiny_vlm)


def test_normalised_run_checkpoints_statistics_as_json_and_refuses_pickles(tmp_path):
    """VecNormalize statistics are saved as vecnormalize.json (never a pickle), used by
    evaluation and restored on resume; a v1 vecnormalize.pkl (a pickle) is refused, not loaded."""
    import pickle

    from rmtl.errors import ConfigError
    from rmtl.train.eval.evaluate import evaluate_checkpoint, load_checkpoint, resolve_checkpoint
    from rmtl.train.stage1 import train_stage1

    kw = dict(total_timesteps=64, checkpoint_every=64, eval_every=64, normalize_observations=True)
    d = train_stage1(small("dense_reference", tmp_path / "r", **kw))
    ck = resolve_checkpoint(d)
    assert (ck / "vecnormalize.json").is_file() and not list(ck.glob("*.pkl"))
    _, _, norm = load_checkpoint(d)
    assert norm is not None and norm.obs_rms and all(r.count > 1 for r in norm.obs_rms.values())
    assert evaluate_checkpoint(d, episodes=1).episodes == 1
    d = train_stage1(small("dense_reference", tmp_path / "r", **{**kw, "total_timesteps": 96}))  # resume
    ck = resolve_checkpoint(d)
    assert (ck / "vecnormalize.json").is_file()

    class Crafted:
        def __reduce__(self):
            return (os.mkdir, (str(tmp_path / "PWNED"),))

    (ck / "vecnormalize.json").unlink()
    (ck / "vecnormalize.pkl").write_bytes(pickle.dumps(Crafted()))
    with pytest.raises(ConfigError, match="is a pickle"):
        load_checkpoint(d)
    with pytest.raises(ConfigError, match="is a pickle"):
        train_stage1(small("dense_reference", tmp_path / "r", **{**kw, "total_timesteps": 128}))
    assert not (tmp_path / "PWNED").exists()


def test_a_run_starts_from_another_policy_with_a_fresh_optimiser(tiny_dense_run, tmp_path):
    """``init_policy``: a new run's PPO starts with a kept policy's weights (the rule-continued control)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from rmtl.errors import ConfigError
    from rmtl.train.config import stage1_config
    from rmtl.train.run.run_dir import resolve_checkpoint
    from rmtl.train.stage1 import train_stage1

    init = PPO.load(resolve_checkpoint(tiny_dense_run) / "model.zip", device="cpu").policy.state_dict()
    seen = {}

    class AtStart(BaseCallback):
        def _on_training_start(self) -> None:
            state = self.model.policy.state_dict()
            seen["same"] = all(torch.equal(state[k], init[k]) for k in init)
            seen["optimiser_steps"] = sum(len(s) for s in self.model.policy.optimizer.state.values())

        def _on_step(self) -> bool:
            return True

    base = dict(n_envs=2, n_steps=16, batch_size=16, n_epochs=1, total_timesteps=32, checkpoint_every=32,
                eval_every=0, eval_episodes=1, progress_bar=False, torch_threads=1, vec_env="dummy",
                env={"max_episode_steps": 16})
    cfg = stage1_config("dense_reference", init_policy=str(tiny_dense_run), output_dir=str(tmp_path / "warm"), **base)
    train_stage1(cfg, callbacks=[AtStart()])
    assert seen == {"same": True, "optimiser_steps": 0}
    with pytest.raises(ConfigError, match="init_policy .*nothing does not exist"):
        stage1_config("dense_reference", init_policy=str(tmp_path / "nothing"), **base)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a Stage-1 checkpoint"):
        train_stage1(stage1_config("dense_reference", init_policy=str(tmp_path / "empty"),
                                   output_dir=str(tmp_path / "from_empty"), **base))
    bigger = stage1_config("dense_reference", init_policy=str(tiny_dense_run), net_arch_pi=[8],
                           output_dir=str(tmp_path / "other_net"), **base)
    with pytest.raises(ConfigError, match="does not fit this run's policy"):
        train_stage1(bigger)
