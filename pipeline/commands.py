"""What each command over stored data runs (embed, embed-text, query, reward-quality,
alpha-sweep, per-view-analysis, bc-labels, return-ranking, diagnose-rollouts, gate-set,
prompt-study, qualify, export minari, export lerobot): the commands' side of
``rmtl.command_table``. Each command's config class sits beside its step (``pipeline.jobs``,
``pipeline.analyses``, ``pipeline.export``, ``pipeline.qualify``), so a command, a flow and a
Python caller take the same class."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from pipeline.stores.questions import StoreQuestion
from rmtl.errors import ConfigError, StoreError
from rmtl.provenance import portable_values

if TYPE_CHECKING:  # the step modules load only when their command runs
    from pipeline.analyses.alpha_sweep import AlphaSweepConfig
    from pipeline.analyses.per_view import PerViewConfig
    from pipeline.analyses.prompt_study import PromptStudyConfig
    from pipeline.analyses.query import QueryConfig
    from pipeline.analyses.return_ranking import ReturnRankingConfig
    from pipeline.analyses.rollout_diagnosis import DiagnoseRolloutsConfig
    from pipeline.export.bc_labels import BCLabelsConfig
    from pipeline.export.lerobot_export import ExportLeRobotConfig
    from pipeline.export.minari_export import ExportMinariConfig
    from pipeline.jobs.embed import EmbedConfig
    from pipeline.jobs.embed_text import EmbedTextConfig
    from pipeline.jobs.gate_set import GateSetConfig
    from pipeline.jobs.reward_quality import RewardQualityConfig
    from pipeline.qualify.step import QualifyConfig


def _out_dir(cfg: StoreQuestion) -> Path | None:
    from rmtl.console import check_output_dir

    if cfg.out is None:
        return None
    check_output_dir(Path(cfg.out), "--out")
    return Path(cfg.out)


def _echo_result(dataset: Any, plots: dict, summary: Any) -> None:
    print(json.dumps(summary, indent=2, default=str))
    print(f"wrote {dataset}")
    for p in plots.values():
        print(f"wrote {p}")


def _check_renderers(ds: Any, cfg: Any) -> None:
    """Refuse, before the model loads, a model whose declared renderer is not the store's:
    the one ``embed`` would write, and the stored ones a reader would read (``model``,
    ``against``). A model the store lacks is left to the command to report."""
    from pipeline.jobs.embed import EmbedConfig
    from pipeline.stores.store_models import check_model_renderer, spec_of, stored_model_id

    if isinstance(cfg, EmbedConfig):
        check_model_renderer(ds, cfg.model)
        return
    for name in ("model", "against"):
        if not hasattr(cfg, name) or (name == "against" and getattr(cfg, name) is None):
            continue
        try:
            mid = stored_model_id(ds, getattr(cfg, name))
        except (ConfigError, StoreError):
            continue
        check_model_renderer(ds, spec_of(ds, mid), mid)


def stores_first(run_it: Callable[[Any], None]) -> Callable[[Any], None]:
    """``run_it`` checking its inputs first: the stores it reads (``store``, ``reference``) open and
    have every committed chunk file, and its model spec (``model``) parses. Its own imports
    (torch, open_clip) take seconds, and a wrong path, a damaged store or a malformed spec
    should fail at once."""

    @functools.wraps(run_it)
    def run(cfg: Any) -> None:
        from rmtl.vlm.spec import parse_spec
        from storage.dataset import DatasetStore

        if isinstance(getattr(cfg, "model", None), str):
            parse_spec(cfg.model)
        store = cfg.store_path() if hasattr(cfg, "store_path") else getattr(cfg, "store", None)  # by name too
        for path in (store, getattr(cfg, "reference", None)):
            if path:
                with DatasetStore.open(path, "r") as ds:
                    ds.require_chunks()
                    _check_renderers(ds, cfg)
        return run_it(cfg)

    return run


@stores_first
def embed(cfg: EmbedConfig) -> None:
    """Embed a store's rows not yet embedded by a model, and the prompts' text (no rendering)."""
    from pipeline.jobs.embed import run

    res = run(cfg)
    copied = f" ({res.rows_copied} copied from {res.copied_from}: same image tower)" if res.rows_copied else ""
    print(f"store {res.store}: embedded {res.rows_embedded} rows{copied}; {res.rows_total} rows have "
               f"embeddings of {res.model_id}")


@stores_first
def embed_text(cfg: EmbedTextConfig) -> None:
    """Store the text embeddings of prompt sets: the text tower only, no frame read, no image encoded."""
    from pipeline.jobs.embed_text import run

    for r in run(cfg):
        print(f"{r.store}: prompt set {r.prompt_set} ({r.prompt_set_id}), {r.texts} texts of {r.model_id}")


@stores_first
def query(cfg: QueryConfig) -> None:
    """Reward-quality questions over a store: tables, JSON and PNG plots."""
    from pipeline.analyses.query import run

    _out_dir(cfg)  # checked before the step loads the store
    run(cfg)  # prints its tables


@stores_first
def alpha_sweep(cfg: AlphaSweepConfig) -> None:
    """Scores for every alpha from stored embeddings (paper Fig. 10/11): dataset + PNGs."""
    from pipeline.analyses.alpha_sweep import run

    _out_dir(cfg)  # checked before the step loads the store
    res = run(cfg)
    _echo_result(res.dataset, res.plots, res.summary)


@stores_first
def per_view(cfg: PerViewConfig) -> None:
    """Per-view vs mean scores, smoothness and disagreement (paper Fig. 3/8): dataset + PNGs."""
    from pipeline.analyses.per_view import run

    _out_dir(cfg)  # checked before the step loads the store
    res = run(cfg)
    _echo_result(res.dataset, res.plots, res.summary)


@stores_first
def return_ranking(cfg: ReturnRankingConfig) -> None:
    """ROC AUC of successful vs failed episodes for each reward variant's shaped return, from stored embeddings."""
    from pipeline.analyses.return_ranking import run

    _out_dir(cfg)  # checked before the step loads the store
    res = run(cfg)
    print("\n".join(f"wrote {p}" for p in res["files"].values()))


