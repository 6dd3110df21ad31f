"""``rmtl qualify``: will this scorer teach? Its quality metrics on the qualification set, its
battery of degenerate behaviours, and where it sits on the learnability map (docs/reward_quality.md).

The qualification set is a list of rollout families (``qualification_families.yaml``): the
noise-free expert, noisy experts, the task's degenerate behaviours and committed learners'
policies. A scorer that reads state (``oracle``, ``degraded_oracle``, ``rule_only``) is scored on
the families' states, rolled out without rendering and cached; a VLM is scored on the same
episodes rendered on the model's declared renderer into one store per family and embedded once.

The verdict comes from the task's learnability map (``Task.learnability_map``, shipped with the
task's package: ``rmtl/tasks/fetch_lift/learnability_map.json``, fitted by ``experiments/learnability/fit_map.py`` from the degraded-oracle runs): the fitted probability
that a run on this scorer teaches (test success >= 0.5 at 300k steps) with a bootstrap interval,
and the outcomes of the nearest mapped conditions.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

from rmtl.errors import ConfigError
from rmtl.micro_tasks import micro_task_indices
from storage.whole_file import write_file_whole

REPO = Path(__file__).resolve().parents[1]
FAMILIES_FILE = Path(__file__).with_name("qualification_families.yaml")
METRICS = ("approach_rank", "align_rank", "grasp_auc", "right_prompt", "resting_grasp_pay", "noise_ratio")
"""The map's axes, in this order (RULE.md of results/learnability)."""
BETTER = {"approach_rank": 1, "align_rank": 1, "grasp_auc": 1, "right_prompt": 1, "resting_grasp_pay": -1,
          "noise_ratio": -1}
"""Which way each axis improves (+1: higher is better)."""
STATE_KINDS = ("oracle", "degraded_oracle", "rule_only")
NO_SCORER_METRICS = {"approach_rank": 0.0, "align_rank": 0.0, "grasp_auc": 0.5, "right_prompt": 1 / 3,
                     "resting_grasp_pay": 1.0, "noise_ratio": 0.0}
"""Where a reward without a scorer (rule-only: a constant score) sits on the map: no rank, grasp at
chance, one prompt in three right by chance, a resting cube paid like a lifted one, no noise."""
BOOTSTRAP = 200
"""Episode resamples of a pooled metric's interval."""


@dataclass(frozen=True)
class Family:
    name: str
    group: str
    rollout: dict[str, Any]
    trained_on: tuple[str, ...] = ()


@dataclass
class StateSet:
    """The qualification set's rows: states [N, S], episode ids (unique over the set), steps,
    success of each row's episode, family name per row."""

    states: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    success: np.ndarray
    family: np.ndarray


