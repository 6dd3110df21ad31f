"""Which model's embeddings a store holds: a model name or spec resolved to a stored model id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rmtl.default_model import DEFAULT_MODEL
from rmtl.errors import ConfigError, StoreError


def resolve_model_id(store: Any, model: str | None) -> str:
    """The store's model id for ``model``: a stored model id, a model spec (its id), or
    None: the store's only model, else the project's default model (``DEFAULT_MODEL``, its
    current weights) when it is one of them, as every other command defaults to it.
    One line if that model declares another renderer than the store's frames'
    (:func:`check_model_renderer`): every reader refuses such embeddings."""
    mid = stored_model_id(store, model)
    check_model_renderer(store, spec_of(store, mid), mid)
    return mid


def stored_model_id(store: Any, model: str | None) -> str:
    """:func:`resolve_model_id` without the renderer check."""
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
    problem = model_problem(model)
    if problem:  # `rmtl embed --model <it>` would fail too: say why, not suggest it
        raise ConfigError(f"{problem}; {store.path} has embeddings of {have or 'no model'}"
                          + (": pass one of them with --model" if have else ""))
    raise StoreError(f"{store.path} has no embeddings of '{model}' (it has {have or 'none'}); "
                     f"embed it first: rmtl embed --store {store.path} --model {model}")


def _open_clip_architectures() -> set[str]:
    """OpenCLIP's architecture names, from its config files (found without importing it: that loads torch)."""
    import importlib.util

    spec = importlib.util.find_spec("open_clip")
    names: set[str] = set()
    for root in (spec.submodule_search_locations or []) if spec else []:
        names |= {p.stem for p in (Path(root) / "model_configs").glob("*.json")}
    return names


def model_problem(model: str) -> str | None:
    """Why ``rmtl embed --model <model>`` would fail before it loads anything, or None: an
    unknown architecture, a model folder without its config or weights, a weights file that is
    not there (checked without torch; hub and tag downloads are not tried)."""
    from rmtl.vlm import registry
    from rmtl.vlm.spec import parse_spec

    try:
        s = parse_spec(model)
    except Exception as e:  # a malformed spec: its own line
        return " ".join(str(e).split())
    if s.kind == "local-dir":
        d = s.path
        if not d.is_dir():
            return f"model folder {d} does not exist"
        cfg = d / "open_clip_config.json"
        try:
            ok = "model_cfg" in json.loads(cfg.read_text())
        except (OSError, ValueError):
            ok = False
        if not ok:
            return (f"model folder {d} is not an OpenCLIP model folder (no readable open_clip_config.json with "
                    f"'model_cfg'); pass a folder written by rmtl train-reward-vlm (or an OpenCLIP export)")
        if registry.find_weights_in_dir(d) is None and not any(p.suffix in registry.WEIGHT_SUFFIXES
                                                                for p in d.iterdir()):
            return (f"model folder {d} has no weights ({' or '.join(registry.WEIGHT_FILE_NAMES[::2])}); "
                    f"pass a folder written by rmtl train-reward-vlm")
        return None
    if s.kind == "local-file" and not s.path.is_file():
        return f"weights file {s.path} (spec {s.text!r}) does not exist"
    if s.kind in ("name", "tag", "random", "local-file") and s.arch not in set(registry.list_registered()) \
            and s.arch not in _open_clip_architectures():
        return (f"unknown model {s.arch!r} in spec {s.text!r}: not an OpenCLIP architecture nor a project-registered "
                f"name (project names: {', '.join(registry.list_registered())})")
    return None


def _renderer_settings(record: dict[str, Any]) -> str:
    """The render settings of a renderer record (or declaration), as a user sets them."""
    return (f"mesh_reduction={record.get('mesh_reduction')}, msaa_samples={record.get('msaa_samples')}, "
            f"cull_invisible={str(record.get('cull_invisible')).lower()}")


def check_model_renderer(store: Any, spec: str, model_id: str | None = None) -> None:
    """One-line StoreError if ``spec`` declares a renderer (rmtl.vlm.registry.declared_renderer)
    other than the one that drew the store's frames: its embeddings of them would score frames
    unlike its training frames (render-and-embed refuses the same mix). Models that declare no
    renderer, and stores without a renderer record of frames, are not checked."""
    from rmtl.vlm.registry import declared_renderer

    declared = declared_renderer(spec)
    if not declared:
        return
    from rmtl.env.render_settings import RENDERER_V1_ID, FULL_MSAA_SAMPLES, RenderSettings

    record = store.info.get("renderer")
    if record is None:
        if not store.has_frames or store.info.get("provenance", {}).get("kind", "rollout") != "rollout":
            return
        # written before renderer ids: the paper domain, full meshes, 4x MSAA, no culling
        record = {"visual_domain": True, "shadows": False, "reflections": False, "mesh_reduction": 0.0,
                  "msaa_samples": FULL_MSAA_SAMPLES, "culled_geoms": [], "renderer_id": RENDERER_V1_ID}
    want = RenderSettings(**{**RenderSettings().model_dump(), **declared})
    profile = want.profile(bool(record.get("visual_domain", True)), bool(record.get("shadows")),
                           bool(record.get("reflections")))
    have_id = record.get("renderer_id") or RENDERER_V1_ID
    if profile["renderer_id"] == have_id:
        return
    have = {**record, "cull_invisible": bool(record.get("culled_geoms"))}
    name = model_id or spec
    p = Path(str(store.path))
    fresh = p.with_name(f"{p.stem}.{profile['renderer_id']}{p.suffix or '.zarr'}")
    episodes = store.read(fields=["episode"])["episode"] if store.num_rows else []
    n_eps = len({int(e) for e in episodes if int(e) >= 0}) or 1
    raise StoreError(
        f"{store.path} was rendered by renderer {have_id} ({_renderer_settings(have)}) but model '{name}' declares "
        f"renderer {profile['renderer_id']} ({_renderer_settings(want.model_dump())}), so it would score frames unlike "
        f"its training frames; render a store with the model's renderer: "
        f"`rmtl render-and-embed --store {fresh} --model {spec} --episodes {n_eps} --views {','.join(store.views)}`")


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