@stores_first
def diagnose_rollouts(cfg: DiagnoseRolloutsConfig) -> None:
    """A policy's own rollouts: VLM vs dense reward along them, what it does (PNG montage), whether it games the reward."""
    from pipeline.analyses.rollout_diagnosis import run

    _out_dir(cfg)  # checked before the step loads the store
    res = run(cfg)
    print("\n".join(f"wrote {p}" for p in res["files"].values()))


@stores_first
def prompt_study(cfg: PromptStudyConfig) -> None:
    """Rank prompt sets on one store from stored embeddings: within-phase ranks, right prompt, spreads,
    success-vs-failure AUCs, flatness against the single prompt (table, JSON, CSV, PNG)."""
    from pipeline.analyses.prompt_study import run

    _out_dir(cfg)  # checked before the step loads the store
    run(cfg)  # prints its table


def bc_labels(cfg: BCLabelsConfig) -> None:
    """Rule-phase labels on rollouts of a policy (Stage-2 behaviour-cloning data)."""
    from pipeline.export.bc_labels import run
    from rmtl.console import check_store_path

    check_store_path(cfg.store_path(), "store")  # given as --store, --out or --name
    res = run(cfg)
    print(res.describe())


@stores_first
def reward_quality(cfg: RewardQualityConfig) -> None:
    """Acceptance metrics of a reward model beside a random-weight one, with pass/fail (and per source: noise level, checkpoint)."""
    from rich.console import Console
    from rich.table import Table

    from pipeline.jobs.gate_set import group_table
    from pipeline.jobs.reward_quality import run
    from rmtl.console import check_output_file
    from rmtl.tasks import get_task

    out = Path(cfg.out) if cfg.out else None
    if out is not None:
        check_output_file(out, "--out")
    res = run(cfg)
    m, r, gates = res["model"], res["against"], res["gates"]
    table = Table(title=f"{cfg.store}: within-phase reward quality, multi-view mean, alpha {cfg.alpha}")
    for col in ("metric", "target", cfg.model, cfg.against):
        table.add_column(col)
    for key in ("approach_spearman", "approach_spread", "align_spearman", "align_spread", "grasp_auc",
                "grasp_spread", "right_prompt_accuracy", "step_variation"):
        table.add_row(key, str(get_task().quality_gates.get(key, "")), f"{m['mean'][key]:.4g}", f"{r['mean'][key]:.4g}")
    for name in m["goal_baseline_cosine"]:
        table.add_row(f"{name} goal-baseline cosine", "", f"{m['goal_baseline_cosine'][name]:.3f}",
                      f"{r['goal_baseline_cosine'][name]:.3f}")
    console = Console()
    console.print(table)
    for name, ok in gates.items():
        console.print(f"{'PASS' if ok else 'FAIL'}  {name}")
    if len(res["groups"]) > 1:
        console.print(group_table(cfg.store, res["groups"], cfg.model))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(portable_values(res), indent=2, default=str))
        print(f"wrote {out}")


