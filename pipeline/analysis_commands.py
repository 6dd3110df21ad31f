"""What each command over stored data runs (embed, embed-text, query, reward-quality,
alpha-sweep, per-view-analysis, bc-labels, return-ranking, diagnose-rollouts, gate-set,
prompt-study, qualify, export minari, export lerobot) and the configs of those whose job has no
module of its own (their command lines: rmtl.command_table). A job with a flow keeps its config
beside its step (pipeline.alpha_sweep, pipeline.per_view, pipeline.bc_labels), so its command,
its flow and a Python caller take the same class."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable

import tyro
from pydantic import Field

from pipeline.questions import PromptedQuestion, StoreQuestion, prompt_set_of
from rmtl.config import MAX_EPISODES, Config
from rmtl.errors import ConfigError, StoreError
from rmtl.default_model import DEFAULT_MODEL, RANDOM_REFERENCE
from rmtl.provenance import portable_values
from rmtl.train.variants import variant_names
from rmtl.reward.projection import DEFAULT_ALPHA

if TYPE_CHECKING:  # the step modules load only when their command runs
    from pipeline.alpha_sweep import AlphaSweepConfig
    from pipeline.bc_labels import BCLabelsConfig
    from pipeline.per_view import PerViewConfig


class EmbedConfig(Config):
    """``rmtl embed``: embed a store's rows not yet embedded by a model."""

    store: str
    """Dataset store with frames (made by render-and-embed)."""
    model: str = DEFAULT_MODEL
    """VLM spec (name, name:tag, hf-hub:..., local dir or file)."""
    batch_size: int = Field(64, ge=1)
    """Images per VLM call."""


class EmbedTextConfig(Config):
    """``rmtl embed-text``: the text embeddings of prompt sets."""

    store: str
    """Dataset store with image embeddings of the model."""
    prompts: str
    """Prompt-set YAML file, a directory of them, or a shipped set's name."""
    model: str | None = None
    """Model spec (default: the spec of the store's only model, else of the default model rmtl-fetch-tiny when stored)."""
    device: str | None = None
    """Torch device (default: CUDA when present, else CPU)."""


class QueryConfig(PromptedQuestion):
    """``rmtl query``: reward-quality questions over a store."""

    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""
    radii: tuple[float, ...] = (0.0, 0.002, 0.005, 0.01, 0.02)
    """Cache radii (m) for hit rate vs reward error."""
    holdout: float = 0.25
    """Fraction of episodes used as cache queries."""


class ReturnRankingConfig(StoreQuestion):
    """``rmtl return-ranking``: ROC AUC of successful vs failed episodes per reward variant."""

    variants: tuple[str, ...] = variant_names(analysis="return_ranking")
    """Stage-1 variants whose shaped return to rank."""
    bounds: str = "adapted"
    """'adapted': bounds where long training leaves them; 'running': start at 0.45/0.70 like a fresh env."""


class DiagnoseRolloutsConfig(StoreQuestion):
    """``rmtl diagnose-rollouts``: a policy's own rollouts against a reference."""

    store: str
    """Store of a policy's rollouts with embeddings (e.g. from rmtl gate-set --checkpoint)."""
    reference: str | None = None
    """Store of reference (expert) episodes embedded by the same model."""
    variants: tuple[str, ...] = variant_names(analysis="rollout_diagnosis")
    """Stage-1 variants; the first is traced and plotted."""
    episodes: int = Field(4, ge=1, le=MAX_EPISODES)
    """Episodes shown in the traces and the montage (failures first)."""
    view: str = "front"
    """Camera view of the montage."""


class PromptStudyConfig(StoreQuestion):
    """``rmtl prompt-study``: rank prompt sets on one store."""

    prompts: str
    """Directory of prompt-set YAML files (or one file)."""
    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""
    bounds: str = "adapted"
    """Shaping bounds of the return ranking: 'adapted' or 'running'."""


class RewardQualityConfig(Config):
    """``rmtl reward-quality``: acceptance metrics of a reward model beside a random-weight one."""

    store: str
    """Dataset store with embeddings of both models."""
    model: str = DEFAULT_MODEL
    """Model to judge: a model spec or a stored model id."""
    against: str = RANDOM_REFERENCE
    """Model to compare with (random weights): spec or stored id."""
    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""
    out: str | None = None
    """JSON path for all metrics and gates."""
    prompts: str | None = None
    """Prompt-set YAML file or a shipped set's name (default: the paper's prompts)."""


