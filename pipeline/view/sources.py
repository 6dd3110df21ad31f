"""Where ``rmtl view`` gets its episodes: a dataset store (:class:`StoreSource`: frames, states and the
embeddings it holds) or a Stage-1 policy rolled out and rendered now (:class:`RolloutSource`, through
the rollout job, ``pipeline.jobs.rollout``). Either gives, per episode, its rows (:class:`EpisodeRows`)
and its frames, and the image embeddings of a reward model with the prompts' text embeddings: stored
ones when the store has them, else the model run on the frames now (:class:`LiveModel`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np

from rmtl.default_model import DEFAULT_MODEL
from rmtl.errors import ConfigError, StoreError
from rmtl.reward.prompts import TextEmbeddings, embed_prompts

ROW_FIELDS = ("state", "episode", "step", "success", "difficulty")


@dataclass(frozen=True)
class EpisodeRows:
    """One episode's rows in step order (the reset row first when the store holds it)."""

    episode: int
    step: np.ndarray
    """[T] env step of each row (0: the reset state)."""
    state: np.ndarray
    """[T, state_dim] the task's state."""
    success: np.ndarray
    """[T] the env's success flag."""
    difficulty: np.ndarray
    """[T] the start difficulty u of the episode (the reverse curriculum's draw)."""
    stage: int | None
    """The curriculum stage the episode was drawn from (None when the store does not record it)."""


@dataclass(frozen=True)
class Embedded:
    """A reward model's view of a source: its id, the prompts' text embeddings and goal names, and
    the image embeddings of every episode (float32 [T, V, D], in the source's episode order)."""

    model_id: str
    text: TextEmbeddings
    goal_names: tuple[str, ...]
    episodes: list[np.ndarray]
    how: str
    """'stored' (the store's embeddings) or 'embedded now' (the model run on the frames)."""


def prompt_texts(task: Any, pset: Any) -> tuple[Any, bool]:
    """(resolved PromptConfig, single prompt?) of a prompt set (None: the task's own prompts)."""
    if pset is None:
        return task.prompts(None), False
    pset = pset.for_task(task.micro_tasks)
    return pset.prompts, pset.single_prompt


def goal_names(task: Any, pset: Any) -> tuple[str, ...]:
    prompts, single = prompt_texts(task, pset)
    return ("single",) if single else tuple(prompts.goal_names)


class LiveModel:
    """A reward VLM loaded now, run on frames (as ``embed_store`` runs it) and on the prompts."""

    _loaded: dict[str, Any] = {}

    def __init__(self, spec: str):
        from pipeline.stores.store_models import model_problem

        problem = model_problem(spec)
        if problem:
            raise ConfigError(f"{problem}; pass a model spec that loads (docs/reward.md, 'Models')")
        self.spec = spec

    @property
    def vlm(self) -> Any:
        if self.spec not in self._loaded:
            from rmtl.vlm import load_vlm

            self._loaded.clear()  # one model in memory at a time
            self._loaded[self.spec] = load_vlm(self.spec)
        return self._loaded[self.spec]

    def text(self, task: Any, pset: Any) -> TextEmbeddings:
        prompts, single = prompt_texts(task, pset)
        return embed_prompts(self.vlm.encode_text, prompts, single)

    def embed(self, frames: np.ndarray) -> np.ndarray:
        """float32 [T, V, D] embeddings of uint8 frames [T, V, H, W, 3]."""
        flat = frames.reshape(-1, *frames.shape[2:])
        return np.asarray(self.vlm.encode_images(flat, batch_size=64), np.float32).reshape(len(frames),
                                                                                          frames.shape[1], -1)


