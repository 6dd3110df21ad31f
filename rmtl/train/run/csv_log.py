"""The CSV logs of a run directory (eval.csv, curriculum.csv, manager.csv, report tables):
appended a row at a time while training, cut back to a checkpoint on resume, read back parsed."""

from __future__ import annotations

import csv
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