def file_slug(name: str) -> str:
    """A model spec or scorer name as one safe file or folder name (its qualify stores and reports)."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def load_families(path: str | Path | None = None, small: bool = False) -> tuple[str, list[Family]]:
    """(task name, families) of a qualification-set file; ``small``: the CI-sized episode counts."""
    p = Path(path) if path is not None else FAMILIES_FILE
    try:
        spec = yaml.safe_load(p.read_text())
        task, seed = spec["task"], int(spec["seed"])
        out = []
        for name, f in spec["families"].items():
            f = dict(f)
            group, trained_on, small_n = f.pop("group"), tuple(f.pop("trained_on", ())), f.pop("small", None)
            if small and small_n is not None:
                f["episodes"] = int(small_n)
            policy = str(f.get("policy", "expert"))
            if policy.endswith(".zip") and not Path(policy).is_absolute():
                f["policy"] = str(REPO / policy)
            f.setdefault("seed", seed)
            out.append(Family(name, group, f, trained_on))
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as e:
        from rmtl.errors import yaml_problem

        why = f" is not valid YAML at {yaml_problem(e)}" if isinstance(e, yaml.YAMLError) else f": {type(e).__name__}: {e}"
        raise ConfigError(f"qualification families {p}{why}; see pipeline/qualification_families.yaml "
                          "for the format") from None
    if not out:
        raise ConfigError(f"qualification families {p} lists no families; give at least one under 'families:' "
                          f"(see pipeline/qualification_families.yaml)")
    return task, out


def _family_key(task: str, family: Family) -> str:
    """The cache key of a family's states: its rollout with paths as recorded (repository-relative), so
    every checkout shares one cache."""
    from rmtl.provenance import portable_path

    rollout = {k: portable_path(v) if k == "policy" and str(v).endswith(".zip") else v for k, v in family.rollout.items()}
    return hashlib.sha256(json.dumps([task, rollout], sort_keys=True).encode()).hexdigest()[:12]


def state_set(task: str, families: Sequence[Family], cache_dir: Path, progress: bool = True) -> StateSet:
    """The families' rows, rolled out without rendering (cached per family under ``cache_dir``)."""
    from pipeline.rollout import RolloutConfig, rollout_episodes

    cache_dir.mkdir(parents=True, exist_ok=True)
    parts, offset = [], 0
    for fam in families:
        path = cache_dir / f"{fam.name}-{_family_key(task, fam)}.npz"
        if not path.is_file():
            cfg = RolloutConfig.make(task=task, **fam.rollout)
            if progress:
                print(f"qualify: rolling out {fam.name} ({cfg.episodes} episodes)", flush=True)
            rows = rollout_episodes(cfg, list(range(cfg.episodes)), render=False)
            buf = io.BytesIO()
            np.savez(buf, **{k: rows[k] for k in ("state", "episode", "step", "success")})
            write_file_whole(path, buf.getvalue())
        try:
            with np.load(path) as d:
                ep = d["episode"].astype(np.int64)
                ok = np.zeros(len(ep), dtype=bool)
                for e in np.unique(ep):
                    ok[ep == e] = bool(d["success"][ep == e].any())
                parts.append((d["state"], ep + offset, d["step"], ok, np.full(len(ep), fam.name)))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:  # truncated, garbage, foreign
            raise ConfigError(f"the cached states of family {fam.name}, {path}, are damaged ({type(e).__name__}); "
                              f"delete that file and run again (its episodes are rolled out again)") from None
        offset += int(ep.max()) + 1 if len(ep) else 0
    cols = [np.concatenate([p[i] for p in parts]) for i in range(5)]
    return StateSet(*cols)


def state_scorer(task: Any, reward: Mapping[str, Any], seed: int = 0) -> Any:
    """The reward kind of a ``reward`` section (a state-reading kind), built as a run of ``seed`` builds it."""
    from rmtl.reward.kinds import get_kind, reward_kind_config

    cfg = reward_kind_config(dict(reward))
    if cfg.kind not in STATE_KINDS:
        raise ConfigError(f"qualify --reward takes a kind that reads state ({', '.join(STATE_KINDS)}), not "
                          f"{cfg.kind!r}; score a VLM with --model")
    return get_kind(cfg.kind).from_run(SimpleNamespace(seed=seed), task, reward=cfg), cfg


def kind_scores(kind: Any, states: np.ndarray) -> np.ndarray | None:
    """Per-micro-task scores [N, K] of a state kind (None for a kind without a scorer: rule-only)."""
    return kind.scores(states) if hasattr(kind, "scores") else None


def windowed_scores(scores: np.ndarray, rows: StateSet, window: int) -> np.ndarray:
    """Scores [N, K] as a reward with ``shaping.score_window = window`` sees them: each micro-task's
    score averaged over the episode's last ``window`` steps (rows in step order per episode)."""
    if window <= 1:
        return scores
    out = scores.astype(np.float64).copy()
    for e in np.unique(rows.episode):
        idx = np.flatnonzero(rows.episode == e)
        idx = idx[np.argsort(rows.step[idx], kind="stable")]
        csum = np.cumsum(np.vstack([np.zeros((1, scores.shape[1])), scores[idx]]), axis=0)
        n = np.arange(1, len(idx) + 1)
        lo = np.maximum(n - window, 0)
        out[idx] = (csum[n] - csum[lo]) / (n - lo)[:, None]
    return out


