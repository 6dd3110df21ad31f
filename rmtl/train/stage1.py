"""Stage 1 (paper section 3.5, Table 1): the PPO worker on the phased multi-view VLM reward.

``train_stage1(config) -> run dir``. The loop is SB3's PPO; everything RMTL adds is a
vec-env wrapper (reward, phase one-hot) or a callback (curriculum, logging, evaluation,
checkpoints). The vec-env stack, innermost first::

    FetchPickAndLiftEnv (TerminalFrames for VLM rewards)  x n_envs, Dummy/SubprocVecEnv
    SimTimer                 times simulation
    VLMRewardVecEnv | DenseRewardVecEnv   the reward
    PhaseObservation         phase one-hot (unless phase_input is off)
    VecMonitor               episode returns/lengths
    VecNormalize             only with normalize_observations

Run directory (see docs/stage1.md): ``config.yaml``, ``run.json`` (+ ``run_resume_<step>.json``),
``progress_<start step>.csv``, ``tb/``, ``eval.csv``, ``curriculum.csv``,
``checkpoints/step_<N>/``, ``checkpoints/latest.txt``, ``summary.json``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from rmtl.env.curriculum import PAPER_STAGES, ReverseCurriculum
from rmtl.env.fetch_lift import EnvConfig, FetchPickAndLiftEnv
from rmtl.errors import ConfigError
from rmtl.train.callbacks import (
    CHECKPOINTS,
    LATEST,
    CheckpointCallback,
    CurriculumCallback,
    PeriodicEvalCallback,
    TrainStatsCallback,
    save_checkpoint,
    truncate_csv,
)
from rmtl.train.config import Stage1Config
from rmtl.train.evaluate import evaluate_policy_success
from rmtl.train.timing import SimTimer, TimedSource, Timings
from rmtl.train.wrappers import PHASE_KEY, DenseRewardVecEnv, PhaseObservation

SourceFactory = Callable[[Stage1Config, Any], Any]
"""(config, loaded VLM) -> EmbeddingSource; replaces the default render-and-embed source."""

RESUME_FREE_FIELDS = {"total_timesteps", "progress_bar", "output_dir", "checkpoint_every", "eval_every",
                      "eval_episodes", "torch_threads", "vec_env", "workers", "worker_threads", "device"}
"""Fields a resumed run may change; any other difference is refused."""


def _make_env(env_config: EnvConfig, terminal_frames: bool):
    env = FetchPickAndLiftEnv(env_config)
    if terminal_frames:
        from rmtl.reward.wrapper import TerminalFrames

        env = TerminalFrames(env)
    return env


def cache_source(config: Stage1Config, vlm: Any) -> Any:
    """The cached reward path: FAISS state-cache lookups, render and embed only the misses
    (``rmtl.reward.cached_source.CachedEmbeddingSource`` over ``config.cache.store``)."""
    from rmtl.reward.cached_source import CachedEmbeddingSource

    c = config.cache
    if c.atlas:
        from rmtl.reward.scorer import PhasedScorer

        scorer = PhasedScorer.from_config(config.reward, vlm.encode_text)
        overlay = c.overlay or str(config.run_dir() / "overlay.zarr")
        return CachedEmbeddingSource.open_catalogue(
            c.atlas, vlm, overlay, radius=c.radius, views=config.reward.active_views,
            renderer_id=config.env.render_profile()["renderer_id"], batch_size=config.reward.batch_size,
            audit_every=c.audit_every, audit_scorer=lambda e: scorer(e).aggregate)
    return CachedEmbeddingSource.open(c.store, vlm, radius=c.radius, views=config.reward.active_views,
                                      append=c.grow, batch_size=config.reward.batch_size, save_every=c.persist_every)


@dataclasses.dataclass
class TrainEnv:
    """The training vec env and the parts of it the trainer talks to."""

    venv: Any
    reward_env: Any
    source: TimedSource | None
    normalizer: Any
    timings: Timings


def build_train_env(config: Stage1Config, *, vlm: Any = None, source: Any = None,
                    source_factory: SourceFactory | None = None, timings: Timings | None = None) -> TrainEnv:
    """The Stage-1 vec-env stack of the module docstring (seeding is left to PPO)."""
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecMonitor, VecNormalize

    timings = timings or Timings()
    make = functools.partial(_make_env, config.env, config.uses_vlm)
    if config.vec_env == "workers":
        from rmtl.train.vec_env import ProcessGroupVecEnv

        raw = ProcessGroupVecEnv([make] * config.n_envs, config.workers, config.worker_threads)
    else:
        raw = (SubprocVecEnv if config.vec_env == "subproc" else DummyVecEnv)([make for _ in range(config.n_envs)])
    venv: Any = SimTimer(raw, timings)
    timed = None
    if config.uses_vlm:
        from rmtl.reward import VLMEmbeddingSource, VLMRewardVecEnv

        if vlm is None:
            from rmtl.vlm.loader import load_vlm

            vlm = load_vlm(config.reward.model, config.reward.device, config.reward.precision)
        if source is None:
            if source_factory is not None:
                source = source_factory(config, vlm)
            elif config.cache.store or config.cache.atlas:
                source = cache_source(config, vlm)
            else:
                source = VLMEmbeddingSource(vlm, config.reward.batch_size)
        timed = TimedSource(source, timings)
        venv = reward_env = VLMRewardVecEnv(venv, config.reward, vlm=vlm, source=timed)
    else:
        venv = reward_env = DenseRewardVecEnv(venv, config.dense)
    if config.phase_input:
        venv = PhaseObservation(venv)
    venv = VecMonitor(venv)
    normalizer = None
    if config.normalize_observations:
        keys = [k for k in venv.observation_space.spaces if k != PHASE_KEY]
        venv = normalizer = VecNormalize(venv, norm_obs=True, norm_reward=False, norm_obs_keys=keys)
    return TrainEnv(venv, reward_env, timed, normalizer, timings)


def make_curriculum(config: Stage1Config) -> ReverseCurriculum:
    """The paper's stages; without curriculum, the same object pinned at the final stage."""
    start = 0 if config.curriculum else len(PAPER_STAGES) - 1
    return ReverseCurriculum(PAPER_STAGES, window=config.curriculum_window, start_stage=start)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    p = Path(run_dir) / CHECKPOINTS / LATEST
    if not p.is_file():
        return None
    ck = p.parent / p.read_text().strip()
    return ck if (ck / "model.zip").is_file() else None


