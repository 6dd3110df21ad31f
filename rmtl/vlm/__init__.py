"""OpenCLIP vision-language models: a project registry, model specs and one loader.

``load_vlm(spec)`` returns a :class:`VLM` whose ``encode_images`` / ``encode_text`` give
float32 unit embeddings. Specs are described in :mod:`rmtl.vlm.spec`; random weights
are only ever used when asked for with ``ARCH@random``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmtl.lazy import lazy_attributes

if TYPE_CHECKING:  # the same names, for type checkers and IDEs (at run time: _LAZY)
    from rmtl.vlm.device import select_device, select_precision
    from rmtl.vlm.loader import input_side, load_vlm, resolve
    from rmtl.vlm.model import VLM, preprocess_batch
    from rmtl.vlm.registry import RegisteredModel, get_registered, list_registered, register_model
    from rmtl.vlm.spec import PRECISIONS, ModelSpec, parse_spec, safe_id

_LAZY = {
    "select_device": "rmtl.vlm.device",
    "select_precision": "rmtl.vlm.device",
    "input_side": "rmtl.vlm.loader",
    "load_vlm": "rmtl.vlm.loader",
    "resolve": "rmtl.vlm.loader",
    "VLM": "rmtl.vlm.model",
    "preprocess_batch": "rmtl.vlm.model",
    "RegisteredModel": "rmtl.vlm.registry",
    "get_registered": "rmtl.vlm.registry",
    "list_registered": "rmtl.vlm.registry",
    "register_model": "rmtl.vlm.registry",
    "PRECISIONS": "rmtl.vlm.spec",
    "ModelSpec": "rmtl.vlm.spec",
    "parse_spec": "rmtl.vlm.spec",
    "safe_id": "rmtl.vlm.spec",
}
"""Public names and their modules: imported on first use (torch, open_clip and SB3 load only when needed)."""

__all__ = [
    "PRECISIONS", "input_side", "load_vlm", "resolve", "select_device", "select_precision",
    "VLM", "preprocess_batch",
    "RegisteredModel", "get_registered", "list_registered", "register_model",
    "ModelSpec", "parse_spec", "safe_id",
]

__getattr__ = lazy_attributes(__name__, _LAZY)
