"""A sweep file: a YAML file of runs (Stage-1 variants x seeds x override arms or conditions, and
Stage-2 runs over workers), read and checked into a :class:`Sweep` before anything trains.

Sweep file (docs/flows.md, ``experiments/*/*.yaml``)::

    output_root: results/oracle_structure/runs   # relative: to the working directory; or $RMTL_DATA_DIR/...
    report: results/oracle_structure/report      # optional (default <output_root>/report)
    pool: rmtl-cpu                               # optional work pool (default rmtl); deployments train-stage1/<pool>
    steps: 600000                                # total_timesteps of every run (a group may change it)
    set: {checkpoint_every: 40000, vec_env: dummy}   # dotted Stage1Config keys, every run
    runs:
      - variants: [oracle_rmtl, rule_only]
        seeds: [0, 1, 2]
        set: {eval_every: 20000}                 # optional, this group's runs
        arms: {lr_low: {learning_rate: 1.0e-4}}  # optional: one run per arm, named <variant>_<arm>_s<seed>
      - variants: [degraded_oracle]              # conditions: one variant, one run per condition,
        seeds: [0]                               # named <condition>_s<seed>
        conditions: {noise_0.3: {reward.error.default.noise: 0.3}, exact: {},
                     replayed: {from: results/learnability/replay_M.yaml}}
      # Stage 2 over each seed's worker, runs <name>_s<seed>; its own set: Stage2Config keys
      - {stage: 2, name: manager, worker: "runs/rmtl_s{seed}/best", seeds: [0], set: {freeze_steps: 50000}}

``{seed}`` in a string value is the run's seed; the top ``set`` is for Stage-1 runs only.
A Stage-1 run is named ``<variant>_s<seed>`` (with arms ``<variant>_<arm>_s<seed>``, with conditions
``<condition>_s<seed>``; an arm or condition is recorded in its run's config as ``sweep_arm``). An arm's
or condition's ``from: FILE`` (relative: to the working directory) stands for the ``overrides:``
mapping of that YAML file (a committed fit), under the entry's own keys.

Every run keeps its results (``keep_results: true`` unless the file says otherwise), so a re-run
resumes it (:mod:`rmtl.train.sweep` runs a :class:`Sweep`). Nothing here imports Prefect or torch: a
sweep file is checked before any server is asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from rmtl.errors import ConfigError
from rmtl.provenance import expand_data_dir
from rmtl.train.run.lock import DEFAULT_STALE_SECONDS

DEFAULT_POOL = "rmtl"
RUN_DEFAULTS = {"keep_results": True, "progress_bar": False}
"""Settings of every sweep run unless the file sets them: kept results make re-runs resume."""
PLACEHOLDER = "SET-ME"
"""A value a sweep file leaves for its user to fill in (refused until replaced)."""
_TOP_KEYS = {"output_root", "report", "pool", "deployment", "steps", "set", "runs", "lock_stale_seconds"}
_GROUP_KEYS = {"variants", "variant", "seeds", "steps", "set", "arms", "conditions"}
_STAGE2_KEYS = {"stage", "name", "worker", "seeds", "steps", "set"}


@dataclass(frozen=True)
class SweepRun:
    """One training run of a sweep: what ``rmtl train stage1`` (or ``stage2``) would be given."""

    name: str
    variant: str
    """The Stage-1 variant (a Stage-2 run: ``stage2``)."""
    seed: int
    overrides: dict[str, Any]
    """Dotted Stage1Config keys (``reward.model``), as ``--set`` takes them (Stage 2: Stage2Config keys)."""
    output_dir: str
    """Absolute, or ``$RMTL_DATA_DIR/...`` (expanded by whoever trains it)."""
    steps: int
    stage: int = 1
    worker: str | None = None
    """Stage 2: the worker checkpoint."""


@dataclass(frozen=True)
class Sweep:
    path: Path
    runs: list[SweepRun]
    output_root: str
    report_dir: str
    pool: str = DEFAULT_POOL
    deployment: str = DEFAULT_POOL
    """Deployment name of the training flows (default: the pool's name)."""
    lock_stale_seconds: float = DEFAULT_STALE_SECONDS


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (``{"env": {"resolution": 64}}`` -> ``{"env.resolution": 64}``)."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys as nested mappings (the inverse of :func:`flatten`)."""
    from rmtl.config import nest_dotted

    return nest_dotted(dotted)


def _portable_root(text: str) -> str:
    """``$RMTL_DATA_DIR/...`` kept for the trainer to expand; any other path made absolute here."""
    from rmtl.provenance import DATA_DIR_MARK

    if text == DATA_DIR_MARK or text.startswith(DATA_DIR_MARK + "/"):
        return text
    if "://" in text:
        raise ConfigError(f"output_root {text!r}: training writes to a local or shared filesystem path, not a URL "
                          f"(s3:// and other object stores are not supported for run directories)")
    return str(Path(text).expanduser().resolve())


def stage1_run_config(variant: str, seed: int, overrides: Mapping[str, Any], output_dir: str | None = None,
                      steps: int | None = None) -> Any:
    """The Stage1Config ``rmtl train stage1 --variant V --seed S --out DIR --steps N --set k=v ...`` builds."""
    from rmtl.train.config import stage1_config

    values = nest({**RUN_DEFAULTS, **overrides})
    values["seed"] = int(seed)
    if output_dir is not None:
        values["output_dir"] = str(output_dir)
    if steps is not None:
        values["total_timesteps"] = int(steps)
    return stage1_config(variant, **values)


def stage2_run_config(worker: str, seed: int, overrides: Mapping[str, Any], output_dir: str | None = None,
                      steps: int | None = None) -> Any:
    """The Stage2Config ``rmtl train stage2 --worker CK --seed S --out DIR --steps N --set k=v ...`` builds."""
    from rmtl.train.config import Stage2Config

    values = nest({"progress_bar": False, **overrides})
    values.update(worker=str(worker), seed=int(seed))
    if output_dir is not None:
        values["output_dir"] = str(output_dir)
    if steps is not None:
        values["total_timesteps"] = int(steps)
    return Stage2Config.make(**values)


def with_seed(values: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """String values with ``{seed}`` given the run's seed (other values as they are)."""
    return {k: v.replace("{seed}", str(seed)) if isinstance(v, str) else v for k, v in values.items()}


def _stage2_runs(group: Mapping[str, Any], where: str, root: str, steps: int, path: Path) -> list[SweepRun]:
    """The runs of a ``stage: 2`` group, each config built (bad keys fail here, naming the run)."""
    bad = sorted(set(group) - _STAGE2_KEYS)
    if bad:
        raise ConfigError(f"{where}: unknown key {bad[0]!r} for a Stage-2 group; allowed: {', '.join(sorted(_STAGE2_KEYS))}")
    worker = group.get("worker")
    if not isinstance(worker, str) or not worker:
        raise ConfigError(f"{where}: worker is missing (the Stage-1 checkpoint the manager is trained over; "
                          f"{{seed}} stands for the run's seed)")
    name = str(group.get("name") or "stage2")
    runs = []
    for seed in group["seeds"]:
        run = f"{name}_s{seed}"
        out = root.rstrip("/") + "/" + run
        overrides = with_seed(_mapping(group.get("set"), "set", path), seed)
        ck = worker.replace("{seed}", str(seed))
        if not expand_data_dir(ck).exists():  # as init_policy: a missing input fails before any run starts
            raise ConfigError(f"{where}, run {run}: worker {ck} does not exist; give a Stage-1 checkpoint or run "
                              f"folder ({{seed}} stands for the run's seed)")
        try:
            stage2_run_config(ck, seed, overrides, out, steps)
        except ConfigError as e:
            raise _run_error(e, f"{where}, run {run}", "Stage2Config") from None
        runs.append(SweepRun(run, "stage2", int(seed), overrides, out, int(steps), stage=2, worker=ck))
    return runs


def _run_error(e: ConfigError, where: str, config: str) -> ConfigError:
    """A run's config error as one line naming the run (an unknown override key said as such)."""
    m = re.match(rf"bad config value {config}\.(\S+?)=.*Extra inputs are not permitted", str(e))
    return ConfigError(f"{where}: " + (f"unknown override key {m.group(1)!r} (no such {config} field)" if m else str(e)))


def _mapping(value: Any, what: str, path: Path) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"sweep file {path}: {what} must be a mapping of Stage1Config keys to values")
    return flatten(value)


def _entry(value: Any, what: str, path: Path) -> dict[str, Any]:
    """An arm's or condition's overrides; ``from: FILE`` brings the ``overrides:`` mapping of FILE."""
    entry = dict(_mapping(value, what, path))
    source = entry.pop("from", None)
    if source is None:
        return entry
    from rmtl.config import read_yaml_mapping

    try:
        fitted = read_yaml_mapping(Path(str(source)))["overrides"]
    except (ConfigError, KeyError, TypeError) as e:
        why = str(e) if isinstance(e, ConfigError) else "it has no 'overrides:' mapping"
        raise ConfigError(f"sweep file {path}: {what}.from {source}: {why}") from None
    return {**_mapping(fitted, f"{what}.from {source}: overrides", path), **entry}


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file: every run's config is built (unknown variants and keys fail
    with one line naming the run), before any server or trainer starts."""
    path = Path(path)
    data = _read_sweep_file(path)
    root = _portable_root(str(data["output_root"]))
    _check_folder(root, "output_root", path)  # before any run's path under it is read (a lock, a run's files)
    common = _mapping(data.get("set"), "set", path)
    runs: list[SweepRun] = []
    for i, group in enumerate(data["runs"]):
        where = f"sweep file {path}: runs[{i}]"
        stage, seeds, steps = _group_basics(group, where, data)
        if stage == 2:
            runs += _stage2_runs(group, where, root, steps, path)
        else:
            runs += _stage1_runs(group, where, root, seeds, steps, common, path)
    names = [r.name for r in runs]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ConfigError(f"sweep file {path}: run {dup!r} appears twice; give each group other variants, seeds or arms")
    report = _portable_root(str(data["report"])) if data.get("report") else root.rstrip("/") + "/report"
    _check_folder(report, "report", path)
    stale = data.get("lock_stale_seconds", DEFAULT_STALE_SECONDS)
    if not isinstance(stale, (int, float)) or stale <= 0:
        raise ConfigError(f"sweep file {path}: lock_stale_seconds must be a positive number")
    pool = str(data.get("pool") or DEFAULT_POOL)
    # named after the pool by default: sweeps on other pools never repoint each other's deployment
    return Sweep(path, runs, root, report, pool, str(data.get("deployment") or pool), float(stale))


def _check_folder(root: str, key: str, path: Path) -> None:
    """One line if the folder ``key`` names is a file, or lies under one (it could never be created)."""
    from rmtl.provenance import expand_data_dir

    p = expand_data_dir(root)
    q = p
    while not q.exists() and q != q.parent:
        q = q.parent
    if q.exists() and not q.is_dir():
        what = "is a file, not a directory" if q == p else f"cannot be created: {q} is a file, not a directory"
        raise ConfigError(f"sweep file {path}: {key} {p} {what}; give a directory there (or another path)")
    from rmtl.outputs import check_writable_into

    # never a store, a store's cache, a run, a model or an export, nor a place inside a store, a cache or an export
    check_writable_into(p, own=(), what=f"sweep file {path}: {key}", writes=f"a sweep's {key.split('_')[0]}",
                        fix=f"give another {key}")


def _read_sweep_file(path: Path) -> dict[str, Any]:
    """The file's top-level mapping, its keys known, with an output root and a list of groups."""
    from rmtl.config import read_yaml_mapping

    if not path.exists():
        raise ConfigError(f"sweep file {path} does not exist; pass a YAML sweep file (e.g. "
                          f"experiments/oracle_structure/structure.yaml)")
    try:
        data = read_yaml_mapping(path)
    except ConfigError as e:
        raise ConfigError(str(e).replace("config file", "sweep file", 1)) from None
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"sweep file {path}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(_TOP_KEYS))}")
    if not data.get("output_root"):
        raise ConfigError(f"sweep file {path}: output_root is missing; give the directory the run folders go to")
    groups = data.get("runs")
    if not isinstance(groups, list) or not groups:
        raise ConfigError(f"sweep file {path}: runs must be a non-empty list of groups "
                          f"({{variants: [...], seeds: [...]}})")
    return data


