"""The frozen worker of Stage 2: its actor parameters are frozen for the first
``freeze_steps`` env steps (paper App. A), then train at a reduced learning rate."""

from __future__ import annotations

from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

ACTOR_PREFIXES = ("features_extractor.", "pi_features_extractor.", "mlp_extractor.policy_net.", "action_net.", "log_std")
"""Worker parameters frozen during the first freeze_steps (paper App. A); the critic trains."""


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
