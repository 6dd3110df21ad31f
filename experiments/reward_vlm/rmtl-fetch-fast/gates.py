"""The pre-registered gates of a stand-in reward model (GATES.md) on held-out stores.

    python experiments/reward_vlm/rmtl-fetch-fast/gates.py --model MODEL --round 1 --store data/stores/fast/heldout_*.zarr

Each store must hold the model's embeddings (``rmtl embed STORE --model MODEL``). Per store
(a family: a behaviour, a policy, noisy experts) and pooled over every store:

1-3. within-phase Spearman of approach / align scores against the oracle's progress, grasp AUC
     lifted vs resting, right-prompt accuracy on target states (rmtl.tasks.fetch_lift.quality),
     with 95% bootstrap CIs over episodes;
4.   the battery: mean discounted return (gamma 0.95, +1 on success) of each family's episodes
     under the default RMTL reward, the single prompt and rule-only, on bounds adapted to all
     the held-out states at once (pipeline.analyses.return_ranking, "adapted"); the expert must beat every
     degenerate behaviour; and the AUC of the RMTL shaped return, successful vs failed episodes.

Thresholds: gates.yaml. Writes gates_round<R>.json / .md and battery_round<R>.png to
results/reward_vlm/rmtl-fetch-fast/.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml

from pipeline.analyses.behaviour_returns import family_table, plot_family_returns
from pipeline.analyses.return_ranking import reward_steps, variant_scores
from rmtl.reward.replay import discounted_returns, rule_only_rewards, shaped_rewards
from pipeline.stores.store_models import resolve_model_id
from pipeline.stores.stored_text import text_embeddings
from rmtl.provenance import portable_values
from rmtl.reward.prompts import PromptConfig
from rmtl.reward.shaping import ShapingConfig
from rmtl.tasks import get_task
from rmtl.reward.quality_stats import roc_auc
from rmtl.task import QualityInputs
from rmtl.tasks.fetch_lift.quality import reward_quality
from storage.dataset import DatasetStore

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parents[2] / "results" / "reward_vlm" / "rmtl-fetch-fast"
REGISTERED = yaml.safe_load((HERE / "gates.yaml").read_text())
THRESHOLDS: dict[str, float] = dict(REGISTERED["thresholds"])
"""The pre-registered thresholds (gates.yaml)."""
ADDENDUM_FAMILIES: tuple[str, ...] = tuple(REGISTERED["addendum_families"])
"""Families added after registration (GATES.md, addendum): reported, not in the registered pool."""
NUM_PHASES = len(get_task().micro_tasks.names)
METRICS = ("approach_spearman", "align_spearman", "grasp_auc", "right_prompt_accuracy")


def family(path: str) -> str:
    name = Path(path).name.removesuffix(".zarr")
    return name.removeprefix("heldout_").removeprefix("b_").removeprefix("p_")


def degenerate_families(returns: dict) -> list[str]:
    """The scripted degenerate behaviours among one reward's battery families (not the experts,
    not the learner policies)."""
    return [f for f in returns if f != "expert" and f not in ADDENDUM_FAMILIES and not f.startswith("oracle")]


def beaten_by(returns: dict, expert: str = "expert") -> list[str]:
    """Degenerate behaviours paid at least ``expert``'s mean return under one reward."""
    ref = returns.get(expert, [np.nan])[0]
    return sorted(f for f in degenerate_families(returns) if returns[f][0] >= ref)


def success_auc(rewards: np.ndarray, episodes, families, success: np.ndarray) -> float | None:
    """AUC of the undiscounted shaped return, successful vs failed episodes of the registered families."""
    ret = np.array([rewards[idx].sum() for idx in episodes])
    registered = ~np.isin(np.array(families), ADDENDUM_FAMILIES)
    ok, ret = success[registered], ret[registered]
    return roc_auc(ret[ok], ret[~ok]) if ok.any() and (~ok).any() else None


def quality(emb, states, episodes, steps, views, text, alpha=0.9):
    return reward_quality(QualityInputs(emb, states, episodes, steps, views), text.goals, text.baseline, alpha)["mean"]


