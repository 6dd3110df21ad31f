"""Stage 2 (paper section 3.6, App. A, Table 2): the learned manager over a Stage-1 worker.

``train_stage2(config) -> run dir``. The worker is SB3's PPO loaded from a Stage-1
checkpoint; everything Stage 2 adds is a vec-env hook or a callback:

    Stage-1 stack (rmtl.train.stage1.build_train_env), with
      ManagerDecide    inserted directly below the reward wrapper (decisions every H steps)
      ManagerSegments  inserted directly above PhaseObservation (segments, episode-start decisions)
      one ExternalPhaseSelector driving both the reward's prompt and the phase one-hot
    FreezeWorkerCallback   actor frozen for the first freeze_steps env steps, then lr 1e-4
    ManagerCallback        REINFORCE update of the manager after every PPO rollout

Before RL the manager is warm-started by BC on rule labels (a bc-labels store, or the
worker rolled out with the rule: :func:`worker_rule_rollouts`).

Run directory (docs/stage2.md): ``config.yaml``, ``run.json`` (+ ``run_resume_<N>.json``),
``bc_labels.npz``, ``bc.json``, ``manager_bc.pt``, ``progress_<start>.csv``, ``tb/``,
``manager.csv``, ``eval.csv``, ``curriculum.csv``, ``checkpoints/step_<N>/`` (``model.zip``,
``manager.pt``, ``curriculum.json``, ``meta.json``), ``summary.json``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import yaml
from stable_baselines3.common.callbacks import BaseCallback

from rmtl.env.check import SuccessRate
from rmtl.env.curriculum import PAPER_STAGES
from rmtl.env.fetch_lift import EnvConfig, FetchPickAndLiftEnv
from rmtl.errors import ConfigError
from rmtl.phases import PHASES, phase_one_hot
from rmtl.reward.phase import RulePhaseSelector
from rmtl.train.artifacts import load_torch_state
from rmtl.train.callbacks import (
    CHECKPOINTS,
    CheckpointCallback,
    CurriculumCallback,
    PeriodicEvalCallback,
    TrainStatsCallback,
    append_csv,
    truncate_csv,
)
from rmtl.train.config import FINAL_STAGE_RANGE, Stage1Config, Stage2Config, deep_merge
from rmtl.train.evaluate import EvalResult, load_checkpoint, resolve_checkpoint
from rmtl.train.manager import (
    ManagerController,
    ManagerDecide,
    ManagerNet,
    ManagerSegments,
    ProgressSignal,
    bc_train,
    decision_points,
    reinforce_loss,
    segments_batch,
)
from rmtl.train.wrappers import PHASE_KEY, PhaseObservation

RESUME_FREE_FIELDS = {"total_timesteps", "progress_bar", "output_dir", "checkpoint_every", "eval_every",
                      "eval_episodes", "torch_threads", "device"}
ACTOR_PREFIXES = ("features_extractor.", "pi_features_extractor.", "mlp_extractor.policy_net.", "action_net.", "log_std")
"""Worker parameters frozen during the first freeze_steps (paper App. A); the critic trains."""
MANAGER_FILE = "manager.pt"
_FRESH = "start over with --fresh, or use another --out"


# ============================================================================ worker
def worker_stage1_config(config: Stage2Config) -> Stage1Config:
    """The worker's Stage-1 config (its checkpoint's meta.json) with ``config.stage1`` merged on top."""
    ck = resolve_checkpoint(config.worker)
    meta = json.loads((ck / "meta.json").read_text()) if (ck / "meta.json").is_file() else {}
    if "config" not in meta:
        raise ConfigError(f"worker checkpoint {ck} has no meta.json with its Stage-1 config")
    s1 = Stage1Config.make(**deep_merge(meta["config"], {**config.stage1, "progress_bar": False}))
    if not s1.phase_input:
        raise ConfigError("Stage 2 needs a worker trained with the phase one-hot (phase_input: true)")
    if s1.uses_vlm and s1.reward.single_prompt:
        # One goal, one phase: no micro-task for a manager to choose, no per-phase scores for its progress signal.
        raise ConfigError("Stage 2 needs a micro-task worker: a single-prompt worker has one phase and nothing to "
                          "choose (evaluate single-prompt runs with the rule, e.g. stage2-report --single-prompt)")
    return s1


def actor_parameters(policy: Any) -> list[tuple[str, Any]]:
    """(name, parameter) of the worker's actor: features, policy_net, action_net, log_std."""
    return [(n, p) for n, p in policy.named_parameters() if n.startswith(ACTOR_PREFIXES)]


