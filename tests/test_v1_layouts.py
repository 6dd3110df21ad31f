"""Stores and runs of layout v1 still load: a store whose key spec has no id
(tests/fixtures/layout_v1/store.zarr) and a Stage-1 run directory of that layout (stage1_run),
both made by commit 096a6bb's code (fixtures/layout_v1/make.py)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rmtl.tasks.fetch_lift.state import KEY_SPEC, state_key

FIXTURES = Path(__file__).parent / "fixtures" / "layout_v1"
MODEL = "rmtl-fetch-tiny__51e76d00"


@pytest.fixture
def v1(tmp_path):
    shutil.copytree(FIXTURES, tmp_path / "v1")
    return tmp_path / "v1"


def test_v1_store_reads_caches_and_appends(v1):
    from pipeline.stores.store_rows import load_rows
    from pipeline.stores.stored_text import stored_text_embeddings
    from rmtl.tasks import get_task
    from storage.cache import StateCache
    from storage.dataset import DatasetStore

    path = v1 / "store.zarr"
    with DatasetStore.open(path) as st:
        assert "id" not in st.info["key_spec"] and KEY_SPEC.matches(st.info["key_spec"])
        states, frames = (st.read(fields=["state", "frames"])[k] for k in ("state", "frames"))
        rows = load_rows(st, MODEL)
        assert len(rows) == len(st) and rows.phase.max() <= 2
        text = stored_text_embeddings(st, MODEL, get_task().prompts())
        assert text.goals.shape[0] == 3
        cache = StateCache.open(st, MODEL, persist=False)
        hit = cache.lookup(cache.state_keys(states[5:8], KEY_SPEC), radius=1e-6)
        assert hit.hit.all() and hit.rows.tolist() == [5, 6, 7]
    with DatasetStore.open(path, "a", key_spec=KEY_SPEC) as st:  # keys left to the store: layout v1's
        n = len(st)
        st.append({"state": states[:2], "episode": np.full(2, 9), "step": np.arange(2), "phase_rule": np.zeros(2, np.int8),
                   "success": np.zeros(2, bool), "difficulty": np.ones(2, np.float32), "frames": frames[:2]})
        assert np.array_equal(st.read(slice(n, n + 2), ["key"])["key"], state_key(states[:2]))


def test_a_key_spec_of_another_version_is_refused(v1):
    from dataclasses import replace

    from storage.cache import StateCache
    from storage.dataset import DatasetStore
    from storage.errors import StoreError

    with DatasetStore.open(v1 / "store.zarr") as st:
        cache = StateCache.open(st, MODEL, persist=False)
        with pytest.raises(StoreError, match="stores keys with layout"):
            cache.state_keys(st.read(slice(0, 1), ["state"])["state"], replace(KEY_SPEC, params={"rotation_scale": 0.05}))
        with pytest.raises(StoreError, match="stores keys with layout"):
            cache.state_keys(st.read(slice(0, 1), ["state"])["state"], replace(KEY_SPEC, fields=KEY_SPEC.fields[::-1]))


def test_v1_stage1_run_loads_evaluates_and_resumes(v1):
    from rmtl.train.config import Stage1Config, Stage2Config
    from rmtl.train.eval.evaluate import evaluate_policy_success, load_checkpoint, resolve_checkpoint
    from rmtl.train.stage1 import train_stage1
    from rmtl.train.stage2.trainer import worker_stage1_config

    run = v1 / "stage1_run"
    ck = resolve_checkpoint(run)
    model, meta, normalizer = load_checkpoint(ck)
    assert meta["num_timesteps"] == 32
    saved = Stage1Config.from_yaml(run / "config.yaml")
    assert saved.reward.kind == "dense"  # reward_kind: dense, read as the dense kind's config
    # written when the shaping had adaptive_bounds / phase_offset: read as the per-micro-task reconstruction (v1) (the
    # dense kind is not shaped, so its config has no shaping now: the section the run wrote is read directly)
    import yaml

    from rmtl.reward.shaping import ShapingConfig

    shaping = ShapingConfig.make(**yaml.safe_load((run / "config.yaml").read_text())["reward"]["shaping"])
    assert (shaping.bounds, shaping.band) == ("widen_only", "phase_offset: true" in (run / "config.yaml").read_text())
    from rmtl.tasks import get_task

    res = evaluate_policy_success(model, saved.env, episodes=1, seed=0, normalizer=normalizer, task=get_task())
    assert res.episodes == 1
    assert worker_stage1_config(Stage2Config.make(worker=str(run))).phase_input
    resumed = train_stage1(saved.replace(total_timesteps=64, output_dir=str(run)))
    assert (resumed / "run_resume_000000032.json").is_file()
    assert json.loads((resumed / "summary.json").read_text())["env_steps"] == 64


ORACLE_CONFIG_LAYOUT_V1 = Path(__file__).parent / "data" / "stage1_oracle_run_config_reward_layout_v1.yaml"
"""The config.yaml of results/oracle_structure/runs/oracle_sweep_level_only_s0: ``reward_kind: oracle``,
``rule_only_u``, ``oracle`` and ``dense`` beside a ``reward`` section that was always the VLM reward's."""


