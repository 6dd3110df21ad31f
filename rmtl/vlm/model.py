"""A loaded OpenCLIP model with batched image/text encoders returning unit vectors."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np
import open_clip
import torch
import torch.nn.functional as F

from rmtl.errors import ConfigError, ModelLoadError
from rmtl.vlm.spec import ModelSpec

_INTERPOLATION = {"bicubic": "bicubic", "bilinear": "bilinear", "nearest": "nearest"}


def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, (int, np.integer)):
        return int(size), int(size)
    h, w = size
    return int(h), int(w)


def preprocess_batch(frames: torch.Tensor, cfg: dict[str, Any]) -> torch.Tensor:
    """uint8 [N, H, W, 3] frames -> normalised float [N, 3, h, w] following an OpenCLIP preprocess cfg.

    Batched tensor equivalent of OpenCLIP's inference transform (``image_transform``):
    the same resize mode (squash / shortest edge + centre crop / longest edge + pad),
    interpolation, mean and std, read from the model's ``preprocess_cfg`` instead of
    being hard-coded. Resizing uses antialiasing like PIL does when shrinking, and the
    result is clamped to [0, 1] as PIL's uint8 output is.
    """
    th, tw = _pair(cfg["size"])
    mode = cfg.get("resize_mode", "shortest")
    interp = _INTERPOLATION.get(cfg.get("interpolation", "bicubic"), "bicubic")
    x = frames.permute(0, 3, 1, 2).float()
    std = torch.tensor(cfg["std"], dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    shift = -torch.tensor(cfg["mean"], dtype=x.dtype, device=x.device).view(1, -1, 1, 1) / std
    h, w = x.shape[-2:]
    if (h, w) == (th, tw):
        # frames rendered at the input size (the reward's case): scale, centre and normalise in one pass
        return torch.addcmul(shift, x, 1.0 / (255.0 * std))
    x.div_(255.0)
    if mode == "squash":
        size = (th, tw)
    else:
        # OpenCLIP's ResizeKeepRatio: ratio of the longest (or shortest) edge.
        rh, rw = h / th, w / tw
        ratio = max(rh, rw) if mode == "longest" else min(rh, rw)
        size = (round(h / ratio), round(w / ratio))
    if size != (h, w):
        kwargs = {"antialias": True, "align_corners": False} if interp != "nearest" else {}
        x = F.interpolate(x, size=size, mode=interp, **kwargs).clamp_(0.0, 1.0)
    x = _center_crop_or_pad(x, th, tw, float(cfg.get("fill_color", 0)) / 255.0)
    return torch.addcmul(shift, x, 1.0 / std)


def _center_crop_or_pad(x: torch.Tensor, th: int, tw: int, fill: float) -> torch.Tensor:
    h, w = x.shape[-2:]
    if h < th or w < tw:
        ph, pw = max(th - h, 0), max(tw - w, 0)
        x = F.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2), value=fill)
        h, w = x.shape[-2:]
    top, left = int(round((h - th) / 2.0)), int(round((w - tw) / 2.0))
    return x[..., top : top + th, left : left + tw]


class VLM:
    """An OpenCLIP model ready to embed frames and prompts (build it with :func:`rmtl.vlm.load_vlm`).

    Embeddings come back as float32 NumPy arrays, L2-normalised in float32 whatever the
    compute precision. ``preprocess`` (PIL -> tensor) and ``tokenizer`` are the model's
    own; :meth:`encode_images` takes uint8 frames and preprocesses them in batch on the
    model's device with the same settings.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        preprocess: Callable[[Any], torch.Tensor],
        tokenizer: Callable[[Sequence[str]], torch.Tensor],
        spec: ModelSpec,
        device: torch.device,
        precision: str,
        embed_dim: int,
    ):
        self.model = model.eval()
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.spec = spec
        self.device = device
        self.precision = precision
        self.embed_dim = int(embed_dim)
        self.preprocess_cfg: dict[str, Any] = dict(model.visual.preprocess_cfg)
        self.input_size: tuple[int, int] = _pair(self.preprocess_cfg["size"])
        self._compiled_tower: Callable[[torch.Tensor], torch.Tensor] | None = None

    @property
    def compiled(self) -> bool:
        """Whether image embeddings run through a ``torch.compile``-d image tower."""
        return self._compiled_tower is not None

    def compile_image_tower(self) -> VLM:
        """Run the image tower through ``torch.compile`` from now on; returns self.

        Compiles once here, on a batch of the model's input size, so a machine that cannot
        compile (inductor needs a C++ compiler on CPU) fails now with one line, not at the
        first reward. The tower's weights and the model id are unchanged; embeddings agree
        with the eager tower to the compute precision's rounding (tests/test_vlm_compile.py).
        A new batch size costs one more compilation (a few seconds), after which shapes
        are dynamic.
        """
        if self._compiled_tower is not None:
            return self
        compiled = torch.compile(self.model.visual)
        dtype = open_clip.get_input_dtype(self.precision) or torch.float32
        probe = torch.zeros((2, 3, *self.input_size), device=self.device, dtype=dtype)
        try:
            with torch.inference_mode(), self._autocast():
                compiled(probe)
        except Exception as err:  # inductor's errors are many and deep: one line says what to do
            reason = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
            raise ModelLoadError(f"torch.compile of {self.spec.text!r}'s image tower failed ({type(err).__name__}: "
                                 f"{reason}); install a C++ compiler (gcc or clang) or set reward.compile=false") from None
        self._compiled_tower = compiled
        return self

    @property
    def model_id(self) -> str:
        """Filesystem-safe id of this model and its weights (Zarr array name of its embeddings)."""
        return self.spec.model_id

    @functools.cached_property
    def image_tower_id(self) -> str:
        """Twelve hex digits identifying the image tower's weights and preprocessing.

        Two models with the same image tower (e.g. a text tower fine-tuned with the image
        tower locked) embed images identically, so stored image embeddings of one serve
        the other (:func:`pipeline.jobs.embed.embed_store`). Hashes every parameter and buffer
        of the tower as float32, so the id does not depend on the checkpoint's dtype.
        """
        h = hashlib.sha256(json.dumps({k: self.preprocess_cfg.get(k) for k in ("size", "mean", "std", "resize_mode",
                                                                                 "interpolation")},
                                      sort_keys=True, default=str).encode())
        for name, tensor in sorted(self.model.visual.state_dict().items()):
            h.update(f"{name}:{tuple(tensor.shape)}".encode())
            h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
        return h.hexdigest()[:12]

    @property
    def image_size(self) -> int:
        """Side (px) of the model's square input; the natural render resolution."""
        return max(self.input_size)

    def _autocast(self):
        if self.precision.startswith("amp"):
            dtype = torch.bfloat16 if self.precision == "amp_bf16" else torch.float16
            return torch.autocast(device_type=self.device.type, dtype=dtype)
        return contextlib.nullcontext()

    def preprocess_frames(self, frames: np.ndarray | torch.Tensor) -> torch.Tensor:
        """uint8 frames [N, H, W, 3] -> model input [N, 3, h, w] on the model's device."""
        t = torch.as_tensor(frames)
        if t.dtype != torch.uint8 or t.ndim != 4 or t.shape[-1] != 3:
            raise ConfigError(f"frames must be uint8 [N, H, W, 3], got {t.dtype} {tuple(t.shape)}")
        return preprocess_batch(t.to(self.device, non_blocking=True), self.preprocess_cfg)

    @torch.inference_mode()
    def forward_images(self, pixels: torch.Tensor) -> torch.Tensor:
        """Raw image-tower forward of preprocessed pixels (unnormalised, model dtype)."""
        dtype = open_clip.get_input_dtype(self.precision) or torch.float32
        pixels = pixels.to(self.device, dtype=dtype)
        with self._autocast():
            if self._compiled_tower is not None:  # encode_image(normalize=False) is the tower alone
                return self._compiled_tower(pixels)
            return self.model.encode_image(pixels)

    @torch.inference_mode()
    def encode_images(self, images: np.ndarray | torch.Tensor, batch_size: int | None = None) -> np.ndarray:
        """Unit image embeddings float32 [N, D] of uint8 frames [N, H, W, 3] or preprocessed [N, 3, h, w].

        ``batch_size`` bounds one model call (None: all at once).
        """
        t = torch.as_tensor(images)
        raw = t.dtype == torch.uint8
        if raw and not (t.ndim == 4 and t.shape[-1] == 3):
            raise ConfigError(f"frames must be uint8 [N, H, W, 3], got {tuple(t.shape)}")
        if not raw and not (t.ndim == 4 and t.shape[1] == 3 and t.is_floating_point()):
            raise ConfigError(f"images must be uint8 [N, H, W, 3] or preprocessed float [N, 3, h, w], got {t.dtype} {tuple(t.shape)}")
        n = t.shape[0]
        out = np.empty((n, self.embed_dim), dtype=np.float32)
        step = n if not batch_size else int(batch_size)
        for i in range(0, n, max(step, 1)):
            chunk = t[i : i + step]
            pixels = self.preprocess_frames(chunk) if raw else chunk
            out[i : i + len(chunk)] = _unit(self.forward_images(pixels))
        return out

    @property
    def has_text_tower(self) -> bool:
        """Whether a text tower is loaded (OpenCLIP's ``transformer`` or ``text`` module)."""
        m = self.model
        return callable(getattr(m, "encode_text", None)) and (
            getattr(m, "transformer", None) is not None or getattr(m, "text", None) is not None)

    @torch.inference_mode()
    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        """Unit text embeddings float32 [N, D] with the model's own tokenizer and context length."""
        if isinstance(texts, str) or not texts:
            raise ConfigError("encode_text takes a non-empty list of strings")
        if not self.has_text_tower:
            raise ModelLoadError(f"model {self.spec.text!r} has no text tower loaded; prompts need a model with one "
                                 f"(an OpenCLIP CLIP model with its text weights)")
        tokens = self.tokenizer(list(texts)).to(self.device)
        with self._autocast():
            feats = self.model.encode_text(tokens)
        return _unit(feats)

    def __repr__(self) -> str:
        return (
            f"VLM({self.spec.text!r}, id={self.model_id}, dim={self.embed_dim}, "
            f"input={self.input_size}, device={self.device}, precision={self.precision}"
            + (", compiled" if self.compiled else "") + ")"
        )


def _unit(feats: torch.Tensor) -> np.ndarray:
    f = feats.float()
    return F.normalize(f, dim=-1).cpu().numpy().astype(np.float32, copy=False)