def set_actor_frozen(model: Any, frozen: bool) -> None:
    for _, p in actor_parameters(model.policy):
        p.requires_grad_(not frozen)
        if frozen:
            p.grad = None  # a stale gradient would let Adam move a frozen parameter


class FreezeWorkerCallback(BaseCallback):
    """Freezes the actor while the rollout just collected ends at or before ``freeze_steps``;
    the first update after that unfreezes it and sets the worker lr to ``unfreeze_lr``.

    Checked at every rollout end (after collection, before PPO's update), so the actor of
    every checkpoint up to ``freeze_steps`` is bit-identical to the loaded worker.
    """

    def __init__(self, freeze_steps: int, unfreeze_lr: float, verbose: int = 0):
        super().__init__(verbose)
        self.freeze_steps = int(freeze_steps)
        self.unfreeze_lr = float(unfreeze_lr)
        self.frozen = False
        self.unfrozen_at: int | None = None

    def _apply(self) -> None:
        should = self.model.num_timesteps <= self.freeze_steps
        if should and not self.frozen:
            set_actor_frozen(self.model, True)
            self.frozen = True
        elif not should and (self.frozen or self.model.learning_rate != self.unfreeze_lr):
            from stable_baselines3.common.utils import FloatSchedule

            set_actor_frozen(self.model, False)
            self.frozen = False
            self.model.learning_rate = self.unfreeze_lr
            self.model.lr_schedule = FloatSchedule(self.unfreeze_lr)
            if self.unfrozen_at is None:
                self.unfrozen_at = int(self.model.num_timesteps)
            if self.verbose:
                print(f"worker actor unfrozen at {self.model.num_timesteps} env steps, lr {self.unfreeze_lr}")

    def _on_training_start(self) -> None:
        # A resumed run past the freeze continues unfrozen at the reduced lr.
        if self.model.num_timesteps > self.freeze_steps:
            self._apply()
        elif self.freeze_steps > 0:
            set_actor_frozen(self.model, True)
            self.frozen = True

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self._apply()
        self.logger.record("worker/actor_frozen", float(self.frozen))


# ============================================================================ BC data
def worker_rule_rollouts(checkpoint: str | Path, episodes: int, *, seed: int = 0,
                         stages: Sequence[int] = (0, 1, 2, 3, 4), deterministic: bool = False,
                         env_config: EnvConfig | None = None, device: str = "cpu") -> dict[str, np.ndarray]:
    """Roll out a Stage-1 checkpoint with the rule's phase one-hot and record (state, rule phase).

    Episode i resets with seed ``seed + i`` at a start difficulty drawn (seeded by
    ``(seed, i)``) from curriculum stage ``stages[i % len(stages)]``; the reset state is
    recorded too (step 0, where the manager makes its first decision). Returns arrays
    state [N,25], phase_rule, episode, step, success (the fields of a bc-labels store).
    """
    from rmtl.train.evaluate import ObsAdapter

    model, meta, normalizer = load_checkpoint(checkpoint, device)
    if env_config is None:
        cfg = meta.get("config", {})
        env_config = EnvConfig.make(**cfg["env"]) if "env" in cfg else EnvConfig()
    adapt = ObsAdapter.for_model(model, normalizer)
    rule = RulePhaseSelector()
    cols: dict[str, list] = {k: [] for k in ("state", "phase_rule", "episode", "step", "success")}
    model.set_random_seed(seed)
    env = FetchPickAndLiftEnv(env_config)
    try:
        for ep in range(int(episodes)):
            st = PAPER_STAGES[stages[ep % len(stages)]]
            u = float(np.random.default_rng([seed, ep]).uniform(st.d_min, st.d_max))
            obs, info = env.reset(seed=seed + ep, options={"difficulty": u})
            done, t = False, 0
            while True:
                s = np.asarray(obs["observation"], dtype=np.float32)
                cols["state"].append(s)
                cols["phase_rule"].append(int(rule(s[None])[0]))
                cols["episode"].append(ep)
                cols["step"].append(t)
                cols["success"].append(bool(info.get("is_success", False)))
                if done:
                    break
                action, _ = model.predict(adapt(obs), deterministic=deterministic)
                obs, _, terminated, truncated, info = env.step(action)
                done = terminated or truncated
                t += 1
    finally:
        env.close()
    return {
        "state": np.asarray(cols["state"], dtype=np.float32).reshape(-1, 25),
        "phase_rule": np.asarray(cols["phase_rule"], dtype=np.int64),
        "episode": np.asarray(cols["episode"], dtype=np.int64),
        "step": np.asarray(cols["step"], dtype=np.int64),
        "success": np.asarray(cols["success"], dtype=bool),
    }


