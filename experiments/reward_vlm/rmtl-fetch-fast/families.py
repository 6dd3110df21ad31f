"""The stand-in's render families (families.yaml): every store a round renders, with its
render-and-embed parameters. Imported by render_families.py and round4_gpu.py, which run as
scripts from this folder (Python puts a script's folder first on its path).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

FAMILIES_FILE = Path(__file__).with_name("families.yaml")
POLICIES = Path(__file__).resolve().parents[3] / "results" / "oracle_structure"
"""Holds runs/<run>/best/model.zip and stage2_worker/model.zip (the policies families roll out)."""


def load_families(path: Path = FAMILIES_FILE) -> dict[str, Any]:
    """families.yaml as data."""
    return yaml.safe_load(Path(path).read_text())


def round_spec(data: dict[str, Any], round_: int) -> dict[str, Any]:
    """A round's render settings, training families and learner, with what it extends filled in."""
    rounds = data["rounds"]
    if round_ not in rounds:
        raise SystemExit(f"families.yaml has no round {round_}; rounds: {', '.join(map(str, rounds))}")
    own = rounds[round_]
    base = round_spec(data, own["extends"]) if "extends" in own else {"render": {}, "train": [], "learner": None}
    return {"render": own.get("render", base["render"]), "train": base["train"] + list(own.get("train", [])),
            "learner": own.get("learner", base["learner"])}


def _fill(entry: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    return {k: v.format(**values) if isinstance(v, str) else tuple(v) if isinstance(v, list) else v
            for k, v in entry.items()}


def _expand(entry: dict[str, Any], lists: dict[str, list], values: dict[str, Any]) -> list[dict[str, Any]]:
    entry = dict(entry)
    loop = entry.pop("for", None)
    if not loop:
        return [_fill(entry, values)]
    (key, list_name), = loop.items()
    return [_fill(entry, {**values, key: item}) for item in lists[list_name]]


def _learner_checkpoints(spec: dict[str, Any], run: Path) -> list[dict[str, Any]]:
    spec = dict(spec)
    out = []
    for ck in sorted(Path(run).glob(spec.pop("checkpoints"))):
        name = ck.parent.name
        step = re.fullmatch(r"step_(\d+)", name)
        out.append(_fill({**spec, "policy": str(ck)}, {"checkpoint": name, "step": int(step[1]) if step else name}))
    return out


def round_families(round_: int, *, policies: Path = POLICIES, learner: Path | None = None, smoke: bool = False,
                   data: dict[str, Any] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(store name, render-and-embed parameters) of every training, learner and held-out family
    of ``round_``. ``learner``: the run whose checkpoints make the learner families (none without
    it). ``smoke``: each family's ``smoke_episodes``, else at most two episodes."""
    data = data if data is not None else load_families()
    spec = round_spec(data, round_)
    values = {"runs": Path(policies) / "runs", "policies": Path(policies)}
    entries = [e for entry in spec["train"] for e in _expand(entry, data["lists"], values)]
    if learner is not None and spec["learner"]:
        entries += _learner_checkpoints(spec["learner"], learner)
    entries += [e for entry in data["heldout"] for e in _expand(entry, data["lists"], values)]
    out = []
    for e in entries:
        name, smoke_episodes = e.pop("store"), e.pop("smoke_episodes", None)
        if smoke:
            e["episodes"] = smoke_episodes or min(e["episodes"], 2)
        out.append((name, e))
    return out
