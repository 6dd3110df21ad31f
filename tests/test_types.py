"""The type checker (mypy, ``[tool.mypy]`` in pyproject.toml) over rmtl, storage, pipeline and flows:
no file has more errors than its count in tests/data/mypy_baseline.json, and a file the baseline does
not name has none. The baseline only shrinks: when a file's count drops, the test warns, and
``python tests/test_types.py --lower`` writes the lower counts (it never raises one or adds a file).

mypy keeps its incremental cache in ``.mypy_cache/`` (ignored by git): the first run of a checkout
analyses everything, later runs only what changed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "tests" / "data" / "mypy_baseline.json"
ERROR = re.compile(r"^(?P<file>[\w./-]+\.py):\d+(?::\d+)?: error: ", re.M)


def mypy_errors() -> Counter[str]:
    """Error count per file (repository-relative path) of one mypy run over the configured packages."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(REPO / ".mypy_cache"),
                           "--no-error-summary", "--no-pretty", "--no-color-output"],
                          cwd=REPO, capture_output=True, text=True, timeout=1200)
    if proc.returncode not in (0, 1):  # 2: a crash or a bad configuration, not type errors
        raise RuntimeError(f"mypy did not run (status {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return Counter(m["file"] for m in ERROR.finditer(proc.stdout))


def read_baseline() -> dict[str, int]:
    return json.loads(BASELINE.read_text())["errors"]


def compare(found: Counter[str], baseline: dict[str, int]) -> tuple[list[str], list[str]]:
    """(what grew: files over their count or new files with errors, what shrank: files under it)."""
    grew = [f"{f}: {n} errors, baseline {baseline.get(f, 0)}" for f, n in sorted(found.items())
            if n > baseline.get(f, 0)]
    shrank = [f"{f}: {found.get(f, 0)} errors, baseline {n}" for f, n in sorted(baseline.items())
              if found.get(f, 0) < n]
    return grew, shrank


def test_the_compare_rule():
    grew, shrank = compare(Counter({"a.py": 3, "b.py": 1, "new.py": 1}), {"a.py": 2, "b.py": 1, "c.py": 4})
    assert grew == ["a.py: 3 errors, baseline 2", "new.py: 1 errors, baseline 0"]
    assert shrank == ["c.py: 0 errors, baseline 4"]
    assert compare(Counter({"a.py": 1}), {"a.py": 1}) == ([], [])


def test_the_baseline_names_only_files_that_exist_with_errors():
    baseline = read_baseline()
    assert all(n > 0 for n in baseline.values()), "a file with no errors leaves the baseline"
    assert json.loads(BASELINE.read_text())["total"] == sum(baseline.values())
    assert all((REPO / f).is_file() for f in baseline), [f for f in baseline if not (REPO / f).is_file()]


def test_no_file_has_more_type_errors_than_its_baseline():
    grew, shrank = compare(mypy_errors(), read_baseline())
    assert not grew, ("new type errors (fix them; the baseline only shrinks); run `python -m mypy` for the "
                      "messages:\n" + "\n".join(grew))
    if shrank:  # not a failure: the next change lowers it (shown in pytest's warnings summary)
        warnings.warn("fewer type errors than the baseline: lower it with `python tests/test_types.py --lower` "
                      "and commit tests/data/mypy_baseline.json:\n" + "\n".join(shrank), stacklevel=1)


def lower_baseline() -> list[str]:
    """Lower each file's count to what mypy finds now (a file at 0 leaves); returns what changed."""
    data = json.loads(BASELINE.read_text())
    found, old = mypy_errors(), data["errors"]
    data["errors"] = {f: min(n, found.get(f, 0)) for f, n in sorted(old.items()) if found.get(f, 0) > 0}
    data["total"] = sum(data["errors"].values())
    BASELINE.write_text(json.dumps(data, indent=1) + "\n")
    return [f"{f}: {n} -> {data['errors'].get(f, 0)}" for f, n in old.items() if data["errors"].get(f, 0) != n]


if __name__ == "__main__":
    if sys.argv[1:] != ["--lower"]:
        sys.exit("usage: python tests/test_types.py --lower")
    print("\n".join(lower_baseline()) or "the baseline is already at the counts mypy finds")
