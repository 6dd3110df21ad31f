"""The CSV logs of a run directory (eval.csv, curriculum.csv, manager.csv, report tables):
appended a row at a time while training, cut back to a checkpoint on resume, read back parsed."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any


def append_csv(path: Path, row: dict[str, Any]) -> None:
    """Append one row (writing the header when the file is new)."""
    new = not path.is_file() or path.stat().st_size == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        if new:
            w.writeheader()
        w.writerow(row)


def truncate_csv(path: Path, max_timesteps: int, column: str = "timesteps") -> None:
    """Drop rows logged after ``max_timesteps`` (rows a crashed run wrote after its last checkpoint)."""
    if not path.is_file():
        return
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    keep = [r for r in rows if int(float(r[column])) <= max_timesteps]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep)


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a CSV with numbers parsed (missing file: no rows)."""
    p = Path(path)
    if not p.is_file():
        return []
    with open(p, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        parsed = {}
        for k, v in r.items():
            try:
                parsed[k] = int(v)
            except (TypeError, ValueError):
                try:
                    parsed[k] = float(v)
                except (TypeError, ValueError):
                    parsed[k] = v
        out.append(parsed)
    return out


PROGRESS_STEP = "time/total_timesteps"
"""The env-step column of a run's progress logs (``progress_<step>.csv``, one per training session)."""


def progress_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run's logged rollouts from all its ``progress_*.csv`` in step order, one per env step count:
    a resumed run logs the steps after its checkpoint again in the next file, and the later file wins."""
    by_step: dict[int, dict[str, Any]] = {}
    for f in sorted(Path(run_dir).glob("progress_*.csv")):
        for row in read_csv(f):
            step = row.get(PROGRESS_STEP)
            if isinstance(step, (int, float)) and math.isfinite(step):
                by_step[int(step)] = row
    return [by_step[k] for k in sorted(by_step)]


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return path
