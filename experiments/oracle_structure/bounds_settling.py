"""Where the default shaping's tracking bounds settle on the shipped model's scores of learner-like
states, against the phase's p2 / p98 and against a fast tracker of one env's 3-step spread.

    python experiments/oracle_structure/bounds_settling.py --store STORE [--model rmtl-fetch-tiny]

STORE: a render-and-embed store of learner-like episodes (noisy experts at several noise levels
and random actions; README.md has the command). The episodes' active-micro-task scores (rule
phase, paper prompts, six views) are fed to a real RewardShaper of 16 envs, each env playing one
episode after another (as in training), for several passes. Reported per micro-task: the
settled bounds, the phase's p1 / p2 / p98 / p99, the bounds of a 1-env tracker at rate 0.01 both
ways toward its own 3-step min / max (the rejected alternative), and the u of a resting cube at
the cube (align / grasp rows, not lifted) against a lifted one (grasp, lift >= 2 cm) under the
default bounds and under bounds that only widen. Writes bounds_settling.json / .md / .png.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from pipeline.stores.store_rows import active, load_rows, open_store, per_view_scores
from pipeline.stores.stored_text import text_embeddings
from rmtl.default_model import DEFAULT_MODEL
from rmtl.reward.shaping import RewardShaper, ShapingConfig
from rmtl.tasks import get_task
from rmtl.train.config import stage1_config
from rmtl.vlm.spec import parse_spec

OUT = Path(__file__).resolve().parents[2] / "results" / "oracle_structure"
PHASES = get_task().micro_tasks.names
GRASP = PHASES.index("grasp")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True, nargs="+", help="one or more stores (episodes of each are pooled)")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    s, k, ep, step, lift, dist = _reward_steps(a.store, parse_spec(a.model).model_id)
    episodes = [np.flatnonzero(ep == e)[np.argsort(step[ep == e])] for e in np.unique(ep)]
    default = _replay(s, k, episodes, ShapingConfig(), 16, a.passes)
    widen = _replay(s, k, episodes, stage1_config("rmtl_per_phase").reward.shaping_config(), 16, a.passes)
    fast = _replay(s, k, episodes, ShapingConfig(contraction_rate=0.01), 1, a.passes)  # 1 env, rate 0.01 both ways
    result = {"stores": [str(x) for x in a.store], "model": a.model, "reward_steps": int(len(s)), "episodes": len(episodes),
              "passes": a.passes, "phases": _phase_rows(s, k, default, fast, widen)}
    g = result["phases"].get("grasp")
    if g:
        resting = (dist <= 0.04) & (lift < 0.005)
        lifted = (k == GRASP) & (lift >= 0.02)
        for label, (lo, hi) in {"default": g["default_bounds"], "widen_only": g["widen_only_bounds_env0"],
                                "p2_p98": [g["p2"], g["p98"]]}.items():
            result.setdefault("grasp_u", {})[label] = {"resting_cube": _u_of(s, k, resting, lo, hi),
                                                       "lifted_cube": _u_of(s, k, lifted, lo, hi)}
    out = Path(a.out)
    (out / "bounds_settling.json").write_text(json.dumps(result, indent=1))
    lines = _table(result)
    (out / "bounds_settling.md").write_text("\n".join(lines) + "\n")
    _plot(s, k, result, out / "bounds_settling.png")
    print("\n".join(lines))
    return result


def _reward_steps(stores: list[str], mid: str) -> tuple[np.ndarray, ...]:
    """(score, phase, episode, step, lift, distance) of the reward steps of every store, pooled."""
    parts = []
    for i, path in enumerate(stores):
        with open_store(path) as st:
            rows = load_rows(st, mid)
            text = text_embeddings(st, mid)
            sc = active(per_view_scores(st, mid, text, [0.9], rows.rows)[0].mean(axis=1), rows.phase)
        keep = rows.step >= 1  # reward steps: the states env steps ended in
        parts.append((sc[keep], rows.phase[keep], rows.episode[keep] + 1_000_000 * i, rows.step[keep],
                      rows.lift[keep], rows.distance[keep]))
    return tuple(np.concatenate(x) for x in zip(*parts))


def _replay(s: np.ndarray, k: np.ndarray, episodes: list[np.ndarray], cfg: ShapingConfig, n_envs: int,
            passes: int) -> RewardShaper:
    """A shaper of ``n_envs`` envs fed the episodes one after another per env, ``passes`` times."""
    sh = RewardShaper(n_envs, cfg, num_phases=len(PHASES))
    rng = np.random.default_rng(0)
    for _ in range(passes):
        order = rng.permutation(len(episodes))
        lanes = [list(order[i::n_envs]) for i in range(n_envs)]
        cur = [[] for _ in range(n_envs)]
        while any(lanes) or any(cur):
            for i in range(n_envs):
                if not cur[i] and lanes[i]:
                    cur[i] = list(episodes[lanes[i].pop()])
            live = [i for i in range(n_envs) if cur[i]]
            if not live:
                break
            # envs without an episode repeat a neutral row of their last phase: only live rows count
            idx = np.array([cur[i][0] if cur[i] else episodes[0][0] for i in range(n_envs)])
            sh(s[idx], k[idx])
            for i in live:
                cur[i].pop(0)
                if not cur[i]:
                    sh.reset(np.arange(n_envs) == i)
    return sh


def _phase_rows(s: np.ndarray, k: np.ndarray, default: RewardShaper, fast: RewardShaper,
                widen: RewardShaper) -> dict[str, dict]:
    """Per micro-task: its percentiles and where each shaper's bounds settled."""
    phases = {}
    for p, name in enumerate(PHASES):
        sp = s[k == p]
        if len(sp) == 0:
            continue
        q = np.percentile(sp, [1, 2, 98, 99])
        row = {"rows": int(len(sp)), "p1": q[0], "p2": q[1], "p98": q[2], "p99": q[3],
               "default_bounds": [default.low[0, p], default.high[0, p]],
               "fast_3step_tracker_bounds": [fast.low[0, p], fast.high[0, p]],
               "widen_only_bounds_env0": [widen.low[0, p], widen.high[0, p]]}
        phases[name] = {kk: (int(v) if kk == "rows" else float(v) if np.isscalar(v) else [float(x) for x in v])
                        for kk, v in row.items()}
    return phases


