"""Reading run directories for the reports: a run's config, evaluations and curriculum logs, and
the Stage-1 runs under a directory. A run whose files cannot be read is passed over (RunSkipped)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import yaml

from rmtl.errors import ConfigError
from rmtl.train.run.csv_log import read_csv


class RunSkipped(ConfigError):
    """A run directory the report passes over: one of its files cannot be read (the message names it)."""


_FIX = "restore it from a copy, or leave the run out"


def _json_object(path: Path) -> dict[str, Any]:
    """A JSON object file ({} if missing); RunSkipped naming the file if it is not one."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError, OSError) as e:
        raise RunSkipped(f"{path} is not valid JSON ({type(e).__name__}); {_FIX}") from None
    if not isinstance(value, dict):
        raise RunSkipped(f"{path} holds a JSON {type(value).__name__}, not an object; {_FIX}")
    return value


def _csv_rows(path: Path, numeric: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of a log CSV whose ``numeric`` columns are numbers; RunSkipped naming the file if not."""
    try:
        rows = read_csv(path)
    except (UnicodeDecodeError, OSError, __import__("csv").Error) as e:
        raise RunSkipped(f"{path} is not a CSV log written by rmtl ({type(e).__name__}); {_FIX}") from None
    for i, row in enumerate(rows):
        bad = [c for c in numeric if not isinstance(row.get(c), (int, float)) or isinstance(row.get(c), bool)]
        if bad:
            raise RunSkipped(f"{path} is not a CSV log written by rmtl (row {i + 1} has no number in column "
                             f"{bad[0]!r}); {_FIX}")
    return rows


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """What the report needs of one run directory; RunSkipped (one line naming the file) if a
    file it reads is damaged."""
    d = Path(run_dir)
    if not (d / "config.yaml").is_file():
        raise ConfigError(f"{d} is not a Stage-1 run directory (no config.yaml)")
    try:
        config = yaml.safe_load((d / "config.yaml").read_text()) or {}
    except UnicodeDecodeError:
        raise RunSkipped(f"{d / 'config.yaml'} is not a text file (not UTF-8); {_FIX}") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise RunSkipped(f"{d / 'config.yaml'} is not valid YAML{at}; {_FIX}") from None
    if not isinstance(config, dict):
        raise RunSkipped(f"{d / 'config.yaml'} holds a YAML {type(config).__name__}, not the run's config "
                         f"(a mapping); {_FIX}")
    if not config:
        raise RunSkipped(f"{d / 'config.yaml'} is empty, not the run's config; {_FIX}")
    lacks = [k for k in ("variant", "seed") if k not in config]
    if lacks:  # else the run would be reported under its folder's name and seed None
        raise RunSkipped(f"{d / 'config.yaml'} has no {' or '.join(lacks)}, so it is not a run config written by "
                         f"rmtl train stage1; {_FIX}")
    curriculum: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    latest = d / "checkpoints" / "latest.txt"
    if latest.is_file():
        ck = d / "checkpoints" / latest.read_text(errors="replace").strip()
        curriculum = _json_object(ck / "curriculum.json")
        meta = _json_object(ck / "meta.json")
        if curriculum and not all(isinstance(curriculum.get(k), list) for k in
                                  ("steps_per_stage", "episodes_per_stage", "successes_per_stage")):
            raise RunSkipped(f"{ck / 'curriculum.json'} is not a curriculum state written by rmtl; {_FIX}")
    summary = _json_object(d / "summary.json")
    _json_object(d / "selection.json")  # the success table reads it
    curriculum_rows = _csv_rows(d / "curriculum.csv", ("timesteps", "window_success_rate", "stage"))
    if not curriculum and curriculum_rows:
        curriculum = curriculum_from_rows(curriculum_rows)  # a kept run without its checkpoints
    return {
        "dir": d, "variant": config["variant"], "seed": config["seed"], "config": config,
        "eval": _csv_rows(d / "eval.csv", ("timesteps", "episodes", "successes", "success_rate", "ci_low",
                                                     "ci_high")),
        "curriculum_rows": curriculum_rows,
        "curriculum": curriculum, "summary": summary, "meta": meta,
    }


def curriculum_from_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Env steps and episodes per curriculum level rebuilt from ``curriculum.csv`` (one row per
    rollout), for runs whose checkpoints (and their ``curriculum.json``) were not kept. Successes per
    level are not in the CSV: None (the rolling success is drawn from the rows themselves)."""
    stages = [int(r["stage"]) for r in rows if isinstance(r.get("stage"), (int, float))]
    if not stages:
        return {}
    n = max(stages) + 1
    steps, episodes = [0] * n, [0] * n
    last_t, last_total = 0, 0
    for r in rows:
        k, t = int(r["stage"]), int(r["timesteps"])
        total = int(float(r.get("total_episodes") or last_total))
        steps[k] += t - last_t
        episodes[k] += total - last_total
        last_t, last_total = t, total
    return {"steps_per_stage": steps, "episodes_per_stage": episodes, "successes_per_stage": [None] * n,
            "from": "curriculum.csv"}


def load_runs(run_dirs: Sequence[str | Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """The runs that can be read, and one line per run passed over (what is wrong, naming the file)."""
    runs, skipped = [], []
    for d in run_dirs:
        try:
            runs.append(load_run(d))
        except RunSkipped as e:
            skipped.append(f"skipped run {d}: {e}")
    # Runs of one variant and seed that differ by a sweep arm are told apart, so tables and curves
    # never pool different arms: by the arm their config records (``sweep_arm``), or for runs made
    # before it was recorded by their folder's name (the sweep's ``<variant>_<arm>_s<seed>``).
    for r in runs:
        if r["config"].get("sweep_arm"):
            r["variant"] = f"{r['variant']}_{r['config']['sweep_arm']}"
    seen = Counter((r["variant"], r["seed"]) for r in runs)
    for r in runs:
        if seen[(r["variant"], r["seed"])] > 1:
            r["variant"] = re.sub(r"_s\d+$", "", Path(r["dir"]).name)
    return runs, skipped


def is_stage2_run(run_dir: Path) -> bool:
    """Whether a run directory holds a Stage-2 run (its config names a Stage-1 ``worker``)."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, ValueError, yaml.YAMLError):  # ValueError: not UTF-8
        return False  # load_run names what is wrong with it
    return isinstance(config, dict) and "worker" in config


def stage1_run_dirs(paths: Sequence[str | Path]) -> tuple[list[Path], list[Path]]:
    """The Stage-1 run directories named by ``paths``, and the Stage-2 runs passed over.

    A path is a run directory (it holds ``config.yaml``) or a directory of them, one or two
    levels up (``data/runs/stage1``, ``data/runs``), so ``rmtl report data/runs/*`` works
    with the default layout ``data/runs/stage<k>/<run>``. Stage-2 runs found inside a
    directory are passed over (their report is ``--stage 2``); one named directly is an
    error, as is a directory without any run."""
    if not paths:
        raise ConfigError("rmtl report needs the runs to report: rmtl report RUN_DIR... (Stage-1 run directories, "
                          "or a directory of them such as data/runs/stage1); rmtl report --stage 2 RUN for a Stage-2 run")
    runs: list[Path] = []
    skipped: list[Path] = []
    for p in map(Path, paths):
        if (p / "config.yaml").is_file() or not p.is_dir():
            if p.is_dir() and is_stage2_run(p):
                raise ConfigError(f"{p} is a Stage-2 run; report it with: rmtl report --stage 2 {p}")
            runs.append(p)  # load_run says what is wrong with a path that is no run
            continue
        found = sorted(c.parent for c in p.glob("*/config.yaml")) or sorted(c.parent for c in p.glob("*/*/config.yaml"))
        if not found:
            raise ConfigError(f"{p} is not a Stage-1 run directory (no config.yaml) and holds none; pass run "
                              f"directories written by rmtl train stage1, or a directory of them (data/runs/stage1)")
        for run in found:
            (skipped if is_stage2_run(run) else runs).append(run)
    if not runs:
        raise ConfigError(f"no Stage-1 runs among {', '.join(map(str, paths))} (only Stage-2 runs, which "
                          f"`rmtl report --stage 2 RUN` reports one at a time)" if skipped else
                          f"no Stage-1 runs among {', '.join(map(str, paths))}; pass run directories written by "
                          f"rmtl train stage1, or a directory of them (data/runs/stage1)")
    return list(dict.fromkeys(runs)), skipped