def bc_dataset(config: Stage2Config, s1: Stage1Config, run_dir: Path) -> dict[str, np.ndarray]:
    """The BC labels: ``config.bc.labels`` (a bc-labels store) or the worker rolled out with the rule
    (cached as ``bc_labels.npz`` in the run directory)."""
    if config.bc.labels:
        from pipeline.analysis import read_bc_labels

        d = read_bc_labels(config.bc.labels)
        return {k: np.asarray(v) for k, v in d.items()}
    cache = run_dir / "bc_labels.npz"
    if cache.is_file():
        with np.load(cache) as z:
            return {k: z[k] for k in z.files}
    d = worker_rule_rollouts(config.worker, config.bc.episodes, seed=config.seed, stages=config.bc.stages,
                             deterministic=config.bc.deterministic, env_config=s1.env, device=config.device)
    np.savez_compressed(cache, **d)
    return d


def run_bc(config: Stage2Config, net: ManagerNet, data: dict[str, np.ndarray]) -> dict[str, Any]:
    rows = np.arange(len(data["phase_rule"]))
    if config.bc.decision_points_only:
        rows = decision_points(data["episode"], data["step"], config.manager.horizon)
    t0 = time.perf_counter()
    res = bc_train(net, data["state"][rows], data["phase_rule"][rows], data["episode"][rows],
                   updates=config.bc.updates, batch_size=config.bc.batch_size, learning_rate=config.bc.learning_rate,
                   prefill=config.bc.prefill_segments, heldout_fraction=config.bc.heldout_fraction, seed=config.seed)
    return {**res.to_dict(), "episodes_total": int(len(np.unique(data["episode"]))),
            "rows_total": int(len(data["phase_rule"])), "seconds": round(time.perf_counter() - t0, 2)}


# ============================================================================ manager callback
class ManagerCallback(BaseCallback):
    """After every PPO rollout: REINFORCE on the segments finished in it; logs manager/* and manager.csv."""

    def __init__(self, controller: ManagerController, config: Stage2Config, csv_path: Path | None = None,
                 optimizer: Any = None, verbose: int = 0):
        super().__init__(verbose)
        import torch

        self.controller = controller
        self.mcfg = config.manager
        self.csv_path = csv_path
        self.optimizer = optimizer or torch.optim.Adam(controller.net.parameters(), lr=self.mcfg.learning_rate)
        self.updates = 0

    def _on_step(self) -> bool:
        return True

    def update(self, segments: Sequence[Any]) -> dict[str, float]:
        """REINFORCE steps on ``segments``; returns the logged statistics."""
        import torch

        c, m = self.controller, self.mcfg
        if not segments:
            return {}
        b = segments_batch(segments, m.segment_return)
        net = c.net
        terms = None
        net.train()
        for _ in range(m.updates_per_rollout):
            terms = reinforce_loss(net(b["states"]), b["actions"], b["returns"], b["rules"], epsilon=c.epsilon,
                                   ent_coef=m.ent_coef, kl_coef=m.kl_coef, kl_smoothing=m.kl_smoothing)
            self.optimizer.zero_grad()
            terms.loss.backward()
            if m.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(net.parameters(), m.max_grad_norm)
            self.optimizer.step()
        net.eval()
        self.updates += 1
        probs = np.stack([s.probs for s in segments])
        acts, rules = b["actions"].numpy(), b["rules"].numpy()
        ent = -(probs * np.log(np.clip(probs, 1e-12, 1))).sum(-1)
        stats = {
            "segments": len(segments),
            "segment_return": float(b["returns"].mean()),
            "segment_progress": float(np.mean([s.progress_return() for s in segments])),
            "segment_worker_reward": float(np.mean([s.worker_reward for s in segments])),
            "entropy": float(ent.mean()),
            "agreement_rule": float((acts == rules).mean()),
            "greedy_agreement_rule": float((probs.argmax(-1) == rules).mean()),
            "step_agreement_rule": c.step_agreement(),
            "loss": float(terms.loss.detach()), "policy_loss": terms.policy, "kl_rule": terms.kl,
            "entropy_batch": terms.entropy, "updates": self.updates,
        }
        for k, name in enumerate(PHASES):
            stats[f"frac_{name}"] = float((acts == k).mean())
        return stats

    def _on_rollout_end(self) -> None:
        stats = self.update(self.controller.pop_segments())
        for k, v in stats.items():
            self.logger.record(f"manager/{k}", v)
        if stats and self.csv_path is not None:
            append_csv(self.csv_path, {"timesteps": int(self.num_timesteps),
                                       **{k: (round(v, 5) if isinstance(v, float) else v) for k, v in stats.items()}})

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.controller.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                "rng": self.controller.rng.bit_generator.state, "updates": self.updates,
                "hidden": list(self.mcfg.hidden), "horizon": self.mcfg.horizon}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.controller.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.controller.rng.bit_generator.state = state["rng"]
        self.updates = int(state.get("updates", 0))


