"""Train a small domain CLIP on rendered Fetch frames with captions written from state.

Contrastive training (OpenCLIP's symmetric InfoNCE) with *soft targets*: two samples
whose task geometry (gripper-to-cube offset, finger opening, cube lift) is close count
as partial positives, weighted by a Gaussian kernel of width ``soft_sigma`` metres. This
makes image embeddings a smooth function of task progress, so a prompt's score grows
steadily as the state approaches what it describes (what a dense reward needs), instead
of being flat within each captioned situation.

Whole episodes are held out; the reward-quality metrics (rmtl.tasks.fetch_lift.quality) are computed
on held-out expert episodes at step 0 (the random-weight model of the same architecture)
and every ``eval_every`` steps. Output directory (loadable as a model spec):

    open_clip_config.json        architecture + preprocessing (OpenCLIP's format)
    open_clip_model.safetensors  weights (float16)
    metrics.json, train_log.csv, model_card.md, run.json
    checkpoint.pt                resume state (not shipped)
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import numpy as np
from pydantic import Field, model_validator

from rmtl.config import Config
from rmtl.tasks.fetch_lift.captions import CaptionConfig
from rmtl.tasks.fetch_lift.state import CUBE_REL_POS, FINGER_WIDTHS, lift_height

HOLDOUT_SALT = 7919
_CAPTIONS = CaptionConfig()


class TrainVLMConfig(Config):
    """Hyperparameters of domain-CLIP training."""

    model: str = "rmtl-fetch-tiny"
    """Registered OpenCLIP architecture to train from random weights."""
    steps: int = Field(3000, ge=1)
    """Optimiser steps."""
    batch_size: int = Field(256, ge=2)
    """(image, caption) pairs per step; each pair is one view of one state."""
    lr: float = Field(1e-3, gt=0)
    """Peak AdamW learning rate (cosine decay after warm-up)."""
    weight_decay: float = Field(0.1, ge=0)
    """AdamW weight decay (not applied to biases, norms, embeddings or the logit scale)."""
    warmup_steps: int = Field(200, ge=0)
    """Linear warm-up steps."""
    soft_sigma: float = Field(0.03, ge=0)
    """Width (m) of the soft-target kernel on task geometry; 0 gives plain CLIP targets."""
    soft_sigma_wide: float = Field(0.0, ge=0)
    """Width (m) of a second, wider kernel averaged 50/50 with the first (0: off); it
    keeps the score graded over centimetres-to-decimetres, not only near each situation."""
    graded_approach_rate: float = Field(_CAPTIONS.graded_rates[0], ge=0, le=0.5)
    """Peak probability of progress-graded approach-prompt captions (rmtl.tasks.fetch_lift.captions); 0: off."""
    graded_align_rate: float = Field(_CAPTIONS.graded_rates[1], ge=0, le=0.5)
    """Peak probability of progress-graded align-prompt captions; 0: off."""
    graded_approach_scale: float = Field(_CAPTIONS.graded_scales[0], gt=0)
    """Distance (m) over which the graded approach-caption probability falls by a factor e."""
    graded_align_scale: float = Field(_CAPTIONS.graded_scales[1], gt=0)
    """Distance (m) over which the graded align-caption probability falls by a factor e."""
    graded_band: Literal["wide", "full", "phase"] = _CAPTIONS.graded_band
    """Which states graded prompts may caption (rmtl.tasks.fetch_lift.captions.GRADED_BANDS)."""
    target_prompt_rate: float | None = Field(_CAPTIONS.target_prompt_rate, ge=0, le=1)
    """Probability that a micro-task's target state is captioned with the paper prompt
    rather than another paraphrase of its situation (None: uniform over paraphrases)."""
    captions: Literal["graded", "neutral", "compositional"] = "graded"
    """'graded': the shipped recipe (paper prompts among the captions). 'neutral': the
    prompt-neutral stand-in, whose training never sees an evaluated prompt text (captions
    from rmtl.tasks.fetch_lift.captions' neutral mode); 'compositional': prompt-neutral as well, with
    rich compositional captions (rmtl.tasks.fetch_lift.neutral_captions). Both need baseline_balance 0 and keep_best false
    (both use the evaluated prompts), and reset_text_tower when starting from ``init``."""
    reset_text_tower: bool = False
    """Re-initialise the text tower and logit scale to random weights (seed ``seed``) before
    training, keeping ``init``'s image tower: a text tower that never saw the prompts."""
    baseline_balance: float = Field(10.0, ge=0)
    """Weight of a penalty on the spread of the paper micro-task prompts' cosine to the
    baseline prompt (0: off). Under the goal-baseline projection a prompt close to the
    baseline gets a head start on every image (:func:`baseline_balance_penalty`), so
    without it the broadest prompt wins on states another prompt describes."""
    init: str | None = None
    """Model spec to start from (e.g. a trained directory) instead of random weights."""
    tune: Literal["all", "text"] = "all"
    """'all': train both towers. 'text': lock the image tower (LiT-style, needs ``init``)
    and train the text tower and logit scale on image embeddings computed once, read from
    the stores when they hold embeddings of ``init``. Cheap on a CPU, and enough when the
    image embeddings already order states by progress and only the prompts sit wrong."""
    holdout_fraction: float = Field(0.15, ge=0, lt=1)
    """Fraction of episodes held out for evaluation (chosen by episode id)."""
    shift_augment: int = Field(4, ge=0)
    """Random translation (px) applied to training images."""
    seed: int = Field(0, ge=0)
    """Seed of sampling, captions and initialisation."""
    eval_every: int = Field(500, ge=1)
    """Steps between held-out evaluations."""
    checkpoint_every: int = Field(500, ge=1)
    """Steps between resumable checkpoints."""
    device: str | None = None
    """'cuda', 'cpu' or None for the best available."""
    bf16_autocast: bool | None = None
    """Run forward passes under bf16 autocast (weights and optimiser stay fp32). None: on
    CUDA and on CPUs with native bf16 (1.3x the fp32 training speed of the image tower on
    a 2-core AVX512-BF16 CPU, results/bench/amd_epyc/image_tower_training.json)."""
    keep_best: bool = True
    """Ship the weights of the held-out evaluation with the best worst-gate ratio
    (:func:`gate_margin`) instead of the last step's."""
    frame_cache_gb: float = Field(2.0, gt=0)
    """Training frames in memory at most (GiB) when they are streamed from stores
    (``stream_frames``): a shuffle buffer of row blocks (pipeline.frame_stream)."""
    stream_frames: bool = True
    """Read training frames from the stores through the bounded buffer instead of loading
    every frame (the frames of in-memory renders are always in memory)."""
    caption_bank: int = Field(8, ge=1)
    """Captions per training state written and embedded once, before training, when the model's
    text tower is frozen (a packaged pretrained encoder, rmtl.vlm.registry.packaged_text_tower):
    each step then draws one of them per sample instead of running the text tower. Each state's
    j-th caption is written with the j-th of ``caption_bank`` fixed seeds, so states the captions
    cannot tell apart share their captions and each distinct caption is embedded once."""
    time_budget_s: float | None = Field(None, gt=0)
    """Optional wall-clock budget: the cosine schedule runs on max(step/steps,
    elapsed/budget) and training stops when either reaches 1."""

    @model_validator(mode="after")
    def _locked_image_tower_needs_init(self) -> "TrainVLMConfig":
        if self.tune == "text" and self.init is None:
            raise ValueError("tune='text' locks the image tower, so it needs trained weights: set init (e.g. init=rmtl-fetch-tiny)")
        if self.reset_text_tower and self.init is None:
            raise ValueError("reset_text_tower keeps init's image tower: set init (without init every tower starts random)")
        if self.captions in ("neutral", "compositional"):
            leaks = [name for name, bad in (("baseline_balance > 0", self.baseline_balance > 0),
                                            ("keep_best", self.keep_best),
                                            ("init without reset_text_tower", self.init is not None and not self.reset_text_tower))
                     if bad]
            if leaks:
                raise ValueError(f"captions={self.captions!r} must not train on or select by the evaluated prompts: "
                                 f"{', '.join(leaks)} would (set baseline_balance 0, keep_best false, reset_text_tower true)")
        return self


class RowFrames:
    """Frames [N, V, H, W, 3] of which only some rows are in memory.

    Training the text tower against stored image embeddings needs frames only where a
    model must encode them (held-out rows, for the random-weight reference), so the
    other rows' frames are never read: a 60k-state store is 10 GB of frames."""

    def __init__(self, rows: np.ndarray, frames: np.ndarray, n_rows: int):
        self.rows = np.asarray(rows, dtype=np.int64)  # sorted global row ids held
        self.frames = frames
        self.shape = (n_rows, *frames.shape[1:])

    @classmethod
    def dense(cls, frames: np.ndarray) -> "RowFrames":
        return cls(np.arange(len(frames)), frames, len(frames))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if len(self.rows) == 0:
            pos, missing = rows, rows
        else:
            pos = np.minimum(np.searchsorted(self.rows, rows), len(self.rows) - 1)
            missing = rows[self.rows[pos] != rows]
        if len(missing):
            raise ValueError(f"frames of rows {missing[:5].tolist()} were not loaded (only held-out rows "
                             f"are read when stored image embeddings stand in for the frames)")
        return self.frames[pos]

    @classmethod
    def concat(cls, parts: list) -> "RowFrames | np.ndarray":
        if all(isinstance(p, np.ndarray) for p in parts):
            return np.concatenate(parts)
        parts = [p if isinstance(p, RowFrames) else cls.dense(p) for p in parts]
        offsets = np.cumsum([0] + [len(p) for p in parts])
        rows = np.concatenate([p.rows + o for p, o in zip(parts, offsets)])
        return cls(rows, np.concatenate([p.frames for p in parts]), int(offsets[-1]))


@dataclass
class TrainingData:
    """Rendered rows: frames [N, V, H, W, 3], states [N, 25], episode/step [N], expert [N]."""

    frames: "np.ndarray | RowFrames"
    states: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    expert: np.ndarray
    views: Sequence[str]
    image_embeddings: np.ndarray | None = None
    """Stored image embeddings [N, V, D] of the ``init`` model, when every store has them."""
    sources: list[tuple[str, int]] | None = None
    """(store path, rows) in row order, when the frames stay in the stores and training
    streams them (:class:`pipeline.frame_stream.FrameStream`); None: ``frames`` holds them all."""

    def __len__(self) -> int:
        return len(self.states)

    @classmethod
    def concat(cls, parts: list["TrainingData"]) -> "TrainingData":
        if not parts:
            raise ValueError("no training data")
        cat = lambda name: np.concatenate([getattr(p, name) for p in parts])  # noqa: E731
        have = all(p.image_embeddings is not None for p in parts)
        sources = [s for p in parts for s in p.sources] if all(p.sources is not None for p in parts) else None
        return cls(RowFrames.concat([p.frames for p in parts]), cat("states"), cat("episode"), cat("step"),
                   cat("expert"), parts[0].views, cat("image_embeddings") if have else None, sources)

    @classmethod
    def from_batches(cls, batches: list[dict], views: Sequence[str], expert: bool, episode_offset: int = 0) -> "TrainingData":
        cat = lambda k: np.concatenate([b[k] for b in batches])  # noqa: E731
        n = sum(len(b["state"]) for b in batches)
        return cls(cat("frames"), cat("state"), cat("episode") + episode_offset, cat("step"),
                   np.full(n, expert), list(views))

    @classmethod
    def from_stores(cls, paths: Sequence[str | Path], embeddings_of: str | None = None,
                    image_tower: str | None = None, holdout_fraction: float | None = None,
                    stream: bool = False) -> "TrainingData":
        """Rows of one or more dataset stores; episode ids are made unique across stores.
        ``embeddings_of``: a model spec whose stored image embeddings to load too (when a
        store has them for every row); ``image_tower``: its ``VLM.image_tower_id``, so that
        embeddings stored by another model with the same image tower serve as well.
        ``holdout_fraction``: where a store's embeddings were loaded, read the frames of
        the held-out rows only (:meth:`holdout_mask`); None reads every frame. ``stream``:
        read only the held-out rows' frames (with ``holdout_fraction``) and leave the rest in
        the stores, for training to stream in bounded memory."""
        from pipeline.embed import same_image_tower
        from rmtl.vlm.spec import parse_spec
        from storage.dataset import DatasetStore

        model_id = parse_spec(embeddings_of).model_id if embeddings_of else None
        parts, offset = [], 0
        for path in paths:
            with DatasetStore.open(path, "r") as store:
                d = store.read(fields=["state", "episode", "step"])
                policy = store.info.get("provenance", {}).get("policy", "expert")
                n = len(d["state"])
                emb, source = None, model_id
                if image_tower and source is not None and store.embedded_rows(source) < n:
                    source = same_image_tower(store, model_id, image_tower) or model_id
                if source is not None and store.embedded_rows(source) == n:
                    emb = np.asarray(store.embeddings(source, slice(0, n)), dtype=np.float32)
                if (emb is not None or stream) and holdout_fraction is not None:
                    rows = np.flatnonzero(_held_out(d["episode"] + offset, holdout_fraction))
                    frames = RowFrames(rows, store.read(rows=rows, fields=["frames"])["frames"], n)
                else:
                    frames = store.read(fields=["frames"])["frames"]
                parts.append(cls(frames, d["state"], d["episode"] + offset, d["step"],
                                 np.full(n, policy == "expert"), store.views, emb,
                                 [(str(path), n)] if stream else None))
                offset = int(parts[-1].episode.max()) + 1 if len(d["state"]) else offset
        return cls.concat(parts)

    def holdout_mask(self, fraction: float) -> np.ndarray:
        """Rows of held-out episodes (a deterministic hash of the episode id)."""
        return _held_out(self.episode, fraction)


def _held_out(episode: np.ndarray, fraction: float) -> np.ndarray:
    h = (np.asarray(episode).astype(np.int64) * HOLDOUT_SALT) % 1000
    return h < int(round(fraction * 1000))


def task_geometry(states: np.ndarray) -> np.ndarray:
    """Features the soft targets compare (m): gripper-to-cube offset, finger opening, lift x3."""
    s = np.asarray(states, dtype=np.float32)
    lift = np.asarray(lift_height(s), dtype=np.float32)
    return np.concatenate([s[:, CUBE_REL_POS], s[:, FINGER_WIDTHS].sum(1, keepdims=True), 3 * lift[:, None]], axis=1)


def soft_targets(geometry, sigma: float, sigma_wide: float = 0.0):
    """Row-stochastic target matrix from pairwise geometry distances (torch); with
    ``sigma_wide`` > 0 the mean of a narrow and a wide kernel."""
    import torch

    if sigma <= 0:
        return torch.eye(len(geometry), device=geometry.device)
    d2 = torch.cdist(geometry, geometry).pow(2)
    targets = torch.softmax(-d2 / (2 * sigma * sigma), dim=1)
    if sigma_wide > 0:
        targets = 0.5 * (targets + torch.softmax(-d2 / (2 * sigma_wide * sigma_wide), dim=1))
    return targets


def _param_groups(model, weight_decay: float):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or "bn" in name or "ln" in name or "embedding" in name or "logit_scale" in name:
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _lr_at(step: int, cfg: TrainVLMConfig, progress: float = 0.0) -> float:
    """Linear warm-up, then cosine decay over max(step progress, time progress)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    t = max(progress, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


def encode_rows(vlm, data: TrainingData, rows: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Image embeddings [len(rows), V, D] of every view of the given rows."""
    frames = data.frames[rows]
    n, v = frames.shape[:2]
    return vlm.encode_images(frames.reshape(n * v, *frames.shape[2:]), batch_size=batch_size).reshape(n, v, -1)


def evaluate(vlm, data: TrainingData, rows: np.ndarray, alpha: float = 0.9, batch_size: int = 512,
             image_embeddings: np.ndarray | None = None) -> dict:
    """Reward-quality metrics of ``vlm`` on the given rows (all views), paper prompts;
    ``image_embeddings`` [len(rows), V, D] skips encoding the frames (locked image tower)."""
    from rmtl.tasks.fetch_lift.quality import QualityInputs, reward_quality
    from rmtl.reward.prompts import embed_prompts
    from rmtl.tasks import get_task

    was_training = vlm.model.training
    vlm.model.eval()
    emb = image_embeddings if image_embeddings is not None else encode_rows(vlm, data, rows, batch_size)
    text = embed_prompts(vlm.encode_text, get_task().prompts())
    if was_training:
        vlm.model.train()
    inputs = QualityInputs(emb, data.states[rows], data.episode[rows], data.step[rows], list(data.views))
    return reward_quality(inputs, text.goals, text.baseline, alpha)


def gate_margin(metrics: dict) -> float:
    """The worst ratio of a multi-view metric to its acceptance gate (rmtl.tasks.fetch_lift.quality.GATES):
    above 1 when every rank gate passes. Model selection uses held-out training episodes,
    never the store the gates are finally reported on."""
    from rmtl.tasks.fetch_lift.quality import GATES

    return float(min(np.nan_to_num(metrics["mean"][k], nan=-1.0) / v for k, v in GATES.items()))


def baseline_balance_penalty(goals, baseline):
    """Sum of squared deviations of each goal's cosine to the baseline from their mean (torch).

    Why: with unit image x, goal g and baseline b, the projected score at alpha near 1 is
    about const - (m - D)^2 / (4 m), where m = 1 - g.b and D = x.g - x.b. Image-text
    similarities sit far below text-text ones (the modality gap), so D << m and the score
    is about const - m/4 + D/2: a goal near the baseline scores higher on *every* image.
    Contrastive training fixes D but leaves m free; equal m makes prompts comparable.
    """
    cos = goals @ baseline
    return ((cos - cos.mean()) ** 2).sum()


def _summary(m: dict) -> str:
    x = m["mean"]
    return (f"approach {x['approach_spearman']:.3f} (spread {x['approach_spread']:.3f})  "
            f"align {x['align_spearman']:.3f} (spread {x['align_spread']:.3f})  "
            f"grasp AUC {x['grasp_auc']:.3f}  right prompt {x['right_prompt_accuracy']:.3f}  goal-baseline cosine "
            + ("/".join(f"{c:.2f}" for c in m.get("goal_baseline_cosine", {}).values()) or "n/a"))


def text_tower_frozen(model) -> bool:
    """Whether a model's text tower is locked (no trainable parameter), as the loader leaves a
    packaged pretrained text tower."""
    text = getattr(model, "text", None)
    params = list(text.parameters()) if text is not None else []
    return bool(params) and not any(p.requires_grad for p in params)


def caption_bank(vlm, states: np.ndarray, k: int, seed: int, caption_cfg, batch_size: int = 128,
                 cache: Path | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``k`` training captions of each state, embedded once by the model's (frozen) text tower.

    Returns ``index`` [len(states), k] (int32) into ``emb`` [U, D] (float32 unit rows, one per
    distinct caption) and the U captions. The j-th caption of every state is written with the same
    seed, so states whose captions cannot differ get the same ones and are embedded once. Captions
    are embedded in batches of similar token length, trimmed to the batch's longest (the text
    tower masks padding: the same embeddings as full-length batches). ``cache``: a file holding
    the bank of the same states, k and seed (reused; written when absent)."""
    import torch

    from rmtl.tasks.fetch_lift.captions import sample_captions

    states = np.asarray(states, dtype=np.float64)
    key = {"rows": int(len(states)), "k": int(k), "seed": int(seed), "mode": caption_cfg.mode,
           "states": float(np.round(np.abs(states).sum(), 3))}
    if cache is not None and cache.is_file():
        saved = torch.load(cache, weights_only=True)
        if saved.get("key") == key:
            return saved["index"].numpy(), saved["emb"].float().numpy(), list(saved["captions"])
    ids: dict[str, int] = {}
    index = np.empty((len(states), k), dtype=np.int32)
    for j in range(k):
        for i, st in enumerate(states):
            text = sample_captions(st[None], np.random.default_rng([seed, j]), caption_cfg)[0]
            index[i, j] = ids.setdefault(text, len(ids))
    captions = list(ids)
    tokens = vlm.tokenizer(captions)
    pad = getattr(getattr(vlm.model, "text", None), "config", None)
    pad_id = getattr(pad, "pad_token_id", 0) or 0
    lengths = (tokens != pad_id).sum(1).numpy()
    order = np.argsort(lengths, kind="stable")
    emb = np.empty((len(captions), vlm.embed_dim), dtype=np.float32)
    was_training = vlm.model.training
    vlm.model.eval()
    with torch.inference_mode():
        for b in range(0, len(order), batch_size):
            rows = order[b:b + batch_size]
            width = max(1, int(lengths[rows].max()))
            feats = vlm.model.encode_text(tokens[rows, :width].to(vlm.device))
            emb[rows] = torch.nn.functional.normalize(feats.float(), dim=-1).cpu().numpy()
    if was_training:
        vlm.model.train()
    if cache is not None:
        torch.save({"key": key, "index": torch.from_numpy(index), "emb": torch.from_numpy(emb).half(),
                    "captions": captions}, cache)
    return index, emb, captions


def train_reward_vlm(data: TrainingData, cfg: TrainVLMConfig, out_dir: str | Path, progress: bool = True,
                     vlm=None) -> dict:
    """Train, evaluate and save a domain CLIP; resumes from ``out_dir/checkpoint.pt``.
    ``vlm``: the model to train, already loaded as ``load_vlm(cfg.init or MODEL@random,
    device=cfg.device, precision='fp32')`` (None: load it here)."""
    import torch
    from tqdm import tqdm

    from rmtl.provenance import write_run_record
    from rmtl.tasks import get_task
    from rmtl.vlm import load_vlm
    from rmtl.vlm.loader import select_precision
    from rmtl.tasks.fetch_lift.captions import sample_captions
    from rmtl.vlm.model import preprocess_batch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    if vlm is None:
        vlm = load_vlm(cfg.init or f"{cfg.model}@random", device=cfg.device, precision="fp32")
    model, device = vlm.model, vlm.device
    if cfg.reset_text_tower and not (out / "checkpoint.pt").is_file():  # a resumed run loads its own weights
        reset_text_tower(vlm, cfg.model, cfg.device)
    # None: the inference precision rule (bf16 on CUDA and on native-bf16 CPUs), as autocast
    use_bf16 = cfg.bf16_autocast if cfg.bf16_autocast is not None else select_precision(device) != "fp32"
    holdout = data.holdout_mask(cfg.holdout_fraction)
    train_rows = np.flatnonzero(~holdout)
    eval_rows = np.flatnonzero(holdout & data.expert)
    if len(train_rows) == 0 or len(eval_rows) == 0:
        raise ValueError(f"need training and held-out expert rows; got {len(train_rows)} and {len(eval_rows)}")
    n_views = data.frames.shape[1]
    geometry = torch.from_numpy(task_geometry(data.states)).to(device)
    locked = None  # image embeddings [N, V, D] of the locked image tower (tune='text')
    stream = None  # training frames streamed from the stores (bounded memory)
    if cfg.tune == "all" and data.sources is not None:
        from pipeline.frame_stream import FrameStream

        row_bytes = int(np.prod(data.frames.shape[1:]))
        stream = FrameStream([p for p, _ in data.sources], [n for _, n in data.sources], train_rows,
                             cap_bytes=int(cfg.frame_cache_gb * 2**30), row_bytes=row_bytes, seed=cfg.seed)
        print(f"streaming training frames: {len(stream.blocks)} blocks, at most {stream.max_blocks} in memory "
              f"({cfg.frame_cache_gb:g} GiB cap)")
    elif cfg.tune == "all":
        if isinstance(data.frames, RowFrames):
            raise ValueError("tune='all' trains the image tower on every frame, but only held-out frames were read")
        frames_t = torch.from_numpy(data.frames)
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            # uint8 frames on the GPU when they fit easily: batch gathers then cost nothing.
            frames_t = frames_t.to(device) if data.frames.nbytes < 0.4 * free else frames_t.pin_memory()
    else:  # the locked tower's embeddings stand in for the frames: none go to the device
        model.visual.requires_grad_(False)
        if data.image_embeddings is not None:
            locked = data.image_embeddings
            print(f"image tower locked: using the stores' embeddings of {cfg.init} ({locked.shape[0]} rows)")
        elif isinstance(data.frames, RowFrames):
            raise ValueError("some stores hold no image embeddings of the init model, and only their held-out "
                             f"frames were read: embed them first (rmtl embed STORE --model {cfg.init})")
        else:
            print(f"image tower locked: encoding {len(data)} rows x {n_views} views once")
            locked = encode_rows(vlm, data, np.arange(len(data)))
        locked_t = torch.from_numpy(np.ascontiguousarray(locked, dtype=np.float32)).to(device)

    def held_out_metrics(v=vlm) -> dict:
        return evaluate(v, data, eval_rows, image_embeddings=locked[eval_rows] if locked is not None and v is vlm else None)

    opt = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6)
    rng = np.random.default_rng(cfg.seed)
    start, log, metrics, best = 0, [], {}, None  # best: (gate margin, step, state dict)
    ckpt = out / "checkpoint.pt"
    if ckpt.is_file():
        state = load_checkpoint(ckpt, device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start, log, metrics, best = state["step"], state["log"], state["metrics"], state.get("best")
        rng.bit_generator.state = state["rng"]
        print(f"resumed from {ckpt} at step {start}")
    else:
        random_vlm = vlm if cfg.init is None else load_vlm(f"{cfg.model}@random", device=cfg.device, precision="fp32")
        metrics["random_init"] = held_out_metrics(random_vlm)
        print(f"random weights: {_summary(metrics['random_init'])}")
        if cfg.init is not None:
            metrics["init_model_id"] = vlm.model_id
            metrics["initial"] = metrics["step_0"] = held_out_metrics()
            print(f"step 0 ({cfg.init}): {_summary(metrics['initial'])}  gate margin {gate_margin(metrics['initial']):.3f}")
            best = (gate_margin(metrics["initial"]), 0, {k: v.detach().clone() for k, v in model.state_dict().items()})
    write_run_record(out, cfg, cfg.seed, rows=len(data), train_rows=int(len(train_rows)),
                     eval_rows=int(len(eval_rows)), views=list(data.views))
    caption_tokens: dict[str, torch.Tensor] = {}
    caption_cfg = CaptionConfig((cfg.graded_approach_rate, cfg.graded_align_rate),
                                (cfg.graded_approach_scale, cfg.graded_align_scale), cfg.graded_band,
                                cfg.target_prompt_rate, cfg.captions)
    if cfg.captions == "neutral":  # cheap insurance: no caption the mode can write contains a prompt
        from rmtl.tasks.fetch_lift.captions import evaluated_prompt_texts, neutral_vocabulary, prompt_leaks

        leaks = prompt_leaks(neutral_vocabulary(), evaluated_prompt_texts())
        if leaks:
            raise ValueError(f"neutral caption {leaks[0][0]!r} contains the evaluated prompt {leaks[0][1]!r}")
    paper = get_task().prompts()
    balance_texts = [paper.baseline[0], *(phrasings[0] for phrasings in paper.goals())]

    def encode_captions(captions: list[str]) -> torch.Tensor:
        """Normalised text embeddings [B, D]; each distinct caption goes through the tower once."""
        unique = sorted(set(captions))
        missing = [c for c in unique if c not in caption_tokens]
        if missing:
            for c, t in zip(missing, vlm.tokenizer(missing)):
                caption_tokens[c] = t
        emb = model.encode_text(torch.stack([caption_tokens[c] for c in unique]).to(device))
        index = {c: i for i, c in enumerate(unique)}
        return torch.nn.functional.normalize(emb, dim=-1)[torch.tensor([index[c] for c in captions], device=device)]

    bank = None  # (index [train rows, k], embeddings [U, D]) when the text tower is frozen
    frozen_text = text_tower_frozen(model)
    if frozen_text:
        t_bank = time.perf_counter()
        index, bank_emb, bank_captions = caption_bank(vlm, data.states[train_rows], cfg.caption_bank, cfg.seed,
                                                      caption_cfg, cache=out / "caption_bank.pt")
        bank = (index, torch.from_numpy(bank_emb).to(device))
        metrics["caption_bank"] = {"per_state": cfg.caption_bank, "distinct": len(bank_captions),
                                   "seconds": round(time.perf_counter() - t_bank, 1)}
        print(f"text tower frozen: {len(bank_captions)} distinct captions ({cfg.caption_bank} per training state) "
              f"embedded once in {time.perf_counter() - t_bank:.0f} s", flush=True)
    model.train()
    if frozen_text:
        model.text.eval()  # no dropout in the frozen tower (its prompts are embedded in eval mode)
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, disable=not progress, desc="train-reward-vlm")
    t0 = time.perf_counter()
    for step in bar:
        if stream is not None:
            rows, views, batch_frames = stream.sample(cfg.batch_size, n_views, rng)
            imgs = torch.from_numpy(batch_frames)
        else:
            rows = rng.choice(train_rows, size=cfg.batch_size)
            views = rng.integers(n_views, size=cfg.batch_size)
        if locked is None:
            if stream is None:
                imgs = frames_t[torch.from_numpy(rows).to(frames_t.device), torch.from_numpy(views).to(frames_t.device)]
            pixels = preprocess_batch(imgs.to(device, non_blocking=True), vlm.preprocess_cfg)
            if cfg.shift_augment:
                p = cfg.shift_augment
                padded = torch.nn.functional.pad(pixels, (p, p, p, p), mode="replicate")
                dx, dy = rng.integers(0, 2 * p + 1, size=2)
                pixels = padded[..., dy : dy + pixels.shape[-2], dx : dx + pixels.shape[-1]]
        captions = sample_captions(data.states[rows], rng, caption_cfg) if bank is None else None
        targets = soft_targets(geometry[torch.from_numpy(rows).to(device)], cfg.soft_sigma, cfg.soft_sigma_wide)
        progress = (time.perf_counter() - t0) / cfg.time_budget_s if cfg.time_budget_s else 0.0
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg, progress)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            if locked is None:
                img = torch.nn.functional.normalize(model.encode_image(pixels), dim=-1)
            else:
                img = locked_t[torch.from_numpy(rows).to(device), torch.from_numpy(views).to(device)]
            if bank is None:
                # One text-tower pass for the batch's captions and the prompts the balance compares.
                texts = encode_captions(captions + (balance_texts if cfg.baseline_balance > 0 else [])).float()
                txt, prompts = texts[: len(captions)], texts[len(captions):]
            else:  # a frozen text tower: one of each state's embedded captions
                pick = bank[0][np.searchsorted(train_rows, rows), rng.integers(cfg.caption_bank, size=len(rows))]
                txt = bank[1][torch.from_numpy(pick.astype(np.int64)).to(device)]
                if cfg.baseline_balance > 0:
                    prompts = encode_captions(balance_texts).float()
            logits = model.logit_scale.exp() * img.float() @ txt.T
        loss = 0.5 * (torch.sum(-targets * logits.log_softmax(1), 1).mean()
                      + torch.sum(-targets.T * logits.T.log_softmax(1), 1).mean())
        if cfg.baseline_balance > 0:
            loss = loss + cfg.baseline_balance * baseline_balance_penalty(prompts[1:], prompts[0])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        done = step + 1
        last = done == cfg.steps or progress >= 1.0
        if done % 20 == 0 or last:
            rate = (done - start) * cfg.batch_size / (time.perf_counter() - t0)
            log.append({"step": done, "loss": loss.item(), "lr": opt.param_groups[0]["lr"], "images_per_s": rate})
            bar.set_postfix(loss=f"{loss.item():.3f}", img_s=f"{rate:.0f}")
        if done % cfg.eval_every == 0 or last:
            metrics[f"step_{done}"] = m = held_out_metrics()
            bar.write(f"step {done}: {_summary(m)}  gate margin {gate_margin(m):.3f}")
            if best is None or gate_margin(m) > best[0]:
                best = (gate_margin(m), done, {k: v.detach().clone() for k, v in model.state_dict().items()})
        if done % cfg.checkpoint_every == 0 or last:
            # plain containers, numbers and tensors only: loadable with weights_only=True
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": done, "log": _plain(log),
                        "metrics": _plain(metrics), "rng": _plain(rng.bit_generator.state), "best": _plain(best)}, ckpt)
        if last:
            break
    metrics["steps_done"] = done if start < cfg.steps else start
    if cfg.keep_best and best is not None and best[1] != metrics["steps_done"]:
        model.load_state_dict(best[2])
        print(f"keeping the weights of step {best[1]} (gate margin {best[0]:.3f})")
    metrics["selected_step"] = best[1] if cfg.keep_best and best is not None else metrics["steps_done"]
    key = f"step_{metrics['selected_step']}"
    metrics["final"] = metrics[key] if key in metrics else held_out_metrics()
    metrics["train_seconds"] = time.perf_counter() - t0
    metrics["bf16_autocast"] = bool(use_bf16)
    if stream is not None:
        metrics["frame_stream"] = {"cap_bytes": stream.cap_bytes, "peak_bytes": stream.peak_bytes,
                                   "bytes_read": stream.bytes_read, "blocks": len(stream.blocks),
                                   "blocks_in_memory": stream.max_blocks}
    model.eval()  # a VLM embeds in eval mode (a pretrained text tower has dropout)
    save_model(vlm, cfg.model, out)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    with open(out / "train_log.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", "loss", "lr", "images_per_s"])
        w.writeheader()
        w.writerows(log)
    return metrics


def reset_text_tower(vlm, arch: str, device: str | None = None) -> None:
    """Replace the text tower and logit scale of ``vlm`` (every parameter outside ``visual.``)
    with those of a fresh random model of architecture ``arch`` (torch's current seed)."""
    from rmtl.vlm import load_vlm

    fresh = load_vlm(f"{arch}@random", device=device, precision="fp32").model.state_dict()
    text = {k: v for k, v in fresh.items() if not k.startswith("visual.")}
    result = vlm.model.load_state_dict(text, strict=False)
    if result.unexpected_keys or any(not k.startswith("visual.") for k in result.missing_keys):
        raise ValueError(f"{arch} does not match the model's architecture: cannot reset its text tower")


def save_model(vlm, arch: str, out_dir: str | Path) -> Path:
    """Save weights (float16 safetensors) and OpenCLIP's config JSON: a loadable directory
    (without a packaged text tower's weights, which always load from their package)."""
    from safetensors.torch import save_file

    from rmtl.vlm.loader import FROZEN_TEXT_PREFIX
    from rmtl.vlm.registry import architecture_config, packaged_text_tower

    out = Path(out_dir)
    # A frozen packaged text tower loads from its package: the checkpoint holds the rest only.
    frozen = FROZEN_TEXT_PREFIX if packaged_text_tower(architecture_config(arch)) else None
    state = {k: v.detach().to("cpu").half().contiguous() for k, v in vlm.model.state_dict().items()
             if frozen is None or not k.startswith(frozen)}
    save_file(state, str(out / "open_clip_model.safetensors"))
    cfg = {"model_cfg": architecture_config(arch), "preprocess_cfg": dict(vlm.preprocess_cfg)}
    (out / "open_clip_config.json").write_text(json.dumps(cfg, indent=2))
    return out


def invoking_command(argv: list[str] | None = None) -> str:
    """The command line that ran this process, as a user would type it (``python -m
    pipeline.train_vlm ...`` when this module is the entry point, else the calling script)."""
    import shlex

    from rmtl.provenance import portable_command

    argv = portable_command(list(sys.argv if argv is None else argv))
    if Path(argv[0]).stem == "train_vlm":
        return "python -m pipeline.train_vlm " + shlex.join(argv[1:])
    script = Path(argv[0])
    try:
        script = script.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    return "python " + shlex.join([str(script), *argv[1:]])


def write_model_card(out_dir: str | Path, cfg: TrainVLMConfig, data_desc: str, metrics: dict, command: str,
                     renderer: dict | None = None) -> Path:
    """model_card.md: what the model is, its renderer, data, captions, config, metrics and the command."""
    m, r = metrics["final"]["mean"], metrics.get("random_init", {}).get("mean", {})
    row = lambda k: f"| {k} | {m.get(k, float('nan')):.3f} | {r.get(k, float('nan')):.3f} |"  # noqa: E731
    keys = ["approach_spearman", "approach_spread", "align_spearman", "align_spread", "grasp_auc",
            "grasp_spread", "right_prompt_accuracy", "step_variation"]
    init = metrics.get("init_model_id", cfg.init)
    from rmtl.vlm.registry import architecture_config, packaged_text_tower

    frozen = packaged_text_tower(architecture_config(cfg.model) or {})
    if cfg.init is None and frozen:
        text = (architecture_config(cfg.model).get("text_cfg") or {}).get("hf_model_name")
        origin = (f"whose image tower was trained from random weights to a frozen pretrained text tower "
                  f"(`{text}`, from the installed package `{frozen}`; LiT, text side locked)")
    elif cfg.init is None:
        origin = "trained from random weights"
    elif cfg.reset_text_tower:
        image = "locked" if cfg.tune == "text" else "fine-tuned"
        origin = f"with the image tower of `{init}` ({image}) and a text tower trained from random weights"
    else:
        towers = "text tower only, image tower locked" if cfg.tune == "text" else "both towers"
        origin = f"fine-tuned from `{init}` ({towers})"
    caption_line = {
        "neutral": "prompt-neutral: descriptive captions from state that contain none of the evaluated prompt "
                   "texts (baseline, approach, align, grasp, single prompt); no prompt-based loss or model selection",
        "compositional": "prompt-neutral, compositional (rmtl/tasks/fetch_lift/neutral_captions.py): one to three facts "
                         "of the state in many wordings, none containing any phrasing of any shipped prompt set; no "
                         "prompt-based loss or model selection; the evaluated prompts are scored zero-shot",
        "graded": "graded: the paper prompts are among the captions (progress-graded, target situations, baseline)",
    }[cfg.captions]
    renderer_line = (f"{json.dumps(renderer, sort_keys=True)} (its training frames; declared in renderer.json)"
                     if renderer else "not one setting (frames rendered here or by several renderers)")
    cosine = lambda d: "/".join(f"{c:.3f}" for c in d.get("goal_baseline_cosine", {}).values()) or "n/a"  # noqa: E731
    text = "\n".join([
        f"# {cfg.model}: a domain-trained stand-in reward VLM for Fetch pick-and-lift",
        "",
        f"A small OpenCLIP model {origin} on this project's own MuJoCo renders",
        "(six-camera bank, paper visual domain) with captions written from simulator state",
        "(`rmtl/tasks/fetch_lift/captions.py`). It is **not** PE-Core-bigG-14-448 and knows nothing outside",
        "this scene; it exists so the reward means something on machines without pretrained weights.",
        "",
        f"- renderer: {renderer_line}",
        f"- data: {data_desc}",
        f"- captions: {caption_line}",
        f"- training: {json.dumps(cfg.model_dump(mode='json'))}",
        f"- steps done: {metrics.get('steps_done')} (weights of step {metrics.get('selected_step')}), "
        f"seconds: {metrics.get('train_seconds', 0):.0f}",
        f"- reproduce: `{command}`",
        "",
        "Held-out expert episodes, multi-view mean, alpha 0.9 (random-weight model of the same architecture beside it):",
        "",
        "| metric | trained | random weights |",
        "| --- | --- | --- |",
        *[row(k) for k in keys],
        f"| goal-baseline cosine approach/align/grasp | {cosine(metrics['final'])} "
        f"| {cosine(metrics.get('random_init', {}))} |",
        "",
    ])
    path = Path(out_dir) / "model_card.md"
    path.write_text(text)
    return path


def _plain(obj):
    """``obj`` with numpy scalars and arrays turned into Python numbers and lists (tensors,
    dicts, lists and tuples kept): what ``torch.load(weights_only=True)`` accepts."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


def load_checkpoint(path: str | Path, device="cpu") -> dict:
    """The resume state in ``checkpoint.pt``, loaded with ``weights_only=True``: tensors and
    plain Python values only, so loading a checkpoint never runs code from it."""
    from rmtl.train.artifacts import load_torch_state

    return load_torch_state(path, "VLM training checkpoint", "delete it to train from the start, or choose "
                            "another --out", map_location=device)


def train_vlm_command(run: Any = None) -> Any:
    """The ``train-reward-vlm`` command: options generated from TrainVLMConfig (rmtl.command_config)
    plus the data options; ``run(config, **data options)`` defaults to training."""
    import typer

    from rmtl.command_config import config_command, option

    return config_command(TrainVLMConfig, run or train_from_options, extra=[
        option("store", Optional[list[str]], typer.Option(None, "--store", help="Dataset store(s) with frames (repeatable).")),
        option("render_episodes", int, typer.Option(0, min=0, help="Render this many expert episodes instead.")),
        option("random_episodes", int, typer.Option(0, min=0, help="And this many random-action episodes.")),
        option("resolution", int, typer.Option(96, help="Frame size of rendered episodes (px).")),
        option("workers", int, typer.Option(1, min=1, help="Render processes.")),
        option("out", Path, typer.Option(..., "--out", help="Output directory of the weights and model card.")),
    ], switches=False)  # its booleans have always taken a value: --keep-best false


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``python -m pipeline.train_vlm``: train from stores, or render the data first; returns
    the exit status (errors: one line on stderr, rmtl.console)."""
    from rmtl.command_config import run_standalone

    return run_standalone(train_vlm_command(), argv, prog or "python -m pipeline.train_vlm")


def train_from_options(cfg: TrainVLMConfig, store: list[str] | None = None, render_episodes: int = 0,
                       random_episodes: int = 0, resolution: int = 96, workers: int = 1,
                       out: Path | None = None) -> None:
    """Train the domain reward VLM from stores and/or freshly rendered episodes into ``out``."""

    from rmtl.console import check_output_dir
    from storage.dataset import DatasetStore

    stores = list(store or [])
    check_output_dir(out, "--out")  # before any model or data loads
    for path in stores:
        DatasetStore.open(path, "r")  # a missing or foreign store fails now
    parts, desc = [], []
    init_vlm = None
    if stores:
        tower = None
        if cfg.tune == "text":  # the locked tower's id finds its stored embeddings under any model id
            from rmtl.vlm import load_vlm

            init_vlm = load_vlm(cfg.init, device=cfg.device, precision="fp32")  # trained below, not loaded twice
            tower = init_vlm.image_tower_id
        stream = cfg.stream_frames and cfg.tune == "all"
        parts.append(TrainingData.from_stores(stores, embeddings_of=cfg.init if cfg.tune == "text" else None,
                                              image_tower=tower, stream=stream,
                                              holdout_fraction=cfg.holdout_fraction if cfg.tune == "text" or stream
                                              else None))
        desc.append(f"stores {', '.join(stores)}")
    if render_episodes or random_episodes:
        from pipeline.rollout import RolloutConfig, map_rollouts

        offset = int(max(p.episode.max() for p in parts)) + 1 if parts else 0
        for policy, n in (("expert", render_episodes), ("random", random_episodes)):
            if n:
                rc = RolloutConfig.make(episodes=n, policy=policy, resolution=resolution, seed=cfg.seed + offset)
                t = time.perf_counter()
                batches = list(map_rollouts(rc, list(range(n)), workers=workers, chunk=4))
                parts.append(TrainingData.from_batches(batches, rc.views, policy == "expert", offset))
                print(f"rendered {n} {policy} episodes, {len(parts[-1])} rows in {time.perf_counter() - t:.0f} s", flush=True)
                desc.append(f"{n} {policy} episodes ({len(parts[-1])} states x {len(rc.views)} views, "
                            f"{resolution} px, curriculum stages 0-4, noise {rc.noise_std}/{2 * rc.noise_std})")
                offset += n
    data = TrainingData.concat(parts)
    renderers = set()
    for path in stores:
        with DatasetStore.open(path, "r") as st:
            r = st.info.get("renderer") or {}
            renderers.add(json.dumps({"cull_invisible": bool(r.get("culled_geoms")),
                                      "mesh_reduction": r.get("mesh_reduction", 0.0),
                                      "msaa_samples": r.get("msaa_samples", 4)}, sort_keys=True))
    metrics = train_reward_vlm(data, cfg, out, vlm=init_vlm)
    renderer = None
    if len(renderers) == 1 and not (render_episodes or random_episodes):
        # The model declares the renderer of its training frames (rmtl.vlm.registry.declared_renderer).
        declared = renderers.pop()
        (Path(out) / "renderer.json").write_text(declared + "\n")
        renderer = json.loads(declared)
    write_model_card(out, cfg, "; ".join(desc), metrics, invoking_command(), renderer)
    print(f"final: {_summary(metrics['final'])}\nwrote {out}")


if __name__ == "__main__":
    from rmtl.console import finish

    finish(main())