def _u_of(s: np.ndarray, k: np.ndarray, mask: np.ndarray, lo: float, hi: float, p: int = GRASP) -> float | None:
    m = mask & (k == p)
    return float(np.clip((s[m] - lo) / (hi - lo), 0, 1).mean()) if m.any() else None


def _table(result: dict) -> list[str]:
    """The markdown tables of bounds_settling.md."""
    lines = ["| micro-task | rows | p2 | p98 | default bounds (16 envs) | p1 | p99 | fast 3-step tracker (rate 0.01 both ways) | widen-only bounds |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in result["phases"].items():
        lines.append(f"| {name} | {r['rows']} | {r['p2']:.3f} | {r['p98']:.3f} | {r['default_bounds'][0]:.3f} / {r['default_bounds'][1]:.3f} "
                     f"| {r['p1']:.3f} | {r['p99']:.3f} | {r['fast_3step_tracker_bounds'][0]:.3f} / {r['fast_3step_tracker_bounds'][1]:.3f} "
                     f"| {r['widen_only_bounds_env0'][0]:.3f} / {r['widen_only_bounds_env0'][1]:.3f} |")
    if "grasp_u" in result:
        lines += ["", "| grasp bounds | mean u, resting cube at the gripper | mean u, lifted cube |", "|---|---|---|"]
        for label, v in result["grasp_u"].items():
            f = lambda x: "-" if x is None else f"{x:.2f}"
            lines.append(f"| {label} | {f(v['resting_cube'])} | {f(v['lifted_cube'])} |")
    return lines


def _plot(s, k, result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["phases"])
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2))
    for ax, name in zip(np.atleast_1d(axes), names):
        p = PHASES.index(name)
        r = result["phases"][name]
        ax.hist(s[k == p], bins=60, color="0.7")
        for (lo, hi), c, lab in ((r["default_bounds"], "C0", "default (tracking)"),
                                 (r["fast_3step_tracker_bounds"], "C3", "fast 3-step tracker"),
                                 (r["widen_only_bounds_env0"], "C2", "widen only")):
            ax.axvline(lo, color=c, label=lab)
            ax.axvline(hi, color=c)
        for q in (r["p2"], r["p98"]):
            ax.axvline(q, color="k", ls=":", label="p2 / p98" if q == r["p2"] else None)
        ax.set_title(f"{name} ({r['rows']} steps)")
        ax.set_xlabel("active-prompt score")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
