"""Why does a reward VLM's grasp score pay a cube resting at the gripper almost like a lifted one?
Offline, on the qualification frames that ``rmtl qualify --model M`` rendered and embedded (run it
first; nothing is rendered here).

    python experiments/learnability/grasp_diagnosis.py --models rmtl-fetch-fast-r6 rmtl-fetch-fast-r6-labelled \
        [--out results/learnability/grasp_diagnosis]     # one JSON per model and README.md's tables (tables.md)

Rows: the qualification set's grasp band (the rule's grasp phase), families the model was trained
on left out (as qualify pools). "Resting": the cube at the gripper on the table
(``resting_at_gripper``); "lifted": lift >= 2 cm (the map's definition); "small lift": 1-3 cm.

1. **Image side**: is lift decodable from the frozen image embeddings? A logistic probe (lifted vs
   resting) and a ridge probe (lift height, 0-10 cm), per view and on the six-view mean embedding,
   5-fold cross-validated with whole episodes held out; beside the zero-shot grasp score's AUC and
   resting pay on the same rows.
2. **Text side**: how the grasp prompt's goal-baseline direction sits against the image
   embeddings' lift direction (mean lifted minus mean resting) and the probe's weights; the caption
   grammar's words on lifted and resting rows against the prompt's words; the prompt's cosine to
   the mean caption embedding of lifted and of resting rows; and the resting pay of a goal made of
   the lifted rows' own captions (what the text tower can say about lift at all).
3. **The reward's settings**: the resting pay and grasp AUC of the projection at every alpha, and
   after the tracking bounds' clip (the bounds replayed over the rows' episodes in order).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path

import numpy as np

from pipeline.qualify import file_slug, frames_folder, load_families, state_set
from pipeline.stores.store_models import resolve_model_id
from pipeline.stores.stored_text import text_embeddings
from rmtl.provenance import data_dir
from rmtl.reward.projection import goal_baseline_scores
from rmtl.reward.quality_stats import roc_auc
from rmtl.tasks.fetch_lift.cameras import VIEW_NAMES as VIEWS
from rmtl.tasks.fetch_lift.neutral_captions import caption
from rmtl.tasks.fetch_lift.phases import GRASP, rule_phase
from rmtl.tasks.fetch_lift.quality import LIFTED
from rmtl.tasks.fetch_lift.scorer_errors import resting_at_gripper
from rmtl.tasks.fetch_lift.state import gripper_cube_distance, lift_height
from storage.dataset import DatasetStore

REPO = Path(__file__).resolve().parents[2]
ALPHAS = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)
FOLDS = 5

CAPTIONS_PER_STATE = 4


def load_rows(model: str):
    """States, family, episode and per-view embeddings [N, V, D] of the full qualification set, plus
    the model's text embeddings (goals [K, D], baseline [D]) and its view names."""
    task_name, families = load_families()
    rows = state_set(task_name, families, data_dir() / "qualification" / "full" / "states", progress=False)
    folder = frames_folder(data_dir() / "qualification" / "full", model, task_name, families)
    embs, text = [], None
    for fam in families:
        path = folder / f"{fam.name}.zarr"
        if not path.exists():
            raise SystemExit(f"error: {path} is missing: run `rmtl qualify --model {model}` first")
        with DatasetStore.open(path, "r") as store:
            model_id = resolve_model_id(store, model)
            n = store.embedded_rows(model_id)
            embs.append(np.asarray(store.embeddings(model_id, slice(0, n)), dtype=np.float32))
            text = text if text is not None else text_embeddings(store, model_id)
    x = np.concatenate(embs)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    held = ~np.isin(rows.family, [f.name for f in families if model in f.trained_on])
    return rows, x, text, held


def grouped_folds(episode: np.ndarray, k: int = FOLDS, seed: int = 0) -> list[np.ndarray]:
    eps = np.unique(episode)
    rng = np.random.default_rng(seed)
    rng.shuffle(eps)
    return [np.isin(episode, part) for part in np.array_split(eps, k)]