def load_manager(path: str | Path) -> tuple[ManagerNet, int]:
    """(manager net, horizon) from a manager .pt file, a Stage-2 checkpoint dir or a Stage-2 run dir (latest)."""
    p = Path(path).expanduser().resolve()
    if p.is_dir():
        p = (p if (p / MANAGER_FILE).is_file() else resolve_checkpoint(p)) / MANAGER_FILE
    if not p.is_file():
        raise ConfigError(f"no manager at {p}")
    state = load_torch_state(p, "Stage-2 manager", "pass a manager written by rmtl train stage2")
    net = ManagerNet(state.get("hidden", (128, 128)))
    net.load_state_dict(state["net"])
    net.eval()
    return net, int(state.get("horizon", 3))


# ============================================================================ evaluation
@dataclasses.dataclass
class SelectorEval:
    """Success of a worker under one phase selector, with per-step phase traces."""

    result: EvalResult
    selector: str
    step_agreement: float
    """Fraction of steps whose active phase equals the rule's."""
    decision_agreement: float
    """Fraction of decisions (every H steps) equal to the rule's phase at that state."""
    traces: list[dict[str, list]]


def evaluate_selector(model: Any, env_config: EnvConfig | None = None, episodes: int = 50, seed: int = 1_000_000, *,
                      selector: str = "rule", manager: ManagerNet | None = None, horizon: int = 3,
                      normalizer: Any = None, deterministic: bool = True, traces: int = 0,
                      difficulty_range: tuple[float, float] = FINAL_STAGE_RANGE,
                      env: FetchPickAndLiftEnv | None = None) -> SelectorEval:
    """Seeded random-start episodes (as :func:`rmtl.train.evaluate.evaluate_policy_success`) with the
    phase one-hot from ``selector``: 'rule' (the distance rule every step), 'manager' (the greedy
    manager every ``horizon`` steps and at the episode start) or 'none' (a worker without phase input).
    The first ``traces`` episodes keep their per-step active phase, rule phase and distance."""
    from rmtl.env.state import gripper_cube_distance

    if selector not in ("rule", "manager", "none"):
        raise ConfigError(f"selector must be rule, manager or none, got {selector!r}")
    if selector == "manager" and manager is None:
        raise ConfigError("selector 'manager' needs a manager network")
    phase_input = PHASE_KEY in getattr(model.observation_space, "spaces", {})
    own = env is None
    env = env or FetchPickAndLiftEnv(env_config)
    rule = RulePhaseSelector()
    successes, lengths, agree, total, d_agree, d_total = 0, [], 0, 0, 0, 0
    out_traces: list[dict[str, list]] = []
    try:
        env.set_difficulty_range(*difficulty_range)
        for ep in range(int(episodes)):
            obs, info = env.reset(seed=int(seed) + ep)
            done, t, phase = False, 0, 0
            tr: dict[str, list] = {"phase": [], "rule": [], "distance": []}
            while not done:
                s = np.asarray(obs["observation"], dtype=np.float32)
                r = int(rule(s[None])[0])
                if selector == "manager":
                    if t % horizon == 0:
                        phase = int(manager.greedy(s[None])[0])
                        d_agree += int(phase == r)
                        d_total += 1
                else:
                    phase = r
                agree += int(phase == r)
                total += 1
                if ep < traces:
                    tr["phase"].append(phase)
                    tr["rule"].append(r)
                    tr["distance"].append(float(gripper_cube_distance(s)))
                o = dict(obs)
                if phase_input:
                    o[PHASE_KEY] = phase_one_hot(phase)
                if normalizer is not None:
                    o = normalizer.normalize_obs(o)
                action, _ = model.predict(o, deterministic=deterministic)
                obs, _, terminated, truncated, info = env.step(action)
                done = terminated or truncated
                t += 1
            successes += int(info["is_success"])
            lengths.append(info["step"])
            if ep < traces:
                tr["success"] = [bool(info["is_success"])]
                out_traces.append(tr)
    finally:
        if own:
            env.close()
    sr = SuccessRate(selector, float(difficulty_range[1]), int(episodes), successes,
                     float(np.mean(lengths)) if lengths else 0.0)
    lo, hi = sr.wilson_interval()
    res = EvalResult(int(episodes), successes, sr.rate, float(lo), float(hi), sr.mean_length, int(seed),
                     (float(difficulty_range[0]), float(difficulty_range[1])))
    return SelectorEval(res, selector, agree / total if total and selector != "none" else float("nan"),
                        d_agree / d_total if d_total else float("nan"), out_traces)


