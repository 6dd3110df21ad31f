"""Model specs: the one string that names a VLM and its weights.

Grammar (checked in this order):

- ``hf-hub:org/repo``: an OpenCLIP repo on the Hugging Face Hub (config + weights).
- ``local-dir:PATH`` or a path to a directory: ``open_clip_config.json`` plus weights
  (``open_clip_model.safetensors`` or ``open_clip_pytorch_model.bin``).
- ``ARCH:TAG``: an OpenCLIP architecture with a pretrained tag, e.g. ``PE-Core-bigG-14-448:meta``.
- ``ARCH:PATH``: an architecture with a local weights file (``.safetensors``/``.bin``/``.pt``/``.pth``).
- ``ARCH``: a project-registered name with default weights (see :mod:`rmtl.vlm.registry`).
- ``ARCH@random``: the architecture with random weights. Random weights are never a
  fallback; they must be asked for like this (tests, benchmarks, plumbing checks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PRECISIONS = ("fp32", "amp_bf16", "bf16", "fp16", "amp")
"""``fp32``; ``amp_bf16``/``amp`` (fp32 weights, bf16/fp16 autocast); ``bf16``/``fp16`` (half weights)."""

from rmtl.errors import ModelLoadError
from rmtl.vlm.registry import WEIGHT_SUFFIXES, find_weights_in_dir, get_registered, weights_fingerprint

HF_HUB_PREFIX = "hf-hub:"
LOCAL_DIR_PREFIX = "local-dir:"
RANDOM_SUFFIX = "@random"

SpecKind = Literal["name", "tag", "random", "hf-hub", "local-dir", "local-file"]


def safe_id(text: str) -> str:
    """A filesystem- and Zarr-safe name: runs of other characters become '-'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "model"


def _looks_like_path(text: str) -> bool:
    return (
        "/" in text
        or "\\" in text
        or text.startswith((".", "~"))
        or text.lower().endswith(WEIGHT_SUFFIXES)
        or Path(text).expanduser().exists()
    )


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec; see the module docstring for the grammar."""

    text: str
    """The spec as given."""
    kind: SpecKind
    arch: str | None = None
    """Architecture name (kinds name, tag, random, local-file)."""
    tag: str | None = None
    """Pretrained tag (kind tag)."""
    path: Path | None = None
    """Local directory or weights file (kinds local-dir, local-file)."""
    hub_id: str | None = None
    """``org/repo`` (kind hf-hub)."""

    @property
    def model_id(self) -> str:
        """Filesystem-safe id of architecture + weights; the Zarr array name of its embeddings.

        ``ARCH__W`` (registered weights), ``ARCH__TAG``, ``ARCH__random``,
        ``hf-hub__org__repo``, ``DIRNAME__local__W`` and ``ARCH__FILESTEM__W``, where W
        is the weights file's fingerprint (omitted while the file does not exist): new
        weights under the same name never reuse embeddings stored for the old ones.
        """
        if self.kind == "name":
            raw = self.arch
        elif self.kind == "tag":
            raw = f"{self.arch}__{self.tag}"
        elif self.kind == "random":
            raw = f"{self.arch}__random"
        elif self.kind == "hf-hub":
            raw = "hf-hub__" + self.hub_id.replace("/", "__")
        elif self.kind == "local-dir":
            raw = f"{self.path.name}__local"
        else:
            raw = f"{self.arch}__{self.path.stem}"
        weights = self.weights_file()
        if weights is not None:
            raw = f"{raw}__{weights_fingerprint(weights)}"
        return "__".join(safe_id(part) for part in str(raw).split("__"))

    def weights_file(self) -> Path | None:
        """The local weights file this spec resolves to, when it names one that exists."""
        if self.kind == "name":
            reg = get_registered(self.arch)
            return reg.weights if reg is not None and reg.weights is not None and reg.weights.is_file() else None
        if self.kind == "local-dir" and self.path.is_dir():
            return find_weights_in_dir(self.path)
        if self.kind == "local-file" and self.path.is_file():
            return self.path
        return None

    def __str__(self) -> str:
        return self.text


def parse_spec(spec: str | ModelSpec) -> ModelSpec:
    """Parse a model spec string (one-line :class:`ModelLoadError` when malformed)."""
    if isinstance(spec, ModelSpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ModelLoadError(f"model spec {spec!r} is empty; give an OpenCLIP name, NAME:TAG, hf-hub:ORG/REPO or a local path")
    text = spec.strip()
    if text.endswith(RANDOM_SUFFIX):
        arch = text[: -len(RANDOM_SUFFIX)]
        if not arch or ":" in arch or _looks_like_path(arch):
            raise ModelLoadError(f"model spec {text!r}: '@random' applies to an architecture name only, e.g. 'ViT-B-32@random'")
        return ModelSpec(text, "random", arch=arch)
    if text.startswith(HF_HUB_PREFIX):
        hub_id = text[len(HF_HUB_PREFIX):].strip("/")
        if hub_id.count("/") != 1 or not all(hub_id.split("/")):
            raise ModelLoadError(f"model spec {text!r}: a Hugging Face id has the form hf-hub:ORG/REPO")
        return ModelSpec(text, "hf-hub", hub_id=hub_id)
    if text.startswith(LOCAL_DIR_PREFIX):
        raw = text[len(LOCAL_DIR_PREFIX):]
        if not raw:
            raise ModelLoadError(f"model spec {text!r}: give a directory after 'local-dir:'")
        return ModelSpec(text, "local-dir", path=Path(raw).expanduser())
    head, sep, tail = text.partition(":")
    if sep and head and not _looks_like_path(head):
        if not tail:
            raise ModelLoadError(f"model spec {text!r}: give a pretrained tag or weights file after ':'")
        if _looks_like_path(tail):
            p = Path(tail).expanduser()
            if not tail.lower().endswith(WEIGHT_SUFFIXES):  # else the loader fails deep inside torch (KeyError)
                what = "a directory" if p.is_dir() else f"'{p.name}'"
                raise ModelLoadError(f"model spec {text!r}: {what} is not a weights file ({', '.join(WEIGHT_SUFFIXES)}); "
                                     f"give ARCH:PATH to a weights file, e.g. {head}:/path/model.safetensors")
            return ModelSpec(text, "local-file", arch=head, path=p)
        return ModelSpec(text, "tag", arch=head, tag=tail)
    if _looks_like_path(text):
        p = Path(text).expanduser()
        if text.lower().endswith(WEIGHT_SUFFIXES) or p.is_file():
            raise ModelLoadError(
                f"model spec {text!r} is a weights file without an architecture; write ARCH:{text} "
                "(e.g. ViT-B-32:/path/model.safetensors) or give a directory holding open_clip_config.json"
            )
        return ModelSpec(text, "local-dir", path=p)
    return ModelSpec(text, "name", arch=text)