def frames_folder(root: Path, model: str, task: str, families: Sequence[Family]) -> Path:
    """The folder of a model's qualification stores under ``root`` (``<data dir>/qualification/<size>``):
    ``frames/<input px>px_<renderer id>``, shared by every model that sees the same frames (its
    declared renderer, its input size), each adding its own embeddings. A folder
    ``models/<model>`` from before frames were shared is used as it is when it exists."""
    from pipeline.render import renderer_profile
    from pipeline.render_and_embed import RenderAndEmbedConfig, rollout_config
    from rmtl.vlm import input_side

    legacy = root / "models" / file_slug(model)
    if legacy.is_dir():
        return legacy
    first = families[0].rollout if families else {}
    cfg = RenderAndEmbedConfig.make(task=task, model=model, store=str(root / "probe.zarr"), **first)
    resolution = cfg.resolution or input_side(model)  # the model's input size decides the frames' size
    renderer = renderer_profile(rollout_config(cfg, resolution))["renderer_id"]  # what decides the pixels
    return root / "frames" / f"{resolution}px_{renderer}"


def _no_state_cache(store: Any, model_id: str, kind: str) -> dict:
    """The cache step of a qualification store: skipped (nothing looks up states there)."""
    return {"files": [], "status": "not built (qualification store)", "indexed": 0}


def model_scores(model: str, task: str, families: Sequence[Family], store_dir: Path, rows: StateSet,
                 progress: bool = True, single_prompt: bool = False) -> np.ndarray:
    """Multi-view mean scores [N, K] of a VLM on the families' episodes, rendered on its declared
    renderer into one store per family (rendered once per renderer and input size, embedded once
    per model; :func:`frames_folder`). The model is loaded once for all families, and no FAISS
    state cache is built: nothing reads one on a qualification store. ``single_prompt``: the scores
    [N, 1] of the task's single global prompt instead (the single-prompt reward's goal)."""
    from dataclasses import replace

    from pipeline.render_and_embed import RenderAndEmbedConfig, local_steps, run_steps
    from pipeline.store_models import resolve_model_id
    from pipeline.stored_text import text_embeddings
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.vlm import load_vlm
    from storage.dataset import DatasetStore

    from rmtl.reward.kinds.vlm import RewardConfig

    alpha = RewardConfig.model_fields["alpha"].default  # the reward's projection mix
    steps = replace(local_steps(progress), load_model=functools.cache(load_vlm), build_cache=_no_state_cache)
    parts = []
    for fam in families:
        cfg = RenderAndEmbedConfig.make(task=task, model=model, store=str(store_dir / f"{fam.name}.zarr"), **fam.rollout)
        run_steps(cfg, steps)
        with DatasetStore.open(cfg.store_path(), "r") as store:
            model_id = resolve_model_id(store, model)
            n = store.embedded_rows(model_id)
            cols = store.read(slice(0, n), fields=["state"])
            text = text_embeddings(store, model_id, single_prompt=single_prompt)
            per_view = goal_baseline_scores(store.embeddings(model_id, slice(0, n)), text.goals, text.baseline, alpha)
        mine = rows.family == fam.name
        if len(cols["state"]) != int(mine.sum()) or not np.allclose(cols["state"], rows.states[mine], atol=1e-4):
            raise ConfigError(f"qualification store {cfg.store_path()} does not hold family {fam.name}'s episodes; "
                              "delete it and run qualify again")
        parts.append(per_view.mean(axis=1))
    return np.concatenate(parts) if parts else np.zeros((0, 0))


def scorer_metrics(task: Any, scores: np.ndarray | None, rows: StateSet, mask: np.ndarray | None = None) -> dict[str, float]:
    """The map's metrics (``METRICS``) of scores [N, K] on the rows in ``mask`` (all by default), as
    the task defines them (``Task.scorer_metrics``); a reward without a scorer sits at chance."""
    m = np.ones(len(rows.states), dtype=bool) if mask is None else mask
    if scores is None:
        return dict(NO_SCORER_METRICS)
    if task.scorer_metrics is None:
        raise ConfigError(f"task {task.name!r} defines no scorer metrics (Task.scorer_metrics); it cannot be qualified")
    return task.scorer_metrics(scores[m], rows.states[m], rows.episode[m], rows.step[m])


