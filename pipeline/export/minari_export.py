"""Export a dataset store as a Minari dataset (the Farama offline-RL format) with VLM rewards.

One Minari episode per store episode (episode-id order, live-cache rows left out). With
T env steps an episode has T + 1 store rows (the reset row, then the row each step ended
in), and the dataset gets:

- ``observations`` [T + 1]: the env's observation dict (``observation`` = the 25-D state,
  ``achieved_goal`` = the cube position, ``desired_goal`` = the cube's start position
  raised by the success lift), float64 as the env returns them;
- ``actions`` [T]: the action of each step, the one stored on the row the step ended in;
- ``rewards`` [T]: per step, the shaped VLM reward of the chosen prompt set (its active
  micro-task's view-mean score, rule phase, Table-1 shaping through
  pipeline.analyses.return_ranking.shaped_rewards with adapted bounds), or the dense reference
  (``reward="dense"``); plus the env's +1 on the success step unless ``env_reward=False``;
- ``terminations`` / ``truncations`` [T]: the stored episode ends;
- ``infos`` [T + 1] per observation: ``phase_rule`` (distance rule of the state),
  ``bc_label`` (the stored ``phase_rule`` label, the Stage-2 BC target), ``vlm_score``
  (active view-mean score of the prompt set; NaN where the store has no embeddings),
  ``success``, ``step`` and ``store_row``;
- each episode's reset ``seed`` and ``options`` (``{"difficulty": u}``), so
  ``env.reset(seed=..., options=...)`` starts it again.

Datasets go under ``$MINARI_DATASETS_PATH``, by default ``<data-dir>/minari`` (docs/storage.md),
written in a staging folder beside the dataset's and swapped in whole (pipeline.export.export_target);
``--overwrite`` replaces only an earlier Minari export of rmtl that holds just what its manifest,
``.rmtl-output.json``, lists (rmtl.outputs), never a store or anything else that sits where the dataset would go.
Rows, episodes and rewards are read by pipeline.export.episode_rows (shared with the LeRobot export).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Annotated, Any
from unittest import mock

import numpy as np
import tyro

from pipeline.export.export_target import StagedDirectory, interrupted_export, refuse_output_over_inputs
from rmtl.config import Config
from rmtl.errors import ConfigError
from rmtl.outputs import check_replaceable, write_manifest
from rmtl.reward.projection import DEFAULT_ALPHA
from rmtl.reward.prompt_sets import PromptSet


def minari_root(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where Minari datasets go: ``$MINARI_DATASETS_PATH``, else ``<data-dir>/minari``. The
    variable is set only around the export's Minari calls, never left in the process: a later
    export with another data directory must not write into the first one's."""
    from rmtl.provenance import data_dir as resolve_data_dir

    return Path(os.environ.get("MINARI_DATASETS_PATH") or resolve_data_dir(data_dir) / "minari")


def dataset_id(name: str) -> str:
    """A Minari id from a name: ``rmtl/NAME-v0`` unless it has a namespace or a version."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*", name or ""):
        raise ConfigError(f"dataset name {name!r} must be letters, digits, '_', '-', '.' and '/' (e.g. expert-vlm)")
    if "/" not in name:
        name = f"rmtl/{name}"
    return name if re.search(r"-v\d+$", name) else f"{name}-v0"


def export_minari(store: Any, name: str, prompts: PromptSet | str | os.PathLike[str] = "paper",
                  model: str | None = None, reward: str = "vlm", alpha: float = DEFAULT_ALPHA, env_reward: bool = True,
                  overwrite: bool = False, data_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Write the store's episodes as the Minari dataset ``dataset_id(name)`` (module docstring);
    returns ``{"dataset_id", "path", "root", "episodes", "steps", "reward", "model_id", "prompt_set"}``."""
    from rmtl.reward.prompt_sets import load_prompt_set

    pset = prompts if isinstance(prompts, PromptSet) else load_prompt_set(prompts)
    ds_id = dataset_id(name)
    root = minari_root(data_dir)
    target = root / ds_id
    refuse_output_over_inputs(target, [store], what=f"Minari dataset {ds_id} at",
                              fix="set MINARI_DATASETS_PATH (or --data-dir) to a folder outside {store}, or choose "
                                  "another --name")
    StagedDirectory.recover(target)  # what a killed export left: its staging folder, an old dataset set aside
    # --overwrite replaces only an earlier Minari export of rmtl holding just what its manifest lists
    def check() -> bool:
        return check_replaceable(target, "minari", overwrite=overwrite, what=f"Minari dataset {ds_id} at",
                                 fix="choose another --name (or MINARI_DATASETS_PATH)")

    existed = check()
    staged = StagedDirectory(target, check=check)  # checked again right before the swap
    try:
        episodes, steps, model_id = _write_dataset(store, ds_id, staged, pset, model, reward, alpha, env_reward)
    except KeyboardInterrupt:
        raise interrupted_export(target, existed, staged.committed) from None
    finally:
        staged.discard()
    return {"dataset_id": ds_id, "path": str(target), "root": str(root), "episodes": episodes,
            "steps": steps, "reward": reward, "model_id": model_id, "prompt_set": pset.to_dict()}


