"""Why does a VLM-reward learner fail? Its own rollouts, read back from a store.

Input: a store of a policy's rollouts (``rmtl gate-set --checkpoint ...`` makes one, with
frames and embeddings) and, optionally, a reference store of the same model's embeddings
(expert episodes) to put the numbers in scale. From stored data only (no rendering, no
model), for every reward step (rows with step >= 1):

- the variant's shaped VLM reward (:func:`pipeline.analyses.return_ranking.variant_rewards`, with
  the adaptive bounds both stores share, so the two are on one scale) and its raw
  active-prompt score;
- the hand-written dense reward of the state (the dense reference learner's reward);
- gripper-cube distance, cube lift and rule phase.

What it answers:

- **does the VLM reward follow the task along the policy's own states?** Spearman of VLM
  vs dense reward, pooled and within each rule phase (within-phase is what the shaping
  rewards; pooled mostly shows the phase structure);
- **what does the policy do?** phase occupancy, final distance and lift, success; per-step
  traces and a PNG montage of frames of a few episodes, labelled with both rewards;
- **does it game the reward?** ``hacking``: the policy earns at least the reference's mean
  VLM reward per step while its mean dense reward per step is below the reference's (it is
  paid as well as the expert without doing the task); per phase, the policy's mean active
  score against the reference's in the same phase.

Writes ``diagnosis.json``, ``steps.csv`` (every reward step of both stores),
``traces.png``, ``reward_scatter.png`` and ``montage.png`` into ``out_dir`` (default
``<store>.analysis/diagnosis``).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from pipeline.stores.questions import StoreQuestion
from rmtl.config import MAX_EPISODES
from rmtl.errors import ConfigError
from rmtl.provenance import json_safe, portable_values
from rmtl.reward.quality_stats import spearman
from rmtl.tasks import get_task
from rmtl.train.variants import variant_names


def _phase_names() -> tuple[str, ...]:
    """The micro-tasks in phase order (the diagnosis reads pick-and-lift rollouts, the default task)."""
    return get_task().micro_tasks.names


def _steps(store: Any, model: str | None, variants: Sequence[str]) -> dict[str, Any]:
    """Per reward step of one store: rows, labels, dense reward, each variant's active score."""
    from pipeline.analyses.return_ranking import reward_steps, variant_scores
    from pipeline.stores.store_models import resolve_model_id

    model_id = resolve_model_id(store, model)
    steps = reward_steps(store, model_id, "diagnose")
    scores, configs = {}, {}
    for variant in variants:
        scores[variant], cfg, num_phases = variant_scores(store, model_id, steps.rows, steps.phase, variant, "diagnose")
        configs[variant] = (cfg.reward.shaping, num_phases, cfg.gamma, cfg.reward.add_env_reward)
    return {
        "path": str(store.path), "model_id": model_id, "rows": steps.rows, "episode": steps.episode,
        "step": steps.step, "phase": steps.phase, "distance": steps.distance, "lift": steps.lift, "scores": scores,
        "score": scores[variants[0]], "configs": configs,
        "dense": get_task().dense_reward(steps.state).astype(np.float64),
        "episode_ids": steps.ids, "success": steps.success, "episodes": steps.episodes,
    }


def _shared_bounds_rewards(parts: Sequence[dict[str, Any]], variants: Sequence[str]) -> None:
    """Each variant's shaped VLM reward of every step, with the adaptive bounds of all parts
    together (one scale for policy and reference)."""
    from rmtl.reward.replay import shaped_rewards

    phase = np.concatenate([p["phase"] for p in parts])
    offsets = np.cumsum([0] + [len(p["phase"]) for p in parts])
    episodes = [idx + o for p, o in zip(parts, offsets) for idx in p["episodes"]]
    for variant in variants:
        shaping, num_phases, _, _ = parts[0]["configs"][variant]
        score = np.concatenate([p["scores"][variant] for p in parts])
        reward = shaped_rewards(score, phase, episodes, shaping, num_phases, "adapted")
        for p, a, b in zip(parts, offsets[:-1], offsets[1:]):
            p.setdefault("rewards", {})[variant] = reward[a:b]
    for p in parts:
        p["vlm"] = p["rewards"][variants[0]]


