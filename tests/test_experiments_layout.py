"""Experiment code lives in experiments/<study>/, outputs in results/: runners compile, use the
packages' public API only, need no path hacks, and read their pre-registered data from files."""

from __future__ import annotations

import ast
import importlib.util
import json
import py_compile
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("rmtl", "pipeline", "storage", "flows")
FETCH_FAST = REPO / "experiments" / "reward_vlm" / "rmtl-fetch-fast"


def tracked(*paths: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", *paths], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return out.split()


def experiment_scripts(ext: str) -> list[Path]:
    return [REPO / p for p in tracked("experiments") if p.endswith(ext)]


def test_results_hold_no_scripts():
    scripts = [p for p in tracked("results") if p.endswith((".py", ".sh"))]
    assert scripts == [], scripts


@pytest.mark.parametrize("path", experiment_scripts(".py"), ids=lambda p: str(p.relative_to(REPO)))
def test_python_runner_compiles(path, tmp_path):
    py_compile.compile(str(path), cfile=str(tmp_path / "x.pyc"), doraise=True)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("path", experiment_scripts(".sh"), ids=lambda p: str(p.relative_to(REPO)))
def test_shell_runner_parses(path):
    subprocess.run(["bash", "-n", str(path)], check=True)


def private_imports(source: str) -> list[str]:
    """``from <package>... import _name`` and ``import <package>..._name`` in Python source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            found += [node.module for part in node.module.split(".") if part.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in PACKAGES
                      and any(p.startswith("_") for p in a.name.split("."))]
    return found


SHELL_PRIVATE_IMPORT = re.compile(rf"from\s+(?:{'|'.join(PACKAGES)})[\w.]*\s+import\s+[^\n]*\b_\w")


def test_experiments_import_no_private_names():
    bad = {str(p.relative_to(REPO)): private_imports(p.read_text()) for p in experiment_scripts(".py")}
    bad = {k: v for k, v in bad.items() if v}
    bad.update({str(p.relative_to(REPO)): ["python -c: private import"] for p in experiment_scripts(".sh")
                if SHELL_PRIVATE_IMPORT.search(p.read_text())})
    assert not bad, bad


def test_private_import_check_catches_one():
    assert private_imports("from rmtl.train.eval.committed import _write_policy\n") == ["rmtl.train.eval.committed._write_policy"]
    assert private_imports("from numpy import _core\nfrom rmtl.train import committed\n") == []


def test_experiments_make_no_path_hacks():
    hacks = [str(p.relative_to(REPO)) for p in experiment_scripts(".py") + experiment_scripts(".sh")
             if "sys.path.insert" in p.read_text() or "sys.path.append" in p.read_text()]
    assert not hacks, hacks


def test_registered_gate_thresholds_are_the_committed_gates():
    registered = yaml.safe_load((FETCH_FAST / "gates.yaml").read_text())["thresholds"]
    committed = sorted((REPO / "results" / "reward_vlm" / "rmtl-fetch-fast").glob("gates_round*.json"))
    assert committed
    for path in committed:
        assert json.loads(path.read_text())["thresholds"] == registered, path.name


def load_families_module():
    spec = importlib.util.spec_from_file_location("fetch_fast_families", FETCH_FAST / "families.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_round_renders_the_same_heldout_families_once(tmp_path):
    families = load_families_module()
    for step in ("step_000016000", "step_000032000"):
        (tmp_path / "checkpoints" / step).mkdir(parents=True)
        (tmp_path / "checkpoints" / step / "model.zip").write_bytes(b"")
    heldout = None
    for round_ in families.load_families()["rounds"]:
        rows = families.round_families(round_, learner=tmp_path)
        names = [name for name, _ in rows]
        assert len(names) == len(set(names)), round_
        this = [(n, p) for n, p in rows if n.startswith("heldout_")]
        assert heldout is None or this == heldout
        heldout = this
    round2 = dict(families.round_families(2, learner=tmp_path))
    assert round2["train_c_r1_16000"]["policy"].endswith("step_000016000/model.zip")
    assert len(heldout) == 14


def test_round6_is_round5_with_coverage_stores_on_its_renderer(tmp_path):
    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig

    families = load_families_module()
    data = families.load_families()
    assert families.round_spec(data, 6)["render"] == families.round_spec(data, 5)["render"]
    round5, round6 = (dict(families.round_families(r, learner=tmp_path, data=data)) for r in (5, 6))
    coverage = {n: p for n, p in round6.items() if n not in round5}
    assert sorted(coverage) == [f"train_coverage_{i}" for i in range(4)]
    assert sum(p["episodes"] for p in coverage.values()) == 48_000
    seeds = sorted(p["seed"] for p in coverage.values())
    assert all(b - a >= 12_000 for a, b in zip(seeds, seeds[1:]))  # no scene twice
    for name, params in coverage.items():  # what round4_gpu.render_job builds
        cfg = RenderAndEmbedConfig(store=str(tmp_path / f"{name}.zarr"), model=data["model"],
                                   render=families.round_spec(data, 6)["render"], **params)
        assert cfg.policy == "coverage" and cfg.render.mesh_reduction == 0.9


def test_the_stand_in_rounds_call_the_trainer_with_its_signature(tmp_path, monkeypatch):
    """Round 4-6's train stages call train_from_options as it is now (a signature change once
    stopped round 6 at its first training step, after a 45-minute render)."""
    import argparse
    import inspect

    import pipeline.train_vlm as train_vlm

    real = inspect.signature(train_vlm.train_from_options)
    calls = []

    class Called(Exception):
        pass

    def bind_only(*args, **kwargs):
        bound = real.bind(*args, **kwargs)  # TypeError on a call the real function would refuse
        calls.append(bound.arguments)
        raise Called

    monkeypatch.setattr(train_vlm, "train_from_options", bind_only)
    monkeypatch.syspath_prepend(str(FETCH_FAST))
    import round4_gpu
    import round6

    a = argparse.Namespace(train_steps=6, train_budget_s=10.0, batch_size=8, eval_every=2, patience_evals=2,
                           device="cpu", frame_cache_gb=0.1, stores=tmp_path, out=tmp_path, model_dir=tmp_path / "m")
    for stage in (round6.stage_train, round6.stage_train_labelled, round4_gpu.stage_train):
        with pytest.raises(Called):
            stage(a, {})
    assert len(calls) == 3 and all(c["options"].out for c in calls)
