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
from rmtl.train.run.csv_log import truncate_csv

LOCK_FILE = "sweep.lock"
"""The run lock (host, pid, heartbeat) of whichever process trains the run (``rmtl.train.sweep.RunLock``)."""

CHECKPOINTS = "checkpoints"
LATEST = "latest.txt"
RESUME = "resume"
"""A copy of the newest checkpoint kept with a run's results (rmtl.train.eval.committed)."""
FINAL = "final"
"""A finished Stage-2 run's last checkpoint as policy only, kept with its results (no checkpoints/)."""
BEST = "best"
"""The checkpoint best on the validation seeds as policy only, kept with a run's results (rmtl.train.eval.committed)."""


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


PREVIOUS = "previous-"
"""Prefix of the folders (``previous-<UTC time>/``) a fresh start moves an earlier run's files into."""
RUN_MARKERS = ("run.json", "summary.json", "selection.json", "eval.csv", "curriculum.csv", "validation.csv",
               "manager.csv", RESUME, BEST, FINAL, CHECKPOINTS)
"""Files and folders that mean a directory holds a run (besides ``progress_*.csv`` and ``run_resume_*.json``)."""
_JSON_FILES = ("meta.json", "curriculum.json", "reward_state.json", "vecnormalize.json")
RUN_FILES = ("config.yaml", *RUN_MARKERS, "tb", "bc.json", "manager_bc.pt", "bc_labels.npz", "sweep_starts.jsonl",
             "overlay.zarr")
"""What a run writes at the top of its directory under fixed names (Stage 1 and Stage 2, their logs, a
sweep's start records, the cached reward's overlay store); with :data:`RUN_PATTERNS`, the run's own
files: what ``--fresh`` moves aside, and all it moves."""
RUN_PATTERNS = ("progress_*.csv", "run_resume_*.json", "overlay.zarr.*",
                *(f".{kept}.{how}" for kept in (BEST, RESUME, FINAL) for how in ("writing", "replaced")))
"""Names of the run's own files written under varying names: SB3's logs per session, the record of each
resume, the overlay store's cache and records, a kept policy being replaced (``.best.writing``). A
small file of the run being replaced whole (``.selection.json.<hex>.tmp``) is the run's too."""


def run_files(run_dir: Path) -> list[str]:
    """Names of what in ``run_dir`` shows that a run is already there (empty for a new directory). A
    lone ``config.yaml``, or Stage 2's behaviour-cloning results without ``run.json`` (a start that
    stopped before training), is no run: a new start reuses or replaces them as before."""
    if not run_dir.is_dir():
        return []
    found = [p.name for p in run_dir.iterdir()
             if p.name in RUN_MARKERS or (p.name.startswith("progress_") and p.name.endswith(".csv"))
             or (p.name.startswith("run_resume_") and p.name.endswith(".json"))]
    return sorted(found)


def _is_own(name: str, known: set[str]) -> bool:
    import fnmatch

    if name in known or any(fnmatch.fnmatch(name, pat) for pat in RUN_PATTERNS):
        return True
    # storage.whole_file.write_file_whole's temp file of one of the run's files
    return name.startswith(".") and name.endswith(".tmp") and name[1:].rsplit(".", 2)[0] in known


def own_files(run_dir: Path, logs: Iterable[str] = ()) -> list[str]:
    """Names (in ``run_dir``) of what the run wrote there (:data:`RUN_FILES`, :data:`RUN_PATTERNS`,
    ``logs``); anything else in the directory (a user's store, notes, earlier ``previous-*`` folders,
    the run lock) is not the run's and stays where it is."""
    if not run_dir.is_dir():
        return []
    known = {*RUN_FILES, *logs}
    return sorted(p.name for p in run_dir.iterdir()
                  if _is_own(p.name, known) and p.name != LOCK_FILE and not p.name.startswith(PREVIOUS))


