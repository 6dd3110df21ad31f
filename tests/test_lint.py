"""`ruff check` (the rules of [tool.ruff] in pyproject.toml) passes over the code."""

from __future__ import annotations

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
