"""The Stage-2 manager (paper section 3.6, App. A, Table 2): network, losses, segment returns, vec-env hooks.

- :class:`ManagerNet`: MLP [128, 128] + K-way softmax on the 25-D state (input standardised
  with statistics fixed at BC time), shared across all envs.
- :func:`bc_train`: the behaviour-cloning warm start on rule labels (cross entropy).
- :func:`reinforce_loss`: the REINFORCE objective of docs/stage2.md (z-scored segment
  returns, log-probability of the epsilon-greedy behaviour distribution, entropy bonus,
  KL(manager || smoothed rule) anchor).
- :class:`ProgressSignal`: the manager-independent progress potential the segment
  returns are measured with (so picking the prompt that scores highest earns nothing).
- :class:`ManagerController` + :class:`ManagerDecide` / :class:`ManagerSegments`: the
  vec-env hooks that make a decision every H steps (and at every episode start), set it
  on the :class:`~rmtl.reward.ExternalPhaseSelector` that drives both the reward's prompt
  and the worker's phase one-hot, and collect the segments REINFORCE trains on.

Timing (same convention as the Stage-1 rule, where the phase of a state is used both to
score the step that arrived at it and as the one-hot of that observation): a decision is
taken on the state s an observation returns, *before* the reward of the step that arrived
at s is scored, so the prompt used for s, the one-hot of s and the next H-1 states are the
decision's. At an episode end the terminal state keeps the old decision (it belongs to the
old segment) and the new episode's first state gets a fresh decision.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from rmtl.env.state import STATE_DIM
from rmtl.errors import ConfigError
from rmtl.phases import PHASES, phase_one_hot
from rmtl.reward.phase import ExternalPhaseSelector, RulePhaseSelector
from rmtl.reward.shaping import RewardShaper, ShapingConfig

K = len(PHASES)
MIN_STD = 1e-2
"""Floor of the per-dimension input std (velocities are often ~0 in the BC data)."""


# ============================================================================ network
class ManagerNet(nn.Module):
    """pi_M(phi | s): standardised 25-D state -> MLP (ReLU) -> K logits."""

    def __init__(self, hidden: Sequence[int] = (128, 128), num_phases: int = K, state_dim: int = STATE_DIM):
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


# ============================================================================ losses
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


# ============================================================================ BC
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
             heldout_fraction: float = 0.2, seed: int = 0, optimizer: torch.optim.Optimizer | None = None) -> BCResult:
    """Fit ``net`` to rule labels by cross entropy: ``updates`` Adam steps on minibatches of
    ``batch_size`` drawn (with replacement) from the training episodes' samples.

    The input standardisation is set from the training states. ``prefill``: the buffer
    must hold at least this many samples before the first update (Table 2: 512 segments).
    Accuracy is reported on the held-out episodes (``heldout_fraction`` of them).
    """
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
    confusion = np.zeros((K, K), dtype=np.int64)
    np.add.at(confusion, (hy, pred), 1)
    per_phase = {name: (float(confusion[k, k] / confusion[k].sum()) if confusion[k].sum() else float("nan"))
                 for k, name in enumerate(PHASES)}
    return BCResult(
        int(train.sum()), int(held.sum()), int(len(np.unique(episodes[train]))), int(len(np.unique(episodes[held]))),
        int(updates), float(loss.detach()), accuracy(net, xs, ys), accuracy(net, hx, hy), per_phase,
        confusion.tolist(), {name: int((labels == k).sum()) for k, name in enumerate(PHASES)},
    )


# ============================================================================ segment returns
class ProgressSignal:
    """Manager-independent progress potential Phi(s) in [-1, 0] of the states an env step ended in.

    Its ``source`` is the one the worker's reward kind names (``RewardKind.progress_source``):

    - ``scores``: Phi(s) = (k_rule(s) + u_rule(s)) / K - 1, the band level for the *rule's*
      micro-task k_rule(s) with its own score (``info["reward"]["scores"][k_rule]``: every
      micro-task is scored every step) normalised by bounds that only see rule-micro-task scores;
    - ``rule_band``: the same with u = 0.5 (a reward without a scorer);
    - ``dense``: the dense reference reward of the state.

    None depends on which micro-task the manager chose, so no choice of prompt changes it:
    only what the worker does does.
    """

    def __init__(self, num_envs: int, source: str = "scores", shaping: ShapingConfig | None = None,
                 dense: Any = None, num_phases: int = K):
        if source not in ("scores", "rule_band", "dense"):
            raise ConfigError(f"unknown progress source {source!r}; choose scores, rule_band or dense")
        base = shaping or ShapingConfig()
        cfg = base.replace(enabled=True, level=True, band=True, trend=False, momentum=False, drop_penalty=False)
        self.source = source
        self.shaper = RewardShaper(num_envs, cfg, num_phases)
        self.dense = dense
        self.rule = RulePhaseSelector()

    def __call__(self, states: np.ndarray, infos: Sequence[Mapping[str, Any]]) -> np.ndarray:
        states = np.asarray(states, dtype=np.float32)
        if self.source == "dense":
            from rmtl.tasks.fetch_lift.dense_reward import DenseRewardConfig, dense_reward

            return dense_reward(states, self.dense or DenseRewardConfig()).astype(np.float64)
        rule = np.minimum(self.rule(states), self.shaper.num_phases - 1)
        if self.source == "rule_band":
            return self.shaper.shape_u(np.full(len(rule), 0.5), rule).level.astype(np.float64)
        scores = np.array([np.asarray(info["reward"]["scores"], dtype=np.float64)[k] for info, k in zip(infos, rule)])
        return self.shaper(scores, rule).level.astype(np.float64)


@dataclasses.dataclass
class Segment:
    env: int
    state: np.ndarray
    phase: int
    rule: int
    probs: np.ndarray
    start_step: int
    phi_start: float | None = None
    env_reward: float = 0.0
    worker_reward: float = 0.0
    length: int = 0
    phi_end: float | None = None

    def progress_return(self) -> float:
        """Phi(end) - Phi(start) + success bonus; a first segment starts at the first scored state."""
        start = self.phi_start if self.phi_start is not None else self.phi_end
        return float((self.phi_end or 0.0) - (start or 0.0) + self.env_reward)

    def value(self, kind: str) -> float:
        return self.progress_return() if kind == "progress" else float(self.worker_reward)


class ManagerController:
    """State shared by the two vec-env hooks: the net, the selector, segment counters and the finished segments."""

    def __init__(self, net: ManagerNet, num_envs: int, *, horizon: int = 3, epsilon: float = 0.2, seed: int = 0,
                 greedy: bool = False, progress: ProgressSignal | None = None):
        self.net = net
        self.num_envs = int(num_envs)
        self.horizon = int(horizon)
        self.epsilon = float(epsilon)
        self.greedy = greedy
        self.rng = np.random.default_rng(seed)
        self.selector = ExternalPhaseSelector(num_envs)
        self.rule = RulePhaseSelector()
        self.progress = progress
        self.open: list[Segment | None] = [None] * self.num_envs
        self.steps_in_segment = np.zeros(self.num_envs, dtype=np.int64)
        self.finished: list[Segment] = []
        self.step_count = 0
        self.step_agree = 0
        self.step_total = 0
        self._pending: dict[int, Segment] = {}

    # ------------------------------------------------------------ decisions
    def decide(self, states: np.ndarray, envs: np.ndarray) -> list[Segment]:
        envs = np.asarray(envs, dtype=np.int64)
        if len(envs) == 0:
            return []
        s = np.asarray(states, dtype=np.float32)[envs]
        phases, probs = sample_decisions(self.net, s, self.epsilon, self.rng, greedy=self.greedy)
        rules = self.rule(s)
        cur = self.selector(np.zeros((self.num_envs, STATE_DIM)))
        cur[envs] = phases
        self.selector.set(cur)
        self.steps_in_segment[envs] = 0
        return [Segment(int(i), s[j].copy(), int(phases[j]), int(rules[j]), probs[j], self.step_count)
                for j, i in enumerate(envs)]

    def reset(self, states: np.ndarray) -> None:
        self.open = list(self.decide(states, np.arange(self.num_envs)))  # type: ignore[arg-type]
        self._pending = {}

    def on_step_states(self, states: np.ndarray, dones: np.ndarray) -> None:
        """Inner hook (below the reward): segment boundaries of envs that did not just finish."""
        self.step_count += 1
        self.steps_in_segment += 1
        due = np.flatnonzero((self.steps_in_segment >= self.horizon) & ~np.asarray(dones, dtype=bool))
        self._pending = {seg.env: seg for seg in self.decide(states, due)}

    def on_step_end(self, obs: dict[str, np.ndarray], rewards: np.ndarray, dones: np.ndarray,
                    infos: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Outer hook (above the phase one-hot): close segments, decide at episode starts, fix their one-hot."""
        dones = np.asarray(dones, dtype=bool)
        states = np.asarray(obs["observation"], dtype=np.float32).copy()
        for i in np.flatnonzero(dones):
            states[i] = np.asarray(infos[i]["terminal_observation"]["observation"], dtype=np.float32)
        phi = self.progress(states, infos) if self.progress is not None else np.zeros(self.num_envs)
        active = self.selector(states)
        self.step_agree += int((active == self.rule(states)).sum())
        self.step_total += self.num_envs
        for i in range(self.num_envs):
            seg = self.open[i]  # the transition that just happened was taken under this segment's phase
            if seg is None:
                continue
            seg.length += 1
            seg.env_reward += float(infos[i].get("reward", {}).get("env", 0.0))
            seg.worker_reward += float(rewards[i])
            seg.phi_end = float(phi[i])
            if seg.phi_start is None:
                seg.phi_start = float(phi[i])  # first segment of an episode: progress from the first scored state
            if dones[i] or i in self._pending:
                self.finished.append(seg)
                nxt = self._pending.get(i)
                if nxt is not None:
                    nxt.phi_start = float(phi[i])
                self.open[i] = nxt
        self._pending = {}
        done_idx = np.flatnonzero(dones)
        if len(done_idx):
            # New episodes: decide on their first state; the terminal state kept the old phase.
            for seg in self.decide(np.asarray(obs["observation"], dtype=np.float32), done_idx):
                self.open[seg.env] = seg
            obs = dict(obs)
            obs["phase"] = phase_one_hot(self.selector(states), K)
        return obs

    def pop_segments(self) -> list[Segment]:
        out, self.finished = self.finished, []
        return out

    def step_agreement(self, reset: bool = True) -> float:
        a = self.step_agree / self.step_total if self.step_total else float("nan")
        if reset:
            self.step_agree = self.step_total = 0
        return a


