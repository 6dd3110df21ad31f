"""OpenCLIP vision-language models: a project registry, model specs and one loader.

``load_vlm(spec)`` returns a :class:`VLM` whose ``encode_images`` / ``encode_text`` give
float32 unit embeddings. Specs are described in :mod:`rmtl.vlm.spec`; random weights
are only ever used when asked for with ``ARCH@random``.
"""

from __future__ import annotations

from rmtl.vlm.loader import PRECISIONS, load_vlm, resolve, select_device, select_precision
from rmtl.vlm.model import VLM, preprocess_batch
from rmtl.vlm.registry import RegisteredModel, get_registered, list_registered, register_model
from rmtl.vlm.spec import ModelSpec, parse_spec, safe_id

__all__ = [
    "PRECISIONS", "load_vlm", "resolve", "select_device", "select_precision",
    "VLM", "preprocess_batch",
    "RegisteredModel", "get_registered", "list_registered", "register_model",
    "ModelSpec", "parse_spec", "safe_id",
]
