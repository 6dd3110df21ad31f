"""The qualification set: its rollout families (``qualification_families.yaml``) and their states,
rolled out once and cached."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
import yaml

from rmtl.errors import ConfigError
from storage.whole_file import write_file_whole


FAMILIES_FILE = Path(__file__).resolve().with_name("qualification_families.yaml")
"""The default qualification set, shipped in this package beside its learners (``qualification_learners/``)."""


@dataclass(frozen=True)
class Family:
    name: str
    group: str
    rollout: dict[str, Any]
    trained_on: tuple[str, ...] = ()


@dataclass
class StateSet:
    """The qualification set's rows: states [N, S], episode ids (unique over the set), steps,
    success of each row's episode, family name per row."""

    states: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    success: np.ndarray
    family: np.ndarray


def file_slug(name: str) -> str:
    """A model spec or scorer name as one safe file or folder name (its qualify stores and reports)."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def policy_path(policy: str, folder: Path) -> Path:
    """A families file's relative checkpoint path: beside the file (the shipped set's learners ship
    with the package, ``qualification_learners/``), else under the source checkout
    (:func:`rmtl.provenance.source_root`: files naming ``results/...``); where neither holds it, the
    file's folder, so the error names that path."""
    from rmtl.provenance import source_root

    for root in (folder, source_root()):
        if root is not None and (root / policy).is_file():
            return root / policy
    return folder / policy


GROUPS = ("expert", "noisy_expert", "behaviour", "learner")
"""The groups a family may pool into: the report's metrics per group, its battery of behaviours
(``behaviour``) and its early-progress axes (``learner``) read these names."""


def load_families(path: str | Path | None = None, small: bool = False) -> tuple[str, list[Family]]:
    """(task name, families) of a qualification-set file; ``small``: the CI-sized episode counts.

    Every family is checked here, before anything is rolled out: a known ``group``, ``trained_on`` a
    list of model names, ``small`` an episode count, and its rollout settings (``episodes``, ``policy``,
    ``noise_levels``, ...) valid as a :class:`pipeline.jobs.rollout.RolloutConfig`, in full and small
    sizes; anything else is one line naming the file, the family and the field."""
    p, spec, bad = _open(path)
    task, seed, fams = spec["task"], spec["seed"], spec["families"]
    out = [_family(str(name), f, task, seed, p, small, bad) for name, f in fams.items()]
    _trap_scenes(spec, p, small, bad)  # a bad trap_scenes section fails with the rest of the file
    return task, out


TRAP_SCENES = "coverage_scenes"
"""The name of the trap-scene family (its stores and cached states)."""


def load_trap_scenes(path: str | Path | None = None, small: bool = False) -> Family | None:
    """The file's ``trap_scenes``: coverage scenes (set directly, not by a policy) on which a one-score
    reward's trap ratio is measured (``pipeline.qualify.trap``); None when the file names none."""
    p, spec, bad = _open(path)
    return _trap_scenes(spec, p, small, bad)


def _open(path: str | Path | None) -> tuple[Path, dict[str, Any], Any]:
    """A families file's path, its checked spec (:func:`_read_spec`) and its one-line error maker."""
    p = Path(path) if path is not None else FAMILIES_FILE
    fmt = "see pipeline/qualify/qualification_families.yaml for the format"

    def bad(what: str) -> ConfigError:
        return ConfigError(f"qualification families {p}: {what}; {fmt}")

    return p, _read_spec(p, bad, fmt), bad


def _trap_scenes(spec: dict[str, Any], p: Path, small: bool, bad: Any) -> Family | None:
    section = spec.get("trap_scenes")
    if section is None:
        return None
    if not isinstance(section, dict) or set(section) - {"episodes", "small", "seed"}:
        raise bad(f"trap_scenes must map episodes (and small, seed) to numbers, got {section!r}")
    fam = _family(TRAP_SCENES, {**section, "group": "behaviour", "policy": "coverage"}, spec["task"], spec["seed"], p,
                  small, bad)
    return Family(fam.name, "trap", fam.rollout)


