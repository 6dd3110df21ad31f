"""The layer and cycle contracts of pyproject.toml ([tool.importlinter]) hold: flows > pipeline
> rmtl > storage, no cycles between sibling modules, the layers inside rmtl and inside rmtl.train,
no import of a task (rmtl.tasks) from the env, reward, VLM or storage code, pick-and-lift imported
only by the task registry, and the pipeline's groups in their layers (docs/architecture.md)."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(contracts())} kept, 0 broken" in proc.stdout, proc.stdout


def test_every_part_of_the_pipeline_sits_in_a_group_layer():
    """A module or package added directly under pipeline/ must join the groups' layers, else the
    contract would not see it."""
    groups = next(c for c in contracts() if c["id"] == "pipeline-groups")
    layered = {name.strip() for layer in groups["layers"] for name in layer.split("|")}
    parts = {p.stem for p in (ROOT / "pipeline").glob("*.py") if p.stem != "__init__"}
    parts |= {p.name for p in (ROOT / "pipeline").iterdir() if (p / "__init__.py").is_file()}
    assert parts == layered, f"in pipeline/ but in no layer: {sorted(parts - layered)}; layers naming nothing: {sorted(layered - parts)}"


def test_the_layers_inside_rmtl_and_its_learners_place_every_module():
    """The layer contracts inside rmtl and rmtl.train are exhaustive: a module added there fails
    ``lint-imports`` until it joins a layer, so the contract sees every one."""
    by_id = {c["id"]: c for c in contracts()}
    for cid in ("rmtl-layers", "train-layers"):
        assert by_id[cid].get("exhaustive") is True, f"{cid} must be exhaustive"
    placed = {name.strip() for layer in by_id["train-layers"]["layers"] for name in layer.split("|")}
    assert {"sweep", "sweep_file"} <= placed


def test_every_contract_is_described_in_the_architecture_doc():
    """docs/architecture.md's table of contracts has one row per contract id, and no row for a contract
    that is gone."""
    import re

    doc = (ROOT / "docs" / "architecture.md").read_text()
    start = doc.index("| contract | says |")
    table = doc[start:doc.index("\n\n", start)]
    described = set(re.findall(r"^\| `([\w-]+)` \|", table, flags=re.M))
    assert described == {c["id"] for c in contracts()}, described ^ {c["id"] for c in contracts()}


def test_nothing_outside_the_task_registry_imports_pick_and_lift():
    """The task-seam contract holds with no ignored import: every module outside rmtl.tasks reaches
    pick-and-lift through the Task, so a second task needs no edit there."""
    seam = next(c for c in contracts() if c["id"] == "task-seam")
    assert not seam.get("ignore_imports"), "route new task imports through rmtl.task.Task instead"


def test_python_m_rmtl_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "rmtl", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "render-and-embed" in proc.stdout


def test_no_lazily_exported_name_is_also_a_submodule():
    """A package's public name loaded on first use (``rmtl.lazy.lazy_attributes``) must not be the
    name of one of its submodules: importing that submodule sets the package attribute to the
    module, and ``from package import name`` would then return the module, not the function."""
    import importlib

    clashes = []
    for package in ("rmtl.train", "rmtl.reward", "rmtl.vlm", "pipeline.train_vlm"):
        folder = ROOT / package.replace(".", "/")
        submodules = {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
        lazy = set(importlib.import_module(package)._LAZY)
        clashes += [f"{package}.{name}" for name in sorted(lazy & submodules)]
    assert not clashes, f"public names shadowed by submodules of the same name: {clashes}"
