"""``rmtl qualify fit-map``: the learnability map refitted from finished runs.

The map's conditions are a sweep file whose groups name ``conditions`` of one variant (runs
``<condition>_s<seed>``; ``experiments/learnability/conditions.yaml``, run by ``rmtl sweep``); the
checks of the map are another such file, kept out of the fit and reported beside the verdict the
map gives them. For each condition: the scorer's metrics on the qualification set (``rmtl
qualify``'s, one error landscape per seed, averaged) and each finished seed's test success (best
on validation). Reference runs of a reward without a scorer (rule-only) sit at the task's chance
corner (``Task.map_axes``). With ``early_progress`` the map also reads the task's early-progress axes
(``Task.early_progress_metrics``, measured as ``rmtl qualify`` measures them), the run budget
(:func:`budget`) and whether the reward is phased (1) or one score (0), so conditions of several
sweep files (300k and 600k runs, micro-task and one-score rewards) enter one fit; a verdict is read
at the budget of a pixel run (600k). Writes the map (:class:`LearnabilityMap`), runs.csv, runs.md (one row
per run), conditions.md (one row per condition) and the map's PNGs; it never replaces a file it
did not write (its record: ``.rmtl-output.json`` in ``--out``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import field_validator

from pipeline.qualify.configurations import as_phase_columns
from pipeline.qualify.families import load_families, state_set
from pipeline.qualify.learnability_map import (
    FEATURES,
    MAP_VERSION,
    LearnabilityMap,
    LogisticFit,
    budget,
    map_support,
    map_verdict,
)
from pipeline.qualify.metrics import better, early_axes, early_progress_axes, map_axes, no_scorer_metrics, scorer_metrics
from pipeline.qualify.scores import STATE_KINDS, state_scorer, windowed_scores
from rmtl.config import Config
from rmtl.errors import ConfigError
from pipeline.qualify.fit_outputs import MAP_FILE, TEACHES_AT, check_outputs, write_outputs

BOOTSTRAP_FITS = 1000


def extended_axes(task: Any) -> tuple[tuple[str, ...], dict[str, int]]:
    """The axes and their better-signs of an early-progress map: the map axes, the task's early-progress
    axes (a bigger gain is better) and :data:`FEATURES` (more budget, a phased reward: both +1)."""
    early = early_axes(task)
    return (*map_axes(task), *early, *FEATURES), {**better(task), **{k: 1 for k in (*early, *FEATURES)}}


@dataclass(frozen=True)
class Condition:
    """A condition of a sweep: the reward section its runs train with and its runs (seed, folder name)."""

    name: str
    reward: dict[str, Any]
    runs: tuple[tuple[int, str], ...]


def sweep_conditions(path: Path) -> tuple[list[Condition], str, int]:
    """The conditions of a sweep file (its groups' ``conditions``), its output root and its steps."""
    from rmtl.config import deep_merge
    from rmtl.train.config import VARIANTS, stage1_config
    from rmtl.train.sweep_file import load_sweep, nest

    sweep = load_sweep(path)
    found: dict[str, Condition] = {}
    for r in sweep.runs:
        name = r.overrides.get("sweep_arm")
        if r.stage != 1 or not name or r.name != f"{name}_s{r.seed}":
            raise ConfigError(f"sweep file {path}: run {r.name} is not a condition of the map; list the map's runs "
                              "under a group's conditions: (runs named <condition>_s<seed>)")
        # The variant's own reward overrides (e.g. single_score_oracle's one score), then the condition's.
        reward = deep_merge({**dict(VARIANTS[r.variant].get("reward", {})), "kind": stage1_config(r.variant).reward.kind},
                            nest({k: v for k, v in r.overrides.items() if k.startswith("reward.")}).get("reward", {}))
        c = found.get(name, Condition(name, reward, ()))
        found[name] = Condition(name, c.reward, (*c.runs, (r.seed, r.name)))
    steps = sweep.runs[0].steps
    return [Condition(c.name, c.reward, tuple(sorted(c.runs))) for c in found.values()], sweep.output_root, steps


def outcome(run_dir: Path) -> dict | None:
    """A finished run's test success: its best-on-validation checkpoint's and its final one's."""
    sel = run_dir / "selection.json"
    if not sel.is_file() or (run_dir / "resume").exists():
        return None
    try:
        d = json.loads(sel.read_text())
        return {"best": float(d["best"]["test"]["success_rate"]), "final": float(d["final"]["test"]["success_rate"]),
                "best_step": int(d["best"]["num_timesteps"])}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{sel} is damaged ({type(e).__name__}: {e}); select the run again "
                          "(rmtl train select) or move it out of --runs") from None


