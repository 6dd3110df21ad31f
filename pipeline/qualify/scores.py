"""A scorer's scores on the qualification set: a state-reading reward kind's, or a VLM's on the
families' frames (rendered once per renderer and input size, embedded once per model), or a hybrid
of both."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from pipeline.qualify.families import Family, StateSet, file_slug
from rmtl.errors import ConfigError


STATE_KINDS = ("oracle", "degraded_oracle", "rule_only")


def state_scorer(task: Any, reward: Mapping[str, Any], seed: int = 0) -> Any:
    """The reward kind of a ``reward`` section (a state-reading kind), built as a run of ``seed`` builds it."""
    from rmtl.reward.kinds import RunFacts, get_kind, reward_kind_config

    cfg = reward_kind_config(dict(reward))
    if cfg.kind not in STATE_KINDS:
        raise ConfigError(f"qualify --reward takes a kind that reads state ({', '.join(STATE_KINDS)}), not "
                          f"{cfg.kind!r}; score a VLM with --model")
    return get_kind(cfg.kind).build(cfg, task, RunFacts(seed=seed)), cfg


def kind_scores(kind: Any, states: np.ndarray) -> np.ndarray | None:
    """Per-micro-task scores [N, K] of a state kind (None for a kind without a scorer: rule-only)."""
    return kind.scores(states) if hasattr(kind, "scores") else None


def windowed_scores(scores: np.ndarray, rows: StateSet, window: int) -> np.ndarray:
    """Scores [N, K] as a reward with ``shaping.score_window = window`` sees them: each micro-task's
    score averaged over the episode's last ``window`` steps (rows in step order per episode)."""
    if window <= 1:
        return scores
    out = scores.astype(np.float64).copy()
    for e in np.unique(rows.episode):
        idx = np.flatnonzero(rows.episode == e)
        idx = idx[np.argsort(rows.step[idx], kind="stable")]
        csum = np.cumsum(np.vstack([np.zeros((1, scores.shape[1])), scores[idx]]), axis=0)
        n = np.arange(1, len(idx) + 1)
        lo = np.maximum(n - window, 0)
        out[idx] = (csum[n] - csum[lo]) / (n - lo)[:, None]
    return out


def frames_folder(root: Path, model: str, task: str, families: Sequence[Family]) -> Path:
    """The folder of a model's qualification stores under ``root`` (``<data dir>/qualification/<size>``):
    ``frames/<input px>px_<renderer id>``, shared by every model that sees the same frames (its
    declared renderer, its input size), each adding its own embeddings. A folder
    ``models/<model>`` from before frames were shared is used as it is when it exists."""
    from pipeline.jobs.render import renderer_profile
    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, rollout_config
    from rmtl.vlm import input_side

    legacy = root / "models" / file_slug(model)
    if legacy.is_dir():
        return legacy
    first = families[0].rollout if families else {}
    cfg = RenderAndEmbedConfig.make(task=task, model=model, store=str(root / "probe.zarr"), **first)
    resolution = cfg.resolution or input_side(model)  # the model's input size decides the frames' size
    renderer = renderer_profile(rollout_config(cfg, resolution))["renderer_id"]  # what decides the pixels
    return root / "frames" / f"{resolution}px_{renderer}"


def _no_state_cache(store: Any, model_id: str, kind: str) -> dict:
    """The cache step of a qualification store: skipped (nothing looks up states there)."""
    return {"files": [], "status": "not built (qualification store)", "indexed": 0}


def model_scores(model: str, task: str, families: Sequence[Family], store_dir: Path, rows: StateSet,
                 progress: bool = True, single_prompt: bool = False, views: Sequence[str] | None = None) -> np.ndarray:
    """Multi-view mean scores [N, K] of a VLM on the families' episodes, rendered on its declared
    renderer into one store per family (rendered once per renderer and input size, embedded once
    per model; :func:`frames_folder`). The model is loaded once for all families, and no FAISS
    state cache is built: nothing reads one on a qualification store. ``single_prompt``: the scores
    [N, 1] of the task's single global prompt instead (the single-prompt reward's goal). ``views``:
    the mean over these views only (default every stored view)."""
    from dataclasses import replace

    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, local_steps, run_steps
    from pipeline.stores.store_models import resolve_model_id
    from pipeline.stores.stored_text import text_embeddings
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.vlm import load_vlm
    from storage.dataset import DatasetStore

    from rmtl.reward.kinds.vlm import RewardConfig

    alpha = RewardConfig.model_fields["alpha"].default  # the reward's projection mix
    steps = replace(local_steps(progress), load_model=functools.cache(load_vlm), build_cache=_no_state_cache)
    parts = []
    for fam in families:
        cfg = RenderAndEmbedConfig.make(task=task, model=model, store=str(store_dir / f"{fam.name}.zarr"), **fam.rollout)
        run_steps(cfg, steps)
        with DatasetStore.open(cfg.store_path(), "r") as store:
            model_id = resolve_model_id(store, model)
            n = store.embedded_rows(model_id)
            cols = store.read(slice(0, n), fields=["state"])
            text = text_embeddings(store, model_id, single_prompt=single_prompt)
            per_view = goal_baseline_scores(store.embeddings(model_id, slice(0, n)), text.goals, text.baseline, alpha)
            if views is not None:
                stored = list(store.views)
                missing = [v for v in views if v not in stored]
                if missing:
                    raise ConfigError(f"view {missing[0]!r} is not among the qualification store's views {stored}")
                per_view = per_view[:, [stored.index(v) for v in views]]
        mine = rows.family == fam.name
        if len(cols["state"]) != int(mine.sum()) or not np.allclose(cols["state"], rows.states[mine], atol=1e-4):
            raise ConfigError(f"qualification store {cfg.store_path()} does not hold family {fam.name}'s episodes; "
                              "delete it and run qualify again")
        parts.append(per_view.mean(axis=1))
    return np.concatenate(parts) if parts else np.zeros((0, 0))


def hybrid_scores(model_scores: np.ndarray, oracle_scores: np.ndarray, vlm_phases: Sequence[int]) -> np.ndarray:
    """Scores [N, K] of the ``hybrid`` reward kind: the model's columns for the phases ``vlm_phases``,
    the oracle's for the others (each micro-task is shaped on its own bounds, so the columns never mix)."""
    cols = list(vlm_phases)
    out = np.array(oracle_scores, dtype=float, copy=True)
    out[:, cols] = model_scores[:, cols]
    return out
