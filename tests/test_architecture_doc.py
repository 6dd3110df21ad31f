"""docs/architecture.md names every module in a table row (the rule is written at the top of the
page), and no source file grows past MAX_LINES (one file, one job)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("rmtl", "pipeline", "flows", "storage")
DOC = REPO / "docs" / "architecture.md"
MAX_LINES = 500


def _modules() -> list[Path]:
    return sorted(p.relative_to(REPO) for root in ROOTS for p in (REPO / root).rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py"))


def _named(module: Path, rows: str) -> bool:
    """Whether a table row names ``module`` by its path, its dotted name or its folder (not a top-level one)."""
    path = module.as_posix()
    dotted = ".".join(module.with_suffix("").parts)
    folder = module.parent.as_posix() + "/"
    return (re.search(rf"(?<![\w/.]){re.escape(path)}", rows) is not None
            or re.search(rf"(?<![\w/.]){re.escape(dotted)}(?!\w)", rows) is not None
            or (len(module.parts) > 2 and re.search(rf"(?<![\w/.]){re.escape(folder)}(?![\w.])", rows) is not None))


def test_every_module_is_named_in_the_architecture_doc():
    rows = "\n".join(line for line in DOC.read_text().splitlines() if line.lstrip().startswith("|"))
    missing = [m.as_posix() for m in _modules() if not _named(m, rows)]
    assert not missing, ("modules no table row of docs/architecture.md names (add each to the module map there): "
                         + ", ".join(missing))


def test_the_matching_rule_is_strict():
    rows = "| `pipeline/qualify/` | `rmtl.train.sweep` | `rmtl/viz.py` | `rmtl/train/run/session.py` |"
    assert _named(Path("pipeline/qualify/fit.py"), rows)
    assert _named(Path("rmtl/train/sweep.py"), rows)
    assert _named(Path("rmtl/viz.py"), rows)
    assert not _named(Path("rmtl/train/run/lock.py"), rows)  # one file of a folder does not cover the folder
    assert not _named(Path("rmtl/train/sweep_plan.py"), rows)  # a prefix is not a name
    assert not _named(Path("pipeline/qualify/sub/deep.py"), rows)  # a folder covers only the modules directly in it
    assert not _named(Path("pipeline/analyses/query.py"), "| `pipeline/` |")  # top-level folders cover nothing


def test_no_source_file_is_longer_than_the_limit():
    long = {m.as_posix(): n for m in _modules() if (n := len((REPO / m).read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these along their seams (at most {MAX_LINES} lines a file): {long}"
