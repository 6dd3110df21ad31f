"""Stage-2 BC labels: rule-phase labels on rollouts of a policy, written as a frames-free
dataset store (read back by rmtl.train.stage2.bc_data.read_bc_labels)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from pipeline.stores.questions import StoreLocation
from pipeline.jobs.render import RenderResult
from rmtl.config import MAX_EPISODES


class BCLabelsConfig(StoreLocation):
    """Rule-phase labels on rollouts of a policy: ``rmtl bc-labels``, the ``bc-labels`` flow and :func:`run`."""

    store: str | None = None
    """Store to write (states and rule-phase labels, no frames); default <data dir>/stores/<name>.zarr."""
    name: str = "bc-labels"
    """Dataset name used for the default store path."""
    policy: str = "expert"
    """'expert', 'random', 'behaviour:<name>' or an SB3 checkpoint (.zip)."""
    episodes: int = Field(250, ge=1, le=MAX_EPISODES)
    """Episodes to roll out."""
    noise_std: float = Field(0.15, ge=0)
    """Expert action noise."""
    stages: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Curriculum stages episodes cycle through."""
    seed: int = Field(0, ge=0)
    """Base episode seed."""
    chunk: int = Field(25, ge=1)
    """Whole episodes appended per commit (what a killed run resumes from)."""
    overwrite: bool = False
    """Replace an existing store."""
    minari: str | None = None
    """Also write a Minari dataset of this name (dense reference reward, BC labels in its infos;
    under $MINARI_DATASETS_PATH)."""


@dataclass(frozen=True)
class BCLabelsResult(RenderResult):
    """What ``bc_labels`` wrote: the rollout into the store, and the rows per rule-phase label."""

    phase_counts: dict[str, int] = field(default_factory=dict)
    minari: str | None = None
    """Id of the Minari dataset written beside the store (None: none asked for)."""

    def describe(self) -> str:
        """A few readable lines: episodes and rows written, the rows per label, where."""
        done = (f"rolled out {self.episodes_rendered} new episode(s), {self.episodes_total - self.episodes_rendered} "
                f"were already there (resumed)" if self.resumed else f"rolled out {self.episodes_rendered} episode(s)")
        total = sum(self.phase_counts.values()) or 1
        labels = ", ".join(f"{name} {n} ({n / total:.0%})" for name, n in self.phase_counts.items())
        lines = [f"{done}; the store holds {self.episodes_total} episodes, {self.rows} rows",
                 f"rule-phase labels: {labels}", f"wrote {self.store}"]
        if self.minari:
            lines.append(f"wrote Minari dataset {self.minari}")
        return "\n".join(lines)


def bc_label_rows(config: Any, episodes: Sequence[int], env: Any = None) -> dict[str, np.ndarray]:
    """Roll out ``episodes`` of ``config.policy`` without rendering; rows of (state, rule
    phase, episode, step, success, difficulty) ready for DatasetStore.append (frames=False).

    ``config`` is a pipeline.jobs.rollout.RolloutConfig (views/resolution are ignored).
    Episode plans and policies are pipeline.jobs.rollout's, so episode i is the same episode
    as in a rendered store with the same config.
    """
    from pipeline.jobs.rollout import rollout_episodes

    return rollout_episodes(config, list(episodes), render=False, env=env)


def bc_labels(
    path: str | os.PathLike[str],
    policy: str = "expert",
    episodes: int = 250,
    noise_std: float = 0.15,
    stages: Sequence[int] = (0, 1, 2, 3, 4),
    seed: int = 0,
    chunk: int = 25,
    overwrite: bool = False,
    progress: bool = True,
    minari: str | None = None,
) -> BCLabelsResult:
    """Rule-phase labels on rollouts of a policy (Stage-2 BC warm start), no frames.

    Writes a frames-free dataset store at ``path`` (``DatasetStore.create(frames=False)``)
    with state, key, episode, step, phase_rule (the label), success and difficulty per
    step; appends ``chunk`` whole episodes per commit, so a killed run resumes with only
    the missing episodes (settings must match, as for render-and-embed).
    policy: 'expert', 'random', 'behaviour:<name>' (pipeline.jobs.rollout) or an SB3 checkpoint (.zip).
    minari: also write the labels as the Minari dataset of that name (dense reference reward,
    infos with the BC label; pipeline.export.minari_export), replacing one of the same name.
    """
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.rollout import RolloutConfig
    from storage.dataset import DatasetStore

    config = RolloutConfig.make(episodes=episodes, policy=policy, noise_std=noise_std, stages=tuple(stages), seed=seed)
    done = render_to_store(path, config, chunk=chunk, overwrite=overwrite, progress=progress, render=False,
                           kind="bc_labels")
    with DatasetStore.open(path, "r") as store:
        labels = store.read(fields=["phase_rule"])["phase_rule"]
    counts = {name: int((labels == k).sum()) for k, name in enumerate(config.the_task().micro_tasks.names)}
    exported = None
    if minari is not None:
        from pipeline.export.minari_export import export_minari

        exported = export_minari(path, minari, reward="dense", overwrite=True)["dataset_id"]
    return BCLabelsResult(str(path), done.rows, done.episodes_rendered, episodes, done.resumed, counts, exported)


def run(cfg: BCLabelsConfig, progress: bool = True) -> BCLabelsResult:
    """The BC labels a config describes (``progress``: bars on the terminal)."""
    return bc_labels(cfg.store_path(), policy=cfg.policy, episodes=cfg.episodes, noise_std=cfg.noise_std,
                     stages=cfg.stages, seed=cfg.seed, chunk=cfg.chunk, overwrite=cfg.overwrite, progress=progress,
                     minari=cfg.minari)
