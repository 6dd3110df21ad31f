"""The text side of training: captions of each batch's states, embedded by the trainable text
tower, or drawn from a bank embedded once when the text tower is frozen."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Protocol
from collections.abc import Mapping

import numpy as np
import torch

from rmtl.task import Task
from rmtl.tasks import get_task


def text_tower_frozen(model) -> bool:
    """Whether a model's text tower is locked (no trainable parameter), as the loader leaves a
    packaged pretrained text tower."""
    text = getattr(model, "text", None)
    params = list(text.parameters()) if text is not None else []
    return bool(params) and not any(p.requires_grad for p in params)


def caption_bank(vlm, states: np.ndarray, k: int, seed: int, caption_cfg, batch_size: int = 128,
                 cache: Path | None = None, task: Task | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``k`` training captions of each state, embedded once by the model's (frozen) text tower.

    Returns ``index`` [len(states), k] (int32) into ``emb`` [U, D] (float32 unit rows, one per
    distinct caption) and the U captions. The j-th caption of every state is written with the same
    seed, so states whose captions cannot differ get the same ones and are embedded once. Captions
    are embedded in batches of similar token length, trimmed to the batch's longest (the text
    tower masks padding: the same embeddings as full-length batches). ``caption_cfg``: the task's
    caption options (a mapping of ``Task.captions`` keywords, or its caption config dataclass).
    ``cache``: a file holding the bank of the same states, k and seed (reused; written when absent)."""
    sample = (task or get_task()).captions
    options = dict(caption_cfg) if isinstance(caption_cfg, Mapping) else asdict(caption_cfg)
    states = np.asarray(states, dtype=np.float64)
    key = {"rows": int(len(states)), "k": int(k), "seed": int(seed), "mode": options["mode"],
           "states": float(np.round(np.abs(states).sum(), 3))}
    if cache is not None and cache.is_file():
        saved = torch.load(cache, weights_only=True)
        if saved.get("key") == key:
            return saved["index"].numpy(), saved["emb"].float().numpy(), list(saved["captions"])
    ids: dict[str, int] = {}
    index = np.empty((len(states), k), dtype=np.int32)
    for j in range(k):
        for i, st in enumerate(states):
            text = sample(st[None], np.random.default_rng([seed, j]), **options)[0]
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


class CaptionEncoder:
    """Normalised text embeddings through the model's text tower; each distinct caption is
    tokenized once per run."""

    def __init__(self, vlm):
        self.vlm = vlm
        self.tokens: dict[str, torch.Tensor] = {}

    def __call__(self, captions: list[str]) -> torch.Tensor:
        """[len(captions), D]; each distinct caption goes through the tower once."""
        unique = sorted(set(captions))
        missing = [c for c in unique if c not in self.tokens]
        if missing:
            for c, t in zip(missing, self.vlm.tokenizer(missing)):
                self.tokens[c] = t
        device = self.vlm.device
        emb = self.vlm.model.encode_text(torch.stack([self.tokens[c] for c in unique]).to(device))
        index = {c: i for i, c in enumerate(unique)}
        return torch.nn.functional.normalize(emb, dim=-1)[torch.tensor([index[c] for c in captions], device=device)]


class CaptionSource(Protocol):
    """Caption embeddings of a batch's states."""

    record: dict | None
    """What metrics.json records about the source (None: nothing)."""

    def embed(self, rows: np.ndarray, rng: np.random.Generator, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Unit embeddings (float32) of one caption of each row's state [B, D] and of ``prompts`` [P, D]."""


class SampledCaptions:
    """A fresh caption of each state every step, through the trainable text tower."""

    record = None

    def __init__(self, encoder: CaptionEncoder, states: np.ndarray, options: Mapping, task: Task):
        self.encoder, self.states, self.options, self.task = encoder, states, dict(options), task

    def embed(self, rows: np.ndarray, rng: np.random.Generator, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        captions = self.task.captions(self.states[rows], rng, **self.options)
        # One text-tower pass for the batch's captions and the prompts.
        texts = self.encoder(captions + prompts).float()
        return texts[: len(captions)], texts[len(captions):]


class BankedCaptions:
    """A frozen text tower: each step draws one of each state's captions embedded before training."""

    def __init__(self, encoder: CaptionEncoder, index: np.ndarray, embeddings: torch.Tensor, train_rows: np.ndarray,
                 record: dict):
        self.encoder, self.index, self.embeddings, self.train_rows = encoder, index, embeddings, train_rows
        self.record = record

    def embed(self, rows: np.ndarray, rng: np.random.Generator, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        pick = self.index[np.searchsorted(self.train_rows, rows), rng.integers(self.index.shape[1], size=len(rows))]
        txt = self.embeddings[torch.from_numpy(pick.astype(np.int64)).to(self.embeddings.device)]
        return txt, self.encoder(prompts).float() if prompts else None


def caption_source(vlm, states: np.ndarray, train_rows: np.ndarray, cfg, task: Task, cache: Path) -> CaptionSource:
    """Captions of the training rows' states as ``cfg`` asks: from a bank when the model's text
    tower is frozen (``cache``: the bank's file), else sampled each step."""
    leaks = task.caption_prompt_leaks(cfg.captions) if task.caption_prompt_leaks else []
    if leaks:  # cheap insurance: no caption a prompt-neutral mode can write contains a prompt
        raise ValueError(f"neutral caption {leaks[0][0]!r} contains the evaluated prompt {leaks[0][1]!r}")
    encoder = CaptionEncoder(vlm)
    if not text_tower_frozen(vlm.model):
        return SampledCaptions(encoder, states, cfg.caption_options(), task)
    started = time.perf_counter()
    index, emb, captions = caption_bank(vlm, states[train_rows], cfg.caption_bank, cfg.seed, cfg.caption_options(),
                                        cache=cache, task=task)
    record = {"per_state": cfg.caption_bank, "distinct": len(captions), "seconds": round(time.perf_counter() - started, 1)}
    print(f"text tower frozen: {len(captions)} distinct captions ({cfg.caption_bank} per training state) "
          f"embedded once in {time.perf_counter() - started:.0f} s", flush=True)
    return BankedCaptions(encoder, index, torch.from_numpy(emb).to(vlm.device), train_rows, record)
