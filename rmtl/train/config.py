"""The Stage-1 configuration (paper Table 1 defaults) and the named variants.

A variant is nothing but config overrides, kept as data in ``variants.yaml`` (with its role
and the analyses that include it): :data:`VARIANTS` maps a name to a nested dict merged into
:class:`Stage1Config` by :func:`stage1_config`, so every baseline runs through exactly the
same code as RMTL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import Field, model_validator

from rmtl.config import Config, deep_merge
from rmtl.default_model import DEFAULT_MODEL
from rmtl.env.fetch_lift import EnvConfig
from rmtl.errors import ConfigError
from rmtl.reward.config import RewardConfig
from rmtl.tasks import DEFAULT_TASK, task_names
from rmtl.tasks.fetch_lift.curriculum_stages import PAPER_STAGES
from rmtl.tasks.fetch_lift.dense_reward import DenseRewardConfig
from rmtl.tasks.fetch_lift.oracle_progress import OracleProgressConfig
from rmtl.train.variants import VARIANT_REGISTRY, VARIANTS, Variant, variant_names  # noqa: F401

"""Default scorer of real runs: the domain-trained tiny CLIP (see rmtl/vlm/registry.py)."""

FINAL_STAGE_RANGE: tuple[float, float] = (PAPER_STAGES[-1].d_min, PAPER_STAGES[-1].d_max)
"""Difficulty range of the final (fully random) curriculum stage; evaluation always uses it."""


class CacheConfig(Config):
    """Cached reward path: FAISS state cache over a dataset store (rmtl.reward.cached_source)."""

    store: str | None = None
    """Dataset store (path or fsspec URL) whose FAISS cache answers lookups; None renders and embeds every step."""
    radius: float = Field(0.01, ge=0)
    """Key-space radius (m, see rmtl.tasks.fetch_lift.state) within which a stored state counts as a hit
    (rmtl.reward.cached_source.DEFAULT_RADIUS; bench/cache_accuracy.py measures hit rate and the score and
    shaped-reward error per radius)."""
    grow: bool = False
    """Append rendered misses (frames, states, embeddings) to the store and the index."""
    persist_every: int = Field(0, ge=0)
    """Persist the grown index every this many vec-env steps (0: only at checkpoints and the end)."""
    atlas: tuple[str, ...] = ()
    """Read-only atlas stores (storage.catalogue) looked up together with the run's overlay; replaces ``store``."""
    overlay: str | None = None
    """The run's own store of rendered misses (appended off the rollout path); None: <run dir>/overlay.zarr."""
    audit_every: int = Field(50, ge=0)
    """Every this many vec-env steps render one cache hit fresh and log its score error (0: never)."""


