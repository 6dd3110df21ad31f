"""The Stage-2 manager's training hook (REINFORCE after every PPO rollout) and its saved form."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from rmtl.errors import ConfigError
from rmtl.train.run.artifacts import load_torch_state
from rmtl.train.config import Stage2Config
from rmtl.train.run.csv_log import append_csv
from rmtl.train.eval.evaluate import resolve_checkpoint
from rmtl.train.stage2.manager.loss import reinforce_loss, segments_batch
from rmtl.train.stage2.manager.network import ManagerNet
from rmtl.train.stage2.manager.vec_env_hooks import ManagerController

MANAGER_FILE = "manager.pt"
"""The manager's file in a Stage-2 checkpoint directory."""


class ManagerCallback(BaseCallback):
    """After every PPO rollout: REINFORCE on the segments finished in it; logs manager/* and manager.csv
    (the share of decisions per micro-task under ``phase_names``, the task's, one per manager output)."""

    def __init__(self, controller: ManagerController, config: Stage2Config, csv_path: Path | None = None,
                 optimizer: Any = None, verbose: int = 0, *, phase_names: Sequence[str]):
        super().__init__(verbose)
        import torch

        self.controller = controller
        self.mcfg = config.manager
        self.csv_path = csv_path
        self.optimizer = optimizer or torch.optim.Adam(controller.net.parameters(), lr=self.mcfg.learning_rate)
        self.updates = 0
        if len(phase_names) != controller.net.num_phases:
            raise ConfigError(f"{len(phase_names)} phase names for a manager with {controller.net.num_phases} outputs")
        self.phase_names = tuple(phase_names)

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
        for k, name in enumerate(self.phase_names):
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
    net = ManagerNet.from_state_dict(state["net"], state.get("hidden", (128, 128)))
    net.eval()
    return net, int(state.get("horizon", 3))


def write_final_policy(ck: Path, dest: Path, device: str = "cpu") -> None:
    """A Stage-2 checkpoint as policy only: the worker's weights and normaliser with a fresh optimiser
    (:func:`rmtl.train.eval.committed.write_policy_into`) and the manager's network and horizon without
    its optimiser or random state; small enough to commit, and what :func:`load_manager` reads. Both
    are written beside ``dest`` and renamed into place together, so ``dest`` never holds a worker
    without its manager."""
    import torch

    from rmtl.train.eval.committed import write_policy_into
    from storage.whole_file import dir_written_whole

    state = load_torch_state(ck / MANAGER_FILE, "Stage-2 manager", "pass a checkpoint written by rmtl train stage2")
    with dir_written_whole(dest) as into:
        write_policy_into(ck, into, device)
        torch.save({k: state[k] for k in ("net", "hidden", "horizon") if k in state}, into / MANAGER_FILE)