def gate_set(cfg: GateSetConfig) -> None:
    """Off-expert gate set: noisy experts and learner checkpoints rendered and embedded; within-phase ranks per source."""
    from rich.console import Console

    from pipeline.jobs.gate_set import group_table, run

    for store, groups in run(cfg):
        Console().print(group_table(store, groups, cfg.model))
        print(f"wrote {store}")


@stores_first
def export_minari(cfg: ExportMinariConfig) -> None:
    """Write a store's episodes as a Minari dataset (observations, actions, rewards, terminations,
    truncations; infos: rule phase, BC label, VLM score) under $MINARI_DATASETS_PATH."""
    from pipeline.export.minari_export import run

    res = run(cfg)
    print(f"wrote Minari dataset {res['dataset_id']} ({res['episodes']} episodes, {res['steps']} steps) at "
               f"{res['path']}; load it with MINARI_DATASETS_PATH={res['root']} and "
               f"minari.load_dataset({res['dataset_id']!r})")


@stores_first
def export_lerobot(cfg: ExportLeRobotConfig) -> None:
    """Write a store's episodes as a LeRobot v3.0 dataset: Parquet frames (state, action, env and VLM rewards),
    one MP4 per camera, metadata (pipeline.export.lerobot_export)."""
    from pipeline.export.lerobot_export import run
    from rmtl.console import check_output_dir

    if cfg.out is not None:
        check_output_dir(Path(cfg.out), "--out")
    res = run(cfg)
    print(f"wrote LeRobot v3.0 dataset {res['path']} ({res['episodes']} episodes, {res['frames']} frames, "
               f"{res['cameras']} camera videos; VLM reward of prompt set {res['prompt_set']['name']} by "
               f"{res['model_id']} in next.reward_vlm)")




def qualify(cfg: QualifyConfig) -> None:
    """Will this scorer teach? Quality metrics on the qualification set, the battery and the learnability map's verdict."""
    from pipeline.qualify import format_compare, format_report
    from pipeline.qualify.step import check, run
    from rmtl.provenance import data_dir

    check(cfg)  # before the output folder is checked
    if cfg.model is not None:
        from rmtl.vlm.spec import parse_spec

        parse_spec(cfg.model)
    root = data_dir()
    out = Path(cfg.out) if cfg.out else root / "qualification" / "reports"
    from rmtl.outputs import check_writable_into

    check_writable_into(out, own=(), writes="the qualification report")  # not a store, a cache, a run, an export
    result = run(cfg, out, root)
    if cfg.compare:
        print(format_compare(result))
        print("\n".join(f"wrote {p}" for p in result["files"].values()))
    else:
        print(format_report(result))
