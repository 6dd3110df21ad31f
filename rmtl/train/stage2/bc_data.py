"""Behaviour-cloning data of the Stage-2 manager: rule-phase labels, read from a bc-labels
store or made by rolling out the Stage-1 worker with the rule, and the BC warm start on them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from rmtl.env.episode import run_episode
from rmtl.train.config import EnvConfig
from rmtl.reward.phase import RulePhaseSelector
from rmtl.train.config import Stage1Config, Stage2Config
from rmtl.train.eval.evaluate import load_checkpoint
from rmtl.train.stage2.manager.bc import bc_train, decision_points
from rmtl.train.stage2.manager.network import ManagerNet

BC_FIELDS = ("state", "phase_rule", "episode", "step", "success")
"""The arrays of BC data (the fields of a bc-labels store the manager learns from)."""


def read_bc_labels(path: str | Path) -> dict[str, np.ndarray]:
    """The :data:`BC_FIELDS` arrays of a bc-labels store (``rmtl bc-labels``)."""
    from storage.dataset import DatasetStore

    with DatasetStore.open(path, "r") as store:
        return store.read(fields=list(BC_FIELDS))


def worker_rule_rollouts(checkpoint: str | Path, episodes: int, *, seed: int = 0,
                         stages: Sequence[int] = (0, 1, 2, 3, 4), deterministic: bool = False,
                         env_config: EnvConfig | None = None, device: str = "cpu") -> dict[str, np.ndarray]:
    """Roll out a Stage-1 checkpoint with the rule's phase one-hot and record (state, rule phase).

    Episode i resets with seed ``seed + i`` at a start difficulty drawn (seeded by
    ``(seed, i)``) from curriculum stage ``stages[i % len(stages)]``; the reset state is
    recorded too (step 0, where the manager makes its first decision). Returns arrays
    state [N,25], phase_rule, episode, step, success (the fields of a bc-labels store).
    """
    from rmtl.train.eval.evaluate import ObsAdapter, checkpoint_task

    model, meta, normalizer = load_checkpoint(checkpoint, device)
    if env_config is None:
        cfg = meta.get("config", {})
        env_config = EnvConfig.make(**cfg["env"]) if "env" in cfg else EnvConfig()
    task = checkpoint_task(meta)
    adapt = ObsAdapter.for_model(model, normalizer, task)
    rule = RulePhaseSelector(task.phases)
    cols: dict[str, list] = {k: [] for k in ("state", "phase_rule", "episode", "step", "success")}
    model.set_random_seed(seed)
    env = task.make_env(env_config)
    try:
        for ep in range(int(episodes)):
            st = task.curriculum_stages[stages[ep % len(stages)]]
            u = float(np.random.default_rng([seed, ep]).uniform(st.d_min, st.d_max))
            first = len(cols["step"])

            def observe(obs: Any, info: Any, ep: int = ep, first: int = first) -> None:
                s = np.asarray(obs["observation"], dtype=np.float32)
                cols["state"].append(s)
                cols["phase_rule"].append(int(rule(s[None])[0]))
                cols["episode"].append(ep)
                cols["step"].append(len(cols["step"]) - first)
                cols["success"].append(bool(info.get("is_success", False)))

            run_episode(env, lambda obs: model.predict(adapt(obs), deterministic=deterministic)[0],
                        seed=seed + ep, options={"difficulty": u}, on_reset=observe,
                        on_step=lambda action, obs, terminated, truncated, info: observe(obs, info))
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


def run_bc(config: Stage2Config, net: ManagerNet, data: dict[str, np.ndarray],
           phase_names: Sequence[str]) -> dict[str, Any]:
    """BC warm start of ``net`` on ``data``; ``phase_names`` are the task's micro-tasks (one per output)."""
    rows = np.arange(len(data["phase_rule"]))
    if config.bc.decision_points_only:
        rows = decision_points(data["episode"], data["step"], config.manager.horizon)
    t0 = time.perf_counter()
    res = bc_train(net, data["state"][rows], data["phase_rule"][rows], data["episode"][rows],
                   updates=config.bc.updates, batch_size=config.bc.batch_size, learning_rate=config.bc.learning_rate,
                   prefill=config.bc.prefill_segments, heldout_fraction=config.bc.heldout_fraction, seed=config.seed,
                   phase_names=phase_names)
    return {**res.to_dict(), "episodes_total": int(len(np.unique(data["episode"]))),
            "rows_total": int(len(data["phase_rule"])), "seconds": round(time.perf_counter() - t0, 2)}