def _check_resumable(saved: dict[str, Any], config: Stage1Config, run_dir: Path) -> None:
    new = config.model_dump(mode="json")
    differ = sorted(k for k in set(saved) | set(new) if k not in RESUME_FREE_FIELDS and saved.get(k) != new.get(k))
    if differ:
        raise ConfigError(
            f"run directory {run_dir} holds a run with a different config ({', '.join(differ)}); "
            "pass the same config to resume, another output_dir, or resume=False to start over there"
        )


def _ppo(config: Stage1Config, venv: Any):
    from stable_baselines3 import PPO

    return PPO(
        "MultiInputPolicy", venv,
        learning_rate=config.learning_rate, n_steps=config.n_steps, batch_size=config.batch_size,
        n_epochs=config.n_epochs, gamma=config.gamma, gae_lambda=config.gae_lambda, clip_range=config.clip_range,
        ent_coef=config.ent_coef, vf_coef=config.vf_coef, max_grad_norm=config.max_grad_norm,
        policy_kwargs={"net_arch": {"pi": list(config.net_arch_pi), "vf": list(config.net_arch_vf)}},
        seed=config.seed, device=config.device, verbose=0,
    )


def train_stage1(config: Stage1Config, *, resume: bool = True, vlm: Any = None, source: Any = None,
                 source_factory: SourceFactory | None = None, callbacks: list[Any] | tuple = (),
                 verbose: int = 0) -> Path:
    """Train (or resume) a Stage-1 run; returns its run directory.

    With ``resume`` and a checkpoint in the run directory, training continues from the
    latest checkpoint (model, optimiser, step count, curriculum state, VecNormalize) up
    to ``config.total_timesteps``; CSV rows written after that checkpoint are dropped.
    Resumed runs are not bit-identical to uninterrupted ones (env states and RNG
    streams are reseeded with ``seed + step``). ``vlm``/``source``/``source_factory``
    replace the model loaded from ``config.reward.model`` and the reward's embedding
    source (tests, the cached reward path); ``callbacks`` are extra SB3 callbacks.
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import CSVOutputFormat, HumanOutputFormat, Logger, TensorBoardOutputFormat

    from rmtl.provenance import write_run_record

    if config.torch_threads:
        torch.set_num_threads(int(config.torch_threads))
    run_dir = config.run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    ck = latest_checkpoint(run_dir) if resume else None
    meta_prev: dict[str, Any] = {}
    if ck is not None:
        saved = yaml.safe_load((run_dir / "config.yaml").read_text()) if (run_dir / "config.yaml").is_file() else {}
        _check_resumable(saved or {}, config, run_dir)
        meta_prev = json.loads((ck / "meta.json").read_text())
    elif resume is False and latest_checkpoint(run_dir) is not None:
        # Starting over in a used directory: old curves must not mix with the new run.
        for name in ("eval.csv", "curriculum.csv", "summary.json"):
            (run_dir / name).unlink(missing_ok=True)
        (run_dir / CHECKPOINTS / LATEST).unlink(missing_ok=True)
    config.to_yaml(run_dir / "config.yaml")

    timings = Timings()
    env = build_train_env(config, vlm=vlm, source=source, source_factory=source_factory, timings=timings)
    curriculum_cb = CurriculumCallback(make_curriculum(config), run_dir / "curriculum.csv", verbose=verbose)
    if ck is not None:
        start = int(meta_prev["num_timesteps"])
        model = PPO.load(ck / "model.zip", env=env.venv, device=config.device)
        model.set_random_seed(config.seed + start)
        if (ck / "curriculum.json").is_file():
            curriculum_cb.load_state_dict(json.loads((ck / "curriculum.json").read_text()))
        if env.normalizer is not None:
            from rmtl.train.artifacts import restore_normalizer

            restore_normalizer(env.normalizer, ck)  # vecnormalize.json; a legacy pickle is refused
        for name in ("eval.csv", "curriculum.csv"):
            truncate_csv(run_dir / name, start)
        write_run_record(run_dir, config, config.seed, name=f"run_resume_{start:09d}.json",
                         resumed_from=str(ck), start_timesteps=start)
    else:
        start = 0
        model = _ppo(config, env.venv)
        write_run_record(run_dir, config, config.seed, variant=config.variant)

    formats = [CSVOutputFormat(str(run_dir / f"progress_{start:09d}.csv")), TensorBoardOutputFormat(str(run_dir / "tb"))]
    if verbose:
        formats.append(HumanOutputFormat(__import__("sys").stdout))
    model.set_logger(Logger(str(run_dir), formats))

    eval_env: dict[str, FetchPickAndLiftEnv] = {}

    def evaluate(m: Any):
        if "env" not in eval_env:
            eval_env["env"] = FetchPickAndLiftEnv(config.env)
        return evaluate_policy_success(m, config.env, config.eval_episodes, config.eval_seed,
                                       normalizer=env.normalizer, env=eval_env["env"])

    stats_fn = env.source.stats if env.source is not None else None
    stats_cb = TrainStatsCallback(timings, stats_fn)
    eval_cb = PeriodicEvalCallback(evaluate, config.eval_every, run_dir / "eval.csv", verbose=verbose)
    wall_prev = float(meta_prev.get("wall_seconds", 0.0))
    t_start = time.perf_counter()
    meta: dict[str, Any] = {"variant": config.variant, "phase_input": config.phase_input,
                            "reward_kind": config.reward_kind, "config": config.model_dump(mode="json")}

    def before_save(_: Path) -> None:
        meta["wall_seconds"] = wall_prev + time.perf_counter() - t_start
        meta["timings_seconds"] = timings.snapshot()
        if (config.cache.grow or config.cache.atlas) and env.source is not None and hasattr(env.source.inner, "save"):
            env.source.inner.save()  # persist the grown FAISS index with the checkpoint

    ckpt_cb = CheckpointCallback(run_dir, config.checkpoint_every, curriculum_cb, meta, env.normalizer,
                                 on_save=before_save, verbose=verbose)
    remaining = config.total_timesteps - start
    try:
        if remaining > 0:
            model.learn(remaining, callback=[curriculum_cb, stats_cb, eval_cb, ckpt_cb, *callbacks],
                        reset_num_timesteps=False, progress_bar=config.progress_bar)
        steps, final = finish_learning(run_dir, model, ckpt_cb, eval_cb, curriculum_cb, meta, env,
                                       resumed=ck is not None, start=start, before_save=before_save)
        wall = wall_prev + time.perf_counter() - t_start
        _write_summary(run_dir, config, steps, wall, final, curriculum_cb, timings, stats_fn)
    finally:
        close_train_envs(env, eval_env)
    return run_dir


def finish_learning(run_dir: Path, model: Any, ckpt_cb: CheckpointCallback, eval_cb: Any,
                    curriculum_cb: CurriculumCallback, meta: dict, env: Any, *, resumed: bool, start: int,
                    before_save: Any) -> tuple[int, Any]:
    """After ``learn``: save the final checkpoint unless it exists, evaluate unless done at
    this step. Returns (env steps, final evaluation or None)."""
    steps = int(model.num_timesteps)
    if ckpt_cb.last_saved != steps and (not resumed or steps != start):
        before_save(run_dir)
        save_checkpoint(run_dir, model, curriculum_cb, meta, env.normalizer)
    final = None
    if eval_cb.last_eval_step != steps:
        if eval_cb.model is None:
            eval_cb.init_callback(model)
        final = eval_cb.run_eval()
    return steps, final


def close_train_envs(env: Any, eval_env: dict) -> None:
    """Close the training vec env, its embedding source and the lazily made eval env."""
    env.venv.close()
    if env.source is not None and hasattr(env.source.inner, "close"):
        env.source.inner.close()
    if "env" in eval_env:
        eval_env["env"].close()


def _write_summary(run_dir: Path, config: Stage1Config, steps: int, wall: float, final: Any,
                   curriculum_cb: CurriculumCallback, timings: Timings, stats_fn: Any) -> None:
    from rmtl.train.report import read_csv

    rows = read_csv(run_dir / "eval.csv")
    last = rows[-1] if rows else {}
    secs = timings.snapshot()
    collected = sum(v for k, v in secs.items() if k != "ppo_update")
    summary = {
        "variant": config.variant,
        "seed": config.seed,
        "env_steps": steps,
        "wall_seconds": round(wall, 1),
        "final_eval": last,
        "curriculum": curriculum_cb.state_dict(),
        "stages": [dataclasses.asdict(s) for s in curriculum_cb.curriculum.stages],
        "timings_seconds_this_session": {k: round(v, 3) for k, v in secs.items()},
        "cache_stats": stats_fn() if stats_fn is not None else None,
        "rollout_seconds_this_session": round(collected, 3),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
