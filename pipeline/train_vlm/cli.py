"""``python -m pipeline.train_vlm`` and ``rmtl train-reward-vlm``: the options besides
:class:`TrainVLMConfig` and what the command runs (its command line: rmtl.command_table); the
config is parsed before anything heavy loads."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import tyro
from pydantic import Field

from pipeline.train_vlm.config import TrainVLMConfig
from rmtl.config import Config
from rmtl.errors import ConfigError


class TrainVLMOptions(Config):
    """The data and the output of ``train-reward-vlm`` (the model card records them, not the config)."""

    store: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """Dataset store(s) with frames (repeatable)."""
    render_episodes: int = Field(0, ge=0)
    """Render this many expert episodes instead."""
    random_episodes: int = Field(0, ge=0)
    """And this many random-action episodes."""
    resolution: int = 96
    """Frame size of rendered episodes (px)."""
    workers: int = Field(1, ge=1)
    """Render processes."""
    out: str
    """Output directory of the weights and model card."""


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``python -m pipeline.train_vlm``: train from stores, or render the data first; returns
    the exit status (errors: one line on stderr, rmtl.console)."""
    from rmtl.command_table import COMMANDS
    from rmtl.config_cli import run_standalone

    return run_standalone(COMMANDS["train-reward-vlm"], argv, prog or "python -m pipeline.train_vlm")


def train_from_options(cfg: TrainVLMConfig, options: TrainVLMOptions) -> None:
    """Train the domain reward VLM from stores and/or freshly rendered episodes into ``--out``."""
    from pipeline.train_vlm.data import TrainingData
    from pipeline.train_vlm.heldout import summary
    from pipeline.train_vlm.export import invoking_command, store_renderers, write_model_card, write_renderer
    from pipeline.train_vlm.loop import train_reward_vlm
    from rmtl.console import check_output_dir
    from rmtl.outputs import check_writable_into
    from storage.dataset import DatasetStore

    stores = list(options.store)
    render_episodes, random_episodes = options.render_episodes, options.random_episodes
    resolution, workers, out = options.resolution, options.workers, Path(options.out)
    if not stores and not render_episodes and not random_episodes:
        raise ConfigError("train-reward-vlm has no training data: give --store STORE (repeatable) or "
                          "--render-episodes N (and --random-episodes N); see 'rmtl train-reward-vlm --help'")
    check_output_dir(out, "--out")  # before any model or data loads
    # A new or empty folder, or this command's own run (resumed); never a store, a model, a run of another kind.
    found = check_writable_into(out, own=("vlm-run",), writes="a reward model",
                                fix="choose a new or empty --out folder")
    if found is not None and found[0] == "vlm-run" and earlier_run_is_done(out, cfg):
        return
    for path in stores:
        DatasetStore.open(path, "r")  # a missing or foreign store fails now
    parts, desc = [], []
    init_vlm = None
    if stores:
        tower = None
        if cfg.tune == "text":  # the locked tower's id finds its stored embeddings under any model id
            from rmtl.vlm import load_vlm

            init_vlm = load_vlm(cfg.init, device=cfg.device, precision="fp32")  # trained below, not loaded twice
            tower = init_vlm.image_tower_id
        stream = cfg.stream_frames and cfg.tune == "all"
        parts.append(TrainingData.from_stores(stores, embeddings_of=cfg.init if cfg.tune == "text" else None,
                                              image_tower=tower, stream=stream,
                                              holdout_fraction=cfg.holdout_fraction if cfg.tune == "text" or stream
                                              else None))
        desc.append(f"stores {', '.join(stores)}")
    if render_episodes or random_episodes:
        from pipeline.jobs.rollout import RolloutConfig, map_rollouts

        offset = int(max(p.episode.max() for p in parts)) + 1 if parts else 0
        for policy, n in (("expert", render_episodes), ("random", random_episodes)):
            if n:
                rc = RolloutConfig.make(episodes=n, policy=policy, resolution=resolution, seed=cfg.seed + offset)
                t = time.perf_counter()
                batches = list(map_rollouts(rc, list(range(n)), workers=workers, chunk=4))
                parts.append(TrainingData.from_batches(batches, rc.views, policy == "expert", offset))
                print(f"rendered {n} {policy} episodes, {len(parts[-1])} rows in {time.perf_counter() - t:.0f} s", flush=True)
                desc.append(f"{n} {policy} episodes ({len(parts[-1])} states x {len(rc.views)} views, "
                            f"{resolution} px, curriculum stages 0-4, noise {rc.noise_std}/{2 * rc.noise_std})")
                offset += n
    data = TrainingData.concat(parts)
    renderers = store_renderers(stores)
    metrics = train_reward_vlm(data, cfg, out, vlm=init_vlm)
    # Freshly rendered frames have no recorded render setting: the model then declares none.
    renderer = None if render_episodes or random_episodes else write_renderer(out, renderers)
    write_model_card(out, cfg, "; ".join(desc), metrics, invoking_command(), renderer)
    print(f"final: {summary(metrics['final'])}\nwrote {out}")


RESUME_FREE = ("device", "frame_cache_gb")
"""Settings a resumed run may change: where it runs, not what it trains."""
EXTEND = ("steps", "time_budget_s")
"""Settings that train an unfinished run (or a finished one) further: the weights are retrained."""


def earlier_run_is_done(out: Path, cfg: TrainVLMConfig) -> bool:
    """A ``train-reward-vlm`` run already in ``out`` (its ``checkpoint.pt``): resumed only with its own
    settings (``run.json``), or with more steps; True when it is finished and these settings would train
    it no further, so nothing is trained and nothing rewritten (its weights, run.json and model card
    keep describing each other). One line (ConfigError) for other settings."""
    import json

    from rmtl.provenance import portable_values

    def read(name: str) -> dict:
        try:
            value = json.loads((out / name).read_text())
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    saved = read("run.json").get("config")
    now = portable_values(cfg.model_dump(mode="json"))
    if isinstance(saved, dict):
        try:  # fields added since the run started count as their defaults
            saved = portable_values(TrainVLMConfig.make(**saved).model_dump(mode="json"))
        except ConfigError:
            pass
    else:
        saved = now  # a run that stopped before recording its settings: nothing to compare
    differ = sorted(k for k in set(saved) | set(now) if k not in RESUME_FREE and saved.get(k) != now.get(k))
    metrics = read("metrics.json")
    finished = "steps_done" in metrics and (out / "model_card.md").is_file() and \
        (out / "open_clip_model.safetensors").is_file()
    more = finished and int(cfg.steps) > int(metrics["steps_done"]) and "stopped_early_at" not in metrics
    if any(k not in EXTEND for k in differ) or (differ and finished and not more):
        shown = ", ".join(f"{k} {saved.get(k)!r} there, {now.get(k)!r} here" for k in differ[:3])
        raise ConfigError(f"--out {out} holds a train-reward-vlm run with other settings ({shown}"
                          f"{', ...' if len(differ) > 3 else ''}); its weights, run.json and model card describe that "
                          f"run: give its settings (in {out / 'run.json'}) to resume it, or choose another --out")
    if finished and not differ:
        print(f"{out} already holds the finished model of these settings ({metrics['steps_done']} steps); nothing "
              f"to train and nothing rewritten (choose another --out to train again)")
        return True
    return False
