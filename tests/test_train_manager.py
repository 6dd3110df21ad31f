"""Stage-2 manager units: BC, the REINFORCE loss (sign, KL anchor), segment returns that a
constant-phase manager cannot game, and the decision timing of the vec-env hooks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv

from rmtl.micro_tasks import phase_one_hot
from rmtl.tasks.fetch_lift.phases import GRASP, PHASES, rule_phase
from rmtl.reward import RewardVecEnv
from rmtl.reward.kinds.base import KindStep, RewardKind
from rmtl.reward.phase import RulePhaseSelector
from rmtl.reward.shaping import RewardShaper, ShapingConfig
from rmtl.tasks import get_task
from rmtl.tasks.fetch_lift.state import CUBE_REL_POS, STATE_DIM
from rmtl.train.stage2.manager.bc import bc_train
from rmtl.train.stage2.manager.loss import reinforce_loss, smoothed_rule
from rmtl.train.stage2.manager.network import ManagerNet
from rmtl.train.stage2.manager.progress import ProgressSignal
from rmtl.train.stage2.manager.vec_env_hooks import ManagerController, ManagerDecide, ManagerSegments
from rmtl.train.envs.phase_observation import PhaseObservation

RULE = RulePhaseSelector(get_task().phases)
"""Pick-and-lift's phase rule (the distance rule), as training builds it from the task."""


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(n)


