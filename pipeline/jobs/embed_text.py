"""Text embeddings of prompt sets: encoded with a model's text tower only, stored per model
and prompt-set id, read back as :class:`~rmtl.reward.prompts.TextEmbeddings`.

No frame is read and the image tower is never called: a new prompt set is scored from the
image embeddings already in the store. A set's record lives at
``prompt_sets/<model node>/<set id>`` (docs/storage.md): one row per (role, phrasing) of
the set, with the set's texts, roles and content in the array's attributes. Stores made
before prompt sets existed keep one table of phrasings per model (``text_embeddings``),
which is read as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from pipeline.stores.store_models import spec_of
from rmtl.config import Config
from rmtl.errors import ModelLoadError, StoreError
from rmtl.reward.prompt_sets import PromptSet


@dataclass(frozen=True)
class EmbedTextResult:
    store: str
    model_id: str
    prompt_set: str
    prompt_set_id: str
    texts: int
    """Rows written: one per (role, phrasing)."""


def check_text_tower(vlm: Any) -> None:
    """One-line ModelLoadError when ``vlm`` has no text tower to encode prompts with."""
    if not getattr(vlm, "has_text_tower", True):
        raise ModelLoadError(f"model {vlm.spec.text!r} has no text tower loaded; prompt sets need a model with one "
                             f"(an OpenCLIP CLIP model with its text weights)")


def embed_text(store_path: str | Path, prompt_sets: Sequence[PromptSet], model: str | Any | None = None,
               device: str | None = None) -> list[EmbedTextResult]:
    """Encode every phrasing of ``prompt_sets`` with the text tower of ``model`` (a spec, a
    loaded VLM, or None: the store's only model, loaded from its recorded spec) and store
    them under the model's id and each set's id. The model must have image embeddings in
    the store (text embeddings of another model would score nothing)."""
    from pipeline.stores.store_models import resolve_model_id, store_prompts
    from storage.dataset import DatasetStore

    if not prompt_sets:
        raise StoreError("no prompt sets to embed")
    loaded = model is not None and not isinstance(model, str)  # a VLM: rmtl.vlm (torch) is imported only after the checks
    with DatasetStore.open(store_path, "r") as st:  # check before a model loads or a lock is taken
        prompt_sets = [store_prompts(st, s) for s in prompt_sets]  # each set for the store's task
        if loaded:
            if model.model_id not in st.model_ids():
                raise StoreError(f"{st.path} has no image embeddings of {model.model_id} (it has "
                                 f"{st.model_ids() or 'none'}); embed its frames first: rmtl embed --store {st.path}")
            model_id, spec = model.model_id, None
        else:
            model_id = resolve_model_id(st, model)
            spec = str(model) if model is not None else spec_of(st, model_id)
    from rmtl.vlm import load_vlm

    vlm = model if loaded else load_vlm(spec, device=device)
    if vlm.model_id != model_id:
        raise StoreError(f"model {spec!r} loads as {vlm.model_id}, but the store's embeddings are of {model_id}; "
                         f"pass the spec those were made with (--model)")
    check_text_tower(vlm)
    results = []
    with DatasetStore.open(store_path, "a") as st:
        for pset in prompt_sets:
            rows = pset.rows()
            texts = list(dict.fromkeys(t for _, t in rows))
            table = dict(zip(texts, vlm.encode_text(texts)))
            st.set_prompt_set_embeddings(model_id, pset.id, [r for r, _ in rows], [t for _, t in rows],
                                         np.stack([table[t] for _, t in rows]), pset.to_dict())
            results.append(EmbedTextResult(st.path, model_id, pset.name, pset.id, len(rows)))
    return results


class EmbedTextConfig(Config):
    """``rmtl embed-text``: the text embeddings of prompt sets."""

    store: str
    """Dataset store with image embeddings of the model."""
    prompts: str
    """Prompt-set YAML file, a directory of them, or a shipped set's name."""
    model: str | None = None
    """Model spec (default: the spec of the store's only model, else of the default model rmtl-fetch-tiny when stored)."""
    device: str | None = None
    """Torch device (default: CUDA when present, else CPU)."""


def run(cfg: EmbedTextConfig) -> list[EmbedTextResult]:
    """The text embeddings a config asks for: every prompt set of ``cfg.prompts``."""
    from rmtl.reward.prompt_sets import load_prompt_sets

    return embed_text(cfg.store, load_prompt_sets(cfg.prompts), cfg.model, device=cfg.device)
