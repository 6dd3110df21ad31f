"""The Stage-2 manager's behaviour-cloning warm start on rule labels (cross entropy), with
its episode-wise held-out split and accuracy report."""

from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Sequence

import numpy as np
import torch
from torch.nn import functional as F

from rmtl.train.stage2.manager.network import ManagerNet


@dataclasses.dataclass
class BCResult:
    train_samples: int
    heldout_samples: int
    train_episodes: int
    heldout_episodes: int
    updates: int
    final_loss: float
    train_accuracy: float
    heldout_accuracy: float
    heldout_per_phase: dict[str, float]
    confusion: list[list[int]]
    label_counts: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def decision_points(episodes: np.ndarray, steps: np.ndarray, horizon: int) -> np.ndarray:
    """Rows that are segment starts (step % H == 0 within each episode): where the manager decides."""
    return np.flatnonzero(np.asarray(steps) % int(horizon) == 0)


def split_episodes(episodes: np.ndarray, heldout_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row masks (train, held-out) splitting whole episodes."""
    ids = np.unique(episodes)
    rng = np.random.default_rng(seed)
    n_held = int(round(len(ids) * heldout_fraction)) if len(ids) > 1 else 0
    n_held = min(max(n_held, 1 if heldout_fraction > 0 and len(ids) > 1 else 0), len(ids) - 1)
    held = set(rng.permutation(ids)[:n_held].tolist())
    mask = np.array([e in held for e in episodes])
    return ~mask, mask


def accuracy(net: ManagerNet, states: np.ndarray, labels: np.ndarray) -> float:
    if len(labels) == 0:
        return float("nan")
    return float((net.greedy(states) == np.asarray(labels)).mean())


def bc_train(net: ManagerNet, states: np.ndarray, labels: np.ndarray, episodes: np.ndarray | None = None, *,
             updates: int = 3500, batch_size: int = 64, learning_rate: float = 3e-4, prefill: int = 512,
             heldout_fraction: float = 0.2, seed: int = 0, optimizer: torch.optim.Optimizer | None = None,
             phase_names: Sequence[str]) -> BCResult:
    """Fit ``net`` to rule labels by cross entropy: ``updates`` Adam steps on minibatches of
    ``batch_size`` drawn (with replacement) from the training episodes' samples.

    The input standardisation is set from the training states. ``prefill``: the buffer
    must hold at least this many samples before the first update (Table 2: 512 segments).
    Accuracy is reported on the held-out episodes (``heldout_fraction`` of them), per phase
    under ``phase_names`` (the task's micro-task names, one per output of ``net``).
    """
    if len(phase_names) != net.num_phases:
        raise ValueError(f"{len(phase_names)} phase names for a manager with {net.num_phases} outputs")
    states = np.asarray(states, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    episodes = np.arange(len(labels)) if episodes is None else np.asarray(episodes)
    train, held = split_episodes(episodes, heldout_fraction, seed)
    if train.sum() < prefill:
        raise ValueError(f"BC needs at least {prefill} pre-filled segments, the training episodes hold {int(train.sum())}; "
                         "roll out more episodes or lower bc.prefill_segments")
    xs, ys = states[train], labels[train]
    net.set_normalization(xs)
    opt = optimizer or torch.optim.Adam(net.parameters(), lr=learning_rate)
    gen = torch.Generator().manual_seed(int(seed))
    x_t, y_t = torch.as_tensor(xs), torch.as_tensor(ys)
    loss = torch.tensor(float("nan"))
    net.train()
    for _ in range(int(updates)):
        idx = torch.randint(len(ys), (int(batch_size),), generator=gen)
        loss = F.cross_entropy(net(x_t[idx]), y_t[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    hx, hy = states[held], labels[held]
    pred = net.greedy(hx) if len(hy) else np.zeros(0, dtype=np.int64)
    k_phases = net.num_phases
    confusion = np.zeros((k_phases, k_phases), dtype=np.int64)
    np.add.at(confusion, (hy, pred), 1)
    per_phase = {name: (float(confusion[k, k] / confusion[k].sum()) if confusion[k].sum() else float("nan"))
                 for k, name in enumerate(phase_names)}
    return BCResult(
        int(train.sum()), int(held.sum()), int(len(np.unique(episodes[train]))), int(len(np.unique(episodes[held]))),
        int(updates), float(loss.detach()), accuracy(net, xs, ys), accuracy(net, hx, hy), per_phase,
        confusion.tolist(), {name: int((labels == k).sum()) for k, name in enumerate(phase_names)},
    )