# ============================================================================ training
def _find_wrapper(venv: Any, cls: type) -> tuple[Any, Any]:
    """(the wrapper of type ``cls`` in the stack, the wrapper directly above it or None)."""
    above, cur = None, venv
    while cur is not None:
        if isinstance(cur, cls):
            return cur, above
        above, cur = cur, getattr(cur, "venv", None)
    raise ConfigError(f"no {cls.__name__} in the vec-env stack")


def build_stage2_env(s1: Stage1Config, controller: ManagerController, **kwargs: Any):
    """The Stage-1 stack of :func:`rmtl.train.stage1.build_train_env` with the manager hooks inserted
    and the controller's selector driving both the reward and the phase one-hot."""
    from rmtl.train.stage1 import build_train_env

    env = build_train_env(s1, **kwargs)
    reward_env = env.reward_env
    reward_env.venv = ManagerDecide(reward_env.venv, controller)  # below the reward: decide before scoring
    if hasattr(reward_env, "phase_selector"):
        reward_env.phase_selector = controller.selector
    phase_obs, above = _find_wrapper(env.venv, PhaseObservation)
    phase_obs.selector = controller.selector
    segs = ManagerSegments(phase_obs, controller)
    if above is None:
        env.venv = segs
    else:
        above.venv = segs
    if controller.progress is None:
        controller.progress = ProgressSignal(s1.n_envs, s1.reward.shaping, s1.dense if not s1.uses_vlm else None)
    return env


def _check_resumable(saved: dict[str, Any], config: Stage2Config, run_dir: Path) -> None:
    new = config.model_dump(mode="json")
    differ = sorted(k for k in set(saved) | set(new) if k not in RESUME_FREE_FIELDS and saved.get(k) != new.get(k))
    if differ:
        raise ConfigError(f"run directory {run_dir} holds a Stage-2 run with a different config ({', '.join(differ)}); "
                          "pass the same config to resume, another output_dir, or resume=False to start over there")


def latest_checkpoint(run_dir: Path) -> Path | None:
    from rmtl.train.stage1 import latest_checkpoint as latest

    ck = latest(run_dir)
    return ck if ck is not None and (ck / MANAGER_FILE).is_file() else None