class StoreSource:
    """Episodes of a dataset store (open for reading until :meth:`close`)."""

    kind = "store"
    shaping = None
    """The reward's shaping (None: the default, ``ShapingConfig()``)."""

    def __init__(self, path: str, episodes: Callable[[list[int] | None], list[int]], missing_ok: bool = False):
        """``episodes(available ids) -> ids to show``; ``missing_ok``: leave out ids the store lacks
        (a comparison store) instead of refusing them."""
        from pipeline.stores.store_models import store_task
        from storage.dataset import DatasetStore

        self.path = str(path)
        self.store = DatasetStore.open(self.path, "r")
        try:
            self.store.require_chunks()
            self.task = store_task(self.store)
            by_id = {e: rows for e, rows in self.store.episodes().items() if e >= 0}
            if not by_id:
                raise StoreError(f"{self.path} holds no episodes to view; render some: rmtl render-and-embed "
                                 f"--store {self.path}")
            wanted = episodes(sorted(by_id))
            self.available = len(by_id)
            missing = [e for e in wanted if e not in by_id]
            if missing and not missing_ok:
                raise ConfigError(f"{self.path} has no episode {missing[0]} (it has {_id_ranges(sorted(by_id))}); "
                                  f"pick from those with --episodes")
            self.ids = [e for e in wanted if e in by_id]
            self.rows = [by_id[e] for e in self.ids]
            self.views = list(self.store.views)
            self.has_frames = bool(self.store.has_frames)
            rollout = (self.store.info.get("provenance") or {}).get("rollout") or {}
            stages = rollout.get("stages")
            self.episodes = []
            for e, rows in zip(self.ids, self.rows):
                cols = self.store.read(rows, fields=list(ROW_FIELDS))
                stage = int(stages[e % len(stages)]) if stages else None
                self.episodes.append(EpisodeRows(e, cols["step"], cols["state"], cols["success"].astype(bool),
                                                 cols["difficulty"], stage))
        except BaseException:
            self.store.close()
            raise
        self.name = f"store {self.path}"

    def frames(self, i: int) -> np.ndarray | None:
        """uint8 [T, V, H, W, 3] frames of the i-th shown episode (None: a store without frames)."""
        return self.store.read(self.rows[i], fields=["frames"])["frames"] if self.has_frames else None

    def embedded(self, model: str | None, pset: Any, tick: Callable[[], None] = lambda: None) -> Embedded:
        """Embeddings of ``model`` (None: the store's model as the analyses pick it): stored when the
        store holds them for every shown row, else the model run on the frames now."""
        from pipeline.stores.store_models import resolve_model_id, spec_of
        from pipeline.stores.stored_text import text_embeddings

        store, names = self.store, goal_names(self.task, pset)
        last = max(int(r.max()) for r in self.rows)
        have = store.model_ids()
        stored = model is None or model in have or _spec_id(model) in have
        if stored:
            mid = resolve_model_id(store, model)
            if store.embedded_rows(mid) > last:
                text = text_embeddings(store, mid, pset)
                embs = []
                for rows in self.rows:
                    embs.append(store.embeddings(mid, rows).astype(np.float32))
                    tick()
                return Embedded(mid, text, names, embs, "stored")
            if model is None:
                raise StoreError(f"{self.path} has embeddings of {mid} for {store.embedded_rows(mid)} of its rows; "
                                 f"embed the rest first (rmtl embed --store {self.path} --model {spec_of(store, mid)})")
            model = spec_of(store, mid)
        if not self.has_frames or model is None:
            raise StoreError(f"{self.path} has no embeddings of {model} and no frames to embed; view it with a "
                             f"model it holds ({', '.join(store.model_ids()) or 'none'}) or embed it first")
        live = LiveModel(model)
        embs = []
        for i in range(len(self.rows)):
            embs.append(live.embed(self.store.read(self.rows[i], fields=["frames"])["frames"]))
            tick()
        return Embedded(live.vlm.model_id, live.text(self.task, pset), names, embs, "embedded now")

    def close(self) -> None:
        self.store.close()


def checkpoint_name(policy: str) -> str:
    """``<run>_<checkpoint folder>`` of a policy path (one ConfigError line if it holds no policy)."""
    from rmtl.train.run.run_dir import resolve_checkpoint

    ck = resolve_checkpoint(policy)
    return f"{ck.parent.name}_{ck.name}" if ck.name in ("best", "final", "resume") else \
        f"{ck.parent.parent.name}_{ck.name}"