def synthetic_states(n: int, rng: np.random.Generator) -> np.ndarray:
    """Consistent random 25-D states (cube = gripper + relative position) whose gripper-cube
    distance spans all three rule bins; the other entries are small noise."""
    s = rng.normal(0.0, 0.01, size=(n, STATE_DIM)).astype(np.float32)
    direction = rng.normal(size=(n, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    rel = direction * rng.uniform(0.0, 0.3, size=(n, 1))
    grip = rng.uniform((1.0, 0.35, 0.43), (1.6, 1.15, 0.9), size=(n, 3))
    s[:, 0:3], s[:, 3:6], s[:, CUBE_REL_POS] = grip, grip + rel, rel
    s[:, 9:11] = rng.uniform(0.0, 0.05, size=(n, 2))
    return s


def test_bc_reaches_high_accuracy_on_separable_labels():
    rng = np.random.default_rng(0)
    states = synthetic_states(6000, rng)
    labels = RULE(states)
    episodes = np.arange(6000) // 20  # 300 "episodes" of 20 samples; 20% held out by episode
    assert set(np.unique(labels)) == {0, 1, 2}
    net = ManagerNet(num_phases=len(PHASES), state_dim=STATE_DIM)
    res = bc_train(net, states, labels, episodes, updates=2000, batch_size=64, learning_rate=3e-3, prefill=512, seed=0,
                   phase_names=PHASES)
    assert res.heldout_episodes == 60 and res.heldout_samples == 1200
    assert res.heldout_accuracy >= 0.92, res
    assert min(v for v in res.heldout_per_phase.values()) >= 0.8
    with pytest.raises(ValueError, match="pre-filled"):
        bc_train(ManagerNet(num_phases=len(PHASES), state_dim=STATE_DIM), states[:100], labels[:100], episodes[:100],
                 updates=1, prefill=512, phase_names=PHASES)


def test_reinforce_gradient_sign_two_actions():
    # One state, two actions: action 0 earned more than action 1.
    logits = torch.zeros(2, requires_grad=True)
    actions = torch.tensor([0, 1, 0, 1])
    returns = torch.tensor([1.0, 0.0, 1.0, 0.0])
    rules = torch.zeros(4, dtype=torch.long)
    terms = reinforce_loss(logits.expand(4, 2), actions, returns, rules, epsilon=0.2, ent_coef=0.0, kl_coef=0.0)
    terms.loss.backward()
    assert logits.grad[0] < 0 < logits.grad[1]  # descent raises the better action's logit
    # Flipping the returns flips the gradient.
    logits.grad = None
    reinforce_loss(logits.expand(4, 2), actions, 1.0 - returns, rules, epsilon=0.2, ent_coef=0.0, kl_coef=0.0).loss.backward()
    assert logits.grad[0] > 0 > logits.grad[1]
    # A few SGD steps make the better action more likely; equal returns give no policy gradient.
    lg = torch.zeros(2, requires_grad=True)
    opt = torch.optim.SGD([lg], lr=0.5)
    for _ in range(20):
        opt.zero_grad()
        reinforce_loss(lg.expand(4, 2), actions, returns, rules, epsilon=0.2, ent_coef=0.0, kl_coef=0.0).loss.backward()
        opt.step()
    assert torch.softmax(lg, -1)[0] > 0.9
    lg2 = torch.zeros(2, requires_grad=True)
    reinforce_loss(lg2.expand(4, 2), actions, torch.ones(4), rules, ent_coef=0.0, kl_coef=0.0).loss.backward()
    assert torch.allclose(lg2.grad, torch.zeros(2))


def test_kl_term_pulls_toward_rule():
    rules = torch.tensor([0, 0, 0])  # the rule says approach
    logits = torch.tensor([0.0, 0.0, 3.0], requires_grad=True)  # the manager prefers grasp
    opt = torch.optim.SGD([logits], lr=0.5)
    kls, p_rule = [], []
    for _ in range(300):
        terms = reinforce_loss(logits.expand(3, 3), torch.tensor([2, 2, 2]), torch.zeros(3), rules,
                               ent_coef=0.0, kl_coef=0.3, kl_smoothing=0.1)
        opt.zero_grad()
        terms.loss.backward()
        opt.step()
        kls.append(terms.kl)
        p_rule.append(float(torch.softmax(logits.detach(), -1)[0]))
    assert p_rule[1] > p_rule[0] and kls[-1] < kls[0]
    assert all(b <= a + 1e-9 for a, b in zip(kls, kls[1:]))
    target = smoothed_rule(torch.tensor([0]), 3, 0.1)[0]
    assert torch.allclose(torch.softmax(logits.detach(), -1), target, atol=0.02)  # minimum of KL(pi || q) is q


# ---------------------------------------------------------------------- a replayed trajectory through the real hooks
EP_LEN = 14


class Replay(gym.Env):
    """Replays the same states whatever the actions: the gripper closes on the cube from 0.3 m."""

    observation_space = spaces.Dict({"observation": spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)})
    action_space = spaces.Box(-1, 1, (4,), np.float32)

    def __init__(self):
        d = np.linspace(0.3, 0.0, EP_LEN + 1)
        self.states = np.zeros((EP_LEN + 1, STATE_DIM), np.float32)
        self.states[:, CUBE_REL_POS.start] = d
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {"observation": self.states[0].copy()}, {}

    def step(self, action):
        self.t += 1
        success = self.t == EP_LEN
        return {"observation": self.states[self.t].copy()}, float(success), success, False, {"is_success": success}


def scores_of(states: np.ndarray) -> np.ndarray:
    """Fixed per-phase VLM scores [N, K]: each phase's score rises as the gripper closes in."""
    d = np.linalg.norm(states[:, CUBE_REL_POS], axis=1)
    return np.stack([0.7 - d, 0.65 - d, 0.6 - d], axis=1)


class StateScores(RewardKind):
    """A reward kind scoring every micro-task from the state (no rendering), through the real RewardVecEnv.

    The worker's shaping is the default band: there the naive segment return (the worker's
    reward under the chosen prompt) pays for choosing a later prompt, the exploit the progress
    return must not have."""

    name = "state_scores"
    progress_source = "scores"
    num_phases = 3

    def step(self, states, phases, shaper, render):
        scores = scores_of(states)
        out = shaper(scores[np.arange(len(phases)), phases], phases)
        return KindStep(out.reward, {"scores": scores.astype(np.float32), "u": out.u})


def state_reward(venv, selector):
    return RewardVecEnv(venv, StateScores(), selector, RewardShaper(venv.num_envs, ShapingConfig(), num_phases=3))


class RuleNet:
    def probs(self, states):
        return phase_one_hot(RULE(np.atleast_2d(states)), len(PHASES))


class ConstantNet:
    def __init__(self, phase):
        self.phase = phase

    def probs(self, states):
        return phase_one_hot(np.full(len(np.atleast_2d(states)), self.phase), len(PHASES))


def run_replay(net, n_envs=2, episodes=2, horizon=3, check=None):
    controller = ManagerController(net, n_envs, rule=RULE, num_phases=len(PHASES), horizon=horizon,
                                   epsilon=0.0, greedy=True,
                                   progress=ProgressSignal(n_envs, num_phases=len(PHASES), rule=RULE))
    raw = DummyVecEnv([Replay for _ in range(n_envs)])
    reward = state_reward(ManagerDecide(raw, controller), controller.selector)
    venv = ManagerSegments(PhaseObservation(reward, controller.selector, len(PHASES)), controller)
    obs = venv.reset()
    for _ in range(episodes * EP_LEN):
        prev = obs
        obs, _, dones, infos = venv.step(np.zeros((n_envs, 4), np.float32))
        if check is not None:
            check(prev, obs, dones, infos, controller)
    return controller.pop_segments()


def test_constant_phase_manager_is_not_rewarded_relative_to_rule():
    rule_segs = run_replay(RuleNet())
    grasp_segs = run_replay(ConstantNet(GRASP))
    assert len(rule_segs) == len(grasp_segs) > 0
    assert any(s.phase != GRASP for s in rule_segs) and all(s.phase == GRASP for s in grasp_segs)
    # The progress return (what REINFORCE uses) is identical: choosing a prompt earns nothing by itself.
    prog_rule = np.array([s.progress_return() for s in rule_segs])
    prog_grasp = np.array([s.progress_return() for s in grasp_segs])
    np.testing.assert_allclose(prog_rule, prog_grasp)
    assert prog_rule.sum() > 0  # the trajectory does make progress (closing in, then the success bonus)
    # The naive return (the worker's shaped reward under the chosen prompt) would reward "grasp everywhere".
    naive_rule = np.mean([s.worker_reward for s in rule_segs])
    naive_grasp = np.mean([s.worker_reward for s in grasp_segs])
    assert naive_grasp > naive_rule + 0.1
    # REINFORCE on both managers' segments (same states, equal returns) does not prefer "grasp" over the
    # rule's choice; the KL anchor then pulls a manager that starts at "grasp everywhere" back to the rule.
    segs = rule_segs + grasp_segs
    states = torch.as_tensor(np.stack([s.state for s in segs]))
    rules = torch.as_tensor([s.rule for s in segs])
    actions = torch.as_tensor([s.phase for s in segs])
    returns = torch.as_tensor(np.concatenate([prog_rule, prog_grasp]), dtype=torch.float32)
    net = ManagerNet(num_phases=len(PHASES), state_dim=STATE_DIM)
    net.set_normalization(states.numpy())
    with torch.no_grad():
        net.net[-1].bias.copy_(torch.tensor([0.0, 0.0, 4.0]))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    off_rule = rules != GRASP
    agree0 = float((net(states).argmax(-1) == rules).float()[off_rule].mean())
    for _ in range(200):
        terms = reinforce_loss(net(states), actions, returns, rules)
        opt.zero_grad()
        terms.loss.backward()
        opt.step()
    p = torch.softmax(net(states), -1).detach()
    agree1 = float((p.argmax(-1) == rules).float()[off_rule].mean())
    assert agree0 == 0.0 and agree1 == 1.0
    assert bool((p[off_rule, GRASP] < p[off_rule].gather(1, rules[off_rule, None]).squeeze(1)).all())


def test_hooks_decide_every_h_steps_and_drive_prompt_and_one_hot():
    horizon = 3
    seen = {"steps": 0, "ends": 0, "changes_off_boundary": 0}
    last_phase: dict[int, int] = {}

    class Alternating:
        """Cycles 0, 1, 2 at every call per env so every decision differs from the last."""

        def __init__(self):
            self.k = 0

        def probs(self, states):
            n = len(np.atleast_2d(states))
            out = phase_one_hot((self.k + np.arange(n)) % 3, len(PHASES))
            self.k += 1
            return out

    def check(prev, obs, dones, infos, controller):
        for i, info in enumerate(infos):
            # The one-hot of the state the reward scored is the prompt it scored with.
            if dones[i]:
                assert np.argmax(info["terminal_observation"]["phase"]) == info["reward"]["phase"]
                seen["ends"] += 1
            else:
                assert np.argmax(obs["phase"][i]) == info["reward"]["phase"]
            seen["steps"] += 1
        step = seen["steps"] // len(infos)
        t_in_ep = step % EP_LEN  # step index of the returned obs within its episode (0: a new episode)
        for i in range(len(infos)):
            p = int(np.argmax(obs["phase"][i]))
            if i in last_phase and p != last_phase[i] and t_in_ep % horizon != 0:
                seen["changes_off_boundary"] += 1
            last_phase[i] = p

    segs = run_replay(Alternating(), n_envs=2, episodes=2, horizon=horizon, check=check)
    assert seen["ends"] == 4 and seen["changes_off_boundary"] == 0
    lengths = [s.length for s in segs]
    # 14-step episodes: segments of 3,3,3,3,2 per episode (the last cut by the episode end).
    assert sorted(set(lengths)) == [2, 3] and len(segs) == 2 * 2 * 5
    assert all(s.rule == rule_phase(np.linalg.norm(s.state[CUBE_REL_POS])) for s in segs)
    assert {s.phase for s in segs} == set(range(len(PHASES)))


def test_stage2_config_defaults_are_table_2():
    from rmtl.train.config import Stage2Config

    c = Stage2Config.make(worker="w")
    m, bc = c.manager, c.bc
    assert (m.hidden, m.horizon, m.learning_rate, m.epsilon, m.ent_coef, m.kl_coef) == ((128, 128), 3, 3e-4, 0.2, 0.01, 0.3)
    assert (bc.episodes, bc.prefill_segments, bc.updates, bc.batch_size) == (250, 512, 3500, 64)
    assert (c.freeze_steps, c.unfreeze_learning_rate, c.total_timesteps) == (50_000, 1e-4, 200_000)
    assert m.segment_return == "progress"
