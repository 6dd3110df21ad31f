"""Round 6 of the stand-in: round 5's families plus 48,000 coverage scenes (families.yaml, round 6),
a prompt-neutral model selected without the prompts, the labelled recipe on the same stores, and
both qualified. Stages, each logged with its wall time into ``--out``/status.json
(round4_gpu.run_stages):

1. ``render``: every family of the round into its own store under ``--stores`` (round4_gpu's render
   stage; a store already rendered with the same settings is resumed, so round 5's stores serve);
2. ``train``: `rmtl-fetch-fast`'s architecture from random weights on every training store,
   compositional captions (prompt-neutral), weights selected by the held-out caption loss with
   early stopping (``select_by caption_loss``, ``--patience-evals``), for ``--train-budget-s``,
   into ``--out``/model;
3. ``train-labelled``: the same stores and budget with the labelled recipe (graded captions, the
   paper prompts among them; selection by gate margin), into ``--out``/model_labelled;
4. ``qualify``: ``python -m rmtl qualify`` of each trained model into ``--out``/qualify.

A training stage re-run continues from its model directory's checkpoint.pt (steps, selection,
patience and the time already spent), so a stopped round resumes where it stopped.

    python experiments/reward_vlm/rmtl-fetch-fast/round6.py --out OUT --stores DIR --pixel RUN

``--smoke``: each family at its ``smoke_episodes`` (at most 2 without), a few training steps and the
small qualification set, to check the script end to end on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from families import POLICIES  # this script's folder
from round4_gpu import ROOT, log, run_stages, stage_render

LABELLED = "model_labelled"
"""The labelled model's folder under --out (the prompt-neutral one is model/)."""


def train_config(a, **recipe):
    """Round 6's training settings with a captions-and-selection ``recipe``."""
    from pipeline.train_vlm import TrainVLMConfig

    return TrainVLMConfig.make(model="rmtl-fetch-fast", steps=a.train_steps, time_budget_s=a.train_budget_s,
                               batch_size=a.batch_size, lr=1e-3, warmup_steps=min(300, a.train_steps // 10),
                               eval_every=a.eval_every, checkpoint_every=a.eval_every, soft_sigma=0.03, seed=0,
                               device=a.device, frame_cache_gb=a.frame_cache_gb, patience_evals=a.patience_evals,
                               **recipe)


def train(a, status: dict, key: str, out: Path, **recipe) -> None:
    from pipeline.train_vlm import train_from_options
    from pipeline.train_vlm.cli import TrainVLMOptions

    cfg = train_config(a, **recipe)
    stores = sorted(str(p) for p in a.stores.glob("train_*.zarr"))
    train_from_options(cfg, TrainVLMOptions.make(store=tuple(stores), out=str(out)))
    metrics = json.loads((out / "metrics.json").read_text())
    status[key] = {"stores": len(stores), "model": str(out), "config": cfg.model_dump(mode="json"),
                   **{k: metrics.get(k) for k in ("steps_done", "selected_step", "stopped_early_at", "train_seconds")},
                   "held_out_caption_loss": metrics["final"].get("held_out_caption_loss"),
                   "held_out_quality": metrics["final"].get("mean")}


def stage_train(a, status: dict) -> None:
    train(a, status, "train", a.out / "model", captions="compositional", baseline_balance=0, select_by="caption_loss")


def stage_train_labelled(a, status: dict) -> None:
    train(a, status, "train-labelled", a.out / LABELLED, captions="graded", select_by="gate_margin")


def qualification_families(models: list[str], path: Path) -> Path:
    """The qualification set with ``models`` marked as trained on whatever rmtl-fetch-fast-r5 was:
    round 6's training families include round 5's."""
    from pipeline.qualify import FAMILIES_FILE

    spec = yaml.safe_load(FAMILIES_FILE.read_text())
    for family in spec["families"].values():
        if "rmtl-fetch-fast-r5" in family.get("trained_on", []):
            family["trained_on"] = [*family["trained_on"], *models]
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def stage_qualify(a, status: dict) -> None:
    out = a.out / "qualify"
    out.mkdir(parents=True, exist_ok=True)
    models = [str(d) for d in (a.out / "model", a.out / LABELLED) if (d / "open_clip_config.json").is_file()]
    if not models:
        raise RuntimeError(f"no trained model under {a.out}: run the train stages first")
    families = qualification_families(models, out / "qualification_families.yaml")
    from pipeline.qualify import file_slug

    status["qualify"] = {}
    for model in models:
        cmd = [sys.executable, "-m", "rmtl", "qualify", "--model", model, "--families", str(families), "--out", str(out)]
        cmd += ["--small"] if a.smoke else []
        log(" ".join(cmd))
        with open(out / f"qualify_{Path(model).name}.log", "w") as f:
            subprocess.run(cmd, check=True, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        report = json.loads((out / f"qualify_{file_slug(model)}.json").read_text())
        status["qualify"][Path(model).name] = {"map": report["map"], "pooled": report["pooled"]["value"],
                                               "behaviours_at_or_above_expert": report["behaviours_at_or_above_expert"]}


STAGES = {"render": stage_render, "train": stage_train, "train-labelled": stage_train_labelled,
          "qualify": stage_qualify}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--stores", type=Path, required=True)
    ap.add_argument("--policies", type=Path, default=POLICIES,
                    help="holds runs/<run>/best/model.zip and stage2_worker/model.zip")
    ap.add_argument("--pixel", type=Path, default=None,
                    help="policy-only checkpoints <step>/model.zip of the pixel-reward learner (round 5's: "
                         "results/pixel_fast/runs/rmtl_fast_s0)")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--device", default=None)
    ap.add_argument("--train-steps", type=int, default=30000, help="at most (the time budget ends most runs)")
    ap.add_argument("--train-budget-s", type=float, default=2700.0, help="wall-clock budget of each training stage")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--patience-evals", type=int, default=6)
    ap.add_argument("--frame-cache-gb", type=float, default=3.0)
    ap.add_argument("--render", type=json.loads, default=None,
                    help="render settings of every store (JSON; default: round 6's, families.yaml)")
    ap.add_argument("--stages", nargs="+", choices=list(STAGES), default=list(STAGES))
    ap.add_argument("--smoke", action="store_true",
                    help="smoke_episodes per family, --train-steps 6 --eval-every 2 --patience-evals 2, qualify --small")
    a = ap.parse_args(argv)
    a.families = 6
    # absolute: qualify runs from the repository root and matches models by their spec
    a.out, a.stores = a.out.resolve(), a.stores.resolve()
    if a.smoke:
        a.train_steps, a.eval_every, a.patience_evals = 6, 2, 2
    a.out.mkdir(parents=True, exist_ok=True)
    return 0 if run_stages(a, STAGES, needed=("render",)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