def _discounted(p: dict[str, Any], r: np.ndarray, gamma: float, add_bonus: bool) -> np.ndarray:
    out = np.empty(len(p["episodes"]))
    for j, idx in enumerate(p["episodes"]):
        steps = r[idx].copy()
        if add_bonus and p["success"][j]:
            steps[-1] += 1.0
        out[j] = float(np.sum(steps * gamma ** np.arange(len(steps))))
    return out


def dense_returns(p: dict[str, Any]) -> np.ndarray:
    """The same return under the dense reference reward (with its success bonus), at the
    first variant's gamma: what the dense learner would prefer."""
    from rmtl.reward.kinds.dense import DenseRewardConfig

    gamma = next(iter(p["configs"].values()))[2]
    return _discounted(p, p["dense"], gamma, DenseRewardConfig().add_env_reward)


def episode_returns(p: dict[str, Any], variant: str) -> np.ndarray:
    """Discounted return of each episode as the learner sees it: the variant's shaped
    reward of every step, plus the env's success bonus on the last step of a successful
    episode (when the variant adds it), discounted by the variant's PPO gamma."""
    _, _, gamma, add_bonus = p["configs"][variant]
    return _discounted(p, p["rewards"][variant], gamma, add_bonus)


def summarise(p: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one store's steps (module docstring)."""
    last = np.array([idx[-1] for idx in p["episodes"]])
    out: dict[str, Any] = {
        "store": p["path"], "episodes": int(len(p["episode_ids"])), "success_rate": float(p["success"].mean()),
        "reward_steps": int(len(p["score"])), "mean_length": float(np.mean([len(i) for i in p["episodes"]])),
        "final_distance_m": float(np.median(p["distance"][last])), "final_lift_m": float(np.median(p["lift"][last])),
        "mean_vlm_reward": float(p["vlm"].mean()), "mean_dense_reward": float(p["dense"].mean()),
        "spearman_vlm_dense": spearman(p["vlm"], p["dense"]),
        "spearman_score_dense": spearman(p["score"], p["dense"]),
        "phases": {},
        "mean_return": {**{v: float(episode_returns(p, v).mean()) for v in p["rewards"]},
                        "dense_reference": float(dense_returns(p).mean())},
    }
    for k, name in enumerate(_phase_names()):
        m = p["phase"] == k
        out["phases"][name] = {
            "fraction": float(m.mean()), "mean_score": float(p["score"][m].mean()) if m.any() else None,
            "mean_vlm_reward": float(p["vlm"][m].mean()) if m.any() else None,
            "spearman_vlm_dense": spearman(p["vlm"][m], p["dense"][m]),
            "spearman_score_progress": spearman(p["score"][m], -p["distance"][m] if k < 2 else p["lift"][m]),
        }
    return out


def hacking_verdict(policy: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """Does the reward prefer what the policy does to what the reference does? (module docstring)"""
    paid = policy["mean_vlm_reward"] >= reference["mean_vlm_reward"]
    worse = policy["mean_dense_reward"] < reference["mean_dense_reward"]
    per_phase = {}
    for name in _phase_names():
        a, b = policy["phases"][name]["mean_score"], reference["phases"][name]["mean_score"]
        per_phase[name] = None if a is None or b is None else float(a - b)
    prefers = {v: bool(policy["mean_return"][v] > reference["mean_return"][v]) for v in policy["mean_return"]}
    return {"hacking": bool(paid and worse), "paid_at_least_reference": bool(paid),
            "dense_below_reference": bool(worse), "return_prefers_policy": prefers,
            "score_minus_reference_by_phase": per_phase}


def diagnose_rollouts(store: Any, reference: Any | None = None, model: str | None = None,
                      variants: Sequence[str] | None = None,
                      out_dir: str | Path | None = None, montage_episodes: int = 4, montage_view: str = "front",
                      show: bool = True) -> dict[str, Any]:
    """Diagnose a policy's stored rollouts (module docstring); the first of ``variants`` is
    the one traced and plotted, every one gets episode returns. Returns the JSON written."""
    from pipeline.stores.analysis_dataset import default_out_dir
    from pipeline.stores.store_rows import open_store

    if variants is None:
        variants = variant_names(analysis="rollout_diagnosis")
    parts = []
    with open_store(store) as st:
        if not variants:
            raise ConfigError("give at least one reward variant to diagnose")
        if montage_view not in st.views:  # before any work
            raise ConfigError(f"montage view {montage_view!r} is not in {st.path} (views: {', '.join(st.views)})")
        parts.append(_steps(st, model, variants))
        out = Path(out_dir) if out_dir is not None else default_out_dir(st) / "diagnosis"
        if reference is not None:
            with open_store(reference) as ref:
                parts.append(_steps(ref, parts[0]["model_id"], variants))
        _shared_bounds_rewards(parts, variants)
        out.mkdir(parents=True, exist_ok=True)
        result: dict[str, Any] = {"variants": list(variants), "model_id": parts[0]["model_id"], "policy": summarise(parts[0])}
        if reference is not None:
            result["reference"] = summarise(parts[1])
            result["verdict"] = hacking_verdict(result["policy"], result["reference"])
        _write_steps(out / "steps.csv", parts, ["policy", "reference"])
        _plot_traces(out / "traces.png", parts[0], montage_episodes)
        _plot_scatter(out / "reward_scatter.png", parts)
        _montage(out / "montage.png", st, parts[0], montage_episodes, montage_view)
    files = {n: str(out / n) for n in ("diagnosis.json", "steps.csv", "traces.png", "reward_scatter.png", "montage.png")}
    result["files"] = files
    result = json_safe(result)  # NaN (too few samples): null
    (out / "diagnosis.json").write_text(json.dumps(portable_values(result), indent=1))
    if show:
        print(format_summary(result))
    return result


def _write_steps(path: Path, parts: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source", "store_row", "episode", "step", "phase", "distance_m", "lift_m", "score", "vlm_reward",
                    "dense_reward"])
        for name, p in zip(names, parts):
            for i in range(len(p["score"])):
                w.writerow([name, int(p["rows"][i]), int(p["episode"][i]), int(p["step"][i]), _phase_names()[p["phase"][i]],
                            round(float(p["distance"][i]), 4), round(float(p["lift"][i]), 4),
                            round(float(p["score"][i]), 5), round(float(p["vlm"][i]), 5), round(float(p["dense"][i]), 5)])


def _shown_episodes(p: dict[str, Any], n: int) -> list[int]:
    """Indices into p['episodes']: failures first (what needs explaining), then successes."""
    order = np.argsort(p["success"], kind="stable")
    return [int(i) for i in order[:n]]


def _plot_traces(path: Path, p: dict[str, Any], n: int) -> None:
    from pipeline.analyses.plots import figure

    shown = _shown_episodes(p, n)
    fig, axes = figure(3.2 * len(shown), 5.4, 2, len(shown), sharey="row")
    for j, e in enumerate(shown):
        idx = p["episodes"][e]
        t = p["step"][idx]
        top, bottom = axes[0][j], axes[1][j]
        top.plot(t, p["distance"][idx] * 100, label="gripper-cube distance (cm)")
        top.plot(t, p["lift"][idx] * 100, label="cube lift (cm)")
        top.set_title(f"episode {int(p['episode_ids'][e])} ({'success' if p['success'][e] else 'failure'})")
        bottom.plot(t, p["vlm"][idx], label="VLM reward (shaped)")
        bottom.plot(t, p["dense"][idx], label="dense reward")
        bottom.set_xlabel("step")
    axes[0][0].legend(fontsize=7)
    axes[1][0].legend(fontsize=7)
    fig.savefig(path, dpi=110)


def _plot_scatter(path: Path, parts: Sequence[dict[str, Any]]) -> None:
    from pipeline.analyses.plots import figure

    fig, axes = figure(4.2 * len(_phase_names()), 3.8, 1, len(_phase_names()))
    for k, name in enumerate(_phase_names()):
        ax = axes[0][k]
        for p, label in zip(parts, ("policy", "reference")):
            m = p["phase"] == k
            ax.scatter(p["dense"][m], p["vlm"][m], s=3, alpha=0.4, label=f"{label} ({int(m.sum())} steps)")
        ax.set_title(f"{name} phase")
        ax.set_xlabel("dense reward")
        ax.set_ylabel("VLM reward (shaped)")
        ax.legend(fontsize=7, markerscale=3)
    fig.savefig(path, dpi=110)


def _montage(path: Path, store: Any, p: dict[str, Any], n: int, view: str, per_episode: int = 6) -> None:
    """Frames of one view at evenly spaced steps of the shown episodes, labelled."""
    from rmtl.viz import montage

    frames, labels = [], []
    for e in _shown_episodes(p, n):
        idx = p["episodes"][e]
        for i in idx[np.linspace(0, len(idx) - 1, per_episode).round().astype(int)]:
            frames.append(store.read(rows=int(p["rows"][i]), fields=["frames"], views=[view])["frames"][0])
            labels.append(f"e{int(p['episode'][i])} t{int(p['step'][i])} v{p['vlm'][i]:.2f} d{p['dense'][i]:.2f}")
    montage(np.stack(frames), labels, columns=per_episode, label_height=14).save(path)


def format_summary(result: dict[str, Any]) -> str:
    """A few lines a person reads first."""
    lines = []
    for name in ("policy", "reference"):
        s = result.get(name)
        if s is None:
            continue
        occ = ", ".join(f"{k} {v['fraction']:.2f}" for k, v in s["phases"].items())
        rho = s["spearman_vlm_dense"]
        lines.append(f"{name}: {s['episodes']} episodes, success {s['success_rate']:.2f}, final distance "
                     f"{s['final_distance_m'] * 100:.1f} cm, lift {s['final_lift_m'] * 100:.1f} cm; phases {occ}; "
                     f"mean VLM reward {s['mean_vlm_reward']:.3f}, dense {s['mean_dense_reward']:.3f}, "
                     f"Spearman(VLM, dense) {'n/a' if rho is None else f'{rho:.2f}'}")
    v = result.get("verdict")
    if v is not None:
        lines.append(f"hacking: {'yes' if v['hacking'] else 'no'} (paid at least the reference: "
                     f"{v['paid_at_least_reference']}, dense below the reference: {v['dense_below_reference']})")
        for name, prefers in v["return_prefers_policy"].items():
            lines.append(f"{name}: mean discounted return policy {result['policy']['mean_return'][name]:.3f}, "
                         f"reference {result['reference']['mean_return'][name]:.3f}: the reward "
                         f"{'prefers the policy' if prefers else 'prefers the reference'}")
    return "\n".join(lines)


class DiagnoseRolloutsConfig(StoreQuestion):
    """``rmtl diagnose-rollouts``: a policy's own rollouts against a reference."""

    store: str
    """Store of a policy's rollouts with embeddings (e.g. from rmtl gate-set --checkpoint)."""
    reference: str | None = None
    """Store of reference (expert) episodes embedded by the same model."""
    variants: tuple[str, ...] = variant_names(analysis="rollout_diagnosis")
    """Stage-1 variants; the first is traced and plotted."""
    episodes: int = Field(4, ge=1, le=MAX_EPISODES)
    """Episodes shown in the traces and the montage (failures first)."""
    view: str = "front"
    """Camera view of the montage."""


def run(cfg: DiagnoseRolloutsConfig) -> dict[str, Any]:
    """The rollout diagnosis a config describes (summary printed, JSON, CSV and PNGs written)."""
    return diagnose_rollouts(cfg.store, cfg.reference, cfg.model, list(cfg.variants), out_dir=cfg.out,
                             montage_episodes=cfg.episodes, montage_view=cfg.view)