class GateSetConfig(Config):
    """``rmtl gate-set``: noisy experts and learner checkpoints rendered and embedded."""

    out: str
    """Directory for the gate stores."""
    checkpoint: tuple[str, ...] = ()
    """Stage-1 checkpoints (or run dirs) to roll out."""
    noise_levels: tuple[float, ...] | None = (0.1, 0.3, 0.6, 1.0)
    """Expert noise levels ('none': no noisy-expert store)."""
    episodes: int = Field(100, ge=1, le=MAX_EPISODES)
    """Episodes per store."""
    model: str = DEFAULT_MODEL
    """VLM spec to embed with and judge."""
    against: str | None = RANDOM_REFERENCE
    """Comparison model embedded too ('none': skip)."""
    resolution: int | None = None
    """Frame size (px); default: the model's input size."""
    workers: int = Field(1, ge=1)
    """Render processes."""
    seed: int = Field(50_000, ge=0)
    """Base episode seed."""
    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""


class ExportMinariConfig(Config):
    """``rmtl export minari STORE``: a store's episodes as a Minari dataset."""

    store: Annotated[str, tyro.conf.Positional]
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


class ExportLeRobotConfig(Config):
    """``rmtl export lerobot STORE``: a store's episodes and frames as a LeRobot v3.0 dataset."""

    store: Annotated[str, tyro.conf.Positional]
    """Dataset store with frames (schema v2: with actions) and image embeddings."""
    prompts: str = "paper"
    """Prompt set of the VLM reward column: a YAML file or a shipped set's name."""
    out: str | None = None
    """Dataset directory (default <data-dir>/lerobot/<store name>)."""
    model: str | None = None
    """Stored model id or spec (default: the store's only model, else the default model rmtl-fetch-tiny when stored)."""
    alpha: float = DEFAULT_ALPHA
    """Projection alpha."""
    overwrite: bool = False
    """Replace a non-empty --out directory."""
    data_dir: str | None = None
    """Data directory (default $RMTL_DATA_DIR or ./data)."""


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
    from pipeline.store_models import check_model_renderer, spec_of, stored_model_id

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
    from pipeline.embed import embed_store
    from rmtl.vlm import load_vlm

    res = embed_store(cfg.store, load_vlm(cfg.model), batch_size=cfg.batch_size)
    copied = f" ({res.rows_copied} copied from {res.copied_from}: same image tower)" if res.rows_copied else ""
    print(f"store {res.store}: embedded {res.rows_embedded} rows{copied}; {res.rows_total} rows have "
               f"embeddings of {res.model_id}")


@stores_first
def embed_text(cfg: EmbedTextConfig) -> None:
    """Store the text embeddings of prompt sets: the text tower only, no frame read, no image encoded."""
    from pipeline.embed_text import embed_text as run
    from rmtl.reward.prompt_sets import load_prompt_sets

    for r in run(cfg.store, load_prompt_sets(cfg.prompts), cfg.model, device=cfg.device):
        print(f"{r.store}: prompt set {r.prompt_set} ({r.prompt_set_id}), {r.texts} texts of {r.model_id}")


@stores_first
def query(cfg: QueryConfig) -> None:
    """Reward-quality questions over a store: tables, JSON and PNG plots."""
    from pipeline.query import run_queries

    run_queries(cfg.store, cfg.model, out_dir=_out_dir(cfg), alpha=cfg.alpha, radii=list(cfg.radii),
                holdout=cfg.holdout, prompts=prompt_set_of(cfg.prompts))


@stores_first
def alpha_sweep(cfg: AlphaSweepConfig) -> None:
    """Scores for every alpha from stored embeddings (paper Fig. 10/11): dataset + PNGs."""
    from pipeline.alpha_sweep import run

    _out_dir(cfg)  # checked before the step loads the store
    res = run(cfg)
    _echo_result(res.dataset, res.plots, res.summary)


@stores_first
def per_view(cfg: PerViewConfig) -> None:
    """Per-view vs mean scores, smoothness and disagreement (paper Fig. 3/8): dataset + PNGs."""
    from pipeline.per_view import run

    _out_dir(cfg)  # checked before the step loads the store
    res = run(cfg)
    _echo_result(res.dataset, res.plots, res.summary)