def checkpoint_problem(ck: Path, needs: Iterable[str] = ("model.zip",)) -> str | None:
    """What makes checkpoint folder ``ck`` unusable for a resume, read without torch or SB3 (None: whole):
    a missing file of ``needs`` or ``meta.json``, a ``model.zip`` that is no zip holding ``data`` and
    ``policy.pth``, a JSON file that does not parse."""
    import zipfile

    from rmtl.console import one_line

    missing = [n for n in dict.fromkeys([*needs, "model.zip", "meta.json"]) if not (ck / n).is_file()]
    if missing:
        return f"{', '.join(str(ck / n) for n in missing)} {'is' if len(missing) == 1 else 'are'} missing"
    try:
        with zipfile.ZipFile(ck / "model.zip") as z:
            names = set(z.namelist())
        if not {"data", "policy.pth"} <= names:
            return f"{ck / 'model.zip'} is not an SB3 model (no data or policy.pth inside)"
    except (zipfile.BadZipFile, OSError) as e:
        return f"{ck / 'model.zip'} is not a readable zip ({e})"
    for name in _JSON_FILES:
        if (ck / name).is_file():
            try:
                value = json.loads((ck / name).read_text())
            except (ValueError, UnicodeDecodeError, OSError) as e:
                return f"{ck / name} is not valid JSON ({one_line(e)})"
            if not isinstance(value, dict):
                return f"{ck / name} is not a JSON object"
    if not isinstance(json.loads((ck / "meta.json").read_text()).get("num_timesteps"), int):
        return f"{ck / 'meta.json'} has no num_timesteps (not a checkpoint record)"
    return None


def move_aside(run_dir: Path, names: Iterable[str]) -> Path:
    """Move ``names`` (in ``run_dir``) into a new ``run_dir/previous-<UTC time>/``; returns that folder."""
    import datetime

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    dest = run_dir / f"{PREVIOUS}{stamp}"
    n = 1
    while dest.exists():  # two fresh starts within a second
        n += 1
        dest = run_dir / f"{PREVIOUS}{stamp}-{n}"
    dest.mkdir()
    for name in names:
        (run_dir / name).rename(dest / name)
    return dest


