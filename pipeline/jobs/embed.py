"""Embed a store's frames with a VLM, in batches, resumably; store the prompt embeddings.

Embeddings, not rewards, are the unit of caching: with per-view image embeddings and the
text embeddings of every prompt in the store, any prompt set or alpha is re-scored
offline without rendering or running the image tower again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field

from pipeline.stores.store_models import check_model_renderer, store_prompts
from rmtl.config import Config
from rmtl.default_model import DEFAULT_MODEL
from rmtl.errors import StoreError
from rmtl.reward.prompt_sets import config_prompt_sets
from rmtl.reward.prompts import PromptConfig


@dataclass(frozen=True)
class EmbedResult:
    store: str
    model_id: str
    rows_embedded: int
    """Rows given embeddings by this call (encoded or copied)."""
    rows_total: int
    embed_dim: int
    rows_copied: int = 0
    """Of rows_embedded, those copied from a stored model with the same image tower."""
    copied_from: str | None = None


COPY_ROWS = 4096
"""Rows per read-write when copying another model's image embeddings."""


def same_image_tower(store, model_id: str, image_tower: str) -> str | None:
    """The stored model (other than ``model_id``) whose embeddings came from the same image
    tower (``VLM.image_tower_id``, recorded at embed time), with the most embedded rows."""
    found = [other for other in store.model_ids()
             if other != model_id and store.embedding_info(other)["meta"].get("image_tower") == image_tower]
    return max(found, key=store.embedded_rows, default=None)


def prompt_texts(prompts: PromptConfig) -> list[str]:
    """Every phrasing of every prompt (baseline, micro-tasks, single goal), deduplicated."""
    seen: dict[str, None] = {}
    for group in (prompts.baseline, *prompts.goals(), prompts.single):
        for text in group:
            seen.setdefault(text, None)
    return list(seen)


def embed_store(path: str | Path | object, model: str | object, batch_size: int = 64,
                prompts: PromptConfig | None = None, device: str | None = None, progress: bool = True) -> EmbedResult:
    """Embed rows [embedded, committed) of the store with ``model`` (a spec or a loaded VLM).

    ``path``: a store path (opened as its writer for the call) or a DatasetStore already
    open as writer (the caller keeps the lock, e.g. for a whole render-and-embed job).

    Frames are read in runs of whole frame chunks and embedded ``batch_size`` images per
    model call; each run is committed before the next, so a killed run resumes where it
    stopped. Rows that a stored model with the same image tower already embedded (a text
    tower tuned with the image tower locked) are copied, not encoded again.
    """
    import contextlib

    from rmtl.console import progress as progress_display
    from rmtl.vlm import VLM, load_vlm
    from storage.dataset import DatasetStore
    from storage.schema import Chunking

    vlm = model if isinstance(model, VLM) else load_vlm(str(model), device=device)
    if isinstance(path, DatasetStore):
        opened, path = contextlib.nullcontext(path), path.path
    else:
        opened = DatasetStore.open(path, "a")
    with opened as store:
        if not store.has_frames:
            raise StoreError(f"{path} holds no frames to embed; render episodes into it first "
                             f"(rmtl render-and-embed --store {path})")
        check_model_renderer(store, str(model) if isinstance(model, str) else str(vlm.spec), vlm.model_id)
        prompts = store_prompts(store, prompts)  # default: the prompts of the store's task
        n, views = store.num_rows, len(store.views)
        start = store.embedded_rows(vlm.model_id)
        chunk_rows = Chunking(**store.info["chunking"]).frame_rows_for(*store.resolution)
        rows_per_read = max(chunk_rows, (max(batch_size, views) // views) // chunk_rows * chunk_rows)
        tower = vlm.image_tower_id if start < n else None  # hashing a big tower takes seconds: only when needed
        meta = {"spec": str(vlm.spec), "image_size": vlm.image_size, "normalised": True,
                "preprocess": {k: v for k, v in vlm.preprocess_cfg.items() if k in ("size", "mean", "std", "resize_mode")},
                "image_tower": tower, "precision": vlm.precision}
        if 0 < start < n:
            done = store.embedding_info(vlm.model_id)["meta"].get("precision")
            if done is not None and done != vlm.precision:
                raise StoreError(f"{path} holds {start} rows of '{vlm.model_id}' embedded in {done}, this run would "
                                 f"add {vlm.precision} rows; embed with the same precision (--precision {done})")
        donor = same_image_tower(store, vlm.model_id, tower) if tower else None
        copy_stop = max(start, store.embedded_rows(donor)) if donor else start
        if copy_stop > start:
            meta["image_embeddings_from"] = donor
        with progress_display(progress) as bar:
            task = bar.add_task(f"embed {vlm.model_id}", total=n, completed=start)
            for s in range(start, copy_stop, COPY_ROWS):
                e = min(copy_stop, s + COPY_ROWS)
                store.add_embeddings(vlm.model_id, s, store.embeddings(donor, slice(s, e)), meta=meta)
                bar.advance(task, e - s)
            for s in range(copy_stop, n, rows_per_read):
                e = min(n, s + rows_per_read)
                frames = store.read(slice(s, e), fields=["frames"])["frames"]
                flat = frames.reshape(-1, *frames.shape[2:])
                emb = vlm.encode_images(flat, batch_size=batch_size).reshape(e - s, views, -1)
                store.add_embeddings(vlm.model_id, s, emb, meta=meta)
                bar.advance(task, e - s)
        texts = prompt_texts(prompts)
        table = dict(zip(texts, vlm.encode_text(texts)))
        store.set_text_embeddings(vlm.model_id, table)
        for pset in config_prompt_sets(prompts):  # the same texts, recorded per prompt set too
            rows = pset.rows()
            store.set_prompt_set_embeddings(vlm.model_id, pset.id, [r for r, _ in rows], [t for _, t in rows],
                                            np.stack([table[t] for _, t in rows]), pset.to_dict())
        copied = copy_stop - start
        return EmbedResult(str(path), vlm.model_id, n - start, n, vlm.embed_dim, copied, donor if copied else None)


class EmbedConfig(Config):
    """``rmtl embed``: embed a store's rows not yet embedded by a model."""

    store: str
    """Dataset store with frames (made by render-and-embed)."""
    model: str = DEFAULT_MODEL
    """VLM spec (name, name:tag, hf-hub:..., local dir or file)."""
    batch_size: int = Field(64, ge=1)
    """Images per VLM call."""


def run(cfg: EmbedConfig) -> EmbedResult:
    """The embedding a config describes: the store's rows not yet embedded by ``cfg.model``."""
    from rmtl.vlm import load_vlm

    return embed_store(cfg.store, load_vlm(cfg.model), batch_size=cfg.batch_size)