class Stage1Config(Config):
    """Everything a Stage-1 PPO run depends on. Defaults are the paper's Table 1."""

    variant: str = "rmtl"
    """Name of the variant (for run directories and reports)."""
    seed: int = 0
    total_timesteps: int = Field(600_000, ge=1)
    """Env steps to train for, rounded up to whole rollouts of n_envs*n_steps (the paper's runs converge near 600k)."""

    # ---------------------------------------------------------------- PPO (Table 1)
    n_envs: int = Field(16, ge=1)
    n_steps: int = Field(40, ge=1)
    batch_size: int = Field(64, ge=2)
    n_epochs: int = Field(10, ge=1)
    learning_rate: float = Field(3e-4, gt=0)
    gamma: float = Field(0.95, gt=0, le=1)
    gae_lambda: float = Field(0.95, ge=0, le=1)
    clip_range: float = Field(0.2, gt=0)
    ent_coef: float = Field(0.01, ge=0)
    vf_coef: float = Field(0.5, ge=0)
    max_grad_norm: float = Field(0.5, gt=0)
    net_arch_pi: tuple[int, ...] = (256, 256)
    """Hidden sizes of the policy MLP (MultiInputPolicy)."""
    net_arch_vf: tuple[int, ...] = (256, 256)
    """Hidden sizes of the value MLP."""
    normalize_observations: bool = False
    """VecNormalize on the state keys (Table 1 is silent: off). Its statistics are checkpointed."""
    device: str = "cpu"
    """Torch device of the PPO networks ('cpu' is fastest for [256, 256] MLPs; 'auto', 'cuda')."""
    torch_threads: int | None = None
    """torch.set_num_threads for the learner process; None leaves torch's default."""

    # ---------------------------------------------------------------- task and reward
    task: str = DEFAULT_TASK
    """The task (rmtl.tasks.get_task). Pick-and-lift by default; another registered task trains on
    its own env, curriculum, phase rule, dense reference reward and (VLM variants) the goals of its
    micro-tasks (``env`` is pick-and-lift's)."""
    env: EnvConfig = EnvConfig()
    reward_kind: str = "vlm"
    """A registered reward kind (rmtl.reward.kinds): 'vlm', the phased multi-view VLM reward; 'oracle', the
    same reward with a perfect state-reading scorer (diagnostic, no rendering); 'rule_only', the phase band
    with u held at ``rule_only_u`` and no scorer (control, no rendering); 'dense', the hand-written
    reference (no rendering, no shaping)."""
    rule_only_u: float = Field(0.5, ge=0, le=1)
    """The normalised score u the 'rule_only' kind holds in every micro-task."""
    reward: RewardConfig = RewardConfig(model=DEFAULT_MODEL)
    dense: DenseRewardConfig = DenseRewardConfig()
    oracle: OracleProgressConfig = OracleProgressConfig()
    """The oracle scorer's goal states and scales (reward_kind 'oracle' only)."""
    cache: CacheConfig = CacheConfig()
    curriculum: bool = True
    """Reverse curriculum (paper stages); off trains on the final, fully random stage from the start."""
    curriculum_window: int = Field(100, ge=1)
    """Episodes in the curriculum's success window."""
    phase_input: bool = True
    """Append the active phase one-hot to the observation (key 'phase')."""

    # ---------------------------------------------------------------- run management
    vec_env: Literal["workers", "dummy", "subproc"] = "workers"
    """'workers': the sub-envs step and render in ``workers`` processes (rmtl.train.vec_env);
    'dummy': all in the learner process; 'subproc': SB3's one process per env."""
    workers: int | None = Field(None, ge=1)
    """Worker processes for vec_env='workers'; None: one per available core (at most n_envs)."""
    worker_threads: int = Field(1, ge=1)
    """Threads of each worker's pools (OpenMP, MKL, torch, Mesa llvmpipe), set before they start."""
    checkpoint_every: int = Field(50_000, ge=1)
    """Env steps between checkpoints (model, curriculum state, VecNormalize)."""
    eval_every: int = Field(20_000, ge=0)
    """Env steps between evaluations on the final stage (0: only at the end)."""
    eval_episodes: int = Field(50, ge=1)
    eval_seed: int = 1_000_000
    """First seed of evaluation episodes (episode i uses eval_seed + i)."""
    progress_bar: bool = True
    output_dir: str | None = None
    """Run directory; None: <data dir>/runs/stage1/<variant>_s<seed>."""
    keep_results: bool = False
    """Keep what survives a stop and a new machine in the run directory (rmtl.train.committed): the
    newest checkpoint as ``resume/`` until the run finishes, and the best policy on the validation
    seeds, chosen at each checkpoint, as ``best/`` (for a run directory under results/)."""
    validation_episodes: int = Field(100, ge=1)
    """Validation-seed episodes per checkpoint when ``keep_results`` chooses the best policy."""
    test_episodes: int = Field(200, ge=1)
    """Test-seed episodes of the best and the final policy when a ``keep_results`` run finishes."""

    @model_validator(mode="before")
    @classmethod
    def _model_renderer(cls, data: Any) -> Any:
        """Render with the renderer the reward model was trained on, unless told otherwise."""
        from rmtl.default_model import DEFAULT_MODEL
        from rmtl.vlm.registry import with_declared_renderer

        return with_declared_renderer(data, ("reward", "model"), ("env", "render"), DEFAULT_MODEL)

    @model_validator(mode="after")
    def _check(self) -> "Stage1Config":
        from rmtl.reward.kinds import kind_names

        if self.reward_kind not in kind_names():
            raise ValueError(f"unknown reward kind {self.reward_kind!r}; known kinds: {', '.join(kind_names())}")
        if self.task not in task_names():
            raise ValueError(f"unknown task {self.task!r}; known tasks: {', '.join(task_names())}")
        if self.n_envs * self.n_steps < self.batch_size:
            raise ValueError(
                f"a rollout of n_envs*n_steps={self.n_envs * self.n_steps} steps is smaller than batch_size={self.batch_size}"
            )
        return self

    def run_dir(self, data_dir: str | Path | None = None) -> Path:
        """Where this run writes (``output_dir`` or the default under the data directory)."""
        if self.output_dir:
            return Path(self.output_dir).expanduser().resolve()
        from rmtl.provenance import data_dir as resolve

        return resolve(data_dir) / "runs" / "stage1" / f"{self.variant}_s{self.seed}"


ORACLE_VARIANTS = variant_names(reward_kind="oracle")


def stage1_config(variant: str = "rmtl", base: Stage1Config | Mapping[str, Any] | None = None,
                  **overrides: Any) -> Stage1Config:
    """The config of a named variant: ``base`` (defaults if None), the variant's overrides, then ``overrides``.

    ``overrides`` are nested dicts for nested configs, e.g. ``reward={"views": [...]}``;
    they are applied after the variant, so they win.
    """
    if variant not in VARIANTS:
        raise ConfigError(f"unknown Stage-1 variant {variant!r}; choose from {', '.join(VARIANTS)}")
    if isinstance(base, Stage1Config):
        data = base.model_dump()
    else:
        data = Stage1Config.make(**dict(base or {})).model_dump()
    data = deep_merge(data, VARIANTS[variant])
    data["variant"] = variant
    data = deep_merge(data, overrides)
    return Stage1Config.make(**data)