def _group_basics(group: Any, where: str, data: Mapping[str, Any]) -> tuple[int, list[int], int]:
    """(stage, seeds, steps) of a group of runs, its keys known."""
    if not isinstance(group, Mapping):
        raise ConfigError(f"{where} must be a mapping with variants and seeds")
    bad = sorted(set(group) - _GROUP_KEYS - ({"stage"} if group.get("stage", 1) == 1 else _STAGE2_KEYS))
    if bad:
        raise ConfigError(f"{where}: unknown key {bad[0]!r}; allowed: {', '.join(sorted(_GROUP_KEYS))}")
    stage = group.get("stage", 1)
    if stage not in (1, 2) or isinstance(stage, bool):
        raise ConfigError(f"{where}: stage must be 1 (PPO worker runs) or 2 (manager runs over a worker)")
    seeds = group.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):  # true is no seed 1
        raise ConfigError(f"{where}: seeds must be a non-empty list of integers >= 0")
    steps = group.get("steps", data.get("steps"))
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigError(f"{where}: steps must be a positive integer (set it at the top or in the group)")
    return stage, seeds, steps


def _stage1_runs(group: Mapping[str, Any], where: str, root: str, seeds: list[int], steps: int,
                 common: Mapping[str, Any], path: Path) -> list[SweepRun]:
    """The runs of a Stage-1 group: variants x arms (or conditions) x seeds, each config built."""
    from rmtl.train.config import VARIANTS

    variants = group.get("variants", group.get("variant"))
    variants = [variants] if isinstance(variants, str) else variants
    if not variants or not isinstance(variants, list):
        raise ConfigError(f"{where}: variants is missing (a list of Stage-1 variant names)")
    group_set = {**common, **_mapping(group.get("set"), "set", path)}
    entries, label = _group_entries(group, where, variants)
    runs = []
    for variant in variants:
        if variant not in VARIANTS:
            raise ConfigError(f"{where}: unknown Stage-1 variant {variant!r}; choose from {', '.join(VARIANTS)}")
        for arm, arm_set in entries.items():
            overrides = _arm_overrides(group_set, arm, arm_set, label, where, path)
            runs += [_stage1_run(variant, arm, label == "conditions", seed, overrides, root, steps, where)
                     for seed in seeds]
    return runs


