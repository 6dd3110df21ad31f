"""Stage 2 (paper section 3.6, App. A, Table 2): the learned manager over a Stage-1 worker.

``train_stage2(config) -> run dir``. The worker is SB3's PPO loaded from a Stage-1
checkpoint; everything Stage 2 adds is a vec-env hook or a callback:

    Stage-1 stack (rmtl.train.envs.train_env.build_train_env), with
      ManagerDecide    inserted directly below the reward wrapper (decisions every H steps)
      ManagerSegments  inserted directly above PhaseObservation (segments, episode-start decisions)
      one ExternalPhaseSelector driving both the reward's prompt and the phase one-hot
    FreezeWorkerCallback   actor frozen for the first freeze_steps env steps, then lr 1e-4
    ManagerCallback        REINFORCE update of the manager after every PPO rollout

Before RL the manager is warm-started by BC on rule labels (a bc-labels store, or the
worker rolled out with the rule: :func:`rmtl.train.stage2.bc_data.worker_rule_rollouts`).

The parts live beside this module: rmtl.train.stage2.manager_env (the stack), worker_freeze,
manager_callback, bc_data, selector_eval; run-directory handling is rmtl.train.run.run_dir's, and the
session around SB3's learn (resume, logger, eval env, every checkpoint) is rmtl.train.run.session's,
as in Stage 1.

Run directory (docs/stage2.md): ``config.yaml``, ``run.json`` (+ ``run_resume_<N>.json``),
``bc_labels.npz``, ``bc.json``, ``manager_bc.pt``, ``progress_<start>.csv``, ``tb/``,
``manager.csv``, ``eval.csv``, ``curriculum.csv``, ``checkpoints/step_<N>/`` (``model.zip``,
``manager.pt``, ``curriculum.json``, ``meta.json``), ``summary.json``, and at the end ``final/`` (the
last checkpoint as policy only: worker and manager weights without optimiser state, under 1 MB).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from rmtl.errors import ConfigError
from rmtl.reward.phase import RulePhaseSelector
from rmtl.train.run.artifacts import load_torch_state
from rmtl.train.stage2.bc_data import bc_dataset, run_bc
from rmtl.train.callbacks import CurriculumCallback, PeriodicEvalCallback, TrainStatsCallback
from rmtl.train.config import Stage1Config, Stage2Config, check_device, merge_stage1, rollout_rounding_note
from rmtl.train.run.csv_log import read_csv
from rmtl.train.eval.evaluate import EvalResult, resolve_checkpoint
from rmtl.train.stage2.manager.network import ManagerNet
from rmtl.train.stage2.manager.vec_env_hooks import ManagerController
from rmtl.train.stage2.manager_callback import MANAGER_FILE, ManagerCallback, write_final_policy
from rmtl.train.run.run_dir import FINAL, latest_checkpoint, open_run, saved_config
from rmtl.train.run.session import RunSession
from rmtl.train.stage2.selector_eval import evaluate_selector
from rmtl.train.stage2.manager_env import build_stage2_env
from rmtl.provenance import portable_path
from rmtl.train.run.timing import Timings
from rmtl.train.envs.train_env import make_curriculum, task_of
from rmtl.train.stage2.worker_freeze import FreezeWorkerCallback

RESUME_FREE_FIELDS = {"total_timesteps", "progress_bar", "output_dir", "checkpoint_every", "eval_every",
                      "eval_episodes", "torch_threads", "device"}
LOGS = ("eval.csv", "curriculum.csv", "manager.csv", "summary.json", "bc.json", "manager_bc.pt", "bc_labels.npz")
"""Files a fresh start deletes: the curves and the BC results of another config must not be reused."""
_FRESH = "start over with --fresh, or use another --out"


def worker_stage1_config(config: Stage2Config) -> Stage1Config:
    """The worker's Stage-1 config (its checkpoint's meta.json) with ``config.stage1`` merged on top."""
    from rmtl.train.run.run_dir import checkpoint_meta

    ck = resolve_checkpoint(config.worker)
    meta = checkpoint_meta(ck)  # one line if it is not a JSON object
    if "config" not in meta:
        raise ConfigError(f"worker checkpoint {ck} has no meta.json with its Stage-1 config")
    # merge_stage1: the meta may hold reward layout v1, an override may switch the kind.
    s1 = Stage1Config.make(**merge_stage1(meta["config"], {**config.stage1, "progress_bar": False}))
    if not s1.phase_input:
        raise ConfigError("Stage 2 needs a worker trained with the phase one-hot (phase_input: true)")
    if s1.reward.kind == "vlm" and s1.reward.single_prompt:
        # One goal, one phase: no micro-task for a manager to choose, no per-phase scores for its progress signal.
        raise ConfigError("Stage 2 needs a micro-task worker: a single-prompt worker has one phase and nothing to "
                          "choose (evaluate single-prompt runs with the rule, e.g. rmtl report --stage 2 --single-prompt)")
    return s1




def train_stage2(config: Stage2Config, *, resume: bool = True, vlm: Any = None, source: Any = None,
                 callbacks: Sequence[Any] = (), verbose: int = 0) -> Path:
    """Train (or resume) a Stage-2 run; returns its run directory.

    Fresh: load the worker checkpoint, BC-warm-start the manager, then PPO (worker, actor
    frozen for ``freeze_steps``) + REINFORCE (manager) for ``total_timesteps`` Stage-2
    env steps. With ``resume`` and a Stage-2 checkpoint in the run directory, training
    continues from it (worker, manager, optimisers, manager RNG, curriculum, step count).
    ``vlm``/``source``/``callbacks`` as in :func:`train_stage1`.
    """
    check_device(config.device)  # before the worker and the reward model load
    import torch
    from stable_baselines3 import PPO

    if config.torch_threads:
        torch.set_num_threads(int(config.torch_threads))
    run_dir = config.run_dir()
    saved = saved_config(run_dir)
    if saved is not None and "worker" not in saved:
        raise ConfigError(f"{run_dir} holds a run that is not a Stage-2 run; choose another output_dir")
    ck, meta_prev = open_run(run_dir, config, resume=resume, free_fields=RESUME_FREE_FIELDS, logs=LOGS,
                             needs=("model.zip", MANAGER_FILE), what="Stage-2 run")
    s1 = worker_stage1_config(config)
    worker_ck = resolve_checkpoint(config.worker)
    # The rollout size is the worker's, so Stage 2 can only say how its steps round, not round them in its config.
    if note := rollout_rounding_note(config.total_timesteps, s1.n_envs, s1.n_steps):
        print(note)
    torch.manual_seed(config.seed)

    # ------------------------------------------------------------ manager (+ BC warm start)
    task = task_of(s1.task)
    net = ManagerNet(config.manager.hidden, num_phases=len(task.micro_tasks.names), state_dim=task.key_spec.state_dim)
    bc_info: dict[str, Any] = {}
    if ck is None:
        if (run_dir / "manager_bc.pt").is_file() and (run_dir / "bc.json").is_file():
            net.load_state_dict(load_torch_state(run_dir / "manager_bc.pt", "behaviour-cloned manager", _FRESH)["net"])
            bc_info = json.loads((run_dir / "bc.json").read_text())
        elif config.bc.enabled:
            data = bc_dataset(config, s1, run_dir)
            bc_info = run_bc(config, net, data, task.micro_tasks.names)
            (run_dir / "bc.json").write_text(json.dumps(bc_info, indent=1))
            torch.save({"net": net.state_dict(), "hidden": list(config.manager.hidden),
                        "horizon": config.manager.horizon}, run_dir / "manager_bc.pt")
            if verbose:
                print(f"BC: held-out accuracy {bc_info['heldout_accuracy']:.3f} on {bc_info['heldout_samples']} samples")
    elif (run_dir / "bc.json").is_file():
        bc_info = json.loads((run_dir / "bc.json").read_text())
    net.eval()
    controller = ManagerController(net, s1.n_envs, rule=RulePhaseSelector(task.phases), num_phases=net.num_phases,
                                   horizon=config.manager.horizon, epsilon=config.manager.epsilon,
                                   seed=config.seed)

    # ------------------------------------------------------------ env + worker
    timings = Timings()
    env = build_stage2_env(s1.env_stack(), task, controller, vlm=vlm, source=source, timings=timings)
    with RunSession(run_dir, config, env, ck, meta_prev, logs=LOGS, verbose=verbose) as session:
        stages = task.curriculum_stages
        curriculum = make_curriculum(stages, curriculum=s1.curriculum and config.curriculum == "continue",
                                     window=s1.curriculum_window)
        curriculum_cb = CurriculumCallback(curriculum, run_dir / "curriculum.csv", verbose=verbose)
        manager_cb = ManagerCallback(controller, config, run_dir / "manager.csv", phase_names=task.micro_tasks.names)
        ppo_kw = dict(n_steps=s1.n_steps, batch_size=s1.batch_size, n_epochs=s1.n_epochs)
        src = ck if ck is not None else worker_ck
        model = PPO.load(src / "model.zip", env=env.venv, device=config.device, **ppo_kw)
        # The worker's normaliser and shaper bounds carry over into a fresh Stage 2; its curriculum
        # only with curriculum 'continue' (below), a resumed session's from its own checkpoint.
        session.restore(src, curriculum_cb if session.resumed else None)
        if session.resumed:
            manager_cb.load_state_dict(load_torch_state(ck / MANAGER_FILE, "Stage-2 manager checkpoint", _FRESH))
            session.begin(model)
        else:
            model.num_timesteps = 0
            model._episode_num = 0
            model.set_random_seed(config.seed)
            if config.curriculum == "continue" and (worker_ck / "curriculum.json").is_file():
                state = json.loads((worker_ck / "curriculum.json").read_text())
                curriculum.load_state_dict(state["curriculum"])
            session.begin(model, worker=str(worker_ck), stage1=s1.model_dump(mode="json"))
        if bc_info and ck is None:
            model.logger.record("bc/heldout_accuracy", bc_info.get("heldout_accuracy", float("nan")))

        def evaluate(m: Any) -> EvalResult:
            ev = evaluate_selector(m, s1.env, config.eval_episodes, config.eval_seed, selector="manager",
                                   manager=controller.net, horizon=config.manager.horizon, normalizer=env.normalizer,
                                   env=session.eval_env(lambda: task.make_env(s1.env)))
            m.logger.record("eval/manager_step_agreement_rule", ev.step_agreement)
            m.logger.record("eval/manager_decision_agreement_rule", ev.decision_agreement)
            return ev.result

        freeze_cb = FreezeWorkerCallback(config.freeze_steps, config.unfreeze_learning_rate, verbose=verbose)
        stats_cb = TrainStatsCallback(timings, env.source.stats if env.source is not None else None,
                                      phase_names=task.micro_tasks.names)
        eval_cb = PeriodicEvalCallback(evaluate, config.eval_every, run_dir / "eval.csv", verbose=verbose)
        meta: dict[str, Any] = {"stage": 2, "worker": portable_path(worker_ck), "config": s1.model_dump(mode="json"),
                                "stage2": config.model_dump(mode="json"), "bc": bc_info}

        def before_save(ck: Path) -> None:
            meta["wall_seconds"] = session.wall_seconds()
            meta["actor_frozen"] = freeze_cb.frozen
            ck.mkdir(parents=True, exist_ok=True)
            torch.save(manager_cb.state_dict(), ck / MANAGER_FILE)

        ckpt_cb = session.checkpoint_callback(curriculum_cb, meta, before_save=before_save)
        # Order: the freeze and the manager update run at rollout end, before PPO's update.
        steps, _ = session.learn(model, [freeze_cb, manager_cb, curriculum_cb, stats_cb, eval_cb, ckpt_cb, *callbacks],
                                 eval_cb=eval_cb)
        rows = read_csv(run_dir / "eval.csv")
        mrows = read_csv(run_dir / "manager.csv")
        summary = {
            "stage": 2, "worker": portable_path(worker_ck), "seed": config.seed, "env_steps": steps,
            "wall_seconds": round(session.wall_seconds(), 1),
            "final_eval": rows[-1] if rows else {}, "bc": bc_info, "last_manager_update": mrows[-1] if mrows else {},
            "actor_unfrozen_at": freeze_cb.unfrozen_at, "curriculum": curriculum_cb.state_dict(),
            "timings_seconds_this_session": {k: round(v, 3) for k, v in timings.snapshot().items()},
        }
        # final/: the last checkpoint as policy only, so the results keep it without checkpoints/
        last = latest_checkpoint(run_dir)
        if last is not None:
            write_final_policy(last, run_dir / FINAL)
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return run_dir
