"""`ruff check` (the rules of [tool.ruff] in pyproject.toml) passes over the code, and the tree stands
alone: no text in it points at an issue tracker's numbers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECKED = ["rmtl", "pipeline", "flows", "storage", "tests", "experiments", "bench"]


def test_ruff_check_is_clean():
    # --no-cache: nothing written into the tree while other runs read it.
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *CHECKED],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"ruff check found problems:\n{out.stdout}{out.stderr}"


# "issue 12", "issues #3", "pull request #4", "PR #5", "(#67)": what only a tracker outside the tree explains.
TRACKER_NUMBER = re.compile(r"(?i:\bissues?\s*#?\d+\b|\bpull requests?\s*#?\d+\b)|\bPR\s*#\d+\b|\(#\d+\)")
STANDS_ALONE = [*CHECKED, "docs", "README.md", ".ci", "pyproject.toml"]


def test_the_tree_names_no_issue_numbers():
    """The code, tests and docs say what they mean themselves: no issue or pull-request numbers
    (results/ keeps its history as written)."""
    files = [p for name in STANDS_ALONE for p in ([REPO / name] if (REPO / name).is_file() else (REPO / name).rglob("*"))
             if p.is_file() and p.suffix in {"", ".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".txt", ".cfg"}
             and p != Path(__file__).resolve()]  # this file's examples name numbers on purpose
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in files
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if TRACKER_NUMBER.search(line)]
    assert not found, "name what is meant instead of an issue number:\n" + "\n".join(found)


def test_the_tracker_pattern_finds_what_it_should():
    for text in ("see issue 51, items 1-3", "Issues #12 and", "pull request #4", "fixed in PR #5", "a fix (#67)"):
        assert TRACKER_NUMBER.search(text), text
    for text in ("this issues a warning", "PR curve", "color #1f77b4", "step 51", "the issue's repro"):
        assert not TRACKER_NUMBER.search(text), text
