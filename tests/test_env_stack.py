"""The training env stack as documented: docs/reward.md's stack-order table is the order a built
stack has, every `file:function` hop of "One step, file by file" names code that exists, the kinds
table lists every registered kind, and no env-stack builder takes the whole run config."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "reward.md").read_text()


def documented_order() -> list[str]:
    table = DOC.split("<!-- stack-order -->")[1].split("<!-- /stack-order -->")[0]
    return [m.group(1) for m in re.finditer(r"^\| `(\w+)` \|", table, re.M)]


def built_order(venv) -> list[str]:
    """Wrapper class names from the sub-envs' vec env outwards (the vec env itself left out)."""
    names = []
    while hasattr(venv, "venv"):
        names.append(type(venv).__name__)
        venv = venv.venv
    return names[::-1]


def test_the_documented_order_is_the_code_order():
    from rmtl.train.envs.train_env import STACK_ORDER

    assert tuple(documented_order()) == STACK_ORDER


@pytest.mark.parametrize("phase_input,normalize", [(True, True), (False, False)])
def test_a_built_stage1_stack_has_the_documented_order(phase_input, normalize):
    from rmtl.tasks import get_task
    from rmtl.train.config import stage1_config
    from rmtl.train.envs.train_env import build_train_env

    cfg = stage1_config("rule_only", n_envs=2, n_steps=32, vec_env="dummy", phase_input=phase_input,
                        normalize_observations=normalize)
    env = build_train_env(cfg.env_stack(), get_task())
    try:
        used = {"PhaseObservation": phase_input, "VecNormalize": normalize, "below_reward": False,
                "above_phase": False}
        assert built_order(env.venv) == [n for n in documented_order() if used.get(n, True)]
        assert env.reward_env is _find(env.venv, "RewardVecEnv")
        assert (env.normalizer is not None) == normalize
    finally:
        env.venv.close()


def test_hooks_sit_where_the_table_says():
    from stable_baselines3.common.vec_env import VecEnvWrapper

    from rmtl.tasks import get_task
    from rmtl.train.config import stage1_config
    from rmtl.train.envs.train_env import EnvHooks, build_train_env

    class below_reward(VecEnvWrapper):  # named as the table's slot
        def reset(self):
            return self.venv.reset()

        def step_wait(self):
            return self.venv.step_wait()

    class above_phase(below_reward):
        pass

    cfg = stage1_config("rule_only", n_envs=2, n_steps=32, vec_env="dummy", normalize_observations=True)
    env = build_train_env(cfg.env_stack(), get_task(), hooks=EnvHooks(below_reward, above_phase))
    try:
        assert built_order(env.venv) == documented_order()
    finally:
        env.venv.close()


def _find(venv, name):
    while type(venv).__name__ != name:
        venv = venv.venv
    return venv


def test_every_hop_names_code_that_exists():
    section = DOC.split("## One step, file by file")[1].split("\n## ")[0]
    hops = re.findall(r"`((?:rmtl|pipeline)/[\w/]+\.py):([\w.]+)`", section)
    assert len(hops) >= 15
    for path, qualname in hops:
        module = importlib.import_module(path[:-3].replace("/", "."))
        obj = module
        for part in qualname.split("."):
            assert hasattr(obj, part), f"{path}:{qualname}"
            obj = getattr(obj, part)


def test_the_kinds_table_lists_every_kind():
    from rmtl.reward.kinds import kind_names

    section = DOC.split("## Reward kinds and the wrapper")[1].split("\n## ")[0]
    listed = set(re.findall(r"^\| `(\w+)` \| [^|]*\| (?:yes|no) \|", section, re.M))
    assert listed == set(kind_names())
    configured = set(re.findall(r"^\| `(\w+)` \| `\w+Config`", section, re.M))
    assert configured == set(kind_names())


def test_no_env_stack_builder_takes_the_run_config():
    for path in ("rmtl/train/envs/train_env.py", "rmtl/train/stage2/manager_env.py"):
        source = (ROOT / path).read_text()
        assert "Stage1Config" not in source, path
        for fn in ast.walk(ast.parse(source)):
            if isinstance(fn, ast.FunctionDef):
                assert all(a.arg != "config" for a in fn.args.args + fn.args.kwonlyargs), f"{path}:{fn.name}"