def pooled_metrics(task: Any, scores: np.ndarray | None, rows: StateSet, mask: np.ndarray,
                   seed: int = 0) -> dict[str, Any]:
    """Metrics over the rows in ``mask`` with 95% intervals from episode resamples."""
    point = scorer_metrics(task, scores, rows, mask)
    if scores is None:
        return {"value": point, "ci": {k: [v, v] for k, v in point.items()}}
    eps = np.unique(rows.episode[mask])
    rng = np.random.default_rng(seed)
    by_ep = {e: np.flatnonzero(rows.episode == e) for e in eps}
    draws = {k: [] for k in METRICS}
    for _ in range(BOOTSTRAP):
        pick = rng.choice(eps, size=len(eps), replace=True)
        idx = np.concatenate([by_ep[e] for e in pick])
        # Resampled episodes get new ids so repeats stay separate episodes.
        new_ep = np.concatenate([np.full(len(by_ep[e]), j) for j, e in enumerate(pick)])
        sub = StateSet(rows.states[idx], new_ep, rows.step[idx], rows.success[idx], rows.family[idx])
        vals = scorer_metrics(task, scores[idx], sub)
        for k in METRICS:
            draws[k].append(vals[k])
    ci = {k: [float(np.nanpercentile(v, 2.5)), float(np.nanpercentile(v, 97.5))] if np.isfinite(v).any()
          else [float("nan")] * 2 for k, v in ((k, np.asarray(d, dtype=float)) for k, d in draws.items())}
    return {"value": point, "ci": ci}


def battery(task: Any, scores: np.ndarray | None, rows: StateSet, shaping: Any = None) -> dict[str, dict[str, float]]:
    """Mean discounted return per family under the scorer's reward (``shaping``, default the default;
    bounds adapted to all rows) and under rule-only; the noise-free expert's return is the bar no
    behaviour may reach."""
    from pipeline.behaviour_returns import discounted_returns, rule_only_rewards
    from pipeline.return_ranking import shaped_rewards
    from rmtl.reward.shaping import ShapingConfig

    num_phases = len(task.micro_tasks.names)

    order = np.lexsort((rows.step, rows.episode))
    eps = [order[rows.episode[order] == e] for e in np.unique(rows.episode)]
    eps = [idx[rows.step[idx] > 0] for idx in eps]  # rewards are paid on the states steps end in
    phases = np.asarray(task.phases(rows.states), dtype=np.int64)
    success = [bool(rows.success[idx].any()) if len(idx) else False for idx in eps]
    owner = [str(rows.family[idx[0]]) if len(idx) else "" for idx in eps]
    returns = {"rule_only": discounted_returns(rule_only_rewards(phases, eps, num_phases), eps, success)}
    if scores is not None:
        active = scores[np.arange(len(phases)), phases]
        rewards = shaped_rewards(active, phases, eps, shaping or ShapingConfig(), num_phases, bounds="adapted")
        returns["scorer"] = discounted_returns(rewards, eps, success)
    owner_arr = np.asarray(owner)
    return {label: {f: float(ret[owner_arr == f].mean()) for f in dict.fromkeys(owner)} for label, ret in returns.items()}


def single_prompt_battery(scores: np.ndarray, rows: StateSet, shaping: Any = None) -> dict[str, float]:
    """Mean discounted return per family under the single-prompt reward (one goal, no phase: the
    paper's single-prompt baseline, scores [N, 1]); a behaviour at or above the noise-free expert is
    the "semantic trap" (a pose that scores high without the task being done)."""
    from pipeline.behaviour_returns import discounted_returns
    from pipeline.return_ranking import shaped_rewards
    from rmtl.reward.shaping import ShapingConfig

    order = np.lexsort((rows.step, rows.episode))
    eps = [order[rows.episode[order] == e] for e in np.unique(rows.episode)]
    eps = [idx[rows.step[idx] > 0] for idx in eps]
    success = [bool(rows.success[idx].any()) if len(idx) else False for idx in eps]
    owner = np.asarray([str(rows.family[idx[0]]) if len(idx) else "" for idx in eps])
    zeros = np.zeros(len(rows.states), dtype=np.int64)
    rewards = shaped_rewards(np.asarray(scores)[:, 0], zeros, eps, shaping or ShapingConfig(), 1, bounds="adapted")
    ret = discounted_returns(rewards, eps, success)
    return {f: float(ret[owner == f].mean()) for f in dict.fromkeys(owner.tolist())}