def bootstrap(emb, states, episodes, steps, views, text, reps: int, seed: int = 0):
    """95% CIs of each metric, resampling whole episodes."""
    rng = np.random.default_rng(seed)
    ids = np.unique(episodes)
    samples = {m: [] for m in METRICS}
    for _ in range(reps):
        pick = rng.choice(ids, size=len(ids))
        rows = np.concatenate([np.flatnonzero(episodes == e) for e in pick])
        # relabel so resampled copies of one episode count as different episodes
        ep = np.concatenate([np.full((episodes == e).sum(), j) for j, e in enumerate(pick)])
        q = quality(emb[rows], states[rows], ep, steps[rows], views, text)
        for m in METRICS:
            samples[m].append(q[m])
    return {m: [float(np.nanpercentile(v, 2.5)), float(np.nanpercentile(v, 97.5))] for m, v in samples.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--round", type=int, required=True)
    ap.add_argument("--store", nargs="+", required=True)
    ap.add_argument("--bootstrap", type=int, default=200)
    a = ap.parse_args(argv)

    per_family, pooled = {}, {k: [] for k in ("emb", "state", "episode", "step")}
    battery = {k: [] for k in ("family", "rmtl", "single", "phase", "episodes", "success", "rows")}
    offset = 0
    model_id = None
    for path in sorted(a.store):
        with DatasetStore.open(path, "r") as st:
            model_id = resolve_model_id(st, a.model)
            n = st.num_rows
            d = st.read(fields=["state", "episode", "step"])
            emb = np.asarray(st.embeddings(model_id, slice(0, n)), dtype=np.float32)
            views = st.views
            text = text_embeddings(st, model_id, PromptConfig(), False)
            fam = family(path)
            q = quality(emb, d["state"], d["episode"], d["step"], views, text)
            per_family[fam] = {"episodes": int(len(np.unique(d["episode"]))), "rows": int(n),
                               **{m: float(q[m]) for m in METRICS},
                               "ci": bootstrap(emb, d["state"], d["episode"], d["step"], views, text, a.bootstrap // 4)}
            if fam not in ADDENDUM_FAMILIES:  # the registered pool
                for k, v in (("emb", emb), ("state", d["state"]), ("episode", d["episode"] + offset),
                             ("step", d["step"])):
                    pooled[k].append(v)
            steps = reward_steps(st, model_id)
            rm, _, _ = variant_scores(st, model_id, steps.rows, steps.phase, "rmtl")
            sp, _, _ = variant_scores(st, model_id, steps.rows, steps.phase, "single_prompt_multi_view")
            base = sum(len(x) for x in battery["rmtl"])
            battery["family"] += [fam] * len(steps.episodes)
            battery["rmtl"].append(rm)
            battery["single"].append(sp)
            battery["phase"].append(steps.phase)
            battery["episodes"] += [idx + base for idx in steps.episodes]
            battery["success"].append(steps.success)
            offset += int(d["episode"].max()) + 1
    cat = {k: np.concatenate(v) for k, v in pooled.items()}
    q = quality(cat["emb"], cat["state"], cat["episode"], cat["step"], views, text)
    overall = {m: float(q[m]) for m in METRICS}
    overall["ci"] = bootstrap(cat["emb"], cat["state"], cat["episode"], cat["step"], views, text, a.bootstrap)

    phase = np.concatenate(battery["phase"])
    eps, success = battery["episodes"], np.concatenate(battery["success"])
    rewards = {
        "RMTL (default)": shaped_rewards(np.concatenate(battery["rmtl"]), phase, eps, ShapingConfig(), NUM_PHASES,
                                          "adapted"),
        "single prompt": shaped_rewards(np.concatenate(battery["single"]), np.zeros_like(phase), eps, ShapingConfig(),
                                        1, "adapted"),
    }
    rewards["rule-only"] = rule_only_rewards(phase, eps, NUM_PHASES)

    fams = list(dict.fromkeys(battery["family"]))
    returns = {lab: discounted_returns(r, eps, success) for lab, r in rewards.items()}
    table = family_table(returns, battery["family"])
    auc = success_auc(rewards["RMTL (default)"], eps, battery["family"], success)
    beaten = beaten_by(table["RMTL (default)"])
    clean = table["RMTL (default)"].get("expert_clean", [np.nan])[0]
    addendum = {lab: beaten_by(table[lab], "expert_clean") for lab in table} if "expert_clean" in fams else {}
    gates = {
        "approach_spearman": overall["approach_spearman"] >= THRESHOLDS["approach_spearman"],
        "align_spearman": overall["align_spearman"] >= THRESHOLDS["align_spearman"],
        "grasp_auc": overall["grasp_auc"] >= THRESHOLDS["grasp_auc"],
        "right_prompt_accuracy": overall["right_prompt_accuracy"] >= THRESHOLDS["right_prompt_accuracy"],
        "expert_beats_every_degenerate": not beaten,
        "success_auc": auc is not None and auc >= THRESHOLDS["success_auc"],
    }
    # absolute paths only: a model name stays a name
    result = {"model": portable_values(a.model), "model_id": model_id, "round": a.round,
              "stores": sorted(portable_values(list(a.store))),
              "pooled": overall, "families": per_family, "battery": table, "success_auc": auc,
              "episodes": int(len(eps)), "successes": int(success.sum()), "beaten_by": beaten,
              "gates": gates, "passes": all(gates.values()), "thresholds": THRESHOLDS,
              "addendum_clean_expert_beaten_by": addendum, "clean_expert_return": clean}
    (RESULTS / f"gates_round{a.round}.json").write_text(json.dumps(result, indent=1, default=float))
    md = _markdown(result)
    (RESULTS / f"gates_round{a.round}.md").write_text(md)
    plot_family_returns(table, RESULTS / f"battery_round{a.round}.png",
                        "Hacking battery on held-out episodes (higher = paid more)")
    print(md)
    return 0


def _fmt(v, ci=None):
    s = "n/a" if v is None or not np.isfinite(v) else f"{v:.3f}"
    return s + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci and np.all(np.isfinite(ci)) else "")


def _markdown(r) -> str:
    lines = [f"# Gates of `{r['model']}`, round {r['round']} (held-out families)", "",
             "| family | episodes | approach rank | align rank | grasp AUC | right prompt |", "|---|---|---|---|---|---|"]
    for f, m in r["families"].items():
        lines.append(f"| {f} | {m['episodes']} | " + " | ".join(_fmt(m[k], m["ci"][k]) for k in METRICS) + " |")
    p = r["pooled"]
    lines.append("| **pooled** | | " + " | ".join(_fmt(p[k], p["ci"][k]) for k in METRICS) + " |")
    lines += ["", "| gate | threshold | value | passes |", "|---|---|---|---|"]
    for g, ok in r["gates"].items():
        value = r["success_auc"] if g == "success_auc" else (
            ", ".join(r["beaten_by"]) or "none beat the expert") if g == "expert_beats_every_degenerate" else p[g]
        thr = r["thresholds"].get(g, "expert highest")
        lines.append(f"| {g} | {thr} | {value if isinstance(value, str) else _fmt(value)} | {'yes' if ok else 'NO'} |")
    lines += ["", f"**All gates pass: {'yes' if r['passes'] else 'no'}.**", ""]
    if r.get("addendum_clean_expert_beaten_by"):
        lines += ["Addendum (GATES.md): degenerate behaviours paid at least the noise-free expert's return, per reward: "
                  + "; ".join(f"{lab}: {', '.join(v) or 'none'}" for lab, v in r["addendum_clean_expert_beaten_by"].items()),
                  ""]
    lines += [
              "Battery: mean discounted return (gamma 0.95, +1 on success) ± s.e.m. per family", "",
              "| family | " + " | ".join(r["battery"]) + " |", "|---|" + "---|" * len(r["battery"])]
    fams = list(next(iter(r["battery"].values())))
    for f in fams:
        lines.append(f"| {f} | " + " | ".join(f"{r['battery'][lab][f][0]:.2f} ± {r['battery'][lab][f][1]:.2f}"
                                               for lab in r["battery"]) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