def test_an_oracle_run_of_reward_layout_v1_resumes_without_a_difference(tmp_path):
    import yaml

    from rmtl.reward.kinds.oracle import OracleProgressConfig, OracleRewardConfig
    from rmtl.reward.shaping import ShapingConfig
    from rmtl.train.config import Stage1Config, stage1_config
    from rmtl.train.reward_layout import REWARD_LAYOUT_V1_FIELDS
    from rmtl.train.run.run_dir import CHECKPOINTS, LATEST, config_differences, open_run
    from rmtl.train.stage1 import RESUME_FREE_FIELDS

    saved = yaml.safe_load(ORACLE_CONFIG_LAYOUT_V1.read_text())
    assert saved["reward_kind"] == "oracle" and "model" in saved["reward"]
    cfg = Stage1Config.make(**saved)
    # the oracle's config holds what the oracle kind read: the VLM section's shaping, the dense section's
    # success bonus switch and the oracle section; none of the VLM reward's own fields
    assert isinstance(cfg.reward, OracleRewardConfig) and cfg.reward.kind == "oracle"
    assert cfg.reward.shaping == ShapingConfig(**saved["reward"]["shaping"])
    assert cfg.reward.add_env_reward == saved["dense"]["add_env_reward"]
    assert cfg.reward.progress == OracleProgressConfig(**saved["oracle"])
    assert not set(REWARD_LAYOUT_V1_FIELDS) & set(cfg.model_dump())
    assert Stage1Config.make(**cfg.model_dump(mode="json")) == cfg  # and the new layout round-trips
    # the same command now (the variant and the run's own fields) is the saved run: it resumes
    given = {k: v for k, v in saved.items() if k not in {"variant", "reward", *REWARD_LAYOUT_V1_FIELDS}}
    new = stage1_config(saved["variant"], **given)
    assert new == cfg
    assert config_differences(saved, new, RESUME_FREE_FIELDS) == []
    run = tmp_path / "run"
    ck = run / CHECKPOINTS / "step_000000064"
    ck.mkdir(parents=True)
    import zipfile

    with zipfile.ZipFile(ck / "model.zip", "w") as z:  # what open_run checks of a model: SB3's two members
        z.writestr("data", "{}")
        z.writestr("policy.pth", b"")
    (ck / "meta.json").write_text(json.dumps({"reward_kind": "oracle", "num_timesteps": 64, "config": saved}))
    (run / CHECKPOINTS / LATEST).write_text(ck.name)
    (run / "config.yaml").write_text(ORACLE_CONFIG_LAYOUT_V1.read_text())
    found, meta = open_run(run, new.replace(output_dir=str(run)), resume=True, free_fields=RESUME_FREE_FIELDS,
                           logs=(), what="Stage-1 run")
    assert found == ck and meta["reward_kind"] == "oracle"
    assert Stage1Config.from_yaml(run / "config.yaml") == new.replace(output_dir=str(run))  # rewritten in the new layout


def test_each_kind_of_reward_layout_v1_reads_as_its_own_config():
    from rmtl.default_model import DEFAULT_MODEL
    from rmtl.reward.kinds.dense import DenseRewardConfig
    from rmtl.reward.kinds.rule_only import RuleOnlyRewardConfig
    from rmtl.reward.shaping import ShapingConfig
    from rmtl.train.config import Stage1Config

    vlm_fields = {"model": "rmtl-fetch-tiny", "alpha": 0.5, "shaping": {"trend": True}}
    rule = Stage1Config.make(reward_kind="rule_only", rule_only_u=0.2, dense={"add_env_reward": False}, reward=vlm_fields)
    assert rule.reward == RuleOnlyRewardConfig(u=0.2, add_env_reward=False, shaping=ShapingConfig(trend=True))
    dense = Stage1Config.make(reward_kind="dense", dense={"lift_weight": 2.0}, reward=vlm_fields)
    assert dense.reward == DenseRewardConfig(lift_weight=2.0)
    vlm = Stage1Config.make(reward_kind="vlm", oracle={"align_scale": 0.3}, reward=vlm_fields)
    assert vlm.reward.kind == "vlm" and vlm.reward.alpha == 0.5 and "oracle" not in vlm.model_dump()
    assert Stage1Config.make(reward_kind="vlm").reward.model == DEFAULT_MODEL  # no section: the field's default


VLM_CONFIG_PROMPTS_SPELLED_OUT = Path(__file__).parent / "data" / "stage1_vlm_run_config_prompts_spelled_out.yaml"
"""The config.yaml of results/reward_vlm/rmtl-fetch-fast/round2/learner_rmtl_r1_s0, written before prompts
and views were left to the task: the paper's prompts as ``reward.prompts.approach/align/grasp`` and the
six views spelled out."""


def test_a_vlm_run_with_prompts_and_views_spelled_out_resumes_under_the_task_default(tmp_path):
    import yaml

    from rmtl.tasks import get_task
    from rmtl.train.config import Stage1Config, stage1_config
    from rmtl.train.reward_layout import REWARD_LAYOUT_V1_FIELDS
    from rmtl.train.run.run_dir import config_differences
    from rmtl.train.stage1 import RESUME_FREE_FIELDS

    saved = yaml.safe_load(VLM_CONFIG_PROMPTS_SPELLED_OUT.read_text())
    assert "approach" in saved["reward"]["prompts"] and len(saved["reward"]["views"]) == 6
    given = {k: v for k, v in saved.items() if k not in {"variant", "reward", *REWARD_LAYOUT_V1_FIELDS}}
    new = stage1_config(saved["variant"], **given, reward={"model": saved["reward"]["model"]})
    assert new.reward.prompts.micro_task_goals is None and new.reward.views is None  # the task's own
    assert config_differences(saved, new, RESUME_FREE_FIELDS) == ["reward"]  # unresolved, it reads as another config
    resolved = new.replace(reward=get_task().reward_config(new.reward))  # as train_stage1 resolves it first
    assert config_differences(saved, resolved, RESUME_FREE_FIELDS) == []
    assert Stage1Config.make(**saved).reward.prompts.micro_task_goals["grasp"] == resolved.reward.prompts.goal("grasp")