def train_stage2(config: Stage2Config, *, resume: bool = True, vlm: Any = None, source: Any = None,
                 source_factory: Any = None, callbacks: Sequence[Any] = (), verbose: int = 0) -> Path:
    """Train (or resume) a Stage-2 run; returns its run directory.

    Fresh: load the worker checkpoint, BC-warm-start the manager, then PPO (worker, actor
    frozen for ``freeze_steps``) + REINFORCE (manager) for ``total_timesteps`` Stage-2
    env steps. With ``resume`` and a Stage-2 checkpoint in the run directory, training
    continues from it (worker, manager, optimisers, manager RNG, curriculum, step count).
    ``vlm``/``source``/``source_factory``/``callbacks`` as in :func:`train_stage1`.
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import CSVOutputFormat, HumanOutputFormat, Logger, TensorBoardOutputFormat

    from rmtl.provenance import write_run_record
    from rmtl.train.stage1 import close_train_envs, finish_learning, make_curriculum
    from rmtl.train.timing import Timings

    if config.torch_threads:
        torch.set_num_threads(int(config.torch_threads))
    run_dir = config.run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    saved = yaml.safe_load((run_dir / "config.yaml").read_text()) if (run_dir / "config.yaml").is_file() else None
    if saved is not None and "worker" not in saved:
        raise ConfigError(f"{run_dir} holds a run that is not a Stage-2 run; choose another output_dir")
    ck = latest_checkpoint(run_dir) if resume else None
    meta_prev: dict[str, Any] = {}
    if ck is not None:
        _check_resumable(saved or {}, config, run_dir)
        meta_prev = json.loads((ck / "meta.json").read_text())
    else:
        stale = not resume or saved is None or any(
            saved.get(k) != v for k, v in config.model_dump(mode="json").items() if k not in RESUME_FREE_FIELDS)
        if stale:  # starting over, or a different config: old curves and BC results must not be reused
            for name in ("eval.csv", "curriculum.csv", "manager.csv", "summary.json", "bc.json", "manager_bc.pt",
                         "bc_labels.npz"):
                (run_dir / name).unlink(missing_ok=True)
            (run_dir / CHECKPOINTS / "latest.txt").unlink(missing_ok=True)
    config.to_yaml(run_dir / "config.yaml")
    s1 = worker_stage1_config(config)
    worker_ck = resolve_checkpoint(config.worker)
    torch.manual_seed(config.seed)

    # ------------------------------------------------------------ manager (+ BC warm start)
    net = ManagerNet(config.manager.hidden)
    bc_info: dict[str, Any] = {}
    if ck is None:
        if (run_dir / "manager_bc.pt").is_file() and (run_dir / "bc.json").is_file():
            net.load_state_dict(load_torch_state(run_dir / "manager_bc.pt", "behaviour-cloned manager", _FRESH)["net"])
            bc_info = json.loads((run_dir / "bc.json").read_text())
        elif config.bc.enabled:
            data = bc_dataset(config, s1, run_dir)
            bc_info = run_bc(config, net, data)
            (run_dir / "bc.json").write_text(json.dumps(bc_info, indent=1))
            torch.save({"net": net.state_dict(), "hidden": list(config.manager.hidden),
                        "horizon": config.manager.horizon}, run_dir / "manager_bc.pt")
            if verbose:
                print(f"BC: held-out accuracy {bc_info['heldout_accuracy']:.3f} on {bc_info['heldout_samples']} samples")
    elif (run_dir / "bc.json").is_file():
        bc_info = json.loads((run_dir / "bc.json").read_text())
    net.eval()
    controller = ManagerController(net, s1.n_envs, horizon=config.manager.horizon, epsilon=config.manager.epsilon,
                                   seed=config.seed)

    # ------------------------------------------------------------ env + worker
    timings = Timings()
    env = build_stage2_env(s1, controller, vlm=vlm, source=source, source_factory=source_factory, timings=timings)
    curriculum = make_curriculum(s1) if config.curriculum == "continue" else make_curriculum(s1.replace(curriculum=False))
    curriculum_cb = CurriculumCallback(curriculum, run_dir / "curriculum.csv", verbose=verbose)
    manager_cb = ManagerCallback(controller, config, run_dir / "manager.csv")
    ppo_kw = dict(n_steps=s1.n_steps, batch_size=s1.batch_size, n_epochs=s1.n_epochs)
    src = ck if ck is not None else worker_ck
    model = PPO.load(src / "model.zip", env=env.venv, device=config.device, **ppo_kw)
    if env.normalizer is not None:
        from rmtl.train.artifacts import restore_normalizer

        restore_normalizer(env.normalizer, src)  # vecnormalize.json; a legacy pickle is refused
    if ck is not None:
        start = int(meta_prev["num_timesteps"])
        model.set_random_seed(config.seed + start)
        manager_cb.load_state_dict(load_torch_state(ck / MANAGER_FILE, "Stage-2 manager checkpoint", _FRESH))
        if (ck / "curriculum.json").is_file():
            curriculum_cb.load_state_dict(json.loads((ck / "curriculum.json").read_text()))
        for name in ("eval.csv", "curriculum.csv", "manager.csv"):
            truncate_csv(run_dir / name, start)
        write_run_record(run_dir, config, config.seed, name=f"run_resume_{start:09d}.json", resumed_from=str(ck),
                         start_timesteps=start)
    else:
        start = 0
        model.num_timesteps = 0
        model._episode_num = 0
        model.set_random_seed(config.seed)
        if config.curriculum == "continue" and (worker_ck / "curriculum.json").is_file():
            state = json.loads((worker_ck / "curriculum.json").read_text())
            curriculum.load_state_dict(state["curriculum"])
        write_run_record(run_dir, config, config.seed, worker=str(worker_ck), stage1=s1.model_dump(mode="json"))

    formats = [CSVOutputFormat(str(run_dir / f"progress_{start:09d}.csv")), TensorBoardOutputFormat(str(run_dir / "tb"))]
    if verbose:
        formats.append(HumanOutputFormat(__import__("sys").stdout))
    model.set_logger(Logger(str(run_dir), formats))
    if bc_info and ck is None:
        model.logger.record("bc/heldout_accuracy", bc_info.get("heldout_accuracy", float("nan")))

    eval_env: dict[str, FetchPickAndLiftEnv] = {}

    def evaluate(m: Any) -> EvalResult:
        if "env" not in eval_env:
            eval_env["env"] = FetchPickAndLiftEnv(s1.env)
        ev = evaluate_selector(m, s1.env, config.eval_episodes, config.eval_seed, selector="manager",
                               manager=controller.net, horizon=config.manager.horizon, normalizer=env.normalizer,
                               env=eval_env["env"])
        m.logger.record("eval/manager_step_agreement_rule", ev.step_agreement)
        m.logger.record("eval/manager_decision_agreement_rule", ev.decision_agreement)
        return ev.result

    freeze_cb = FreezeWorkerCallback(config.freeze_steps, config.unfreeze_learning_rate, verbose=verbose)
    stats_cb = TrainStatsCallback(timings, env.source.stats if env.source is not None else None)
    eval_cb = PeriodicEvalCallback(evaluate, config.eval_every, run_dir / "eval.csv", verbose=verbose)
    wall_prev = float(meta_prev.get("wall_seconds", 0.0))
    t_start = time.perf_counter()
    meta: dict[str, Any] = {"stage": 2, "worker": str(worker_ck), "config": s1.model_dump(mode="json"),
                            "stage2": config.model_dump(mode="json"), "bc": bc_info}

    def before_save(_: Path) -> None:
        meta["wall_seconds"] = wall_prev + time.perf_counter() - t_start
        meta["actor_frozen"] = freeze_cb.frozen
        d = run_dir / CHECKPOINTS / f"step_{int(model.num_timesteps):09d}"
        d.mkdir(parents=True, exist_ok=True)
        torch.save(manager_cb.state_dict(), d / MANAGER_FILE)

    ckpt_cb = CheckpointCallback(run_dir, config.checkpoint_every, curriculum_cb, meta, env.normalizer,
                                 on_save=before_save, verbose=verbose)
    remaining = config.total_timesteps - start
    try:
        if remaining > 0:
            # Order: the freeze and the manager update run at rollout end, before PPO's update.
            model.learn(remaining, callback=[freeze_cb, manager_cb, curriculum_cb, stats_cb, eval_cb, ckpt_cb,
                                             *callbacks],
                        reset_num_timesteps=False, progress_bar=config.progress_bar)
        steps, _ = finish_learning(run_dir, model, ckpt_cb, eval_cb, curriculum_cb, meta, env,
                                   resumed=ck is not None, start=start, before_save=before_save)
        from rmtl.train.report import read_csv

        rows = read_csv(run_dir / "eval.csv")
        mrows = read_csv(run_dir / "manager.csv")
        summary = {
            "stage": 2, "worker": str(worker_ck), "seed": config.seed, "env_steps": steps,
            "wall_seconds": round(wall_prev + time.perf_counter() - t_start, 1),
            "final_eval": rows[-1] if rows else {}, "bc": bc_info, "last_manager_update": mrows[-1] if mrows else {},
            "actor_unfrozen_at": freeze_cb.unfrozen_at, "curriculum": curriculum_cb.state_dict(),
            "timings_seconds_this_session": {k: round(v, 3) for k, v in timings.snapshot().items()},
        }
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    finally:
        close_train_envs(env, eval_env)
    return run_dir