def _start_over_hint(run_dir: Path) -> str:
    return (f"pass --fresh to start over (the earlier run's files move to {run_dir}/{PREVIOUS}<UTC time>/), "
            f"or choose another --out")


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
    its checkpoints). Reads no model: it runs before any model, renderer or env is built.

    A directory that already holds a run (:func:`run_files`) is never started over in place, so an
    earlier run's logs are never overwritten nor appended to:

    - with ``resume``, it resumes when its checkpoint (or ``resume/``) is whole and its config equal
      outside ``free_fields``; otherwise one line names what is missing or damaged, and ``--fresh``;
    - without ``resume`` (``--fresh``), the earlier run's own files (:func:`own_files`) move into
      ``previous-<UTC time>/`` inside the run directory (printed), and the new run starts there; other
      files and folders in the directory (a user's store, notes) stay where they are.

    Writes ``config.yaml``.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    held = run_files(run_dir)
    saved = saved_config(run_dir)
    ck: Path | None = None
    meta: dict[str, Any] = {}
    if held and resume:
        ck = _whole_checkpoint(run_dir, tuple(needs), held)
        differ = config_differences(saved or {}, config, free_fields)
        if differ:
            raise ConfigError(f"run directory {run_dir} holds a {what} with a different config ({', '.join(differ)}); "
                              f"pass the same config to resume, or {_start_over_hint(run_dir)}")
        meta = json.loads((ck / "meta.json").read_text())
    else:
        # Files of an earlier start that never trained (Stage 2's behaviour cloning) are reused only by
        # the same config resuming; otherwise they move aside with everything else.
        leftovers = [n for n in logs if (run_dir / n).exists()]
        if held or (leftovers and (not resume or saved is None
                                   or config_differences(saved, config, free_fields))):
            # Only the run's own files move; the run lock of the start that moves them stays where it is,
            # and so does whatever else is in the directory.
            own = own_files(run_dir, logs)
            dest = move_aside(run_dir, own)
            others = sorted(p.name + ("/" if p.is_dir() else "") for p in run_dir.iterdir()
                            if p.name not in own and p != dest and not p.name.startswith(PREVIOUS)
                            and p.name != LOCK_FILE)
            kept = (f"; left in place, not the run's: {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}"
                    if others else "")
            print(f"starting over in {run_dir}: the earlier run's files moved to {dest}{kept}", flush=True)
    config.to_yaml(run_dir / "config.yaml")
    return ck, meta


def _whole_checkpoint(run_dir: Path, needs: tuple[str, ...], held: list[str]) -> Path:
    """The checkpoint a run that is there resumes from: the newest one, else ``resume/``; one line
    (ConfigError) naming what is missing or damaged when neither is whole."""
    latest = run_dir / CHECKPOINTS / LATEST
    candidates: list[Path] = []
    if latest.is_file():
        candidates.append(latest.parent / latest.read_text(errors="replace").strip())
    if (run_dir / RESUME).is_dir():
        candidates.append(run_dir / RESUME)
    problems = []
    for ck in candidates:
        problem = checkpoint_problem(ck, needs) if ck.is_dir() else f"{ck} (named by {latest}) does not exist"
        if problem is None:
            return ck
        if ck.is_dir() and all((ck / n).is_file() for n in (*needs, "model.zip", "meta.json")):
            # damaged, not missing: falling back to an older state would silently lose steps
            raise ConfigError(f"run directory {run_dir} cannot be resumed: {problem}; restore it from a copy, or "
                              f"{_start_over_hint(run_dir)}")
        problems.append(problem)
    if not candidates:
        problems.append(f"it has neither {CHECKPOINTS}/{LATEST} nor a {RESUME}/ folder to resume from")
    shown = ", ".join(n + "/" if (run_dir / n).is_dir() else n for n in held[:4]) + (", ..." if len(held) > 4 else "")
    raise ConfigError(f"run directory {run_dir} holds a run ({shown}) that cannot be resumed: {'; '.join(problems)}; "
                      f"restore the missing files from a copy, or {_start_over_hint(run_dir)}")


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
        from rmtl.train.run.artifacts import restore_normalizer as restore

        restore(normalizer, checkpoint)  # vecnormalize.json; a legacy pickle is refused


def restore_reward_state(shaper: Any, checkpoint: Path) -> None:
    """Load a checkpoint's reward-shaping statistics (``reward_state.json``) into ``shaper``; a checkpoint
    written before they were kept has none, and the shaper keeps its initial bounds."""
    p = Path(checkpoint) / "reward_state.json"
    if p.is_file():
        shaper.load_state_dict(json.loads(p.read_text()))


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory from a checkpoint dir, its ``model.zip``, or a run dir (its latest
    checkpoint, else the best policy it kept, ``best/``, else a Stage-2 run's last policy, ``final/``,
    else its resume state, ``resume/``: a model.zip, meta.json and normaliser like a checkpoint's)."""
    p = Path(path).expanduser().resolve()
    if p.is_file() and p.name == "model.zip":
        p = p.parent
    if (p / "model.zip").is_file():
        return p
    latest = p / CHECKPOINTS / LATEST
    named = None
    if latest.is_file():
        named = latest.read_text(errors="replace").strip()
        ck = p / CHECKPOINTS / named
        if named and (ck / "model.zip").is_file():
            return ck
    # a run kept with its results: its best policy on validation, else a finished Stage-2 run's last
    # policy, else (a run stopped before its first checkpoint) its resume state
    for kept in (BEST, FINAL, RESUME):
        if (p / kept / "model.zip").is_file():
            return p / kept
    if named is not None:  # a run directory whose pointer is stale, not "no run directory"
        have = sorted(c.name for c in (p / CHECKPOINTS).glob("step_*") if (c / "model.zip").is_file())
        fix = f"pass one of its checkpoints ({', '.join(str(p / CHECKPOINTS / h) for h in have[-3:])})" if have \
            else "the run has no checkpoint with a model.zip: retrain it"
        raise ConfigError(f"run directory {p}: checkpoints/latest.txt names {named!r}, which has no model.zip "
                          f"(deleted or moved); {fix}")
    raise ConfigError(f"{p} is not a Stage-1 checkpoint (no model.zip) nor a run directory with checkpoints/latest.txt, "
                      "best/, final/ or resume/ (each holding a model.zip)")


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