class ManagerDecide(VecEnvWrapper):
    """Inner hook, directly below the reward wrapper: new decisions at segment boundaries
    are set on the selector before the reward scores the state."""

    def __init__(self, venv: VecEnv, controller: ManagerController):
        super().__init__(venv)
        self.controller = controller

    def reset(self):
        obs = self.venv.reset()
        self.controller.reset(np.asarray(obs["observation"], dtype=np.float32))
        return obs

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        self.controller.on_step_states(np.asarray(obs["observation"], dtype=np.float32), dones)
        return obs, rewards, dones, infos


class ManagerSegments(VecEnvWrapper):
    """Outer hook, directly above the phase one-hot: segment bookkeeping and episode-start decisions."""

    def __init__(self, venv: VecEnv, controller: ManagerController):
        super().__init__(venv)
        self.controller = controller

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        obs = self.controller.on_step_end(obs, rewards, dones, infos)
        return obs, rewards, dones, infos


def segments_batch(segments: Sequence[Segment], kind: str = "progress") -> dict[str, torch.Tensor]:
    return {
        "states": torch.as_tensor(np.stack([s.state for s in segments]).astype(np.float32)),
        "actions": torch.as_tensor(np.array([s.phase for s in segments], dtype=np.int64)),
        "rules": torch.as_tensor(np.array([s.rule for s in segments], dtype=np.int64)),
        "returns": torch.as_tensor(np.array([s.value(kind) for s in segments], dtype=np.float32)),
    }
