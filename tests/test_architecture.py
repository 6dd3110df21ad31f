"""The layer and cycle contracts of pyproject.toml ([tool.importlinter]) hold: flows > pipeline
> rmtl > storage, no cycles between sibling modules, and no import of a task (rmtl.tasks) from
the env, reward, VLM or storage code, and pick-and-lift imported only by the task registry
(docs/architecture.md)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 kept, 0 broken" in proc.stdout, proc.stdout


def test_the_task_seams_to_do_list_only_shrinks():
    """The task-seam contract's ignore list is the to-do list of a second task: direct imports of
    pick-and-lift outside rmtl.tasks, each still to be routed through the Task. New code adds none."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    seam = next(c for c in contracts if c["id"] == "task-seam")
    assert len(seam["ignore_imports"]) <= 3, "route new task imports through rmtl.task.Task instead"


def test_python_m_rmtl_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "rmtl", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "render-and-embed" in proc.stdout