def _find_run(name: str, roots: Sequence[Path]) -> Path | None:
    return next((root / name for root in roots if (root / name).is_dir()), None)


def logistic_fit(points: Sequence[tuple[Mapping[str, float], float]], axes: Sequence[str], teaches_at: float,
                 seed: int = 0) -> LogisticFit:
    """P(teaches) against the standardised metrics, with ``BOOTSTRAP_FITS`` bootstrap refits (run resamples)."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    x = np.array([[m[a] for a in axes] for m, _ in points], dtype=float)
    y = np.array([o >= teaches_at for _, o in points], dtype=int)
    mean, scale = np.nanmean(x, axis=0), np.nanstd(x, axis=0)
    scale[scale == 0] = 1.0
    z = np.nan_to_num((x - mean) / scale)
    # A few dozen rows: BLAS threads only contend for the cores (10x slower beside a training run).
    with threadpool_limits(limits=1):
        model = LogisticRegression(C=1.0).fit(z, y)
        rng = np.random.default_rng(seed)
        coefs, icpts = [], []
        for _ in range(BOOTSTRAP_FITS):
            idx = rng.integers(0, len(y), len(y))
            if len(set(y[idx])) < 2:
                continue
            m = LogisticRegression(C=1.0).fit(z[idx], y[idx])
            coefs.append(m.coef_[0].tolist())
            icpts.append(float(m.intercept_[0]))
    return LogisticFit(mean=mean.tolist(), scale=scale.tolist(), coef=model.coef_[0].tolist(),
                       intercept=float(model.intercept_[0]), bootstrap_coef=coefs, bootstrap_intercept=icpts)


# -- the fit -------------------------------------------------------------------------------
def _reference(run_dir: Path) -> tuple[str, int, dict[str, Any], int]:
    """A finished run's condition name (``<variant>_<steps>k``), seed, reward section and steps (to the
    thousand, as named), read as the package reads a run's config (older layouts named the reward kind
    elsewhere)."""
    import yaml

    from rmtl.train.config import Stage1Config

    try:
        cfg = Stage1Config.make(**(yaml.safe_load((run_dir / "config.yaml").read_text()) or {}))
    except (OSError, yaml.YAMLError, ConfigError, TypeError) as e:
        raise ConfigError(f"--reference {run_dir}: no readable config.yaml of a Stage-1 run ({type(e).__name__}); give "
                          "the folder of a finished run") from None
    k = int(round(cfg.requested_timesteps / 1000))
    return f"{cfg.variant}_{k}k", int(cfg.seed), cfg.reward.model_dump(mode="json"), k * 1000


def _sweeps(conditions: Path | Sequence[Path], checks: Path | None,
            early_progress: bool) -> tuple[list[Condition], list[Condition], dict[str, int], list[Path], int]:
    """The conditions of every --conditions file and of --checks, each condition's steps, the sweeps'
    output roots (where runs are looked up by default) and the first file's steps."""
    files = [Path(conditions)] if isinstance(conditions, (str, Path)) else [Path(c) for c in conditions]
    if not files:
        raise ConfigError("fit-map needs at least one sweep file of conditions (--conditions FILE ...)")
    sweeps = [sweep_conditions(f) for f in files]
    conds = [c for cs, _, _ in sweeps for c in cs]
    steps_of = {c.name: st for cs, _, st in sweeps for c in cs}
    if len(steps_of) < len(conds):
        raise ConfigError("a condition name appears in two --conditions files; name each condition once")
    budgets = sorted({st for _, _, st in sweeps})
    if not early_progress and len(budgets) > 1:
        raise ConfigError(f"the --conditions files train for different steps ({', '.join(f'{b // 1000}k' for b in budgets)}); "
                          "a map over several budgets reads the budget: add --early-progress")
    root, steps = sweeps[0][1], sweeps[0][2]
    check_conds, check_root, check_steps = sweep_conditions(checks) if checks is not None else ([], root, steps)
    steps_of.update({c.name: check_steps for c in check_conds})
    roots = list(dict.fromkeys([*(Path(r) for _, r, _ in sweeps), Path(check_root)]))
    return conds, check_conds, steps_of, roots, steps