def load_map(path: Path | None = None) -> dict | None:
    """The fitted learnability map at ``path`` (default: the default task's, ``Task.learnability_map``);
    None when there is none."""
    if path is None:
        from rmtl.tasks import get_task

        path = get_task().learnability_map
    if path is None or not Path(path).is_file():
        return None
    return json.loads(path.read_text())


def map_support(points: Sequence[tuple[Mapping[str, float], float]], teaches_at: float) -> dict[str, float]:
    """Per axis, the worst value among the map's runs (metrics, test success) that taught (worse by ``BETTER``)."""
    out: dict[str, float] = {}
    for axis, sign in BETTER.items():
        taught = [sign * m[axis] for m, o in points if o >= teaches_at and np.isfinite(m.get(axis, np.nan))]
        if taught:
            out[axis] = float(sign * min(taught))
    return out


def outside_support(metrics: Mapping[str, float], taught_worst: Mapping[str, float]) -> list[str]:
    """The axes on which ``metrics`` are worse than every run of the map that taught. A scorer teaches
    only if every axis is good enough, so there a "teaches" verdict would rest on the logistic map's
    extrapolation alone. ("Does not teach" needs one bad axis and is not held back this way.)"""
    return [f"{axis} {metrics[axis]:.2f} is worse than every run that taught ({limit:.2f})"
            for axis, limit in taught_worst.items()
            if np.isfinite(metrics.get(axis, np.nan)) and BETTER[axis] * (metrics[axis] - limit) < -1e-9]


def map_verdict(metrics: Mapping[str, float], fitted: Mapping[str, Any] | None) -> dict[str, Any]:
    """Where ``metrics`` sit on the fitted map: P(teaches) with its interval, the verdict and the nearest
    conditions. A "teaches" that the map's runs do not support on some axis (``outside_support``) is
    held at "uncertain": a linear map fitted on few runs must not promise by extrapolation."""
    if fitted is None or not fitted.get("fitted"):
        why = "no map has been fitted yet" if fitted is None else fitted.get("why", "the map is not fitted")
        return {"verdict": "unmapped", "why": why}
    axes = fitted["axes"]
    x = np.array([[metrics.get(a, np.nan) for a in axes]], dtype=float)
    mean, scale = np.asarray(fitted["mean"]), np.asarray(fitted["scale"])
    z = np.nan_to_num((x[0] - mean) / scale, nan=0.0)  # an unmeasured axis sits at the map's average

    def prob(coef: Any, intercept: float) -> float:
        return float(1.0 / (1.0 + np.exp(-(float(z @ np.asarray(coef)) + intercept))))

    probs = [prob(c, i) for c, i in zip(fitted["bootstrap_coef"], fitted["bootstrap_intercept"])]
    p = prob(fitted["coef"], fitted["intercept"])
    lo, hi = (float(np.percentile(probs, 5)), float(np.percentile(probs, 95))) if probs else (p, p)
    verdict = "teaches" if lo >= 0.5 else "does not teach" if hi < 0.5 else "uncertain"
    beyond = outside_support(metrics, fitted.get("support") or {}) if verdict == "teaches" else []
    if beyond:
        verdict = "uncertain"
    conds = fitted["conditions"]
    cz = (np.array([[c["metrics"].get(a, np.nan) for a in axes] for c in conds]) - mean) / scale
    d = np.sqrt(np.nansum((cz - z[None, :]) ** 2, axis=1))
    near = [conds[i] for i in np.argsort(d)[:3]]
    outcomes = [o for c in near for o in c["outcomes"]]
    return {"verdict": verdict, "p_teaches": p, "p_interval_90": [lo, hi],
            "predicted_test_success": float(np.mean([np.mean(c["outcomes"]) for c in near])),
            "predicted_range": [float(min(outcomes)), float(max(outcomes))] if outcomes else None,
            "nearest_conditions": [c["name"] for c in near],
            **({"why": "outside the map's runs: " + "; ".join(beyond)} if beyond else {})}


def scorer_verdict(metrics: Mapping[str, float], beats: Sequence[str], fitted: Mapping[str, Any] | None) -> dict[str, Any]:
    """The map's verdict, held at "uncertain" when a degenerate behaviour (``beats``) earns the expert's return:
    a map of error sizes cannot promise that a reward with an exploit teaches."""
    verdict = map_verdict(metrics, fitted)
    if beats and verdict["verdict"] == "teaches":
        verdict = {**verdict, "verdict": "uncertain", "why": f"{', '.join(beats)} earn the noise-free expert's return"}
    return verdict