def probe_auc(x: np.ndarray, y: np.ndarray, episode: np.ndarray) -> float:
    """Cross-validated AUC of a logistic probe (whole episodes held out)."""
    from sklearn.linear_model import LogisticRegression

    pred = np.full(len(y), np.nan)
    for test in grouped_folds(episode):
        if len(np.unique(y[~test])) < 2 or not test.any():
            continue
        clf = LogisticRegression(C=1.0, max_iter=2000).fit(x[~test], y[~test])
        pred[test] = clf.decision_function(x[test])
    ok = np.isfinite(pred)
    return float(roc_auc(pred[ok][y[ok] == 1], pred[ok][y[ok] == 0]))


def probe_r2(x: np.ndarray, h: np.ndarray, episode: np.ndarray) -> float:
    """Cross-validated R^2 of a ridge probe of lift height (whole episodes held out)."""
    from sklearn.linear_model import Ridge

    pred = np.full(len(h), np.nan)
    for test in grouped_folds(episode):
        pred[test] = Ridge(alpha=1.0).fit(x[~test], h[~test]).predict(x[test])
    return float(1 - np.sum((pred - h) ** 2) / np.sum((h - h.mean()) ** 2))


def pay(score: np.ndarray, all_scores: np.ndarray, rest: np.ndarray, lifted: np.ndarray) -> float:
    """The map's resting pay: 0 at the score's 5th percentile over every row, 1 at a lifted cube's mean."""
    floor = np.percentile(all_scores, 5)
    return float((score[rest].mean() - floor) / (score[lifted].mean() - floor))


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--out", type=Path, default=REPO / "results/learnability/grasp_diagnosis")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    reports = [diagnose(model, a.out) for model in a.models]
    (a.out / "tables.md").write_text(tables(reports))
    print(tables(reports))
    return 0