def _run_conditions(task: Any, reference: Sequence[Path], scored_runs: Sequence[Path]
                    ) -> tuple[list[tuple[Path, str, int, dict, int]], list[Condition], dict[str, int]]:
    """The reference runs (path, condition, seed, reward, steps), the scored runs as conditions (one per
    ``<variant>_<steps>k``, its runs by folder) and each scored condition's steps; each run checked
    against its role before any rollout."""
    refs = [(Path(r), *_reference(Path(r))) for r in reference]
    for path, _name, _, reward, _steps in refs:
        if reward.get("kind") not in STATE_KINDS or hasattr(state_scorer(task, reward)[0], "scores"):
            raise ConfigError(f"--reference {path} trained on reward kind {reward.get('kind')!r}, which has a scorer; "
                              "a reference sits at the map's chance corner: give runs of a reward without one (rule_only)")
    by_name: dict[str, Condition] = {}
    steps_of: dict[str, int] = {}
    for path, name, seed, reward, steps in ((Path(r), *_reference(Path(r))) for r in scored_runs):
        if reward.get("kind") not in STATE_KINDS or not hasattr(state_scorer(task, reward)[0], "scores"):
            raise ConfigError(f"--scored-runs {path} trained on reward kind {reward.get('kind')!r}; a scored run's "
                              f"reward reads state and has a scorer ({', '.join(STATE_KINDS[:2])}): give it as "
                              "--reference when it has none")
        c = by_name.get(name, Condition(name, reward, ()))
        by_name[name] = Condition(name, c.reward, (*c.runs, (seed, str(path.resolve()))))
        steps_of[name] = steps
    return refs, list(by_name.values()), steps_of


def _reference_points(task: Any, refs: Sequence[tuple[Path, str, int, dict, int]], axes: Sequence[str],
                      early_progress: bool) -> tuple[list[dict], list[dict]]:
    """The reference conditions at the chance corner (no scorer: no early gain, phased like the rule it
    pays, at its own budget) and their finished runs' rows."""
    mapped, rows = [], []
    for ref, steps in dict.fromkeys((name, steps) for _, name, _, _, steps in refs):
        chance = no_scorer_metrics(task)
        if early_progress:
            chance.update({k: 0.0 for k in axes if k not in chance and k not in FEATURES})
            chance.update(budget=budget(steps), phased=1.0)
        done = [(seed, outcome(path)) for path, name, seed, _, _ in refs if name == ref]
        done = [(seed, o) for seed, o in done if o is not None]
        mapped.append({"name": ref, "metrics": dict(chance), "outcomes": [o["best"] for _, o in done],
                       "seeds_done": len(done)})
        rows += [{"condition": ref, "seed": seed, **chance, "test_success": o["best"], "final_test": o["final"],
                  "best_step": o["best_step"]} for seed, o in done]
    return mapped, rows


def _fit(mapped: list[dict], rows: list[dict], ref_names: set[str], n_seeds: Mapping[str, int], axes: Sequence[str],
         signs: Mapping[str, int]) -> dict[str, Any]:
    """The map's fields: fitted when three conditions have all their seeds and the runs show both
    outcomes (the references are fitted, not support), else why not (with a provisional fit for plots)."""
    complete = [c for c in mapped if c["name"] in n_seeds and c["seeds_done"] >= n_seeds[c["name"]]]
    points = [({k: r[k] for k in axes}, r["test_success"]) for r in rows]
    classes = {o >= TEACHES_AT for _, o in points}
    result: dict[str, Any] = {"version": MAP_VERSION, "axes": list(axes), "better": dict(signs), "teaches_at": TEACHES_AT,
                              "conditions": mapped, "runs": len(rows), "complete_conditions": len(complete)}
    if len(complete) >= 3 and len(classes) == 2:
        support = map_support([({k: r[k] for k in axes}, r["test_success"]) for r in rows if r["condition"] not in ref_names],
                              TEACHES_AT, signs)
        result.update(fitted=True, **logistic_fit(points, axes, TEACHES_AT).model_dump(), support=support)
    else:
        seeds_needed = max(n_seeds.values(), default=0)
        result.update(fitted=False, why=f"{len(complete)} of {len(n_seeds)} conditions have all seeds ({seeds_needed} needed) "
                                        f"and the runs {'show both outcomes' if len(classes) == 2 else 'show one outcome only'}")
        if len(classes) == 2 and len(points) >= 6:  # a provisional fit, labelled as such, for the plots only
            result["provisional"] = logistic_fit(points, axes, TEACHES_AT)
    return result


