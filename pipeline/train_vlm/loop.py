"""The training loop: train, evaluate and select a domain CLIP, resumable from a checkpoint."""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from pipeline.train_vlm.captions import caption_source, text_tower_frozen
from pipeline.train_vlm.config import TrainVLMConfig
from pipeline.train_vlm.data import TrainingData, frame_source
from pipeline.train_vlm.heldout import evaluate, gate_margin, summary
from pipeline.train_vlm.export import save_run
from pipeline.train_vlm.objective import (balance_prompts, baseline_balance_penalty, lr_at, param_groups,
                                          soft_contrastive_loss, soft_targets, task_geometry)
from pipeline.train_vlm.selection import HeldOutCaptions, Selection
from rmtl.provenance import write_run_record
from rmtl.tasks import get_task
from rmtl.vlm import load_vlm
from rmtl.vlm.device import select_precision
from storage.whole_file import write_file_whole

LEAK_AUDIT_STATES = 20_000
"""Training states whose captions the leak audit checks (one caption each)."""


def train_reward_vlm(data: TrainingData, cfg: TrainVLMConfig, out_dir: str | Path, progress: bool = True,
                     vlm=None) -> dict:
    """Train, evaluate, select and save a domain CLIP; resumes from ``out_dir/checkpoint.pt``
    (weights, optimiser, selection state, patience and elapsed time of a time budget).
    ``vlm``: the model to train, already loaded as ``load_vlm(cfg.init or MODEL@random,
    device=cfg.device, precision='fp32')`` (None: load it here).

    Each evaluation logs the reward-quality metrics of held-out expert episodes under the paper
    prompts and the held-out caption loss (held-out episodes of every family, no prompts);
    ``cfg.select_by`` decides which of them, if either, picks the kept weights."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = get_task()
    torch.manual_seed(cfg.seed)
    if vlm is None:
        vlm = load_vlm(cfg.init or f"{cfg.model}@random", device=cfg.device, precision="fp32")
    model, device = vlm.model, vlm.device
    if cfg.reset_text_tower and not (out / "checkpoint.pt").is_file():  # a resumed run loads its own weights
        reset_text_tower(vlm, cfg.model, cfg.device)
    # None: the inference precision rule (bf16 on CUDA and on native-bf16 CPUs), as autocast
    use_bf16 = cfg.bf16_autocast if cfg.bf16_autocast is not None else select_precision(device) != "fp32"

    # Data: whole episodes held out; the quality metrics score held-out expert episodes, the
    # caption loss held-out episodes of every family.
    holdout = data.holdout_mask(cfg.holdout_fraction)
    train_rows = np.flatnonzero(~holdout)
    eval_rows = np.flatnonzero(holdout & data.expert)
    if len(train_rows) == 0 or len(eval_rows) == 0:
        raise ValueError(f"need training and held-out expert rows; got {len(train_rows)} and {len(eval_rows)}")
    geometry = torch.from_numpy(task_geometry(data.states, task)).to(device)
    if cfg.tune == "text":  # LiT: the image tower stays as init left it
        model.visual.requires_grad_(False)
    images = frame_source(vlm, data, train_rows, cfg)
    held_out_captions = HeldOutCaptions(data, np.flatnonzero(holdout), cfg, task, geometry, images.stored_embeddings)

    def held_out_metrics(v=vlm) -> dict:
        m = evaluate(v, data, eval_rows, image_embeddings=images.stored_embeddings(eval_rows) if v is vlm else None,
                     task=task)
        return {**m, "held_out_caption_loss": held_out_captions.loss(v, stored=v is vlm)}

    # Optimiser, then the resume state or the reference evaluations of a new run.
    opt = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6)
    rng = np.random.default_rng(cfg.seed)
    ckpt = out / "checkpoint.pt"
    start, log, metrics, elapsed, selection = _resume_or_begin(ckpt, cfg, vlm, opt, rng, held_out_metrics)
    write_run_record(out, cfg, cfg.seed, rows=len(data), train_rows=int(len(train_rows)),
                     eval_rows=int(len(eval_rows)), views=list(data.views))

    # Text side: each batch's captions, and the prompts the balance penalty compares.
    texts = caption_source(vlm, data.states, train_rows, cfg, task, cache=out / "caption_bank.pt")
    if texts.record:
        metrics["caption_bank"] = texts.record
    _audit_captions(data, train_rows, cfg, task, metrics)
    prompts = balance_prompts(task) if cfg.baseline_balance > 0 else []

    model.train()
    if text_tower_frozen(model):
        model.text.eval()  # no dropout in the frozen tower (its prompts are embedded in eval mode)
    batches = images.batches(cfg.batch_size, rng)
    # A resumed run that already stopped (patience, or its time budget spent) trains no further.
    stopped = selection.patience_spent(cfg.patience_evals) or bool(cfg.time_budget_s and elapsed >= cfg.time_budget_s)
    bar = tqdm(range(start, cfg.steps if not stopped else start), initial=start, total=cfg.steps,
               disable=not progress, desc="train-reward-vlm")
    t0 = time.perf_counter()
    done = start
    for step in bar:
        rows, inputs = next(batches)
        targets = soft_targets(geometry[torch.from_numpy(rows).to(device)], cfg.soft_sigma, cfg.soft_sigma_wide)
        spent = (elapsed + time.perf_counter() - t0) / cfg.time_budget_s if cfg.time_budget_s else 0.0  # of the budget
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg, spent)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            img = images.embed(model, inputs)
            txt, prompt_emb = texts.embed(rows, rng, prompts)
            logits = model.logit_scale.exp() * img.float() @ txt.T
        loss = soft_contrastive_loss(logits, targets)
        if cfg.baseline_balance > 0:
            loss = loss + cfg.baseline_balance * baseline_balance_penalty(prompt_emb[1:], prompt_emb[0])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))

        done = step + 1
        last = done == cfg.steps or spent >= 1.0
        row = {"step": done, "loss": loss.item(), "lr": opt.param_groups[0]["lr"],
               "images_per_s": (done - start) * cfg.batch_size / (time.perf_counter() - t0)}
        if done % cfg.eval_every == 0 or last:
            last = _evaluate_at(done, last, row, metrics, held_out_metrics, selection, model, cfg, bar)
        if done % 20 == 0 or last or "held_out_caption_loss" in row:
            log.append(row)
            bar.set_postfix(loss=f"{loss.item():.3f}", img_s=f"{row['images_per_s']:.0f}")
        if done % cfg.checkpoint_every == 0 or last:
            # plain containers, numbers and tensors only: loadable with weights_only=True; written whole,
            # so a stop during the write keeps the previous checkpoint instead of a torn one
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": done, "log": plain(log),
                        "metrics": plain(metrics), "rng": plain(rng.bit_generator.state),
                        "selection": plain(selection.state()), "elapsed_s": elapsed + time.perf_counter() - t0}, buf)
            write_file_whole(ckpt, buf.getvalue())
        if last:
            break

    _keep_selected(done, selection, model, cfg, metrics, held_out_metrics)
    metrics["train_seconds"] = elapsed + time.perf_counter() - t0
    metrics["bf16_autocast"] = bool(use_bf16)
    metrics.update(images.report() or {})
    model.eval()  # a VLM embeds in eval mode (a pretrained text tower has dropout)
    save_run(vlm, cfg.model, out, metrics, log)
    return metrics


def _resume_or_begin(ckpt: Path, cfg: TrainVLMConfig, vlm, opt, rng: np.random.Generator,
                     held_out_metrics: Callable[..., dict]) -> tuple[int, list, dict, float, Selection]:
    """(start step, log, metrics, elapsed seconds, selection): the resume state of ``ckpt`` loaded into
    the model, the optimiser and ``rng``; without one, a new run's reference evaluations (random
    weights, and the initial weights of ``cfg.init``)."""
    model = vlm.model
    if ckpt.is_file():
        state = load_checkpoint(ckpt, vlm.device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        # checkpoints from before select_by kept only keep_best's (gate margin, step, weights)
        saved = state.get("selection") or {"select_by": "gate_margin", "best": state.get("best")}
        selection = Selection.resumed(cfg.select_by, saved)
        rng.bit_generator.state = state["rng"]
        print(f"resumed from {ckpt} at step {start}")
        return start, state["log"], state["metrics"], state.get("elapsed_s", 0.0), selection
    metrics: dict = {}
    selection = Selection(cfg.select_by)
    random_vlm = vlm if cfg.init is None else load_vlm(f"{cfg.model}@random", device=cfg.device, precision="fp32")
    metrics["random_init"] = held_out_metrics(random_vlm)
    print(f"random weights: {summary(metrics['random_init'])}")
    if cfg.init is not None:
        metrics["init_model_id"] = vlm.model_id
        metrics["initial"] = metrics["step_0"] = held_out_metrics()
        print(f"step 0 ({cfg.init}): {summary(metrics['initial'])}  gate margin {gate_margin(metrics['initial']):.3f}  "
              f"held-out caption loss {metrics['initial']['held_out_caption_loss']:.4f}")
        selection.update(metrics["initial"], 0, model)
    return 0, [], metrics, 0.0, selection


def _audit_captions(data: TrainingData, train_rows: np.ndarray, cfg: TrainVLMConfig, task, metrics: dict) -> None:
    """What the model card says of the prompt-neutral captions: a sample of the training states' captions
    checked for evaluated prompts and near paraphrases of them (``metrics['caption_leak_audit']``)."""
    if task.caption_leak_audit is None or cfg.captions == "graded":
        return
    audit_rows = np.random.default_rng(cfg.seed).permutation(train_rows)[:LEAK_AUDIT_STATES]
    audit_caps = task.captions(data.states[audit_rows], np.random.default_rng(cfg.seed), **cfg.caption_options())
    metrics["caption_leak_audit"] = task.caption_leak_audit(audit_caps)
    print(f"caption leak audit: {json.dumps(metrics['caption_leak_audit'])}", flush=True)


def _evaluate_at(done: int, last: bool, row: dict, metrics: dict, held_out_metrics: Callable[..., dict],
                 selection: Selection, model, cfg: TrainVLMConfig, bar) -> bool:
    """The held-out evaluation at step ``done``, logged in ``row`` and ``metrics`` and offered to the
    selection; returns whether training stops here (the step budget, or patience spent)."""
    metrics[f"step_{done}"] = m = held_out_metrics()
    row["held_out_caption_loss"] = m["held_out_caption_loss"]
    bar.write(f"step {done}: {summary(m)}  gate margin {gate_margin(m):.3f}  "
              f"held-out caption loss {m['held_out_caption_loss']:.4f}")
    selection.update(m, done, model)
    if selection.patience_spent(cfg.patience_evals) and not last:
        bar.write(f"stopping: {cfg.select_by} has not improved for {selection.since_best} evaluations")
        metrics["stopped_early_at"] = done
        return True
    return last


def _keep_selected(done: int, selection: Selection, model, cfg: TrainVLMConfig, metrics: dict,
                   held_out_metrics: Callable[..., dict]) -> None:
    """Selection: the best held-out evaluation under select_by, or the last step's weights, kept in
    ``model``; reporting, not selection: the selected weights' metrics under the paper prompts."""
    metrics["steps_done"] = done
    best = selection.best
    if best is not None and best[1] != done:
        model.load_state_dict(best[2])
        print(f"keeping the weights of step {best[1]} (best {cfg.select_by} of the held-out evaluations)")
    metrics["select_by"] = cfg.select_by
    metrics["selected_step"] = best[1] if best is not None else done
    key = f"step_{metrics['selected_step']}"
    metrics["final"] = metrics[key] if key in metrics else held_out_metrics()


