"""What ``rmtl view`` takes (:class:`ViewConfig`) and where it writes (:func:`default_out`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from pipeline.stores.questions import StoreLocation
from rmtl.config import MAX_EPISODES
from rmtl.reward.projection import DEFAULT_ALPHA

HTML_EPISODES = 4
"""Episodes an HTML page shows when none are named (a page of a whole store would be huge)."""
RECORDING_EPISODES = 50
"""Episodes a recording holds when none are named (a store's first ones; six 96 px views are ~7 MB an episode)."""
ROLLOUT_EPISODES = 4
"""Episodes of a policy rolled out when none are named (episode ids 0..3)."""


class ViewConfig(StoreLocation):
    """``rmtl view``: a store's episodes, or a policy's rollouts rendered on the fly, with every number
    the reward computes on them, as a Rerun recording (.rrd; --spawn, --serve) or one HTML page (--html)."""

    policy: str | None = None
    """A Stage-1 policy to roll out and render now instead of reading a store: a run directory, a
    checkpoint folder such as its best/, or its model.zip."""
    episodes: tuple[int, ...] = ()
    """Episode ids (the store's, or a policy's seeded episodes); empty: a store's first 50 episodes in a
    recording, its first 4 on an HTML page, a policy's episodes 0-3."""
    model: str | None = None
    """Reward VLM: a stored model id or a spec (default: the store's model as the analyses pick it;
    for a policy's rollouts, rmtl-fetch-tiny). A model the store has no embeddings of embeds the frames now."""
    prompts: str | None = None
    """Prompt-set YAML file or a shipped set's name (default: the paper's prompts)."""
    alpha: float = Field(DEFAULT_ALPHA, ge=0, le=1)
    """Goal-baseline projection alpha."""
    bounds: Literal["adapted", "running"] = "adapted"
    """Shaping bounds: 'adapted' (held at p1/p99 of the shown episodes' scores per micro-task, as the
    exports) or 'running' (from 0.45/0.70, moving as in a fresh training run)."""
    compare: str | None = None
    """A second store (its episodes of the same ids), a second policy (rolled out on the same seeds) or a
    second reward model (on the same frames), logged beside the first."""
    compare_model: str | None = None
    """Reward model of a --compare store or policy (default: as --model)."""
    out: str | None = None
    """Output file (default <store>.analysis/view.rrd or view.html; for a policy,
    <data dir>/views/<run>_<checkpoint>.rrd or .html)."""
    html: bool = False
    """Write one self-contained HTML page (frame strips and score plots) instead of a recording."""
    spawn: bool = False
    """Also open the recording in the native Rerun viewer (needs a display)."""
    serve: bool = False
    """Also serve the recording to a browser (Rerun's web viewer) until Ctrl-C."""
    web_port: int = Field(9090, ge=1, le=65535)
    """HTTP port of --serve's web viewer (the data it shows comes from Rerun's server on port 9876)."""
    jpeg_quality: int = Field(0, ge=0, le=100)
    """Frames in the recording: 0 keeps the exact pixels; 1-100 JPEG-compresses them at that quality."""
    seed: int = Field(0, ge=0)
    """A policy's rollouts: episode i resets with seed + i."""
    stages: tuple[int, ...] = (0, 1, 2, 3, 4)
    """A policy's rollouts: the curriculum stages its episodes cycle through."""
    deterministic: bool = True
    """A policy's rollouts: the mean action (False: sampled, as in training)."""
    progress: bool = True
    """Show progress (a line every 30 s when stdout is not a terminal)."""

    @field_validator("episodes")
    @classmethod
    def _episodes(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(e < 0 or e >= MAX_EPISODES for e in v):
            raise ValueError(f"episode ids must be in 0..{MAX_EPISODES - 1}")
        if len(set(v)) != len(v):
            raise ValueError("episode ids repeat; name each once")
        return v

    @model_validator(mode="after")
    def _modes(self) -> ViewConfig:
        if self.policy is not None and self.store is not None:
            raise ValueError("--store and --policy both given; view a store or a policy's rollouts, not both")
        if self.spawn and self.serve:
            raise ValueError("--spawn and --serve both given; open the recording one way (or neither: the .rrd file)")
        if self.html and (self.spawn or self.serve):
            raise ValueError("--html writes a page for a browser; --spawn and --serve open a Rerun recording: "
                             "leave them out, or leave out --html")
        if self.compare_model is not None and self.compare is None:
            raise ValueError("--compare-model is the model of a --compare store or policy; give --compare too")
        return self

    @property
    def suffix(self) -> str:
        return ".html" if self.html else ".rrd"

    def shown_episodes(self, available: list[int] | None) -> list[int]:
        """The episode ids to show: the named ones, else (``available``: a store's ids) its first ones
        (RECORDING_EPISODES in a recording, HTML_EPISODES on a page), else (a policy) 0..ROLLOUT_EPISODES-1."""
        if self.episodes:
            return list(self.episodes)
        if available is None:
            return list(range(ROLLOUT_EPISODES))
        return list(available[:HTML_EPISODES if self.html else RECORDING_EPISODES])


def default_out(cfg: ViewConfig, policy_name: str | None = None) -> Path:
    """Where the output goes unless ``--out`` says: beside the store in ``<store>.analysis/`` (as the
    analyses), or for a policy's rollouts ``<data dir>/views/<policy_name>``."""
    if cfg.out is not None:
        return Path(cfg.out).expanduser()
    if cfg.policy is not None:
        from rmtl.provenance import data_dir

        return data_dir() / "views" / f"{policy_name or 'policy'}{cfg.suffix}"
    from pipeline.stores.analysis_dataset import beside_store

    return beside_store(cfg.store_path(), ".analysis") / f"view{cfg.suffix}"