def fit_replayed_error(scores: np.ndarray, progress: np.ndarray, phases: np.ndarray, episode: np.ndarray, step: np.ndarray,
                       resting: np.ndarray, names: tuple[str, ...], resting_pay: float) -> dict:
    """The ``degraded_oracle`` error that reproduces a scorer: ``{"error": reward.error section, "fit": the
    per-micro-task lines}`` from its ``scores`` [N, K] against the oracle's ``progress`` [N, K] on rows
    with rule ``phases``, ``episode`` / ``step`` ids and the ``resting`` (cube at the gripper, on the
    table) mask. Per micro-task: scores mapped to progress units by a least-squares line; i.i.d. noise
    from step-to-step changes of the residual along episodes (var / 2, an upper bound); the systematic
    error from the rest of its variance; a negative slope means inverted; for grasp the line leaves
    out resting states. The ``grasp_resting`` strength is the scorer's measured ``resting_pay`` (the
    map's own axis, which equals the strength for a degraded oracle): a line through a nearly flat
    or non-linear grasp score maps resting states unstably (fitted that way, ``rmtl-fetch-fast-r5``
    paying a resting cube 0.98 of a lift came out at 0.19)."""
    per_task, fit = {}, {}
    for k, name in enumerate(names):
        m = phases == k
        line = m & ~resting if name == "grasp" else m
        p, s = progress[line, k], scores[line, k]
        if len(p) < 10 or np.ptp(p) == 0:
            continue
        b, a = np.polyfit(p, s, 1)
        inverted = b < 0
        b = abs(b) if abs(b) > 1e-9 else 1e-9
        r = (scores[m, k] - a) / b * (-1 if inverted else 1) - (1 - progress[m, k] if inverted else progress[m, k])
        order = np.lexsort((step[m], episode[m]))
        e_sorted, r_sorted = episode[m][order], r[order]
        same = e_sorted[1:] == e_sorted[:-1]
        dr = np.diff(r_sorted)[same]
        noise = float(np.sqrt(np.var(dr) / 2)) if len(dr) > 2 else 0.0
        systematic = float(np.sqrt(max(np.var(r) - noise ** 2, 0.0)))
        per_task[name] = {"systematic": round(systematic, 4), "noise": round(noise, 4),
                          "inverted_share": 1.0 if inverted else 0.0}
        fit[name] = {"intercept": float(a), "slope": float(b) * (-1 if inverted else 1), "rows": int(m.sum())}
    error = {"micro_tasks": per_task}
    strength = float(np.clip(resting_pay, 0.0, 1.0)) if np.isfinite(resting_pay) else 0.0
    if strength > 0:
        error["confusions"] = {"grasp_resting": round(strength, 4)}
    return {"error": error, "fit": fit}


def plot_map(fitted: Mapping[str, Any] | None, points: Mapping[str, Mapping[str, float]], path: Path) -> Path:
    """The 2-D view of the map (grasp AUC against min(approach, align) rank): each mapped run coloured
    by whether it taught, and the qualified scorers' points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    if fitted is not None:
        for c in fitted.get("conditions", []):
            m = c["metrics"]
            x, y = m.get("grasp_auc", np.nan), min(m.get("approach_rank", np.nan), m.get("align_rank", np.nan))
            for o in c["outcomes"]:
                ax.scatter(x, y, c="tab:green" if o >= 0.5 else "tab:red", alpha=0.6, s=30)
            ax.annotate(c["name"], (x, y), fontsize=6, alpha=0.7)
    for name, m in points.items():
        x, y = m.get("grasp_auc", np.nan), min(m.get("approach_rank", np.nan), m.get("align_rank", np.nan))
        ax.scatter(x, y, marker="*", s=180, c="black")
        ax.annotate(name, (x, y), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("grasp AUC (qualification set, pooled)")
    ax.set_ylabel("min(approach rank, align rank)")
    ax.set_title("learnability map: green taught (test success >= 0.5 at 300k), red did not")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def hybrid_scores(model_scores: np.ndarray, oracle_scores: np.ndarray, vlm_phases: Sequence[int]) -> np.ndarray:
    """Scores [N, K] of the ``hybrid`` reward kind: the model's columns for the phases ``vlm_phases``,
    the oracle's for the others (each micro-task is shaped on its own bounds, so the columns never mix)."""
    cols = list(vlm_phases)
    out = np.array(oracle_scores, dtype=float, copy=True)
    out[:, cols] = model_scores[:, cols]
    return out


