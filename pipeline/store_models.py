"""Which model's embeddings a store holds: a model name or spec resolved to a stored model id."""

from __future__ import annotations

from typing import Any


from rmtl.errors import ConfigError, StoreError


def resolve_model_id(store: Any, model: str | None) -> str:
    """The store's model id for ``model``: a stored model id, a model spec (its id), or
    None when the store holds exactly one model's embeddings."""
    have = store.model_ids()
    if model is None:
        if not have:
            raise StoreError(f"{store.path} has no embeddings yet; make them with `rmtl embed --store {store.path}` "
                             f"(or render and embed in one go with `rmtl render-and-embed --store {store.path}`)")
        if len(have) != 1:
            raise ConfigError(f"{store.path} has embeddings of several models {have}; name one with --model")
        return have[0]
    try:
        from rmtl.vlm.spec import parse_spec

        mid = parse_spec(model).model_id
    except Exception:
        mid = None
    if mid in have:
        return mid
    if model in have and mid not in (None, model):
        # e.g. 'rmtl-fetch-tiny': stored by a version whose ids did not name the weights,
        # so those embeddings may be of other weights than the ones the name loads now.
        raise StoreError(f"{store.path} has embeddings under '{model}' from before model ids named their weights "
                         f"(the current weights are '{mid}'); re-embed: rmtl embed --store {store.path} --model {model}")
    if model in have:
        return model
    raise StoreError(f"{store.path} has no embeddings of '{model}' (it has {have or 'none'}); "
                     f"embed it first: rmtl embed --store {store.path} --model {model}")


def spec_of(store, model_id: str) -> str:
    """The spec a stored model was embedded from (its id if not recorded)."""
    try:
        return str(store.embedding_info(model_id)["meta"].get("spec") or model_id)
    except Exception:
        return model_id
