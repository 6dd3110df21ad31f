"""The run directory both learner stages share: where checkpoints are, whether a run may
resume in it, which files a fresh start clears, the SB3 logger, restored normaliser state.

Layout (docs/stage1.md, docs/stage2.md): ``config.yaml``, ``run.json``, ``progress_<start>.csv``,
``tb/``, the CSV logs, ``checkpoints/step_<N>/`` and ``checkpoints/latest.txt`` (the newest one).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from rmtl.errors import ConfigError
from rmtl.train.csv_log import truncate_csv

CHECKPOINTS = "checkpoints"
LATEST = "latest.txt"
RESUME = "resume"
"""A copy of the newest checkpoint kept with a run's results (rmtl.train.committed)."""


def saved_config(run_dir: Path) -> dict[str, Any] | None:
    """The config a run directory holds (``config.yaml``), None for a new directory."""
    p = run_dir / "config.yaml"
    return (yaml.safe_load(p.read_text()) or {}) if p.is_file() else None


def latest_checkpoint(run_dir: str | Path, needs: Iterable[str] = ("model.zip",)) -> Path | None:
    """The checkpoint ``checkpoints/latest.txt`` names, if it holds every file of ``needs``."""
    p = Path(run_dir) / CHECKPOINTS / LATEST
    if not p.is_file():
        return None
    ck = p.parent / p.read_text().strip()
    return ck if all((ck / name).is_file() for name in needs) else None


def resume_checkpoint(run_dir: str | Path) -> Path | None:
    """The run's kept resume state (``resume/``), if it holds a model and its meta."""
    p = Path(run_dir) / RESUME
    return p if (p / "model.zip").is_file() and (p / "meta.json").is_file() else None


def config_differences(saved: dict[str, Any], config: Any, free_fields: Iterable[str]) -> list[str]:
    """Fields (outside ``free_fields``, which a resumed run may change) where ``config`` differs from ``saved``.

    A field the saved config lacks (written before the field existed) counts as its default.
    """
    new = config.model_dump(mode="json")
    try:
        saved = type(config).make(**saved).model_dump(mode="json")
    except ConfigError:  # a field since removed or renamed: compare what was written
        pass
    free = set(free_fields)
    return sorted(k for k in set(saved) | set(new) if k not in free and saved.get(k) != new.get(k))


def open_run(run_dir: Path, config: Any, *, resume: bool, free_fields: Iterable[str], logs: Iterable[str],
             needs: Iterable[str] = ("model.zip",), what: str = "run") -> tuple[Path | None, dict[str, Any]]:
    """(checkpoint to resume from or None, its meta.json) for ``config`` in ``run_dir``: the newest
    checkpoint, else the kept ``resume/`` state (a run directory moved to another machine without
    its checkpoints).

    A checkpoint is resumed only with ``resume`` and a config equal outside ``free_fields``
    (else a one-line ConfigError). Without one, a fresh start in a used directory (``resume``
    off, or another config) deletes ``logs`` and ``latest.txt`` so old curves never mix with
    the new run's. Writes ``config.yaml``.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    saved = saved_config(run_dir)
    ck = (latest_checkpoint(run_dir, needs) or resume_checkpoint(run_dir)) if resume else None
    meta: dict[str, Any] = {}
    if ck is not None:
        differ = config_differences(saved or {}, config, free_fields)
        if differ:
            raise ConfigError(f"run directory {run_dir} holds a {what} with a different config ({', '.join(differ)}); "
                              "pass the same config to resume, another output_dir, or resume=False to start over there")
        meta = json.loads((ck / "meta.json").read_text())
    elif not resume or saved is None or config_differences(saved, config, free_fields):
        for name in logs:
            (run_dir / name).unlink(missing_ok=True)
        (run_dir / CHECKPOINTS / LATEST).unlink(missing_ok=True)
    config.to_yaml(run_dir / "config.yaml")
    return ck, meta


def cut_logs_to(run_dir: Path, logs: Iterable[str], step: int) -> None:
    """Drop CSV rows logged after ``step`` (written after the checkpoint a run resumes from)."""
    for name in logs:
        if name.endswith(".csv"):
            truncate_csv(run_dir / name, step)


def attach_logger(model: Any, run_dir: Path, start: int, verbose: int) -> None:
    """SB3 logger of a session starting at ``start`` env steps: ``progress_<start>.csv``, ``tb/``, stdout if verbose."""
    from stable_baselines3.common.logger import CSVOutputFormat, HumanOutputFormat, Logger, TensorBoardOutputFormat

    formats = [CSVOutputFormat(str(run_dir / f"progress_{start:09d}.csv")), TensorBoardOutputFormat(str(run_dir / "tb"))]
    if verbose:
        formats.append(HumanOutputFormat(sys.stdout))
    model.set_logger(Logger(str(run_dir), formats))


def restore_normalizer(normalizer: Any, checkpoint: Path) -> None:
    """Load a checkpoint's observation normaliser into ``normalizer`` (none: nothing to do)."""
    if normalizer is not None:
        from rmtl.train.artifacts import restore_normalizer as restore

        restore(normalizer, checkpoint)  # vecnormalize.json; a legacy pickle is refused