def policy_reward(ck: Path) -> dict[str, Any]:
    """The VLM reward a checkpoint was trained on, from its meta: ``model`` (its spec) and ``shaping``
    (a ShapingConfig); {} when it learned from another kind of reward or records none."""
    from rmtl.reward.shaping import ShapingConfig
    from rmtl.train.run.run_dir import checkpoint_meta

    reward = checkpoint_meta(Path(ck)).get("config", {}).get("reward") or {}
    if reward.get("kind", "vlm") != "vlm" or not reward.get("model"):
        return {}
    return {"model": str(reward["model"]), "shaping": ShapingConfig.make(**(reward.get("shaping") or {}))}


class RolloutSource:
    """A Stage-1 policy's episodes, rolled out and rendered now with the six cameras (the rollout job)
    at the reward model's input size and renderer; frames are kept in memory. The reward model and
    shaping are the ones the policy learned from (its meta), unless ``model`` names another."""

    kind = "policy"

    def __init__(self, policy: str, ids: list[int], model: str | None, seed: int, stages: tuple[int, ...],
                 deterministic: bool, tick: Callable[[], None] = lambda: None):
        from pipeline.jobs.rollout import RolloutConfig, rollout_episodes
        from rmtl.env.render_settings import RenderSettings
        from rmtl.train.run.run_dir import check_model_file, resolve_checkpoint
        from rmtl.vlm.registry import declared_renderer

        ck = resolve_checkpoint(policy)
        check_model_file(ck)
        self.path = str(ck)
        own = policy_reward(ck)
        self.model = LiveModel(model or own.get("model") or DEFAULT_MODEL)
        self.shaping = own.get("shaping")
        declared = declared_renderer(self.model.spec) or {}
        render = RenderSettings(**{**RenderSettings().model_dump(), **declared})
        cfg = RolloutConfig.make(policy=str(Path(self.path) / "model.zip"), episodes=max(ids) + 1, seed=seed,
                                 stages=stages, deterministic=deterministic, resolution=self.model.vlm.image_size,
                                 render=render)
        self.task, self.views, self.ids, self.has_frames = cfg.the_task(), list(cfg.views), list(ids), True
        self.episodes, self._frames = [], []
        env = self.task.make_env(views=cfg.views, resolution=cfg.resolution, render=cfg.render)
        try:
            for e in ids:
                cols = rollout_episodes(cfg, [e], env=env)
                self.episodes.append(EpisodeRows(e, cols["step"].astype(np.int64), cols["state"], cols["success"],
                                                 cols["difficulty"], int(cfg.stages[e % len(cfg.stages)])))
                self._frames.append(cols["frames"])
                tick()
        finally:
            env.close()
        self.name = f"policy {self.path}"

    def frames(self, i: int) -> np.ndarray:
        return self._frames[i]

    def embedded(self, model: str | None, pset: Any, tick: Callable[[], None] = lambda: None) -> Embedded:
        live = self.model if model is None or model == self.model.spec else LiveModel(model)
        embs = []
        for f in self._frames:
            embs.append(live.embed(f))
            tick()
        return Embedded(live.vlm.model_id, live.text(self.task, pset), goal_names(self.task, pset), embs,
                        "embedded now")

    def close(self) -> None:
        self._frames = []


def _spec_id(model: str) -> str | None:
    """The model id of a spec (None if it is not one: then it may still be a stored id)."""
    from rmtl.vlm.spec import parse_spec

    try:
        return parse_spec(model).model_id
    except Exception:
        return None


def _id_ranges(ids: list[int]) -> str:
    """'0-3, 7, 9-10' of sorted ids."""
    parts, start = [], None
    for i, e in enumerate(ids):
        if start is None:
            start = e
        if i + 1 == len(ids) or ids[i + 1] != e + 1:
            parts.append(f"{start}-{e}" if e != start else f"{e}")
            start = None
    return ", ".join(parts)