@stores_first
def return_ranking(cfg: ReturnRankingConfig) -> None:
    """ROC AUC of successful vs failed episodes for each reward variant's shaped return, from stored embeddings."""
    from pipeline.return_ranking import return_ranking as run

    res = run(cfg.store, cfg.model, list(cfg.variants), out_dir=_out_dir(cfg), bounds=cfg.bounds)
    print("\n".join(f"wrote {p}" for p in res["files"].values()))


@stores_first
def diagnose_rollouts(cfg: DiagnoseRolloutsConfig) -> None:
    """A policy's own rollouts: VLM vs dense reward along them, what it does (PNG montage), whether it games the reward."""
    from pipeline.rollout_diagnosis import diagnose_rollouts as run

    res = run(cfg.store, cfg.reference, cfg.model, list(cfg.variants), out_dir=_out_dir(cfg),
              montage_episodes=cfg.episodes, montage_view=cfg.view)
    print("\n".join(f"wrote {p}" for p in res["files"].values()))


@stores_first
def prompt_study(cfg: PromptStudyConfig) -> None:
    """Rank prompt sets on one store from stored embeddings: within-phase ranks, right prompt, spreads,
    success-vs-failure AUCs, flatness against the single prompt (table, JSON, CSV, PNG)."""
    from pipeline.prompt_study import prompt_study as run
    from rmtl.reward.prompt_sets import load_prompt_sets

    run(cfg.store, load_prompt_sets(cfg.prompts), cfg.model, alpha=cfg.alpha, out_dir=_out_dir(cfg), bounds=cfg.bounds)


def bc_labels(cfg: BCLabelsConfig) -> None:
    """Rule-phase labels on rollouts of a policy (Stage-2 behaviour-cloning data)."""
    from pipeline.bc_labels import run
    from rmtl.console import check_store_path

    check_store_path(cfg.store_path(), "store")  # given as --store, --out or --name
    res = run(cfg)
    print(res.describe())


@stores_first
def reward_quality(cfg: RewardQualityConfig) -> None:
    """Acceptance metrics of a reward model beside a random-weight one, with pass/fail (and per source: noise level, checkpoint)."""
    from rich.console import Console
    from rich.table import Table

    from pipeline.gate_set import group_table, grouped_quality  # sources: noise levels, checkpoints
    from pipeline.render_and_embed import quality_summary
    from rmtl.console import check_output_file
    from rmtl.tasks import get_task

    out = Path(cfg.out) if cfg.out else None
    if out is not None:
        check_output_file(out, "--out")
    pset = prompt_set_of(cfg.prompts)
    m, r = quality_summary(cfg.store, cfg.model, cfg.alpha, pset), quality_summary(cfg.store, cfg.against, cfg.alpha, pset)
    task = get_task()
    gates = task.gate_report(m, r)
    table = Table(title=f"{cfg.store}: within-phase reward quality, multi-view mean, alpha {cfg.alpha}")
    for col in ("metric", "target", cfg.model, cfg.against):
        table.add_column(col)
    for key in ("approach_spearman", "approach_spread", "align_spearman", "align_spread", "grasp_auc",
                "grasp_spread", "right_prompt_accuracy", "step_variation"):
        table.add_row(key, str(task.quality_gates.get(key, "")), f"{m['mean'][key]:.4g}", f"{r['mean'][key]:.4g}")
    for name in m["goal_baseline_cosine"]:
        table.add_row(f"{name} goal-baseline cosine", "", f"{m['goal_baseline_cosine'][name]:.3f}",
                      f"{r['goal_baseline_cosine'][name]:.3f}")
    console = Console()
    console.print(table)
    for name, ok in gates.items():
        console.print(f"{'PASS' if ok else 'FAIL'}  {name}")
    groups = grouped_quality(cfg.store, cfg.model, cfg.alpha, pset)
    if len(groups) > 1:
        console.print(group_table(cfg.store, groups, cfg.model))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(portable_values({"store": cfg.store, "model": m, "against": r, "gates": gates,
                                                  "groups": groups}),
                                  indent=2, default=str))
        print(f"wrote {out}")


def gate_set(cfg: GateSetConfig) -> None:
    """Off-expert gate set: noisy experts and learner checkpoints rendered and embedded; within-phase ranks per source."""
    from rich.console import Console

    from pipeline.gate_set import build_gate_set, gate_set_configs, group_table, grouped_quality

    configs = gate_set_configs(Path(cfg.out), checkpoints=[Path(c) for c in cfg.checkpoint],
                               noise_levels=cfg.noise_levels, episodes=cfg.episodes, model=cfg.model, seed=cfg.seed,
                               resolution=cfg.resolution, workers=cfg.workers)
    build_gate_set(configs, against=None if (cfg.against or "none").lower() == "none" else cfg.against)
    for c in configs:
        Console().print(group_table(c.store_path(), grouped_quality(c.store_path(), cfg.model, cfg.alpha), cfg.model))
        print(f"wrote {c.store_path()}")


