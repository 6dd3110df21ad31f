"""Stage-1 configs of reward layout v1, read into the tagged one (one config section per reward kind).

Run configs and checkpoint metas saved before each kind had its own config still load: their
top-level kind fields become the ``reward`` section of the kind they name."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from pydantic import BaseModel

from rmtl.reward.config import RewardKindConfig
from rmtl.reward.kinds import DEFAULT_KIND


REWARD_LAYOUT_V1_FIELDS = ("reward_kind", "rule_only_u", "oracle", "dense")
"""Top-level Stage1Config fields of the reward layout before each kind had its own config: the
kind's name, the rule-only kind's u, the oracle's progress config and the dense reference's
config, beside a ``reward`` section that was always the VLM's. Saved run configs and checkpoint
metas of that layout still load (:func:`upgrade_reward_layout`)."""


def _section(value: Any) -> dict[str, Any]:
    return value.model_dump() if isinstance(value, BaseModel) else dict(value or {})


def reward_kind_of(data: Mapping[str, Any]) -> str:
    """The reward kind a Stage-1 config (or its dump, either layout) names."""
    if "reward_kind" in data:
        return str(data["reward_kind"])
    reward = data.get("reward")
    if isinstance(reward, RewardKindConfig):
        return reward.kind
    return str(_section(reward).get("kind", DEFAULT_KIND))


def upgrade_reward_layout(data: Any, default_kind: str | None = None) -> Any:
    """Stage-1 config input with reward layout v1 (:data:`REWARD_LAYOUT_V1_FIELDS`) in the
    tagged one: ``reward`` becomes the section of the kind ``reward_kind`` named, holding what that
    kind read then (oracle and rule-only: the VLM section's shaping, the dense section's
    ``add_env_reward`` and their own field; dense: the dense section), so the reward is the same.
    Input without those fields is returned as given. ``default_kind``: the kind of partial input
    (overrides) that names none (else vlm)."""
    if not isinstance(data, Mapping) or not any(k in data for k in REWARD_LAYOUT_V1_FIELDS):
        return data
    out = dict(data)
    named = out.pop("reward_kind", None)
    u, progress, dense = out.pop("rule_only_u", None), out.pop("oracle", None), _section(out.pop("dense", None))
    reward = _section(out.get("reward"))
    kind = str(named or reward.get("kind") or default_kind or DEFAULT_KIND)
    same = reward.get("kind", DEFAULT_KIND) == kind
    if kind == "dense":  # no shaping: the dense section alone
        section = {**(reward if same else {}), **dense}
    else:  # all of a section of this kind; of another (the VLM section), only the shaping the kinds shared
        section = dict(reward) if same else {k: reward[k] for k in ("shaping",) if k in reward}
    if kind in ("oracle", "rule_only"):
        if "add_env_reward" in dense:  # these kinds added the env reward as the dense section said
            section["add_env_reward"] = dense["add_env_reward"]
        if kind == "oracle" and progress is not None:
            section["progress"] = _section(progress)
        if kind == "rule_only" and u is not None:
            section["u"] = u
    section["kind"] = kind
    if kind != DEFAULT_KIND or "reward" in data:  # no section for the default kind: the field's default
        out["reward"] = section
    return out
