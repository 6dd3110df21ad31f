"""Which model's embeddings a store holds: a model name or spec resolved to a stored model id."""

from __future__ import annotations

from typing import Any

from rmtl.default_model import DEFAULT_MODEL
from rmtl.errors import ConfigError, StoreError


def resolve_model_id(store: Any, model: str | None) -> str:
    """The store's model id for ``model``: a stored model id, a model spec (its id), or
    None: the store's only model, else the project's default model (``DEFAULT_MODEL``, its
    current weights) when it is one of them, as every other command defaults to it."""
    have = store.model_ids()
    if model is None:
        if not have:
            raise StoreError(f"{store.path} has no embeddings yet; make them with `rmtl embed --store {store.path}` "
                             f"(or render and embed in one go with `rmtl render-and-embed --store {store.path}`)")
        if len(have) == 1:
            return have[0]
        from rmtl.vlm.spec import parse_spec

        default = parse_spec(DEFAULT_MODEL).model_id
        if default in have:
            return default
        raise ConfigError(f"{store.path} has embeddings of several models {have} and none is the default "
                          f"{DEFAULT_MODEL}; name one with --model")
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


def store_task(store: Any) -> Any:
    """The task whose rows a store holds (an rmtl.tasks.Task): the name of its recorded key
    spec, else its rollout provenance's task; stores written before either: pick-and-lift.
    One line if that task is not registered or its key spec does not match the store's."""
    from rmtl.tasks import DEFAULT_TASK, get_task

    meta = store.info.get("key_spec") or {}
    name = meta.get("name") or store.info.get("provenance", {}).get("rollout", {}).get("task") or DEFAULT_TASK
    task = get_task(name)
    if meta and not task.key_spec.matches(meta):
        raise StoreError(f"{store.path} records key spec {meta.get('id', meta)}, not task {name}'s {task.key_spec.id}")
    return task


def store_prompts(store: Any, prompts: Any = None) -> Any:
    """The prompts an analysis of a store uses: ``prompts`` (a PromptConfig or PromptSet)
    as :meth:`~rmtl.reward.prompts.PromptConfig.for_micro_tasks` takes them for the store's
    task (default: the task's own prompts)."""
    from rmtl.reward.prompt_sets import PromptSet
    from rmtl.reward.prompts import PromptConfig

    task = store_task(store)
    if isinstance(prompts, PromptSet):
        return prompts.for_task(task.micro_tasks)
    return PromptConfig.for_micro_tasks(task.micro_tasks, prompts)
