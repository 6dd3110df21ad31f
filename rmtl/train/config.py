"""The Stage-1 configuration (paper Table 1 defaults) and the named variants.

A variant is nothing but config overrides, kept as data in ``variants.yaml`` (with its role
and the analyses that include it): :data:`VARIANTS` maps a name to a nested dict merged into
:class:`Stage1Config` by :func:`stage1_config`, so every baseline runs through exactly the
same code as RMTL. Stage 2's config (Table 2) follows; configs of reward layout v1 are read by
:mod:`rmtl.train.reward_layout`.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Literal
from collections.abc import Mapping

from pydantic import Field, PrivateAttr, SerializeAsAny, field_validator, model_validator

from rmtl.config import Config, deep_merge
from rmtl.default_model import DEFAULT_MODEL
from rmtl.errors import ConfigError
from rmtl.reward.config import RewardKindConfig
from rmtl.reward.kinds import reward_kind_config
from rmtl.reward.kinds.dense import DenseRewardConfig  # noqa: F401  (rmtl.train.DenseRewardConfig)
from rmtl.reward.kinds.vlm import RewardConfig
from rmtl.tasks import DEFAULT_TASK, get_task, task_names
from rmtl.train.reward_layout import reward_kind_of, upgrade_reward_layout
from rmtl.train.variants import VARIANT_REGISTRY, VARIANTS, Variant, variant_names  # noqa: F401

"""Default scorer of real runs: the domain-trained tiny CLIP (see rmtl/vlm/registry.py)."""

EnvConfig: type[Config] = get_task(DEFAULT_TASK).env_config  # type: ignore[assignment]
"""The class of a run's ``env`` section: the default task's env config (a task with another env ignores it)."""

_FINAL_STAGE = get_task(DEFAULT_TASK).curriculum_stages[-1]
FINAL_STAGE_RANGE: tuple[float, float] = (_FINAL_STAGE.d_min, _FINAL_STAGE.d_max)
"""Difficulty range of the final (fully random) curriculum stage; evaluation always uses it."""


def check_learner_values(cfg: Any) -> None:
    """Values a config's fields accept but the learner would misuse or fail on deep inside torch or
    SB3 (one line each): hidden sizes and thread counts below 1."""
    for name in ("net_arch_pi", "net_arch_vf"):
        sizes = getattr(cfg, name, None)
        if sizes is not None and any(int(n) < 1 for n in sizes):
            flag, shown = "--" + name.replace("_", "-"), ",".join(map(str, sizes))
            raise ValueError(f"{flag} {shown}: hidden layer sizes must be at least 1 (e.g. {flag} 256,256)")
    threads = getattr(cfg, "torch_threads", None)
    if threads is not None and threads < 1:
        raise ValueError(f"--torch-threads {threads}: give at least 1 thread, or leave it out for torch's default")


def check_device(device: str) -> None:
    """A device this machine has, or one line saying why not. Checked where training starts, not by
    the configs: a saved config names the device it was trained on, and must load on any machine."""
    device = str(device)
    if device in ("cpu", "auto"):
        return
    if device.split(":")[0] == "cuda" and sys.platform.startswith("linux") and not any(
            Path(node).exists() for node in ("/dev/nvidiactl", "/dev/dxg")):  # the driver's nodes (dxg: WSL2)
        # No NVIDIA driver device node, so no CUDA device: said without the seconds torch takes to import.
        raise ConfigError(f"--device {device}: this machine has no NVIDIA driver (no /dev/nvidiactl), so no CUDA "
                          f"device; use --device cpu (or auto)")
    import torch  # training imports it anyway; checked before the reward model loads

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"--device {device!r} is not a torch device; use cpu, auto or cuda") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ConfigError(f"--device {device}: torch finds no CUDA device on this machine; use --device cpu "
                              f"(or auto)")
        if dev.index is not None and dev.index >= n:
            raise ConfigError(f"--device {device}: this machine has {n} CUDA device(s), cuda:0..cuda:{n - 1}")


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


@dataclasses.dataclass(frozen=True)
class EnvStackConfig:
    """What the training env stack reads of a run (rmtl.train.envs.train_env.build_train_env):
    :meth:`Stage1Config.env_stack` gives it, so no builder of the stack sees the whole run config."""

    env: Any
    """The task's env config (each sub-env's)."""
    reward: RewardKindConfig
    """The reward section as configured (a VLM reward's prompts and views resolve against the task)."""
    cache: CacheConfig = CacheConfig()
    n_envs: int = 16
    vec_env: Literal["workers", "dummy", "subproc"] = "workers"
    workers: int | None = None
    worker_threads: int = 1
    phase_input: bool = True
    normalize_observations: bool = False
    seed: int = 0
    """The run seed, as the reward kind reads it (rmtl.reward.kinds.RunFacts); the envs are seeded by PPO."""
    overlay: str | None = None
    """Where a cache atlas appends rendered misses (the run's own store)."""


def check_run_output(output_dir: str | None, own: str, writes: str) -> str | None:
    """``output_dir`` unless it is something a run must never be written into (rmtl.outputs): a dataset
    store or its cache, a reward model, an export, a file, or a run of the other stage."""
    if output_dir:
        from rmtl.outputs import check_writable_into
        from rmtl.provenance import expand_data_dir

        check_writable_into(expand_data_dir(output_dir).resolve(), own=(own,), what="output_dir", writes=writes,
                            fix="choose another run directory (--out, or a sweep file's output_root)")
    return output_dir


class Stage1Config(Config):
    """Everything a Stage-1 PPO run depends on. Defaults are the paper's Table 1."""

    variant: str = "rmtl"
    """Name of the variant (for run directories and reports)."""
    sweep_arm: str | None = None
    """The sweep arm the run belongs to (``rmtl sweep`` sets it; None outside an arm): reports name the
    run ``<variant>_<arm>`` so arms of one variant never pool."""
    seed: int = Field(0, ge=0)
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
    reward: SerializeAsAny[RewardKindConfig] = RewardConfig(model=DEFAULT_MODEL)
    """The reward: the config of the registered kind its ``kind`` names (rmtl.reward.kinds; default
    'vlm'), with that kind's fields only. 'vlm' (RewardConfig), the phased multi-view VLM reward;
    'oracle' (OracleRewardConfig), the same reward with a perfect state-reading scorer (diagnostic, no
    rendering); 'rule_only' (RuleOnlyRewardConfig), the phase band with u held at ``u`` and no scorer
    (control, no rendering); 'dense' (DenseRewardConfig), the hand-written reference (no rendering, no
    shaping). Serialised as the kind's class (SerializeAsAny), so a saved config reloads to the same one."""
    cache: CacheConfig = CacheConfig()
    curriculum: bool = True
    """Reverse curriculum (paper stages); off trains on the final, fully random stage from the start."""
    curriculum_window: int = Field(100, ge=1)
    """Episodes in the curriculum's success window."""
    phase_input: bool = True
    """Append the active phase one-hot to the observation (key 'phase')."""

    # ---------------------------------------------------------------- run management
    vec_env: Literal["workers", "dummy", "subproc"] = "workers"
    """'workers': the sub-envs step and render in ``workers`` processes (rmtl.train.envs.process_group);
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
    init_policy: str | None = None
    """A Stage-1 policy a new run starts from (a checkpoint, its model.zip, or a run folder: its latest
    checkpoint, else its ``best/``): its weights only, with a fresh optimiser and curriculum (a warm
    start; Stage 2's rule-continued control over a kept worker). A run that resumes from its own
    checkpoint ignores it."""
    keep_results: bool = False
    """Keep what survives a stop and a new machine in the run directory (rmtl.train.eval.committed): the
    newest checkpoint as ``resume/`` until the run finishes, and the best policy on the validation
    seeds, chosen at each checkpoint, as ``best/`` (for a run directory under results/)."""
    validation_episodes: int = Field(100, ge=1)
    """Validation-seed episodes per checkpoint when ``keep_results`` chooses the best policy."""
    test_episodes: int = Field(200, ge=1)
    """Test-seed episodes of the best and the final policy when a ``keep_results`` run finishes."""

    _requested_timesteps: int | None = PrivateAttr(None)
    """``total_timesteps`` as given when the validator rounded it up (None: it was whole rollouts)."""

    @model_validator(mode="before")
    @classmethod
    def _model_renderer(cls, data: Any) -> Any:
        """Render with the renderer the reward model was trained on, unless told otherwise (a kind
        without a model: the default model's); then read a config of reward layout v1."""
        from rmtl.default_model import DEFAULT_MODEL
        from rmtl.vlm.registry import with_declared_renderer

        # The renderer first: a config of reward layout v1 names its model in ``reward`` whatever its kind.
        data = with_declared_renderer(data, ("reward", "model"), ("env", "render"), DEFAULT_MODEL)
        return upgrade_reward_layout(data)

    @field_validator("output_dir")
    @classmethod
    def _output_dir(cls, v: str | None) -> str | None:
        return check_run_output(v, "stage1-run", "a Stage-1 run")

    @field_validator("init_policy")
    @classmethod
    def _init_policy(cls, v: str | None) -> str | None:
        # Only that it exists here (config sits below the run layer); what it holds is read at the start.
        if v is not None and not Path(v).expanduser().exists():
            raise ValueError(f"init_policy {v} does not exist; give a Stage-1 checkpoint, its model.zip or a run folder")
        return v

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        if v not in task_names():  # on this field, not on the whole config
            raise ValueError(f"unknown task {v!r}; known tasks: {', '.join(task_names())}")
        return v

    @field_validator("reward", mode="before")
    @classmethod
    def _reward_kind(cls, v: Any) -> Any:
        """A mapping becomes the config class of the kind it names (the field's type is only the base).
        A kind that scores with a model (vlm, hybrid) and names none gets the field default's model,
        the package default (DEFAULT_MODEL), not its config class's paper default: a section that
        switches the kind (``--set reward.kind=hybrid``) keeps the command's model."""
        if isinstance(v, Mapping) and "model" not in v:
            from rmtl.reward.kinds import DEFAULT_KIND, kind_config

            try:
                takes_model = "model" in kind_config(str(v.get("kind") or DEFAULT_KIND)).model_fields
            except ConfigError:
                takes_model = False  # an unknown kind: reward_kind_config names the known ones
            if takes_model:
                v = {**v, "model": cls.model_fields["reward"].default.model}
        return reward_kind_config(v)

    @model_validator(mode="after")
    def _check(self) -> Stage1Config:
        if self.task not in task_names():
            raise ValueError(f"unknown task {self.task!r}; known tasks: {', '.join(task_names())}")
        if self.n_envs * self.n_steps < self.batch_size:
            raise ValueError(
                f"a rollout of n_envs*n_steps={self.n_envs * self.n_steps} steps is smaller than batch_size={self.batch_size}"
            )
        check_learner_values(self)
        vlm_micro_tasks = getattr(self.reward, "vlm_micro_tasks", None)
        if vlm_micro_tasks:  # a hybrid's names, checked now rather than after the env and the model are built
            from rmtl.micro_tasks import micro_task_indices

            micro_task_indices(get_task(self.task).micro_tasks.names, vlm_micro_tasks, "reward.vlm_micro_tasks")
        rollout = self.n_envs * self.n_steps
        if self.total_timesteps % rollout:
            # PPO collects whole rollouts, so it trains this many anyway (train_stage1 says so, once).
            self._requested_timesteps = self.total_timesteps
            object.__setattr__(self, "total_timesteps", -(-self.total_timesteps // rollout) * rollout)  # frozen model
        return self

    @property
    def requested_timesteps(self) -> int:
        """``total_timesteps`` as given, before the rounding up to whole rollouts."""
        return self._requested_timesteps if self._requested_timesteps is not None else self.total_timesteps

    def rounding_note(self) -> str | None:
        """One line saying that ``total_timesteps`` was rounded up to whole rollouts (None: it was not)."""
        if self._requested_timesteps is None:
            return None
        return rollout_rounding_note(self._requested_timesteps, self.n_envs, self.n_steps)

    def __eq__(self, other: object) -> bool:
        """Equal fields are equal configs: a saved config reloads equal to the one that rounded its steps."""
        if not isinstance(other, Stage1Config):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = Config.__hash__

    def replace(self, **changes: Any) -> Stage1Config:
        """A validated copy with some fields changed; steps are rounded from the requested count again
        (a changed rollout size must not round an earlier rounding)."""
        return super().replace(**{"total_timesteps": self.requested_timesteps, **changes})

    def env_stack(self) -> EnvStackConfig:
        """The part of this config the training env stack reads."""
        overlay = (self.cache.overlay or str(self.run_dir() / "overlay.zarr")) if self.cache.atlas else None
        return EnvStackConfig(env=self.env, reward=self.reward, cache=self.cache, n_envs=self.n_envs,
                              vec_env=self.vec_env, workers=self.workers, worker_threads=self.worker_threads,
                              phase_input=self.phase_input, normalize_observations=self.normalize_observations,
                              seed=int(self.seed), overlay=overlay)

    def run_dir(self, data_dir: str | Path | None = None) -> Path:
        """Where this run writes (``output_dir`` or the default under the data directory)."""
        if self.output_dir:
            from rmtl.provenance import expand_data_dir

            return expand_data_dir(self.output_dir, data_dir).resolve()  # committed configs write $RMTL_DATA_DIR/...
        from rmtl.provenance import data_dir as resolve

        return resolve(data_dir) / "runs" / "stage1" / f"{self.variant}_s{self.seed}"


ORACLE_VARIANTS = variant_names(reward_kind="oracle")


def merge_stage1(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A Stage-1 config dump (either layout) with ``overrides`` merged in (nested dicts merge).

    A ``reward`` override of another kind than the dump's replaces the section (with that kind's
    defaults) instead of merging into it: one kind's fields never reach another's config (the
    shared ones, e.g. ``shaping``, come from the override alone)."""
    data = upgrade_reward_layout(dict(data))
    overrides = upgrade_reward_layout(dict(overrides), default_kind=reward_kind_of(data))
    reward = overrides.get("reward")
    kind = reward.kind if isinstance(reward, RewardKindConfig) else (
        reward.get("kind") if isinstance(reward, Mapping) else None)
    if kind is not None and kind != reward_kind_of(data):
        # The new kind's defaults; the field default's for its kind (the VLM reward's model is the
        # package default model, not RewardConfig's).
        default = Stage1Config.model_fields["reward"].default
        data = {**data, "reward": default.model_dump() if default.kind == kind else {}}
    return deep_merge(data, overrides)


def stage1_config(variant: str = "rmtl", base: Stage1Config | Mapping[str, Any] | None = None,
                  **overrides: Any) -> Stage1Config:
    """The config of a named variant: ``base`` (defaults if None), the variant's overrides, then ``overrides``.

    ``overrides`` are nested dicts for nested configs, e.g. ``reward={"views": [...]}``;
    they are applied after the variant, so they win. A ``reward`` of another kind replaces the
    section (:func:`merge_stage1`), e.g. ``reward={"kind": "oracle"}``.
    """
    if variant not in VARIANTS:
        raise ConfigError(f"unknown Stage-1 variant {variant!r}; choose from {', '.join(VARIANTS)}")
    base = base if isinstance(base, Stage1Config) else Stage1Config.make(**dict(base or {}))
    # The requested steps, not the base's rounding: the variant or the overrides may change the rollout.
    data = {**base.model_dump(), "total_timesteps": base.requested_timesteps}
    data = merge_stage1(data, VARIANTS[variant])
    data["variant"] = variant
    data = merge_stage1(data, overrides)
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


def rollout_rounding_note(steps: int, n_envs: int, n_steps: int) -> str | None:
    """One line saying that ``steps`` env steps round up to whole PPO rollouts (None: they are whole)."""
    rollout = n_envs * n_steps
    if steps % rollout == 0:
        return None
    return (f"--steps {steps} rounds up to {-(-steps // rollout) * rollout} env steps: PPO trains in "
            f"whole rollouts of n_envs*n_steps = {n_envs}*{n_steps} = {rollout} steps")


class Stage2Config(Config):
    """Everything a Stage-2 run depends on; defaults are the paper's Table 2.

    The worker's task, reward, PPO settings and vec env are the Stage-1 config stored in
    the worker checkpoint (its ``meta.json``), with ``stage1`` overrides merged on top.
    """

    worker: str
    """Stage-1 checkpoint: a checkpoint dir, its model.zip, or a run dir (latest checkpoint)."""
    seed: int = Field(0, ge=0)
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

    @field_validator("output_dir")
    @classmethod
    def _output_dir(cls, v: str | None) -> str | None:
        return check_run_output(v, "stage2-run", "a Stage-2 run")

    @model_validator(mode="after")
    def _check(self) -> Stage2Config:
        check_learner_values(self)
        return self

    def run_dir(self, data_dir: str | Path | None = None) -> Path:
        if self.output_dir:
            from rmtl.provenance import expand_data_dir

            return expand_data_dir(self.output_dir, data_dir).resolve()  # committed configs write $RMTL_DATA_DIR/...
        from rmtl.provenance import data_dir as resolve

        p = Path(self.worker).expanduser().resolve()
        if p.suffix == ".zip":
            p = p.parent
        name = p.parent.parent.name if p.name.startswith("step_") else p.name
        return resolve(data_dir) / "runs" / "stage2" / f"{name}_s{self.seed}"