def fit_map(*, conditions: Path | Sequence[Path], checks: Path | None, out: Path, data_dir: Path,
            runs: Sequence[Path] = (), reference: Sequence[Path] = (), scored_runs: Sequence[Path] = (),
            map_out: Path | None = None, ship: bool = False, families_file: str | None = None, small: bool = False,
            early_progress: bool = False, progress: bool = True) -> dict[str, Any]:
    """Refit the learnability map (module docstring); returns {map, files, rows, complete}. ``conditions``:
    one sweep file or several (each with its own steps); ``runs``: the folders the run folders are looked
    up in (default: each sweep file's output root); ``scored_runs``: finished runs of a state-reading
    reward outside the sweep files, each its own condition ``<variant>_<steps>k`` measured like one;
    ``early_progress``: the early-progress axes and the budget and phased features (module docstring);
    ``ship``: also write the task's shipped map (``Task.learnability_map``)."""
    from rmtl.tasks import get_task

    conds, check_conds, steps_of, default_roots, steps = _sweeps(conditions, checks, early_progress)
    roots = [Path(r) for r in runs] or default_roots
    task_name, families = load_families(families_file, small=small)
    task = get_task(task_name)
    axes, signs = extended_axes(task) if early_progress else (map_axes(task), better(task))
    if task.map_plane is None:
        raise ConfigError(f"task {task_name!r} defines no plane of its map to plot (Task.map_plane)")
    map_out = Path(map_out) if map_out is not None else out / MAP_FILE
    check_outputs(out, map_out, task.learnability_map, ship)
    refs, scored, scored_steps = _run_conditions(task, reference, scored_runs)  # before any rollout
    steps_of.update(scored_steps)
    conds += scored
    states = state_set(task_name, families, data_dir / "qualification" / ("small" if small else "full") / "states", progress)
    learners = [f.name for f in families if f.group == "learner"]

    def condition_metrics(c: Condition, seed: int) -> dict[str, float]:
        """The axes of the condition's scorer at one seed's error landscape, as ``rmtl qualify`` measures them."""
        kind, cfg = state_scorer(task, c.reward, seed)
        raw = windowed_scores(kind.scores(states.states), states, cfg.shaping.score_window)
        m = scorer_metrics(task, as_phase_columns(raw, len(task.micro_tasks.names)), states)
        if early_progress:
            every = np.ones(len(states.states), dtype=bool)
            m.update(early_progress_axes(task, raw, states, every, cfg.shaping, learners))
            m.update(budget=budget(steps_of[c.name]), phased=float(raw.shape[1] > 1))
        return m

    def measured(c: Condition, rows: list[dict]) -> dict:
        """A condition's metrics (averaged over its seeds' error landscapes) and finished outcomes;
        each finished run appended to ``rows``."""
        per_seed, outcomes = [], []
        for seed, run_name in c.runs:
            m = condition_metrics(c, seed)
            per_seed.append(m)
            found = Path(run_name) if Path(run_name).is_absolute() else _find_run(run_name, roots)
            o = outcome(found) if found is not None else None
            if o is not None:
                outcomes.append(o["best"])
                rows.append({"condition": c.name, "seed": seed, **m, "test_success": o["best"], "final_test": o["final"],
                             "best_step": o["best_step"]})
        metrics = {k: float(np.nanmean([m[k] for m in per_seed])) for k in axes}
        return {"name": c.name, "metrics": metrics, "outcomes": outcomes, "seeds_done": len(outcomes)}

    rows: list[dict] = []
    check_rows: list[dict] = []
    mapped = [measured(c, rows) for c in conds]
    checked = [measured(c, check_rows) for c in check_conds]
    ref_mapped, ref_rows = _reference_points(task, refs, axes, early_progress)
    mapped, rows = mapped + ref_mapped, rows + ref_rows
    result = _fit(mapped, rows, {c["name"] for c in ref_mapped}, {c.name: len(c.runs) for c in conds}, axes, signs)
    fitted = LearnabilityMap.make(**result)
    checked = [{**c, "verdict": map_verdict(c["metrics"], fitted)} for c in checked]
    fitted = LearnabilityMap.make(**{**result, "checks": checked})
    written = write_outputs(fitted, out, map_out, task, ship, rows, check_rows, checked, mapped,
                            sorted({s for c in conds for s, _ in c.runs}), axes, steps)
    return {"map": fitted, "files": [str(p) for p in written], "rows": len(rows), "complete": result["complete_conditions"]}


