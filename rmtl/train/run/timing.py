"""Where the time of a training step goes: simulation, rendering, embedding/cache, PPO update.

:class:`Timings` accumulates wall seconds per named part; :class:`SimTimer` (a vec-env
wrapper directly above the raw sub-envs) times simulation, :class:`TimedSource` wraps
the reward's :class:`~rmtl.reward.EmbeddingSource` and splits its time into rendering
(the lazy ``render`` it is given) and the rest (embedding, cache lookups). The training
callback adds rollout and update times. Parts overlap nothing, except that the
terminal-step frames rendered inside the sub-envs (1 step in 40) count as simulation.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper


class Timings:
    """Named wall-time accumulators (seconds) and counters."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    def add(self, name: str, seconds: float, count: int = 1) -> None:
        self.seconds[name] += seconds
        self.counts[name] += count

    def snapshot(self) -> dict[str, float]:
        return dict(self.seconds)

    def reset(self) -> None:
        self.seconds.clear()
        self.counts.clear()


class SimTimer(VecEnvWrapper):
    """Times ``step_wait`` of the wrapped (raw) vec env as ``simulation``."""

    def __init__(self, venv: VecEnv, timings: Timings):
        super().__init__(venv)
        self.timings = timings

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        t0 = time.perf_counter()
        out = self.venv.step_wait()
        self.timings.add("simulation", time.perf_counter() - t0, self.num_envs)
        return out


class _TimedEmbedder:
    """Proxy of a VLMEmbeddingSource used inside a cache source: times ``embed_frames``."""

    def __init__(self, inner: Any, timings: Timings):
        self.inner, self.timings = inner, timings

    def embed_frames(self, frames: np.ndarray) -> np.ndarray:
        t = time.perf_counter()
        out = self.inner.embed_frames(frames)
        self.timings.add("embedding", time.perf_counter() - t, int(frames.shape[0]))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class TimedSource:
    """An EmbeddingSource proxy splitting its time into ``rendering`` (the lazy ``render`` it is
    given), ``embedding`` and ``cache_lookup``.

    For a plain render-and-embed source everything but rendering is embedding. For the
    cached source (rmtl.reward.cached_source.CachedEmbeddingSource, recognised by its
    ``_embedder``), the model calls on misses are timed as embedding and the rest (FAISS
    lookup, fetching stored embeddings, appending) as cache_lookup. :meth:`stats` passes
    the inner source's statistics through (``stats.as_dict()`` or ``stats()``), e.g. hit_rate.
    """

    def __init__(self, inner: Any, timings: Timings):
        self.inner = inner
        self.timings = timings
        self.cached = hasattr(inner, "_embedder") and hasattr(inner, "cache")
        if self.cached:
            inner._embedder = _TimedEmbedder(inner._embedder, timings)

    @property
    def image_size(self) -> int | None:
        return getattr(self.inner, "image_size", None)

    def stats(self) -> dict[str, float]:
        st = getattr(self.inner, "stats", None)
        if hasattr(st, "as_dict"):
            return dict(st.as_dict())
        return dict(st()) if callable(st) else {}

    def __call__(self, states: np.ndarray, render):
        rendered = [0.0]

        def timed_render(indices):
            t = time.perf_counter()
            frames = render(indices)
            rendered[0] += time.perf_counter() - t
            return frames

        embed_before = self.timings.seconds.get("embedding", 0.0)
        t0 = time.perf_counter()
        out = self.inner(states, timed_render)
        total = time.perf_counter() - t0
        self.timings.add("rendering", rendered[0], len(states))
        if self.cached:
            embedded = self.timings.seconds.get("embedding", 0.0) - embed_before
            self.timings.add("cache_lookup", max(0.0, total - rendered[0] - embedded), len(states))
        else:
            self.timings.add("embedding", max(0.0, total - rendered[0]), len(states))
        return out
