"""The qualification set: its rollout families (``qualification_families.yaml``) and their states,
rolled out once and cached."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import yaml

from rmtl.errors import ConfigError
from storage.whole_file import write_file_whole


REPO = Path(__file__).resolve().parents[2]


FAMILIES_FILE = Path(__file__).resolve().parents[1] / "qualification_families.yaml"


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
    with the package, ``qualification_learners/``), else under the checkout (files naming
    ``results/...``); where neither holds it, the file's folder, so the error names that path."""
    for root in (folder, REPO):
        if (root / policy).is_file():
            return root / policy
    return folder / policy


def load_families(path: str | Path | None = None, small: bool = False) -> tuple[str, list[Family]]:
    """(task name, families) of a qualification-set file; ``small``: the CI-sized episode counts."""
    p = Path(path) if path is not None else FAMILIES_FILE
    try:
        spec = yaml.safe_load(p.read_text())
        task, seed = spec["task"], int(spec["seed"])
        out = []
        for name, f in spec["families"].items():
            f = dict(f)
            group, trained_on, small_n = f.pop("group"), tuple(f.pop("trained_on", ())), f.pop("small", None)
            if small and small_n is not None:
                f["episodes"] = int(small_n)
            policy = str(f.get("policy", "expert"))
            if policy.endswith(".zip") and not Path(policy).is_absolute():
                f["policy"] = str(policy_path(policy, p.parent))
            f.setdefault("seed", seed)
            out.append(Family(name, group, f, trained_on))
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as e:
        from rmtl.errors import yaml_problem

        why = f" is not valid YAML at {yaml_problem(e)}" if isinstance(e, yaml.YAMLError) else f": {type(e).__name__}: {e}"
        raise ConfigError(f"qualification families {p}{why}; see pipeline/qualification_families.yaml "
                          "for the format") from None
    if not out:
        raise ConfigError(f"qualification families {p} lists no families; give at least one under 'families:' "
                          f"(see pipeline/qualification_families.yaml)")
    return task, out


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