def qualify(*, model: str | None, reward: Mapping[str, Any] | None, families_file: str | None, small: bool,
            out_dir: Path, data_dir: Path, seed: int = 0, map_file: Path | None = None, progress: bool = True,
            vlm_micro_tasks: Sequence[str] | None = None) -> dict:
    """Score the qualification set with one scorer; returns the report (also written as JSON and PNG).
    ``vlm_micro_tasks`` (with ``model``): qualify the hybrid in which the model scores only those
    micro-tasks and the oracle the rest (reward kind ``hybrid``)."""
    from rmtl.tasks import get_task

    if (model is None) == (reward is None):
        raise ConfigError("qualify needs exactly one scorer: --model M (a VLM) or --reward KIND (a state-reading kind)")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"--seed must be an integer >= 0 (a run seed), got {seed!r}")
    if vlm_micro_tasks and model is None:
        raise ConfigError("--vlm-micro-tasks qualifies a hybrid of a VLM and the oracle: give the VLM with --model M")
    task_name, families = load_families(families_file, small=small)
    task = get_task(task_name)
    vlm_phases = micro_task_indices(task.micro_tasks.names, vlm_micro_tasks or (), "--vlm-micro-tasks")  # bad names before any rendering
    size = "small" if small else "full"
    kind, cfg = state_scorer(task, reward, seed) if reward is not None else (None, None)  # bad input before rollouts
    rows = state_set(task_name, families, data_dir / "qualification" / size / "states", progress)
    shaping = None
    if reward is not None:
        scores = kind_scores(kind, rows.states)
        window = getattr(getattr(cfg, "shaping", None), "score_window", 1)
        scores = windowed_scores(scores, rows, window) if scores is not None else None
        shaping = getattr(cfg, "shaping", None)
        label = cfg.kind
        held_out = np.ones(len(rows.states), dtype=bool)
    else:
        stores = frames_folder(data_dir / "qualification" / size, model, task_name, families)
        scores = model_scores(model, task_name, families, stores, rows, progress)
        label = model
        if vlm_micro_tasks:
            oracle, _ = state_scorer(task, {"kind": "oracle"}, seed)
            scores = hybrid_scores(scores, kind_scores(oracle, rows.states), vlm_phases)
            label = f"{model} on {'+'.join(vlm_micro_tasks)}, oracle on the rest"
        held_out = ~np.isin(rows.family, [f.name for f in families if model in f.trained_on])
    fams = {f.name: f for f in families}
    per_family = {name: scorer_metrics(task, scores, rows, rows.family == name) for name in fams}
    groups = sorted({f.group for f in families})
    per_group = {g: scorer_metrics(task, scores, rows,
                                   np.isin(rows.family, [n for n, f in fams.items() if f.group == g]) & held_out)
                 for g in groups}
    pooled = pooled_metrics(task, scores, rows, held_out, seed)
    not_measured = {}
    if vlm_micro_tasks:
        # right_prompt compares the micro-tasks' scores with each other; a hybrid's columns are on two
        # scales (the model's, the oracle's) that its reward never compares, so the map sees it unmeasured.
        not_measured["right_prompt"] = "a hybrid's micro-tasks are scored on two scales"
        for m in (*per_family.values(), *per_group.values(), pooled["value"]):
            m["right_prompt"] = float("nan")
        pooled["ci"]["right_prompt"] = [float("nan")] * 2
    returns = battery(task, scores, rows, shaping)
    bar = returns.get("scorer", returns["rule_only"]).get("expert", float("nan"))
    degenerate = [f.name for f in families if f.group == "behaviour"]
    beats = sorted(n for n in degenerate if returns.get("scorer", {}).get(n, -np.inf) >= bar)
    single: dict[str, Any] = {}
    if model is not None and not vlm_micro_tasks:
        # The single-prompt reward on the same model (the paper's baseline): its own battery.
        single_scores = model_scores(model, task_name, families, stores, rows, False, single_prompt=True)
        single_returns = single_prompt_battery(single_scores, rows)
        single = {"battery_single_prompt": single_returns,
                  "single_prompt_behaviours_at_or_above_expert": sorted(
                      n for n in degenerate if single_returns.get(n, -np.inf) >= single_returns.get("expert", np.inf))}
    fitted = load_map(map_file or task.learnability_map)
    verdict = scorer_verdict(pooled["value"], beats, fitted)
    report = {"scorer": label, "reward": dict(reward) if reward else None, "model": model, "seed": seed,
              "vlm_micro_tasks": list(vlm_micro_tasks or []),
              "set": {"size": size, "families": {n: {"group": f.group, "episodes": int(f.rollout.get("episodes", 0)),
                                                     "held_out": model not in f.trained_on if model else True}
                                                 for n, f in fams.items()},
                      "rows": int(len(rows.states)), "episodes": int(len(np.unique(rows.episode)))},
              "pooled": pooled, "groups": per_group, "families": per_family, "battery": returns,
              "behaviours_at_or_above_expert": beats, **single, "map": verdict, "not_measured": not_measured}
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = file_slug(label if not vlm_micro_tasks else f"{model}_hybrid_{'_'.join(vlm_micro_tasks)}")
    report["files"] = {"json": str(out_dir / f"qualify_{slug}.json"), "png": str(out_dir / f"qualify_{slug}.png")}
    from rmtl.provenance import portable_path

    saved = {**report, "files": {k: portable_path(v) for k, v in report["files"].items()}}
    write_file_whole(report["files"]["json"], json.dumps(saved, indent=1, default=float))
    plot_map(fitted, {label: pooled["value"]}, Path(report["files"]["png"]))
    return report


