"""Stage 1 (paper section 3.5, Table 1): the PPO worker on the phased multi-view VLM reward.

``train_stage1(config) -> run dir``. The loop is SB3's PPO; everything RMTL adds is a
vec-env wrapper (reward, phase one-hot; the stack: rmtl.train.envs.train_env) or a callback
(curriculum, logging, evaluation, checkpoints).

Run directory (see docs/stage1.md; handling shared with Stage 2: rmtl.train.run.run_dir, and the
session around ``learn``, which alone saves and restores checkpoints: rmtl.train.run.session):
``config.yaml``, ``run.json`` (+ ``run_resume_<step>.json``), ``progress_<start step>.csv``,
``tb/``, ``eval.csv``, ``curriculum.csv``, ``checkpoints/step_<N>/``, ``checkpoints/latest.txt``,
``summary.json``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from rmtl.errors import ConfigError
from rmtl.reward.kinds.vlm import RewardConfig
from rmtl.task import Task
from rmtl.train.callbacks import CurriculumCallback, PeriodicEvalCallback, TrainStatsCallback
from rmtl.train.config import Stage1Config, check_device
from rmtl.train.run.csv_log import read_csv
from rmtl.train.eval.evaluate import evaluate_policy_success
from rmtl.train.run.run_dir import check_model_file, open_run, resolve_checkpoint, run_files
from rmtl.train.run.session import RunSession
from rmtl.train.run.timing import Timings
from rmtl.train.envs.train_env import build_train_env, make_curriculum, task_of

RESUME_FREE_FIELDS = {"total_timesteps", "progress_bar", "output_dir", "checkpoint_every", "eval_every",
                      "eval_episodes", "torch_threads", "vec_env", "workers", "worker_threads", "device",
                      "keep_results", "validation_episodes", "test_episodes", "sweep_arm"}
"""Fields a resumed run may change; any other difference is refused."""

LOGS = ("eval.csv", "curriculum.csv", "summary.json", "validation.csv")
"""Files of a run that a fresh start in a used directory deletes (CSV logs are cut back on resume)."""


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


def check_init_policy(policy: str) -> None:
    """One line, before torch and SB3 load, if ``init_policy`` resolves to no readable SB3 model."""
    try:
        check_model_file(resolve_checkpoint(policy))
    except ConfigError as e:
        raise ConfigError(f"init_policy: {e}") from None


def warm_start(model: Any, policy: str) -> None:
    """Load the weights of a Stage-1 policy (``Stage1Config.init_policy``) into a new PPO model; its
    optimiser state is not taken (a new run's learning rate and schedule apply)."""
    import pickle
    import zipfile

    from stable_baselines3.common.save_util import load_from_zip_file

    check_init_policy(policy)  # a damaged zip is said as such, not as a mismatch
    ck = resolve_checkpoint(policy) / "model.zip"
    try:
        _, params, _ = load_from_zip_file(str(ck), device=model.device)
    except (RuntimeError, ValueError, KeyError, TypeError, OSError, EOFError, zipfile.BadZipFile,
            pickle.UnpicklingError) as e:
        why = " ".join(str(e).split())[:160] or type(e).__name__
        raise ConfigError(f"init_policy {ck} is not a readable SB3 model (truncated or damaged: {why}); restore it "
                          f"from a copy, or give another Stage-1 policy") from None
    if not isinstance(params, dict) or not isinstance(params.get("policy"), dict):
        raise ConfigError(f"init_policy {ck} holds no policy weights (policy.pth); restore it from a copy, or give "
                          f"another Stage-1 policy")
    try:
        model.policy.load_state_dict(params["policy"])  # the network only: never the saved optimiser
    except (RuntimeError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"init_policy {ck} does not fit this run's policy ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:160]}); give a policy of the same observation "
                          "layout and network (the same phase input and net_arch)") from None


def train_stage1(config: Stage1Config, *, resume: bool = True, vlm: Any = None, source: Any = None,
                 callbacks: list[Any] | tuple = (),
                 verbose: int = 0, task: Task | None = None) -> Path:
    """Train (or resume) a Stage-1 run; returns its run directory.

    With ``resume`` and a checkpoint in the run directory, training continues from the
    latest checkpoint (model, optimiser, step count, curriculum state, VecNormalize) up
    to ``config.total_timesteps``; CSV rows written after that checkpoint are dropped.
    ``config.total_timesteps`` is already rounded up to whole rollouts (:class:`Stage1Config`); a
    rounded count is said in one line here. Resumed runs are not bit-identical to uninterrupted ones (env states and RNG
    streams are reseeded with ``seed + step``). ``vlm``/``source``
    replace the model loaded from ``config.reward.model`` and the reward's embedding
    source (tests, the cached reward path); ``callbacks`` are extra SB3 callbacks. ``task``
    trains another task (its env, curriculum, phase rule, dense reference reward and micro-task
    prompts; :func:`rmtl.train.envs.train_env.build_train_env`) instead of pick-and-lift.
    """
    check_device(config.device)  # before the reward model loads
    if config.rounding_note():
        print(config.rounding_note())
    import torch
    from stable_baselines3 import PPO

    if config.torch_threads:
        torch.set_num_threads(int(config.torch_threads))
    task = task_of(config.task, task)
    if isinstance(config.reward, RewardConfig):
        # The texts and views the reward scores, spelled out: config.yaml records them, and a run
        # saved with them written out (or in reward layout v1) resumes under the same config.
        config = config.replace(reward=task.reward_config(config.reward))
    run_dir = config.run_dir()
    if config.init_policy and (not resume or not run_files(run_dir)):
        check_init_policy(config.init_policy)  # a new run warm-starts from it: a damaged one fails before the env
    ck, meta_prev = open_run(run_dir, config, resume=resume, free_fields=RESUME_FREE_FIELDS, logs=LOGS)

    timings = Timings()
    env = build_train_env(config.env_stack(), task, vlm=vlm, source=source, timings=timings)
    with RunSession(run_dir, config, env, ck, meta_prev, logs=LOGS, verbose=verbose) as session:
        curriculum_cb = CurriculumCallback(make_curriculum(task.curriculum_stages, curriculum=config.curriculum,
                                                           window=config.curriculum_window),
                                           run_dir / "curriculum.csv",
                                           verbose=verbose)
        if session.resumed:
            model = PPO.load(ck / "model.zip", env=env.venv, device=config.device)
            session.restore(ck, curriculum_cb)
        else:
            model = _ppo(config, env.venv)
            if config.init_policy:
                warm_start(model, config.init_policy)
        session.begin(model, variant=config.variant)

        def evaluate(m: Any):
            t0 = time.perf_counter()  # timed apart, so the rollout's own parts keep their meaning
            try:
                return evaluate_policy_success(m, config.env, config.eval_episodes, config.eval_seed,
                                               normalizer=env.normalizer,
                                               env=session.eval_env(lambda: task.make_env(config.env)), task=task)
            finally:
                timings.add("evaluation", time.perf_counter() - t0)

        stats_fn = env.source.stats if env.source is not None else None
        stats_cb = TrainStatsCallback(timings, stats_fn, phase_names=task.micro_tasks.names)
        eval_cb = PeriodicEvalCallback(evaluate, config.eval_every, run_dir / "eval.csv", verbose=verbose)
        meta: dict[str, Any] = {"variant": config.variant, "phase_input": config.phase_input,
                                "reward_kind": config.reward.kind, "reward": env.reward_env.kind.describe(),
                                "config": config.model_dump(mode="json")}
        if isinstance(config.reward, RewardConfig):  # the prompts its reward scores (its task's micro-tasks)
            meta["reward_prompts"] = config.reward.prompts.model_dump(mode="json")  # resolved above

        save_started = [0.0]

        def before_save(_: Path) -> None:
            save_started[0] = time.perf_counter()
            meta["wall_seconds"] = session.wall_seconds()
            meta["timings_seconds"] = timings.snapshot()
            if (config.cache.grow or config.cache.atlas) and env.source is not None and hasattr(env.source.inner, "save"):
                env.source.inner.save()  # persist the grown FAISS index with the checkpoint

        def after_save(ck: Path) -> None:
            if config.keep_results:
                from rmtl.train.eval.committed import keep_resume_state, validate_and_keep_best

                keep_resume_state(run_dir, ck)
                validate_and_keep_best(run_dir, ck, config.validation_episodes, device=config.device)
            timings.add("checkpoints", time.perf_counter() - save_started[0])  # the save and the validation

        ckpt_cb = session.checkpoint_callback(curriculum_cb, meta, before_save=before_save, after_save=after_save)
        steps, final = session.learn(model, [curriculum_cb, stats_cb, eval_cb, ckpt_cb, *callbacks], eval_cb=eval_cb)
        _write_summary(run_dir, config, steps, session.wall_seconds(), final, curriculum_cb, timings, stats_fn)
        if config.keep_results and steps >= config.total_timesteps:
            from rmtl.train.eval.committed import drop_resume_state, select_kept_run
            from rmtl.train.run.run_dir import latest_checkpoint

            select_kept_run(run_dir, latest_checkpoint(run_dir), config.test_episodes, device=config.device)
            drop_resume_state(run_dir)
    return run_dir


def _write_summary(run_dir: Path, config: Stage1Config, steps: int, wall: float, final: Any,
                   curriculum_cb: CurriculumCallback, timings: Timings, stats_fn: Any) -> None:
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
