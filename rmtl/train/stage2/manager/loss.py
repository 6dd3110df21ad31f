"""The Stage-2 manager's REINFORCE objective (docs/stage2.md): z-scored segment returns,
log-probability of the epsilon-greedy behaviour distribution, entropy bonus and the
KL(manager || smoothed rule) anchor; and the batch of finished segments it trains on."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING
from collections.abc import Sequence

import numpy as np
import torch
from torch.nn import functional as F

from rmtl.train.stage2.manager.network import behaviour_probs

if TYPE_CHECKING:
    from rmtl.train.stage2.manager.vec_env_hooks import Segment


def smoothed_rule(rule_phases: torch.Tensor, num_phases: int, smoothing: float) -> torch.Tensor:
    """q_rule = (1 - eta) onehot(rule) + eta / K."""
    return (1.0 - smoothing) * F.one_hot(rule_phases.long(), num_phases).float() + smoothing / num_phases


def zscore(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / (std + eps) over the batch (population std); zeros for a single element."""
    if x.numel() < 2:
        return torch.zeros_like(x)
    return (x - x.mean()) / (x.std(unbiased=False) + eps)


@dataclasses.dataclass
class LossTerms:
    loss: torch.Tensor
    policy: float
    entropy: float
    kl: float


def reinforce_loss(logits: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor, rule_phases: torch.Tensor, *,
                   epsilon: float = 0.2, ent_coef: float = 0.01, kl_coef: float = 0.30,
                   kl_smoothing: float = 0.1, standardize: bool = True) -> LossTerms:
    """The manager loss of docs/stage2.md over N segments::

        A_n  = (R_n - mean R) / (std R + 1e-8)                      (rollout-internal z-score)
        mu   = (1 - eps) softmax(logits) + eps / K                   (behaviour distribution)
        L    = -mean_n A_n log mu(a_n | s_n)
               - c_H mean_n H(pi(. | s_n))
               + w_KL mean_n KL(pi(. | s_n) || q_rule(. | s_n)),    q_rule = (1 - eta) onehot(rule) + eta / K

    ``returns`` are segment returns (already advantages when ``standardize`` is False).
    """
    k = logits.shape[-1]
    logp = torch.log_softmax(logits, -1)
    p = logp.exp()
    adv = zscore(returns.float()) if standardize else returns.float()
    mu = behaviour_probs(p, epsilon)
    logmu_a = torch.log(mu.gather(-1, actions.long().view(-1, 1)).squeeze(-1).clamp_min(1e-12))
    policy = -(adv.detach() * logmu_a).mean()
    entropy = -(p * logp).sum(-1).mean()
    q = smoothed_rule(rule_phases, k, kl_smoothing)
    kl = (p * (logp - torch.log(q))).sum(-1).mean()
    loss = policy - ent_coef * entropy + kl_coef * kl
    return LossTerms(loss, float(policy.detach()), float(entropy.detach()), float(kl.detach()))


def segments_batch(segments: Sequence[Segment], kind: str = "progress") -> dict[str, torch.Tensor]:
    return {
        "states": torch.as_tensor(np.stack([s.state for s in segments]).astype(np.float32)),
        "actions": torch.as_tensor(np.array([s.phase for s in segments], dtype=np.int64)),
        "rules": torch.as_tensor(np.array([s.rule for s in segments], dtype=np.int64)),
        "returns": torch.as_tensor(np.array([s.value(kind) for s in segments], dtype=np.float32)),
    }