def _read_spec(p: Path, bad: Any, fmt: str) -> dict[str, Any]:
    """The families file as a mapping with a task name, a seed >= 0 and a non-empty mapping of families."""
    try:
        spec = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        from rmtl.errors import yaml_problem

        raise ConfigError(f"qualification families {p} is not valid YAML at {yaml_problem(e)}; {fmt}") from None
    except UnicodeDecodeError:
        raise bad("not a text file") from None
    except OSError as e:
        raise ConfigError(f"qualification families {p} cannot be read ({e.strerror or e}); give an existing "
                          f"families file") from None
    if not isinstance(spec, dict):
        raise bad("not a mapping with 'task', 'seed' and 'families'")
    missing = [k for k in ("task", "seed", "families") if k not in spec]
    if missing:
        raise bad(f"no {', '.join(repr(k) for k in missing)}")
    unknown = sorted(map(str, set(spec) - {"task", "seed", "families", "trap_scenes"}))
    if unknown:
        raise bad(f"unknown key {unknown[0]!r} (known: task, seed, families, trap_scenes)")
    task, seed, fams = spec["task"], spec["seed"], spec["families"]
    if not isinstance(task, str) or not task:
        raise bad(f"task must be a task name, got {task!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise bad(f"seed must be an integer >= 0, got {seed!r}")
    if fams is None or fams == {}:
        raise ConfigError(f"qualification families {p} lists no families; give at least one under 'families:' "
                          f"(see pipeline/qualify/qualification_families.yaml)")
    if not isinstance(fams, dict):
        raise bad("'families' must map each family's name to its settings")
    return spec


def _family(name: str, f: Any, task: str, seed: int, p: Path, small: bool, bad: Any) -> Family:
    """One family of the file, checked: a known group, its model names, its small size and its rollout."""
    where = f"family {name!r}"
    if not isinstance(f, dict):
        raise bad(f"{where} is not a mapping of its settings")
    f = dict(f)
    if "group" not in f:
        raise bad(f"{where} has no 'group' (one of {', '.join(GROUPS)})")
    group, trained_on, small_n = f.pop("group"), f.pop("trained_on", []), f.pop("small", None)
    if group not in GROUPS:
        raise bad(f"{where} has an unknown group {group!r} (known: {', '.join(GROUPS)})")
    if not isinstance(trained_on, list) or not all(isinstance(m, str) for m in trained_on):
        raise bad(f"{where}: trained_on must be a list of model names, got {trained_on!r}")
    if small_n is not None and (isinstance(small_n, bool) or not isinstance(small_n, int) or small_n < 1):
        raise bad(f"{where}: small must be an episode count >= 1, got {small_n!r}")
    policy = f.get("policy", "expert")
    if not isinstance(policy, str):
        raise bad(f"{where}: policy must be a policy name or a checkpoint path, got {policy!r}")
    if policy.endswith(".zip") and not Path(policy).is_absolute():
        f["policy"] = str(policy_path(policy, p.parent))
    f.setdefault("seed", seed)
    _check_rollout(task, f, small_n, bad, where)
    if small and small_n is not None:
        f["episodes"] = small_n
    return Family(name, group, f, tuple(trained_on))


def _check_rollout(task: str, rollout: dict[str, Any], small_n: int | None, bad: Any, where: str) -> None:
    """A family's rollout settings as :class:`RolloutConfig` reads them (both sizes): one line if not."""
    from pydantic import ValidationError

    from pipeline.jobs.rollout import RolloutConfig

    for episodes in (rollout.get("episodes"), small_n):
        values = dict(rollout) if episodes is None else {**rollout, "episodes": episodes}
        try:
            RolloutConfig(task=task, **values)
        except ValidationError as err:
            e = err.errors()[0]
            field = ".".join(str(x) for x in e["loc"]) or "settings"
            shown = repr(e.get("input")) if not isinstance(e.get("input"), dict) else "{...}"
            raise bad(f"{where}: {field}={shown}: {e['msg'].removeprefix('Value error, ')}") from None
        except ConfigError as err:  # an unknown task: its own line names the known ones
            raise bad(f"{where}: {err}") from None


def _family_key(task: str, family: Family) -> str:
    """The cache key of a family's states: its rollout with paths as recorded (repository-relative), so
    every checkout shares one cache."""
    from rmtl.provenance import portable_path

    rollout = {k: portable_path(v) if k == "policy" and str(v).endswith(".zip") else v for k, v in family.rollout.items()}
    return hashlib.sha256(json.dumps([task, rollout], sort_keys=True).encode()).hexdigest()[:12]


def state_set(task: str, families: Sequence[Family], cache_dir: Path, progress: bool = True) -> StateSet:
    """The families' rows, rolled out without rendering (cached per family under ``cache_dir``)."""
    from pipeline.jobs.rollout import RolloutConfig, rollout_episodes

    cache_dir.mkdir(parents=True, exist_ok=True)
    parts, offset = [], 0
    for fam in families:
        path = cache_dir / f"{fam.name}-{_family_key(task, fam)}.npz"
        if not path.is_file():
            cfg = RolloutConfig.make(task=task, **fam.rollout)
            if progress:
                print(f"qualify: rolling out {fam.name} ({cfg.episodes} episodes)", flush=True)
            rows = rollout_episodes(cfg, list(range(cfg.episodes)), render=False)
            buf = io.BytesIO()
            np.savez(buf, **{k: rows[k] for k in ("state", "episode", "step", "success")})
            write_file_whole(path, buf.getvalue())
        try:
            with np.load(path) as d:
                ep = d["episode"].astype(np.int64)
                ok = np.zeros(len(ep), dtype=bool)
                for e in np.unique(ep):
                    ok[ep == e] = bool(d["success"][ep == e].any())
                parts.append((d["state"], ep + offset, d["step"], ok, np.full(len(ep), fam.name)))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:  # truncated, garbage, foreign
            raise ConfigError(f"the cached states of family {fam.name}, {path}, are damaged ({type(e).__name__}); "
                              f"delete that file and run again (its episodes are rolled out again)") from None
        offset += int(ep.max()) + 1 if len(ep) else 0
    cols = [np.concatenate([p[i] for p in parts]) for i in range(5)]
    return StateSet(*cols)
