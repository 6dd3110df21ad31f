"""Stored text embeddings read back as the reward's TextEmbeddings: of a prompt config (every
stored phrasing) or of a prompt set (its own record first)."""

from __future__ import annotations

from typing import Any
from collections.abc import Iterator

import numpy as np

from pipeline.stores.store_models import spec_of, store_prompts
from rmtl.errors import StoreError
from rmtl.reward.prompt_sets import PromptSet
from rmtl.reward.prompts import PromptConfig, TextEmbeddings, embed_prompts


def _tables(store: Any, model_id: str, first: str | None) -> Iterator[dict[str, np.ndarray]]:
    """{phrasing: float32 [D]} tables of a model: prompt set ``first``, the old per-model
    table, then every other stored prompt set (read one at a time, as needed)."""
    ids = store.prompt_set_ids(model_id)
    if first in ids:
        rec = store.prompt_set_embeddings(model_id, first)
        yield dict(zip(rec["texts"], rec["embeddings"]))
    if model_id in store.text_models():
        yield store.text_embeddings(model_id)
    for set_id in ids:
        if set_id != first:
            rec = store.prompt_set_embeddings(model_id, set_id)
            yield dict(zip(rec["texts"], rec["embeddings"]))


def text_for(store: Any, model_id: str, prompts: PromptConfig, single_prompt: bool = False,
             what: str = "these prompts", prompts_file: str = "FILE", set_id: str | None = None) -> TextEmbeddings:
    """TextEmbeddings of ``prompts`` (baseline and the goals the reward uses) from the store's
    stored phrasings (set ``set_id``'s record first); one-line StoreError naming the command
    that adds missing ones."""
    needed = [*prompts.baseline, *(t for goal in prompts.goals(single_prompt) for t in goal)]
    table: dict[str, np.ndarray] = {}
    for more in _tables(store, model_id, set_id):
        table.update({t: v for t, v in more.items() if t not in table})
        if all(t in table for t in needed):
            break
    missing = [t for t in needed if t not in table]
    if missing:
        raise StoreError(f"{store.path} has no text embedding of {missing[0]!r} ({what}) for {model_id}; add it "
                         f"without rendering: rmtl embed-text --store {store.path} --prompts {prompts_file} "
                         f"--model {spec_of(store, model_id)}")
    return embed_prompts(lambda texts: np.stack([table[t] for t in texts]), prompts, single_prompt)


def prompt_set_text(store: Any, model_id: str, pset: PromptSet, single_prompt: bool | None = None) -> TextEmbeddings:
    """TextEmbeddings of a prompt set (its own kind unless ``single_prompt`` says otherwise)."""
    pset = store_prompts(store, pset)  # the set for the store's task: one line if it misses a micro-task's goal
    single = pset.single_prompt if single_prompt is None else single_prompt
    return text_for(store, model_id, pset.prompts, single, f"prompt set {pset.name}, id {pset.id}",
                    pset.source or "FILE", set_id=pset.id)


def stored_text_embeddings(store, model_id: str, prompts: PromptConfig, single_prompt: bool = False):
    """TextEmbeddings of a prompt config from the store (each prompt = mean of its phrasings),
    from every phrasing stored for the model (:func:`text_for`)."""
    return text_for(store, model_id, prompts, single_prompt)


def text_embeddings(store: Any, model_id: str, prompts: PromptConfig | PromptSet | None = None,
                    single_prompt: bool = False) -> TextEmbeddings:
    """Stored text embeddings of a prompt config (default: the store's task's own prompts) or a
    prompt set (its own kind; ``single_prompt`` asks for its single goal), taken for the store's
    task (:func:`~pipeline.stores.store_models.store_prompts`)."""
    prompts = store_prompts(store, prompts)
    if isinstance(prompts, PromptSet):
        return prompt_set_text(store, model_id, prompts, True if single_prompt else None)
    return stored_text_embeddings(store, model_id, prompts, single_prompt)


def prompts_record(store: Any, prompts: PromptConfig | PromptSet | None) -> dict[str, Any]:
    """What an analysis dataset of a store records of its prompts: the set (name, id, texts) or the
    config, as taken for the store's task."""
    prompts = store_prompts(store, prompts)
    if isinstance(prompts, PromptSet):
        return prompts.to_dict()
    return prompts.model_dump(mode="json")