def diagnose(model: str, out: Path) -> dict:
    """The three parts of the diagnosis for one model (see the module docstring); also written as JSON."""
    rows, x, text, held = load_rows(model)
    s = rows.states
    phase = rule_phase(np.asarray(gripper_cube_distance(s)))
    lift = np.asarray(lift_height(s)).reshape(-1)
    band = (phase == GRASP) & held
    rest = band & resting_at_gripper(s)
    lifted = band & (lift >= LIFTED)
    small = band & (lift >= 0.01) & (lift < 0.03)
    views = x.shape[1]
    mean_x = x.mean(axis=1)
    mean_x /= np.linalg.norm(mean_x, axis=-1, keepdims=True)
    report: dict = {"model": model, "rows": {"grasp_band": int(band.sum()), "resting": int(rest.sum()),
                                               "lifted": int(lifted.sum()), "small_lift_1_3cm": int(small.sum())}}

    # 1. Image side.
    sel = rest | lifted
    sel_small = rest | small
    heights = band & (lift >= -0.005) & (lift <= 0.10)
    zero_shot = goal_baseline_scores(x, text.goals, text.baseline, 0.9)  # [N, V, K]
    probe_rows = []
    for v in list(range(views)) + ["mean"]:
        xv = mean_x if v == "mean" else x[:, v]
        score = zero_shot.mean(axis=1)[:, GRASP] if v == "mean" else zero_shot[:, v, GRASP]
        probe_rows.append({
            "view": v,
            "probe_auc_lifted_vs_resting": probe_auc(xv[sel], lifted[sel].astype(int), rows.episode[sel]),
            "probe_auc_small_lift_vs_resting": probe_auc(xv[sel_small], small[sel_small].astype(int), rows.episode[sel_small]),
            "probe_r2_lift_height": probe_r2(xv[heights], lift[heights], rows.episode[heights]),
            "prompt_auc_lifted_vs_resting": float(roc_auc(score[lifted], score[rest])),
            "prompt_auc_small_lift_vs_resting": float(roc_auc(score[small], score[rest])),
            "prompt_resting_pay": pay(score, score[held], rest, lifted),
        })
    report["image_side"] = probe_rows

    # 2. Text side, on the six-view mean embedding.
    from sklearn.linear_model import LogisticRegression
    from rmtl.vlm import load_vlm

    g, b = np.asarray(text.goals, dtype=np.float64), np.asarray(text.baseline, dtype=np.float64).reshape(-1)
    d = g[GRASP] - b
    d_hat = d / np.linalg.norm(d)
    delta = mean_x[lifted].mean(0) - mean_x[rest].mean(0)
    w = LogisticRegression(C=1.0, max_iter=2000).fit(mean_x[sel], lifted[sel].astype(int)).coef_[0]
    side = {
        "lift_gap_norm": float(np.linalg.norm(delta)),
        "cos_goal_direction_vs_lift_direction": float(d_hat @ delta / np.linalg.norm(delta)),
        "cos_goal_direction_vs_probe_weights": float(d_hat @ w / np.linalg.norm(w)),
        "goal_direction_gap": float(d_hat @ delta),
        "grasp_goal_cos_to_mean_resting_image": float(g[GRASP] @ mean_x[rest].mean(0)),
        "grasp_goal_cos_to_mean_lifted_image": float(g[GRASP] @ mean_x[lifted].mean(0)),
    }
    vlm = load_vlm(model)
    prompts = text_prompts()
    rng = random.Random(0)
    caps = {name: [caption(st, rng) for st in s[m] for _ in range(CAPTIONS_PER_STATE)]
            for name, m in (("lifted", lifted), ("resting", rest))}
    cap_emb = {name: vlm.encode_text(c).astype(np.float64) for name, c in caps.items()}
    grasp_prompt = prompts["grasp"]
    pe = vlm.encode_text([grasp_prompt])[0].astype(np.float64)
    side["grasp_prompt"] = grasp_prompt
    side["prompt_cos_to_mean_lifted_caption"] = float(pe @ cap_emb["lifted"].mean(0))
    side["prompt_cos_to_mean_resting_caption"] = float(pe @ cap_emb["resting"].mean(0))
    side["lifted_vs_resting_caption_cos"] = float(
        unit(cap_emb["lifted"].mean(0)) @ unit(cap_emb["resting"].mean(0)))
    # Where the prompt sits on the segment resting-captions -> lifted-captions (0: resting, 1: lifted).
    lc, rc = cap_emb["lifted"].mean(0), cap_emb["resting"].mean(0)
    side["prompt_position_resting_to_lifted"] = float((pe - rc) @ (lc - rc) / ((lc - rc) @ (lc - rc)))
    # A goal made of the lifted rows' own captions: what the text tower can say about lift at all.
    own = unit(lc)
    own_score = goal_baseline_scores(mean_x, own[None], b, 0.9)[:, 0]
    side["lifted_captions_goal_auc"] = float(roc_auc(own_score[lifted], own_score[rest]))
    side["lifted_captions_goal_resting_pay"] = pay(own_score, own_score[held], rest, lifted)
    # Words: how often each of the prompt's words is in a lifted row's caption and a resting row's.
    freq = {name: Counter(w for c in cs for w in set(words(c))) for name, cs in caps.items()}
    side["prompt_words"] = {wd: {"lifted": freq["lifted"][wd] / len(caps["lifted"]),
                                 "resting": freq["resting"][wd] / len(caps["resting"])}
                            for wd in dict.fromkeys(words(grasp_prompt))}
    side["lift_words_in_captions"] = {
        name: [wd for wd, _ in (freq[name] - freq["resting" if name == "lifted" else "lifted"]).most_common(8)]
        for name in caps}
    report["text_side"] = side

    # 3. The reward's settings: alpha, and the tracking bounds' clip.
    settings = []
    for alpha in ALPHAS:
        all_k = goal_baseline_scores(x, text.goals, text.baseline, alpha).mean(axis=1)
        sc = all_k[:, GRASP]
        settings.append({"alpha": alpha, "grasp_auc": float(roc_auc(sc[lifted], sc[rest])),
                         "resting_pay": pay(sc, sc[held], rest, lifted),
                         "resting_pay_after_bounds": bounded_pay(all_k, phase, rows, held, rest, lifted)})
    report["settings"] = settings
    (out / f"{file_slug(model)}.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def tables(reports: list[dict]) -> str:
    """The diagnosis as markdown: the probes per view, the text side, the settings."""
    f = lambda v: f"{v:.2f}"  # noqa: E731
    lines = ["### 1. Image side: lift in the frozen image embeddings (5-fold, whole episodes held out)", "",
             "| model | view | probe AUC lifted vs resting | probe AUC 1-3 cm vs resting | probe R^2 lift height "
             "| prompt AUC lifted vs resting | prompt AUC 1-3 cm vs resting | prompt resting pay |", "|---|---|---|---|---|---|---|---|"]
    for r in reports:
        for p in r["image_side"]:
            view = "six-view mean" if p["view"] == "mean" else VIEWS[p["view"]]
            lines.append(f"| `{r['model']}` | {view} | " + " | ".join(f(v) for k, v in p.items() if k != "view") + " |")
    lines += ["", "### 2. Text side (six-view mean embeddings; captions of the same rows by the prompt-neutral grammar)", "",
              "| model | cos(goal direction, lift direction) | cos(goal direction, probe weights) | prompt cos to lifted / resting captions "
              "| lifted vs resting captions cos | goal from lifted captions: AUC / resting pay |", "|---|---|---|---|---|---|"]
    for r in reports:
        s = r["text_side"]
        lines.append(f"| `{r['model']}` | {f(s['cos_goal_direction_vs_lift_direction'])} | {f(s['cos_goal_direction_vs_probe_weights'])} "
                     f"| {s['prompt_cos_to_mean_lifted_caption']:.4f} / {s['prompt_cos_to_mean_resting_caption']:.4f} "
                     f"| {s['lifted_vs_resting_caption_cos']:.3f} | {f(s['lifted_captions_goal_auc'])} / {f(s['lifted_captions_goal_resting_pay'])} |")
    r = reports[0]["text_side"]
    lines += ["", f"The grasp prompt's words in the grammar's captions of lifted / resting rows ({r['grasp_prompt']!r}): "
              + ", ".join(f"{w} {v['lifted']:.2f} / {v['resting']:.2f}" for w, v in r["prompt_words"].items()
                          if w not in ("a", "its")),
              "", "### 3. The reward's settings: grasp AUC and resting pay by alpha, and after the tracking bounds", "",
              "| model | alpha | grasp AUC | resting pay (scores) | resting pay (u after the tracking bounds) |", "|---|---|---|---|---|"]
    for r in reports:
        for s in r["settings"]:
            lines.append(f"| `{r['model']}` | {s['alpha']} | {f(s['grasp_auc'])} | {f(s['resting_pay'])} | {f(s['resting_pay_after_bounds'])} |")
    return "\n".join(lines) + "\n"


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def text_prompts() -> dict[str, str]:
    """The micro-task prompts of the default reward config (first phrasing of each)."""
    from rmtl.tasks import get_task

    goals = get_task().prompts().micro_task_goals
    return {k: v[0] for k, v in goals.items()}


def bounded_pay(scores: np.ndarray, phase: np.ndarray, rows, held: np.ndarray, rest: np.ndarray,
                lifted: np.ndarray, envs: int = 16, passes: int = 10) -> float:
    """Resting pay of the shaping's u = clip((s - low) / (high - low), 0, 1) with its tracking bounds
    (the reward's defaults) replayed as training feeds them: ``envs`` episodes in lockstep, each row
    scored under its rule phase, the bounds shared by the envs per micro-task, over ``passes`` passes of
    the rows so that the bounds settle from their initial values (u of the last pass). The pay a
    learner sees once its bounds have settled on such states."""
    from rmtl.reward.kinds.vlm import RewardConfig
    from rmtl.reward.shaping import RewardShaper

    shaper = RewardShaper(envs, RewardConfig().shaping, num_phases=scores.shape[1])
    u = np.full(len(scores), np.nan)
    episodes = [np.flatnonzero(rows.episode == ep) for ep in np.unique(rows.episode[held])]
    episodes = [idx[np.argsort(rows.step[idx])] for idx in episodes]
    for start in [s for _ in range(passes) for s in range(0, len(episodes), envs)]:
        chunk = episodes[start:start + envs]
        chunk += [chunk[-1]] * (envs - len(chunk))  # pad the last lockstep group (its rows are overwritten alike)
        shaper.reset()
        for t in range(max(len(idx) for idx in chunk)):
            at = np.array([idx[min(t, len(idx) - 1)] for idx in chunk])
            out = shaper(scores[at, phase[at]], phase[at])
            u[at] = out.u
    ok = held & np.isfinite(u)
    return pay(u, u[ok], rest & ok, lifted & ok)


if __name__ == "__main__":
    raise SystemExit(main())