@stores_first
def export_minari(cfg: ExportMinariConfig) -> None:
    """Write a store's episodes as a Minari dataset (observations, actions, rewards, terminations,
    truncations; infos: rule phase, BC label, VLM score) under $MINARI_DATASETS_PATH."""
    from pipeline.minari_export import export_minari as run

    res = run(cfg.store, cfg.name, prompts=cfg.prompts, model=cfg.model, reward=cfg.reward, alpha=cfg.alpha,
              env_reward=cfg.env_reward, overwrite=cfg.overwrite, data_dir=cfg.data_dir)
    print(f"wrote Minari dataset {res['dataset_id']} ({res['episodes']} episodes, {res['steps']} steps) at "
               f"{res['path']}; load it with MINARI_DATASETS_PATH={res['root']} and "
               f"minari.load_dataset({res['dataset_id']!r})")


@stores_first
def export_lerobot(cfg: ExportLeRobotConfig) -> None:
    """Write a store's episodes as a LeRobot v3.0 dataset: Parquet frames (state, action, env and VLM rewards),
    one MP4 per camera, metadata (pipeline.lerobot_export)."""
    from pipeline.lerobot_export import export_lerobot as run
    from rmtl.console import check_output_dir

    if cfg.out is not None:
        check_output_dir(Path(cfg.out), "--out")
    res = run(cfg.store, cfg.out, prompts=cfg.prompts, model=cfg.model, alpha=cfg.alpha, overwrite=cfg.overwrite,
              data_dir=cfg.data_dir)
    print(f"wrote LeRobot v3.0 dataset {res['path']} ({res['episodes']} episodes, {res['frames']} frames, "
               f"{res['cameras']} camera videos; VLM reward of prompt set {res['prompt_set']['name']} by "
               f"{res['model_id']} in next.reward_vlm)")


class QualifyConfig(Config):
    """``rmtl qualify``: will a scorer teach? Metrics on the qualification set, the battery, the map's verdict."""

    model: str | None = None
    """A VLM spec to qualify (rendered on its declared renderer)."""
    vlm_micro_tasks: tuple[str, ...] = ()
    """With --model: qualify the hybrid in which the model scores only these micro-tasks and the oracle the rest."""
    reward: str | None = None
    """Instead of a model: a reward kind that reads state (oracle, degraded_oracle, rule_only)."""
    reward_config: dict[str, Any] = {}
    """Fields of that kind's config, e.g. --set reward_config.error.default.noise=0.3."""
    seed: int = 0
    """The run seed a state kind is built for (a degraded oracle's error seed follows it)."""
    families: str | None = None
    """Qualification-set file (default: pipeline/qualification_families.yaml)."""
    small: bool = False
    """The CI-sized set (a few episodes per family)."""
    out: str | None = None
    """Output directory (default <data dir>/qualification/reports)."""
    map: str | None = None
    """A learnability map file (default: the task's shipped map; 'rmtl qualify fit-map' writes one)."""


def qualify(cfg: QualifyConfig) -> None:
    """Will this scorer teach? Quality metrics on the qualification set, the battery and the learnability map's verdict."""
    from pipeline.qualify import format_report, qualify as run
    from rmtl.provenance import data_dir

    reward = {**cfg.reward_config, "kind": cfg.reward} if cfg.reward is not None else None
    if cfg.reward is None and cfg.reward_config:
        raise ConfigError("reward_config is set but --reward is not; name the kind with --reward KIND")
    if cfg.model is not None:
        from rmtl.vlm.spec import parse_spec

        parse_spec(cfg.model)
    root = data_dir()
    out = Path(cfg.out) if cfg.out else root / "qualification" / "reports"
    report = run(model=cfg.model, reward=reward, families_file=cfg.families, small=cfg.small, out_dir=out,
                 data_dir=root, seed=cfg.seed, vlm_micro_tasks=cfg.vlm_micro_tasks,
                 map_file=Path(cfg.map) if cfg.map else None)
    print(format_report(report))