def reset_text_tower(vlm, arch: str, device: str | None = None) -> None:
    """Replace the text tower and logit scale of ``vlm`` (every parameter outside ``visual.``)
    with those of a fresh random model of architecture ``arch`` (torch's current seed)."""
    fresh = load_vlm(f"{arch}@random", device=device, precision="fp32").model.state_dict()
    text = {k: v for k, v in fresh.items() if not k.startswith("visual.")}
    result = vlm.model.load_state_dict(text, strict=False)
    if result.unexpected_keys or any(not k.startswith("visual.") for k in result.missing_keys):
        raise ValueError(f"{arch} does not match the model's architecture: cannot reset its text tower")


def plain(obj):
    """``obj`` with numpy scalars and arrays turned into Python numbers and lists (tensors,
    dicts, lists and tuples kept): what ``torch.load(weights_only=True)`` accepts."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(v) for v in obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


def load_checkpoint(path: str | Path, device="cpu") -> dict:
    """The resume state in ``checkpoint.pt``, loaded with ``weights_only=True``: tensors and
    plain Python values only, so loading a checkpoint never runs code from it."""
    from rmtl.train.run.artifacts import load_torch_state

    return load_torch_state(path, "VLM training checkpoint", "delete it to train from the start, or choose "
                            "another --out", map_location=device)
