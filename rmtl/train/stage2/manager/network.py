"""The Stage-2 manager's network pi_M(phi | s) and how decisions are sampled from it
(epsilon-greedy behaviour distribution; argmax in evaluation)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

MIN_STD = 1e-2
"""Floor of the per-dimension input std (velocities are often ~0 in the BC data)."""


class ManagerNet(nn.Module):
    """pi_M(phi | s): standardised state [state_dim] -> MLP (ReLU) -> K = ``num_phases`` logits
    (the task's state width and number of micro-tasks)."""

    def __init__(self, hidden: Sequence[int] = (128, 128), *, num_phases: int, state_dim: int):
        super().__init__()
        layers: list[nn.Module] = []
        d = state_dim
        for h in hidden:
            layers += [nn.Linear(d, int(h)), nn.ReLU()]
            d = int(h)
        layers.append(nn.Linear(d, num_phases))
        self.net = nn.Sequential(*layers)
        self.register_buffer("mean", torch.zeros(state_dim))
        self.register_buffer("std", torch.ones(state_dim))
        self.num_phases = num_phases
        self.state_dim = state_dim

    @classmethod
    def from_state_dict(cls, state: dict, hidden: Sequence[int]) -> ManagerNet:
        """A net shaped like the one that saved ``state`` (its state width and number of phases
        are read from the saved tensors), with those weights loaded."""
        weights = [k for k in state if k.startswith("net.") and k.endswith(".weight")]
        num_phases = int(state[max(weights, key=lambda k: int(k.split(".")[1]))].shape[0])
        net = cls(hidden, num_phases=num_phases, state_dim=int(state["mean"].shape[0]))
        net.load_state_dict(state)
        return net

    def set_normalization(self, states: np.ndarray) -> None:
        s = torch.as_tensor(np.asarray(states, dtype=np.float32))
        self.mean.copy_(s.mean(0))
        self.std.copy_(s.std(0).clamp_min(MIN_STD))

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.net((states - self.mean) / self.std)

    @torch.no_grad()
    def probs(self, states: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(np.atleast_2d(np.asarray(states, dtype=np.float32)))
        return torch.softmax(self(x), -1).numpy()

    @torch.no_grad()
    def greedy(self, states: np.ndarray) -> np.ndarray:
        return self.probs(states).argmax(-1).astype(np.int64)


def behaviour_probs(probs: np.ndarray | torch.Tensor, epsilon: float):
    """Epsilon-greedy behaviour distribution mu = (1 - eps) pi + eps / K (what decisions are sampled from)."""
    k = probs.shape[-1]
    return (1.0 - epsilon) * probs + epsilon / k


def sample_decisions(net: ManagerNet, states: np.ndarray, epsilon: float, rng: np.random.Generator,
                     greedy: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(phases int64 [N], manager probs [N, K]): with probability eps a uniform phase, else a sample of pi
    (or its argmax when ``greedy``, as in evaluation)."""
    p = net.probs(states)
    if greedy:
        return p.argmax(-1).astype(np.int64), p
    mu = behaviour_probs(p, epsilon)
    u = rng.random((len(mu), 1))
    phases = (u > np.cumsum(mu, -1)).sum(-1).clip(0, p.shape[-1] - 1)
    return phases.astype(np.int64), p
