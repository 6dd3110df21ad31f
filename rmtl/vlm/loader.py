"""Build a :class:`~rmtl.vlm.model.VLM` from a spec: resolve weights first, then build.

Weights are located *before* any model is instantiated, so a missing checkpoint of a
2B-parameter model fails in milliseconds with one line (what was looked for, where,
and how to supply it) instead of after minutes of allocation or a network timeout.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import open_clip
import torch

from rmtl.errors import ModelLoadError
from rmtl.vlm import registry
from rmtl.vlm.device import select_device, select_precision
from rmtl.vlm.hub import cached_hf_file, hf_cache_dir, hf_offline, hub_unreachable
from rmtl.vlm.model import VLM, _pair
from rmtl.vlm.spec import ModelSpec, parse_spec

OPEN_CLIP_CONFIG = "open_clip_config.json"
HF_WEIGHT_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")

RANDOM_WEIGHTS_SEED = 0
"""Seed of '@random' models (random weights are the same model in every process)."""


@contextlib.contextmanager
def _no_random_init_warning():
    """Drop OpenCLIP's root-logger warning that a model is initialised randomly: '@random'
    asks for exactly that, and the warning would be a stray line on stderr."""
    import logging

    class Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "No pretrained weights loaded" not in record.getMessage()

    f = Drop()
    logging.getLogger().addFilter(f)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(f)


def _offline_error(spec: ModelSpec, looked: str, how: str) -> ModelLoadError | None:
    """The one-line error when weights are not cached and cannot be downloaded now
    (HF_HUB_OFFLINE set, or no connection to the hub); None if a download may work."""
    if hf_offline():
        return _missing_weights(spec, looked, how)
    reason = hub_unreachable()
    if reason:
        return ModelLoadError(f"weights for model spec {spec.text!r} not found: looked in {looked}, and the hub cannot "
                              f"be reached to download them ({reason}); {how}")
    return None


@dataclass
class BuildPlan:
    """How to build a spec with OpenCLIP, after its weights were found."""

    open_clip_name: str
    """Name passed to create_model_and_transforms and get_tokenizer."""
    pretrained: str | None
    """Checkpoint file (None: weights come with a schema name, or random weights)."""
    arch_config: dict[str, Any]
    preprocess: dict[str, Any] = field(default_factory=dict)
    """image_mean / image_std / image_interpolation / image_resize_mode overrides."""
    tokenizer_name: str | None = None
    where: str = ""
    """Where the weights came from, for messages."""


def _preprocess_kwargs(cfg: dict[str, Any]) -> dict[str, Any]:
    keys = {"mean": "image_mean", "std": "image_std", "interpolation": "image_interpolation", "resize_mode": "image_resize_mode"}
    return {keys[k]: v for k, v in cfg.items() if k in keys and v is not None}


def _unknown_arch(spec: ModelSpec) -> ModelLoadError:
    names = registry.known_architectures()
    close = difflib.get_close_matches(spec.arch, names, n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return ModelLoadError(
        f"unknown model {spec.arch!r} in spec {spec.text!r}: not an OpenCLIP architecture nor a project-registered name{hint}; "
        f"list them with open_clip.list_models() (project names: {', '.join(registry.list_registered()) or 'none'})"
    )


def _arch(spec: ModelSpec) -> dict[str, Any]:
    cfg = registry.architecture_config(spec.arch)
    if cfg is None:
        raise _unknown_arch(spec)
    return cfg


def _missing_weights(spec: ModelSpec, looked: str, how: str) -> ModelLoadError:
    offline = " (HF_HUB_OFFLINE is set, so nothing was downloaded)" if hf_offline() else ""
    return ModelLoadError(f"weights for model spec {spec.text!r} not found: looked in {looked}{offline}; {how}")


def _resolve_tag(spec: ModelSpec, cache_dir: str | Path | None) -> BuildPlan:
    arch_cfg = _arch(spec)
    cfg = open_clip.get_pretrained_cfg(spec.arch, spec.tag)
    if not cfg:
        tags = open_clip.list_pretrained_tags_by_model(spec.arch)
        shown = ", ".join(tags[:8]) + (f" (+{len(tags) - 8} more: open_clip.list_pretrained_tags_by_model)" if len(tags) > 8 else "")
        known = f"known tags: {shown}" if tags else "OpenCLIP knows no pretrained tags for it"
        raise ModelLoadError(
            f"unknown pretrained tag {spec.tag!r} for model {spec.arch!r}; {known}, or give weights as {spec.arch}:/path/to/weights.safetensors"
        )
    preprocess = _preprocess_kwargs(cfg)
    if cfg.get("file"):
        return BuildPlan(spec.arch, cfg["file"], arch_cfg, preprocess, spec.arch, cfg["file"])
    hub = cfg.get("hf_hub", "")
    if hub:
        # OpenCLIP's convention: 'org/repo/' (default file names) or 'org/repo/file'.
        repo, filename = os.path.split(hub)
        files = HF_WEIGHT_FILES if not filename else (filename,)
        cached = cached_hf_file(repo, files, cache_dir)
        looked = f"the Hugging Face cache {hf_cache_dir(cache_dir)} for {repo}/{'|'.join(files)}"
        how = (
            f"run once with a network connection (unset HF_HUB_OFFLINE) to download them into that cache, "
            f"e.g. `huggingface-cli download {repo}`, or pass a local directory holding {OPEN_CLIP_CONFIG} and "
            f"{files[0]}, or {spec.arch}:/path/to/{files[0]}"
        )
    else:
        url = cfg.get("url", "")
        target = Path(cache_dir or Path("~/.cache/clip").expanduser()) / os.path.basename(url)
        cached = str(target) if target.is_file() else None
        looked = f"{target} (download cache of {url})"
        how = f"run once with a network connection to download it, or give {spec.arch}:/path/to/weights"
    if cached is None:
        offline = _offline_error(spec, looked, how) if hub else (_missing_weights(spec, looked, how) if hf_offline() else None)
        if offline is not None:
            raise offline
        try:
            cached = open_clip.download_pretrained(cfg, cache_dir=cache_dir)
        except Exception as err:  # network, auth, missing file: all one line for the user
            reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
            raise ModelLoadError(f"weights for model spec {spec.text!r} not found in {looked} and could not be downloaded ({reason}); {how}") from None
        if not cached:
            raise _missing_weights(spec, looked, how)
    return BuildPlan(spec.arch, str(cached), arch_cfg, preprocess, spec.arch, str(cached))


def _resolve_hf_hub(spec: ModelSpec, cache_dir: str | Path | None) -> BuildPlan:
    repo = spec.hub_id
    config_file = cached_hf_file(repo, (OPEN_CLIP_CONFIG,), cache_dir)
    weights = cached_hf_file(repo, HF_WEIGHT_FILES, cache_dir)
    looked = f"the Hugging Face cache {hf_cache_dir(cache_dir)} for {repo}/{OPEN_CLIP_CONFIG} and {repo}/{'|'.join(HF_WEIGHT_FILES)}"
    how = (
        f"run once with a network connection (unset HF_HUB_OFFLINE) to download them into that cache, "
        f"e.g. `huggingface-cli download {repo}`, or pass a local directory holding {OPEN_CLIP_CONFIG} and {HF_WEIGHT_FILES[0]}"
    )
    if config_file is None or weights is None:
        offline = _offline_error(spec, looked, how)
        if offline is not None:
            raise offline
        try:
            config_file = open_clip.pretrained.download_pretrained_from_hf(repo, filename=OPEN_CLIP_CONFIG, cache_dir=cache_dir)
            weights = open_clip.pretrained.download_pretrained_from_hf(repo, cache_dir=cache_dir)
        except Exception as err:
            reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
            raise ModelLoadError(f"model spec {spec.text!r} not found in {looked} and could not be downloaded ({reason}); {how}") from None
    full = json.loads(Path(config_file).read_text())
    if "model_cfg" not in full:
        raise ModelLoadError(f"{config_file} of model spec {spec.text!r} lacks 'model_cfg'; it is not an OpenCLIP model repo")
    # Both files sit in one snapshot directory: build from it without touching the network.
    # An HF tokenizer (hf_tokenizer_name) lives in another repo, so only then ask the hub.
    snapshot = Path(config_file).parent
    local = f"local-dir:{snapshot}"
    tokenizer = f"hf-hub:{repo}" if full["model_cfg"].get("text_cfg", {}).get("hf_tokenizer_name") else local
    return BuildPlan(local, None, full["model_cfg"], {}, tokenizer, f"hf-hub:{repo} ({snapshot})")


def _resolve_local_dir(spec: ModelSpec) -> BuildPlan:
    d = spec.path
    if not d.exists():
        raise ModelLoadError(
            f"local model directory {d} (spec {spec.text!r}) does not exist; give a directory holding {OPEN_CLIP_CONFIG} and {HF_WEIGHT_FILES[0]}"
        )
    if not d.is_dir():
        raise ModelLoadError(f"model spec {spec.text!r}: {d} is not a directory; for a weights file write ARCH:{d}")
    cfg_path = d / OPEN_CLIP_CONFIG
    if not cfg_path.is_file():
        raise ModelLoadError(
            f"local model directory {d} has no {OPEN_CLIP_CONFIG}; an OpenCLIP model directory holds {OPEN_CLIP_CONFIG} "
            f"({{'model_cfg': ..., 'preprocess_cfg': ...}}) and {HF_WEIGHT_FILES[0]}"
        )
    try:
        full = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as err:
        raise ModelLoadError(f"{cfg_path} is not valid JSON: {err}") from None
    if "model_cfg" not in full:
        raise ModelLoadError(f"{cfg_path} lacks 'model_cfg'; write the architecture under 'model_cfg' as OpenCLIP does")
    weights = registry.find_weights_in_dir(d)
    if weights is None:
        others = sorted(p.name for p in d.iterdir() if p.suffix in registry.WEIGHT_SUFFIXES)
        if not others:
            raise ModelLoadError(
                f"local model directory {d} has {OPEN_CLIP_CONFIG} but no weights; put {' or '.join(registry.WEIGHT_FILE_NAMES[::2])} next to it"
            )
        weights = d / others[0]
    return BuildPlan(f"local-dir:{d.resolve()}", None, full["model_cfg"], {}, f"local-dir:{d.resolve()}", str(weights))


def resolve(spec: str | ModelSpec, cache_dir: str | Path | None = None) -> tuple[ModelSpec, BuildPlan]:
    """Parse a spec and locate its weights without building anything (ModelLoadError if missing,
    or when its text tower ships in a Python package that is not installed)."""
    s, plan = _resolve(spec, cache_dir)
    if registry.packaged_text_tower(plan.arch_config):
        registry.resolve_packaged(plan.arch_config)  # the package and its model directory exist
    return s, plan


def _resolve(spec: str | ModelSpec, cache_dir: str | Path | None = None) -> tuple[ModelSpec, BuildPlan]:
    s = parse_spec(spec)
    if s.kind == "hf-hub":
        return s, _resolve_hf_hub(s, cache_dir)
    if s.kind == "local-dir":
        return s, _resolve_local_dir(s)
    arch_cfg = _arch(s)
    entry = registry.get_registered(s.arch)
    preprocess = _preprocess_kwargs(dict(entry.preprocess)) if entry else {}
    if s.kind == "tag":
        return s, _resolve_tag(s, cache_dir)
    if s.kind == "random":
        return s, BuildPlan(s.arch, None, arch_cfg, preprocess, s.arch, "random weights")
    if s.kind == "local-file":
        if not s.path.is_file():
            raise ModelLoadError(f"weights file {s.path} (spec {s.text!r}) does not exist; give the path of a .safetensors/.bin/.pt checkpoint")
        return s, BuildPlan(s.arch, str(s.path), arch_cfg, preprocess, s.arch, str(s.path))
    # A bare name: only project names with registered weights carry their own weights.
    if entry is not None and entry.weights is not None:
        return s, BuildPlan(s.arch, str(entry.weights), arch_cfg, preprocess, s.arch, str(entry.weights))
    if entry is not None:
        raise ModelLoadError(
            f"no weights registered for project model {s.arch!r}: looked in {registry.PACKAGE_WEIGHTS_DIR / s.arch}; "
            f"put {registry.WEIGHT_FILE_NAMES[0]} there, pass {s.arch}:/path/to/weights, or use {s.arch}@random for random weights"
        )
    tags = open_clip.list_pretrained_tags_by_model(s.arch)
    tag_hint = f"{s.arch}:TAG (tags: {', '.join(tags[:6])}{', ...' if len(tags) > 6 else ''})" if tags else f"{s.arch}:TAG"
    raise ModelLoadError(
        f"model spec {s.text!r} names an architecture but no weights; use {tag_hint}, {s.arch}:/path/to/weights, or {s.arch}@random for random weights"
    )


def _state_dict_mismatch(text: str, shown: int = 3) -> str | None:
    """torch's "Error(s) in loading state_dict" as one line: the first missing, unexpected and
    mis-shaped keys and how many of each, and what to do; None for another error."""
    import re

    if "Error(s) in loading state_dict" not in text:
        return None
    head = text.splitlines()[0].strip().rstrip(":")
    parts = []
    for label, pattern in (("missing keys", r'Missing key\(s\) in state_dict: (.*?)\.\s*(?:\n|$)'),
                           ("unexpected keys", r'Unexpected key\(s\) in state_dict: (.*?)\.\s*(?:\n|$)')):
        m = re.search(pattern, text, re.S)
        if m:
            keys = re.findall(r'"([^"]+)"', m.group(1))
            more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
            parts.append(f"{len(keys)} {label} ({', '.join(keys[:shown])}{more})")
    shapes = re.findall(r"size mismatch for ([^:]+): copying a param with shape (torch.Size\(\[[^\]]*\]\)) from "
                        r"checkpoint, the shape in current model is (torch.Size\(\[[^\]]*\]\))", text)
    if shapes:
        k, a, b = shapes[0]
        more = f" and {len(shapes) - 1} more" if len(shapes) > 1 else ""
        parts.append(f"{len(shapes)} shape mismatches ({k}: {a} in the file, {b} in the model{more})")
    return (f"{head}: {'; '.join(parts) or 'keys do not match'}; the weights are of another architecture than "
            f"the one named: name the architecture they were trained as (ARCH:PATH), or pass the model folder "
            f"they were saved in")


def load_vlm(
    spec: str | ModelSpec,
    device: str | torch.device | None = None,
    precision: str | None = None,
    cache_dir: str | Path | None = None,
    compile: bool = False,
) -> VLM:
    """Load an OpenCLIP model by spec (see :mod:`rmtl.vlm.spec`) on the best device.

    Device: CUDA when present, else CPU. Precision (None): :func:`select_precision`.
    ``compile``: run the image tower through ``torch.compile`` (:meth:`VLM.compile_image_tower`).
    Raises :class:`~rmtl.errors.ModelLoadError` (one line) when the spec is malformed,
    unknown, or its weights are not available.
    """
    dev = select_device(device)
    prec = select_precision(dev, precision)
    s, plan = resolve(spec, cache_dir)
    # Random weights are seeded, so the same '@random' spec (one model id) is the same
    # model in every process: a store embedded in one and a live cache in another agree.
    seeded = torch.random.fork_rng(devices=[]) if s.kind == "random" else contextlib.nullcontext()
    quiet = _no_random_init_warning() if s.kind == "random" else contextlib.nullcontext()
    packaged = registry.packaged_text_tower(plan.arch_config) is not None
    try:
        with seeded, quiet:
            if s.kind == "random":
                torch.manual_seed(RANDOM_WEIGHTS_SEED)
            registry.open_clip_with_project_models()  # project names must be in OpenCLIP's registry
            if packaged:
                model, preprocess, tokenizer = _build_packaged(s, plan, dev, prec)
                vlm = VLM(model, preprocess, tokenizer, s, dev, prec, int(plan.arch_config["embed_dim"]))
                return vlm.compile_image_tower() if compile else vlm
            model, _, preprocess = open_clip.create_model_and_transforms(
                plan.open_clip_name,
                pretrained=plan.pretrained,
                precision=prec,
                device=dev,
                # Only full checkpoints are loaded: never fetch per-tower base weights.
                pretrained_text=False,
                pretrained_image=False,
                cache_dir=str(cache_dir) if cache_dir else None,
                **plan.preprocess,
            )
        tokenizer = open_clip.get_tokenizer(plan.tokenizer_name or plan.open_clip_name)
    except ModelLoadError:
        raise
    except Exception as err:
        reason = _state_dict_mismatch(str(err)) or (str(err).splitlines()[0][:300] if str(err) else type(err).__name__)
        raise ModelLoadError(f"cannot build model spec {s.text!r} from {plan.where}: {type(err).__name__}: {reason}") from None
    embed_dim = plan.arch_config.get("embed_dim")
    if embed_dim is None:
        embed_dim = model.encode_text(tokenizer(["a"]).to(dev)).shape[-1]
    vlm = VLM(model, preprocess, tokenizer, s, dev, prec, int(embed_dim))
    return vlm.compile_image_tower() if compile else vlm


def input_side(spec: str | ModelSpec, cache_dir: str | Path | None = None) -> int:
    """Side (px) of a spec's square image input (:attr:`VLM.image_size`), read from its
    architecture config when that says it, so nothing is built; else from the built model."""
    _, plan = resolve(spec, cache_dir)
    size = (plan.arch_config.get("vision_cfg") or {}).get("image_size")
    if size is None:
        return load_vlm(spec, device="cpu", cache_dir=cache_dir).image_size
    return max(_pair(size))  # as VLM.image_size reads the built model's input size


FROZEN_TEXT_PREFIX = "text."
"""State-dict prefix of a packaged (frozen) text tower: never in the model's own checkpoints."""