def restore_reward_state(shaper: Any, checkpoint: Path) -> None:
    """Load a checkpoint's reward-shaping statistics (``reward_state.json``) into ``shaper``; a checkpoint
    written before they were kept has none, and the shaper keeps its initial bounds."""
    p = Path(checkpoint) / "reward_state.json"
    if p.is_file():
        shaper.load_state_dict(json.loads(p.read_text()))


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory from a checkpoint dir, its ``model.zip``, or a run dir (its latest
    checkpoint, else the best policy it kept, ``best/``)."""
    p = Path(path).expanduser().resolve()
    if p.is_file() and p.name == "model.zip":
        p = p.parent
    if (p / "model.zip").is_file():
        return p
    latest = p / "checkpoints" / "latest.txt"
    named = None
    if latest.is_file():
        named = latest.read_text(errors="replace").strip()
        ck = p / "checkpoints" / named
        if named and (ck / "model.zip").is_file():
            return ck
    if (p / "best" / "model.zip").is_file():  # a run kept with its results: its best policy on validation
        return p / "best"
    if named is not None:  # a run directory whose pointer is stale, not "no run directory"
        have = sorted(c.name for c in (p / "checkpoints").glob("step_*") if (c / "model.zip").is_file())
        fix = f"pass one of its checkpoints ({', '.join(str(p / 'checkpoints' / h) for h in have[-3:])})" if have \
            else "the run has no checkpoint with a model.zip: retrain it"
        raise ConfigError(f"run directory {p}: checkpoints/latest.txt names {named!r}, which has no model.zip "
                          f"(deleted or moved); {fix}")
    raise ConfigError(f"{p} is not a Stage-1 checkpoint (no model.zip) nor a run directory with checkpoints/latest.txt "
                      "or best/")


def check_model_file(ck: Path) -> None:
    """One line, before torch and SB3 load, if a checkpoint's ``model.zip`` is not an SB3 archive
    (a zip holding ``data`` and ``policy.pth``): a damaged file should not take seconds to fail."""
    import zipfile

    path = ck / "model.zip"
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
    except (zipfile.BadZipFile, OSError) as e:
        names, why = set(), f"{type(e).__name__}: {e}"
    else:
        why = "no data or policy.pth inside"
    if not {"data", "policy.pth"} <= names:
        raise ConfigError(f"{path} is not a readable SB3 model ({why}); restore it from a copy, or pass another "
                          "checkpoint")


def checkpoint_meta(ck: Path) -> dict[str, Any]:
    """A checkpoint's ``meta.json`` ({} if it has none); one line if it is not a JSON object."""
    path = ck / "meta.json"
    if not path.is_file():
        return {}
    try:
        meta = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid JSON ({e}); restore it from a copy, or pass another checkpoint") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("config", {}), dict):
        raise ConfigError(f"{path} is not a checkpoint record (a JSON object with the run's config); restore it from "
                          f"a copy, or pass another checkpoint")
    return meta
