"""The ``rmtl qualify`` step: its config and ``run(config)``, one configuration's report
(pipeline.qualify.report) or several ranked (pipeline.qualify.compare)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.qualify.compare import compare
from pipeline.qualify.report import qualify
from rmtl.config import Config
from rmtl.errors import ConfigError


class QualifyConfig(Config):
    """``rmtl qualify``: will a scorer teach? Metrics on the qualification set, the battery, the map's verdict."""

    model: str | None = None
    """A VLM spec to qualify (rendered on its declared renderer)."""
    variant: str = "rmtl"
    """With --model: the reward configuration of this Stage-1 variant (its prompts and views), e.g.
    single_prompt_multi_view or single_prompt_single_view."""
    compare: bool = False
    """With --model: qualify every variant of --variants and rank them in one table."""
    variants: tuple[str, ...] = ("rmtl", "single_prompt_multi_view", "single_prompt_single_view")
    """The configurations --compare ranks."""
    vlm_micro_tasks: tuple[str, ...] = ()
    """With --model: qualify the hybrid in which the model scores only these micro-tasks and the oracle the rest."""
    reward: str | None = None
    """Instead of a model: a reward kind that reads state (oracle, degraded_oracle, rule_only)."""
    reward_config: dict[str, Any] = {}
    """Fields of that kind's config, e.g. --set reward_config.error.default.noise=0.3."""
    seed: int = 0
    """The run seed a state kind is built for (a degraded oracle's error seed follows it)."""
    families: str | None = None
    """Qualification-set file (default: pipeline/qualify/qualification_families.yaml)."""
    small: bool = False
    """The CI-sized set (a few episodes per family)."""
    out: str | None = None
    """Output directory (default <data dir>/qualification/reports)."""
    map: str | None = None
    """A learnability map file (default: the task's shipped map; 'rmtl qualify fit-map' writes one)."""


def check(cfg: QualifyConfig) -> None:
    """What a config asks that no qualification can do, in one line (before anything is read or written)."""
    if cfg.compare and (cfg.model is None or cfg.vlm_micro_tasks):
        raise ConfigError("--compare ranks reward configurations of one VLM: give --model M (and no --vlm-micro-tasks)")
    if cfg.reward is None and cfg.reward_config:
        raise ConfigError("reward_config is set but --reward is not; name the kind with --reward KIND")


def run(cfg: QualifyConfig, out_dir: Path, data_dir: Path) -> dict:
    """The qualification a config asks for, written into ``out_dir``: one configuration's report
    (:func:`qualify`), or with ``cfg.compare`` the ranking of ``cfg.variants`` (``pipeline.qualify.compare``)."""
    check(cfg)
    map_file = Path(cfg.map) if cfg.map else None
    if cfg.compare and cfg.model is not None:  # check() refused --compare without a model
        return compare(cfg.model, list(cfg.variants), out_dir, families_file=cfg.families, small=cfg.small,
                       data_dir=data_dir, seed=cfg.seed, map_file=map_file)
    reward = {**cfg.reward_config, "kind": cfg.reward} if cfg.reward is not None else None
    return qualify(model=cfg.model, reward=reward, families_file=cfg.families, small=cfg.small, out_dir=out_dir,
                   data_dir=data_dir, seed=cfg.seed, vlm_micro_tasks=cfg.vlm_micro_tasks, map_file=map_file,
                   variant=cfg.variant)