def _group_entries(group: Mapping[str, Any], where: str, variants: list[Any]) -> tuple[Mapping[Any, Any], str]:
    """A group's arms (``{None: {}}`` without any) or its conditions, and which of the two they are."""
    conditions = group.get("conditions")
    if conditions is None:
        arms = group.get("arms") or {None: {}}
        if not isinstance(arms, Mapping):
            raise ConfigError(f"{where}: arms must map arm names to override mappings")
        return arms, "arms"
    if group.get("arms"):
        raise ConfigError(f"{where}: give arms or conditions, not both")
    if not isinstance(conditions, Mapping) or not conditions:
        raise ConfigError(f"{where}: conditions must map condition names to override mappings")
    if len(variants) != 1:  # runs are named by the condition alone
        raise ConfigError(f"{where}: a group of conditions takes one variant, got {len(variants)}")
    return conditions, "conditions"


def _arm_overrides(group_set: Mapping[str, Any], arm: Any, arm_set: Any, label: str, where: str,
                   path: Path) -> dict[str, Any]:
    """The overrides of one arm or condition over its group's, none left at the placeholder."""
    overrides = {**group_set, **_entry(arm_set, f"{label}.{arm}", path)}
    if arm:
        overrides["sweep_arm"] = str(arm)  # recorded in the run's config: reports name arms by it
    unset = next((k for k, v in overrides.items() if str(v).startswith(PLACEHOLDER)), None)
    if unset:
        raise ConfigError(f"{where}: {unset} is still the placeholder {overrides[unset]!r}; set it in the "
                          f"sweep file")
    return overrides


def _stage1_run(variant: str, arm: Any, by_condition: bool, seed: int, overrides: Mapping[str, Any], root: str,
                steps: int, where: str) -> SweepRun:
    """One Stage-1 run, its config built: unknown keys and bad values fail here, naming the run."""
    name = (f"{arm}_s{seed}" if by_condition else
            f"{variant}_{arm}_s{seed}" if arm else f"{variant}_s{seed}")
    out = root.rstrip("/") + "/" + name
    seeded = with_seed(overrides, seed)
    try:  # the config the trainer will build
        stage1_run_config(variant, seed, seeded, out, steps)
    except ConfigError as e:
        raise _run_error(e, f"{where}, run {name}", "Stage1Config") from None
    return SweepRun(name, variant, int(seed), seeded, out, int(steps))