def _write_dataset(store: Any, ds_id: str, staged: StagedDirectory, pset: PromptSet, model: str | None,
                   reward: str, alpha: float, env_reward: bool) -> tuple[int, int, str | None]:
    """Read the store's episodes, write them as Minari dataset ``ds_id`` in ``staged`` and swap it in;
    returns (episodes, steps, the reward model's id)."""
    import gymnasium as gym
    import minari

    from pipeline.export.episode_rows import read_episodes
    from pipeline.stores.store_rows import open_store
    from rmtl import ENV_ID
    from rmtl.tasks import get_task

    with open_store(store) as st:
        eps = read_episodes(st, "be exported as a Minari dataset", pset, model, reward, alpha)
    order, pos, cols, phase, score = eps.order, eps.pos, eps.cols, eps.phase, eps.score
    ids, seeds, shaped, model_id, path = eps.ids, eps.seeds, eps.shaped, eps.model_id, eps.path
    bonus = eps.env_reward if env_reward else np.zeros(len(order))
    task = get_task()  # the export reads pick-and-lift stores (the default task)
    buffers = []
    for i, e in enumerate(ids):
        p = pos[e]
        rows = order[p]
        state = cols["state"][rows].astype(np.float64)
        cube, goal = task.episode_goals(state)
        buffers.append(minari.data_collector.EpisodeBuffer(
            id=i, seed=seeds[e], options={"difficulty": float(cols["difficulty"][rows[0]])},
            observations={"observation": state, "achieved_goal": cube, "desired_goal": goal},
            actions=cols["action"][rows[1:]].astype(np.float32),
            rewards=(shaped[p[1:]] + bonus[p[1:]]).astype(np.float64),
            terminations=cols["terminated"][rows[1:]].astype(bool),
            truncations=cols["truncated"][rows[1:]].astype(bool),
            infos={"phase_rule": phase[p], "bc_label": cols["phase_rule"][rows].astype(np.int64),
                   "vlm_score": score[p].astype(np.float32), "success": cols["success"][rows].astype(bool),
                   "step": cols["step"][rows].astype(np.int64), "store_row": rows.astype(np.int64),
                   "episode": np.full(len(rows), e, dtype=np.int64)},
        ))
    obs_space = gym.spaces.Dict({k: gym.spaces.Box(-np.inf, np.inf, (d,), np.float64)
                                 for k, d in (("achieved_goal", 3), ("desired_goal", 3), ("observation", 25))})
    what = (f"shaped VLM reward of prompt set {pset.name} ({pset.id}), model {model_id}, alpha {alpha}"
            if reward == "vlm" else "dense reference reward")
    env = gym.make(ENV_ID)  # its spec is recorded: recover_environment() after `import rmtl.env`
    # Minari writes <its datasets root>/<id>; with the staging folder (a hidden one beside the target,
    # which Minari's listing skips) as that root, the dataset is written whole there, then moved in.
    try:
        staged.create()
        with warnings.catch_warnings(), mock.patch.dict(os.environ, {"MINARI_DATASETS_PATH": str(staged.path)}):
            warnings.simplefilter("ignore", UserWarning)  # Minari asks for a code link and an e-mail
            ds = minari.create_dataset_from_buffers(
                ds_id, buffers, env=env, algorithm_name=f"rmtl dataset store {path}", author="rmtl",
                action_space=gym.spaces.Box(-1.0, 1.0, (4,), np.float32), observation_space=obs_space,
                description=f"rmtl dataset store {path} ({len(ids)} episodes); rewards: {what}"
                            f"{' plus the +1 success bonus' if env_reward else ''}.",
            )
            episodes, steps = int(ds.total_episodes), int(ds.total_steps)
            del ds  # its files are closed before they move
        write_manifest(staged.path / ds_id, "minari", dataset_id=ds_id)  # what --overwrite may replace later
        staged.commit(staged.path / ds_id)
    finally:
        env.close()
    return episodes, steps, model_id


class ExportMinariConfig(Config):
    """``rmtl export minari STORE``: a store's episodes as a Minari dataset."""

    store: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="STORE")]
    """Dataset store (schema v2: with actions)."""
    name: str
    """Dataset name: rmtl/NAME-v0 unless it has a namespace or a version."""
    prompts: str = "paper"
    """Prompt set of the VLM reward: a YAML file or a shipped set's name."""
    model: str | None = None
    """Stored model id or spec (default: the store's only model, else the default model rmtl-fetch-tiny when stored)."""
    reward: str = "vlm"
    """'vlm': the prompt set's shaped reward; 'dense': the dense reference."""
    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""
    env_reward: bool = True
    """Add the env's +1 on the success step."""
    overwrite: bool = False
    """Replace a Minari dataset of the same name."""
    data_dir: str | None = None
    """Data directory (default $RMTL_DATA_DIR or ./data)."""


def run(cfg: ExportMinariConfig) -> dict[str, Any]:
    """The Minari export a config describes (:func:`export_minari`)."""
    return export_minari(cfg.store, cfg.name, prompts=cfg.prompts, model=cfg.model, reward=cfg.reward,
                         alpha=cfg.alpha, env_reward=cfg.env_reward, overwrite=cfg.overwrite, data_dir=cfg.data_dir)