# ============================================================================ Stage 2 (paper Table 2)
class ManagerConfig(Config):
    """The learned manager and its REINFORCE refinement (Table 2; the loss is in docs/stage2.md)."""

    horizon: int = Field(3, ge=1)
    """H: env steps per manager decision (a new decision also at every episode start)."""
    hidden: tuple[int, ...] = (128, 128)
    """Hidden sizes of the manager MLP (input: the task's state; output: one logit per micro-task)."""
    learning_rate: float = Field(3e-4, gt=0)
    """Adam learning rate of the REINFORCE updates."""
    ent_coef: float = Field(0.01, ge=0)
    """c_H: weight of the entropy bonus."""
    kl_coef: float = Field(0.30, ge=0)
    """w_KL: weight of KL(manager || smoothed rule one-hot)."""
    kl_smoothing: float = Field(0.1, gt=0, le=1)
    """eta: the rule target is (1 - eta) onehot(rule) + eta / K (the KL needs a target without zeros)."""
    epsilon: float = Field(0.20, ge=0, le=1)
    """Epsilon-greedy: with this probability a decision is a uniform phase, else a sample of the manager."""
    segment_return: Literal["progress", "worker_reward"] = "progress"
    """'progress': Phi(end) - Phi(start) + success bonus with the manager-independent rule-phase potential
    (docs/stage2.md); 'worker_reward': sum of the worker's shaped reward under the chosen prompt
    (exploitable by always choosing the highest-offset prompt; ablation only)."""
    updates_per_rollout: int = Field(1, ge=1)
    """Full-batch Adam steps on the segments that finished in one PPO rollout."""
    max_grad_norm: float | None = Field(None, gt=0)
    """Gradient-norm clip of the manager updates (None: no clipping; the paper names none)."""


class BCConfig(Config):
    """Behaviour-cloning warm start of the manager on the rule's labels (Table 2)."""

    enabled: bool = True
    labels: str | None = None
    """A bc-labels dataset store (``rmtl bc-labels``); None: roll out the worker checkpoint with the rule."""
    episodes: int = Field(250, ge=1)
    """Episodes of the worker rolled out with the rule (when ``labels`` is None)."""
    stages: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Curriculum stages the rollout episodes cycle through (start difficulty ~ U[d_min, d_max])."""
    deterministic: bool = False
    """Deterministic worker actions in the label rollouts (default: sampled, like in training)."""
    decision_points_only: bool = True
    """Train on segment-start states only (every H-th step of an episode: where the manager decides)."""
    prefill_segments: int = Field(512, ge=1)
    """Samples (segments) the buffer must hold before the first CE update."""
    updates: int = Field(3500, ge=0)
    batch_size: int = Field(64, ge=1)
    learning_rate: float = Field(3e-4, gt=0)
    heldout_fraction: float = Field(0.2, ge=0, lt=1)
    """Fraction of episodes held out for the reported BC accuracy."""


class Stage2Config(Config):
    """Everything a Stage-2 run depends on; defaults are the paper's Table 2.

    The worker's task, reward, PPO settings and vec env are the Stage-1 config stored in
    the worker checkpoint (its ``meta.json``), with ``stage1`` overrides merged on top.
    """

    worker: str
    """Stage-1 checkpoint: a checkpoint dir, its model.zip, or a run dir (latest checkpoint)."""
    seed: int = 0
    total_timesteps: int = Field(200_000, ge=1)
    """Stage-2 env steps (the paper trains the manager for 200k env steps)."""
    manager: ManagerConfig = ManagerConfig()
    bc: BCConfig = BCConfig()
    freeze_steps: int = Field(50_000, ge=0)
    """Env steps with the worker actor frozen (PPO updates of rollouts ending at or before this step)."""
    unfreeze_learning_rate: float = Field(1e-4, gt=0)
    """Worker learning rate (actor and critic) after the freeze."""
    curriculum: Literal["continue", "final"] = "continue"
    """'continue': the curriculum state of the worker checkpoint (if it had one); 'final': random starts only."""
    stage1: dict[str, Any] = {}
    """Overrides of the worker's Stage-1 config (nested dict, e.g. {'n_envs': 8, 'reward': {'resolution': 96}})."""
    checkpoint_every: int = Field(50_000, ge=1)
    eval_every: int = Field(20_000, ge=0)
    eval_episodes: int = Field(50, ge=1)
    eval_seed: int = 1_000_000
    progress_bar: bool = True
    torch_threads: int | None = None
    device: str = "cpu"
    output_dir: str | None = None
    """Run directory; None: <data dir>/runs/stage2/<worker run name>_s<seed>."""

    def run_dir(self, data_dir: str | Path | None = None) -> Path:
        if self.output_dir:
            return Path(self.output_dir).expanduser().resolve()
        from rmtl.provenance import data_dir as resolve

        p = Path(self.worker).expanduser().resolve()
        if p.suffix == ".zip":
            p = p.parent
        name = p.parent.parent.name if p.name.startswith("step_") else p.name
        return resolve(data_dir) / "runs" / "stage2" / f"{name}_s{self.seed}"