def format_fit(result: Mapping[str, Any]) -> str:
    """What fit-map prints: how many runs, whether the map is fitted, its coefficients, the files."""
    m: LearnabilityMap = result["map"]
    lines = [f"{result['rows']} runs, {result['complete']} complete conditions; fitted: {m.fitted}"
             + (f" ({m.why})" if not m.fitted else "")]
    if m.fitted and m.coef is not None:
        lines.append("coefficients (standardised): " + ", ".join(f"{k} {c:+.2f}" for k, c in zip(m.axes, m.coef)))
    return "\n".join(lines + [f"wrote {p}" for p in result["files"]])


# -- the command ---------------------------------------------------------------------------
class FitMapConfig(Config):
    """``rmtl qualify fit-map``: refit the learnability map from finished runs (pipeline/qualify/fit.py)."""

    conditions: tuple[str, ...] = ("experiments/learnability/conditions.yaml",)
    """The map's conditions: sweep files whose groups list conditions (runs <condition>_s<seed>), each
    with its own steps (several budgets need --early-progress, which reads the budget)."""
    checks: str | None = "experiments/learnability/checks.yaml"
    """Checks of the map (a sweep file like --conditions), kept out of the fit; 'none' for none."""
    runs: tuple[str, ...] = ()
    """Folders the run folders are looked up in, in order (default: each sweep file's output_root)."""
    reference: tuple[str, ...] = ("results/oracle_structure/runs/rule_only_s0", "results/oracle_structure/runs/rule_only_s1",
                                  "results/oracle_structure/runs/rule_only_s2")
    """Run folders of a reward without a scorer, placed at the map's chance corner; 'none' for none."""
    scored_runs: tuple[str, ...] = ()
    """Finished run folders of a state-reading reward with a scorer outside the sweep files (e.g. the
    exact oracle's 600k runs): one condition <variant>_<steps>k each, measured like a condition."""
    early_progress: bool = False
    """Fit on the early-progress axes too, with the budget and phased features (verdicts at 600k)."""
    out: str | None = None
    """Folder of the map, its tables and plots (default <data dir>/qualification/map); fit-map replaces
    only files it wrote there."""
    map_out: str | None = None
    """The map's file (default <out>/learnability_map.json)."""
    ship: bool = False
    """Also replace the task's shipped map (Task.learnability_map, read by 'rmtl qualify')."""
    families: str | None = None
    """Qualification-set file (default: pipeline/qualify/qualification_families.yaml)."""
    small: bool = False
    """Metrics on the CI-sized set (a few episodes per family)."""

    @field_validator("reference", mode="before")
    @classmethod
    def _none_is_no_reference(cls, v: Any) -> Any:
        """'none' (the word --help gives; the command line reads it as None) for no reference runs."""
        if v is None or (isinstance(v, str) and v.lower() == "none"):
            return ()
        if isinstance(v, (list, tuple)) and [str(x).lower() for x in v] == ["none"]:
            return ()
        return v


def fit_map_command(cfg: FitMapConfig) -> None:
    """Refit the learnability map from finished runs and print what it found."""
    from rmtl.provenance import data_dir

    default = FitMapConfig.model_fields["conditions"].default
    if tuple(cfg.conditions) == default and not Path(default[0]).is_file():
        raise ConfigError(f"{default[0]} is not here ({Path.cwd()}): fit-map refits the map from the runs kept in the "
                          f"project's checkout; run it from the checkout's root, or pass --conditions and --runs")
    root = data_dir()
    result = fit_map(conditions=[Path(c) for c in cfg.conditions], checks=Path(cfg.checks) if cfg.checks else None,
                     out=Path(cfg.out) if cfg.out else root / "qualification" / "map", data_dir=root,
                     runs=[Path(r) for r in cfg.runs], reference=[Path(r) for r in cfg.reference or ()],
                     scored_runs=[Path(r) for r in cfg.scored_runs], map_out=Path(cfg.map_out) if cfg.map_out else None,
                     ship=cfg.ship, families_file=cfg.families, small=cfg.small, early_progress=cfg.early_progress)
    print(format_fit(result))