def format_report(report: Mapping[str, Any]) -> str:
    """The report as a plain table: pooled metrics with intervals, per group, the battery, the verdict."""
    f = lambda x: "n/a" if x is None or x != x else f"{x:.3f}"  # noqa: E731
    pooled, ci = report["pooled"]["value"], report["pooled"]["ci"]
    lines = [f"qualify {report['scorer']}: {report['set']['rows']} rows, {report['set']['episodes']} episodes "
             f"({report['set']['size']} set)", "",
             f"{'metric':<20}{'pooled':>10}  {'95% CI':<17}" + "".join(f"{g:>14}" for g in report["groups"])]
    for k in METRICS:
        lines.append(f"{k:<20}{f(pooled[k]):>10}  [{f(ci[k][0])}, {f(ci[k][1])}]".ljust(49)
                     + "".join(f"{f(report['groups'][g][k]):>14}" for g in report["groups"]))
    lines += ["", "battery (mean discounted return per family; a behaviour must stay below the noise-free expert):"]
    for label, fams in report["battery"].items():
        lines.append(f"  {label:<10}" + ", ".join(f"{n} {f(v)}" for n, v in fams.items()))
    if report["behaviours_at_or_above_expert"]:
        lines.append("  at or above the expert: " + ", ".join(report["behaviours_at_or_above_expert"]))
    if "battery_single_prompt" in report:
        lines.append("  single prompt: " + ", ".join(f"{n} {f(v)}" for n, v in report["battery_single_prompt"].items()))
        trap = report["single_prompt_behaviours_at_or_above_expert"]
        lines.append("  single prompt, at or above the expert: " + (", ".join(trap) if trap else "none"))
    v = report["map"]
    lines.append("")
    if v["verdict"] == "unmapped":
        lines.append(f"verdict: unmapped ({v['why']})")
    else:
        lines.append(f"verdict: {v['verdict']} (P(teaches) {f(v['p_teaches'])}, 90% [{f(v['p_interval_90'][0])}, "
                     f"{f(v['p_interval_90'][1])}]; predicted test success at 300k {f(v['predicted_test_success'])}, "
                     f"nearest conditions {', '.join(v['nearest_conditions'])})" + (f"; {v['why']}" if "why" in v else ""))
    lines += [f"wrote {p}" for p in report["files"].values()]
    return "\n".join(lines)