def _build_packaged(s: ModelSpec, plan: BuildPlan, dev: torch.device, prec: str):
    """Build a model whose text tower is a pretrained encoder shipped in a Python package
    (rmtl.vlm.registry.packaged_text_tower): the text tower loads from the package's files (no
    network), the checkpoint supplies every other weight (image tower, logit scale), and the text
    tower is locked. Returns (model, preprocess, tokenizer)."""
    name, preprocess_kw = plan.open_clip_name, dict(plan.preprocess)
    weights = plan.pretrained
    if s.kind == "local-dir":
        # A trained directory: its config keeps the portable package: form, so OpenCLIP gets a
        # resolved copy under a name of its own; its preprocessing is the directory's.
        d = Path(name.removeprefix("local-dir:"))
        full = json.loads((d / OPEN_CLIP_CONFIG).read_text())
        preprocess_kw = _preprocess_kwargs(full.get("preprocess_cfg") or {})
        name = f"packaged-{s.model_id}"
        registry.register_model(name, full["model_cfg"], overwrite=True)
        weights = plan.where
    with _quiet_packaged_build():
        model, _, preprocess = open_clip.create_model_and_transforms(
            name, pretrained=None, precision=prec, device=dev, pretrained_text=True, pretrained_image=False,
            **preprocess_kw)
    if weights and weights != "random weights":
        result = open_clip.load_checkpoint(model, weights, strict=False)
        missing = [k for k in result.missing_keys if not k.startswith(FROZEN_TEXT_PREFIX)]
        if missing or result.unexpected_keys:
            raise ModelLoadError(f"{weights} does not fit model spec {s.text!r}: missing {missing[:3]}, "
                                 f"unexpected {list(result.unexpected_keys)[:3]}")
    model.lock_text_tower()
    return model, preprocess, open_clip.get_tokenizer(name)


@contextlib.contextmanager
def _quiet_packaged_build():
    """Drop the lines a packaged text tower's build prints by design: transformers' load report
    and progress bar (the sentence encoder's unused pooler head) and OpenCLIP's warning that the model is
    initialised partially (the checkpoint is loaded right after)."""
    import logging

    from transformers.utils import logging as hf_logging

    class Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "initialized partially" not in record.getMessage()

    f = Drop()
    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger().addFilter(f)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(f)
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
