"""The ``rmtl`` command. Each group lives with the package that owns the work; this
module only wires them together. Every way a command can end goes through
:mod:`rmtl.console` (one error line and status 2, 130 for Ctrl-C; docs/errors.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from rmtl.console import check_output_dir, check_output_file, check_store_path, exit_code, finish
from rmtl.errors import ConfigError, RmtlError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="RMTL: phased multi-view VLM rewards for Fetch.")
env_app = typer.Typer(no_args_is_help=True, help="The Fetch pick-and-lift environment.")
app.add_typer(env_app, name="env")
from rmtl.train.cli import eval_cmd, report_cmd, train_app  # noqa: E402  (cheap: no torch)

app.add_typer(train_app, name="train")
app.command("eval")(eval_cmd)
app.command("report")(report_cmd)
server_app = typer.Typer(no_args_is_help=True, help="A local Prefect server (PREFECT_HOME under the data dir).")
app.add_typer(server_app, name="server")
store_app = typer.Typer(no_args_is_help=True, help="Dataset stores: check their integrity.")
app.add_typer(store_app, name="store")

DataDirOption = typer.Option(None, "--data-dir", help="Data directory (default $RMTL_DATA_DIR or ./data).")


@env_app.command("preview")
def env_preview(
    difficulty: float = typer.Option(0.5, help="Start difficulty u in [0, 1]."),
    seed: int = typer.Option(0, help="Reset seed."),
    resolution: int = typer.Option(224, help="Square frame size in pixels (64-720)."),
    views: str = typer.Option("all", help="Comma-separated view names, or 'all'."),
    visual_domain: bool = typer.Option(True, help="Apply the paper's visual domain."),
    shadows: bool = typer.Option(True, help="Render shadows (slower, nicer)."),
    out: Optional[Path] = typer.Option(None, help="PNG path (default <data-dir>/preview/...)."),
    data_dir: Optional[Path] = DataDirOption,
) -> None:
    """Write a labelled PNG montage of the camera views for one seeded reset."""
    from rmtl.env import EnvConfig, FetchPickAndLiftEnv
    from rmtl.env.fetch_lift import check_difficulty
    from rmtl.provenance import data_dir as resolve_data_dir
    from rmtl.viz import montage

    check_difficulty(difficulty)
    cfg = EnvConfig.make(views=views, resolution=resolution, visual_domain=visual_domain, shadows=shadows)
    if out is None:
        out = resolve_data_dir(data_dir) / "preview" / f"preview_d{difficulty:.2f}_s{seed}_{resolution}px.png"
    check_output_file(out, "--out")  # before rendering
    env = FetchPickAndLiftEnv(cfg)
    _, info = env.reset(seed=seed, options={"difficulty": difficulty})
    frames = env.render_views()
    env.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    montage(frames, list(cfg.views)).save(out)
    typer.echo(
        f"gripper-cube distance {info['gripper_cube_distance']:.3f} m, rule phase {info['phase_rule']}\n"
        f"wrote {out}"
    )


@env_app.command("check")
def env_check(
    episodes: int = typer.Option(100, min=1, help="Episodes per row."),
    seed: int = typer.Option(0, help="First episode seed."),
    noise: float = typer.Option(0.0, min=0.0, help="Expert action noise std."),
    out: Optional[Path] = typer.Option(None, help="JSON path for the rates."),
) -> None:
    """Success rates of the scripted expert (difficulty 1 and 0) and of random actions."""
    from rich.console import Console
    from rich.table import Table

    from rmtl.env import FetchPickAndLiftEnv
    from rmtl.env.check import expert_policy, random_policy, success_rate

    if out is not None:
        check_output_file(out, "--out")
    env = FetchPickAndLiftEnv()
    rows = [
        success_rate(env, expert_policy(noise, seed), "expert", episodes, 1.0, seed),
        success_rate(env, expert_policy(noise, seed), "expert", episodes, 0.0, seed),
        success_rate(env, random_policy(env, seed), "random", episodes, 1.0, seed),
    ]
    table = Table(title=f"Pick-and-lift success ({episodes} seeded episodes each, expert noise {noise})")
    for col in ("policy", "difficulty", "success rate", "95% CI", "mean length"):
        table.add_column(col)
    for r in rows:
        lo, hi = r.wilson_interval()
        table.add_row(r.policy, f"{r.difficulty:.1f}", f"{r.rate:.2f}", f"[{lo:.2f}, {hi:.2f}]", f"{r.mean_length:.1f}")
    Console().print(table)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps([{**r.__dict__, "rate": r.rate} for r in rows], indent=2))
        typer.echo(f"wrote {out}")


def _float_list(text: str, name: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--{name} must be comma-separated numbers, got {text!r}") from None


def _json_object(text: str, name: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ConfigError(f"--{name} must be a JSON object such as '{{\"mesh_reduction\": 0.75}}', got {text!r}")
    return value


@app.command("render-and-embed")
def render_and_embed_cmd(
    episodes: int = typer.Option(8, min=1, help="Episodes to roll out."),
    policy: str = typer.Option("expert", help="'expert', 'random' or an SB3 checkpoint (.zip)."),
    noise_std: float = typer.Option(0.15, min=0.0, help="Expert action noise."),
    stages: str = typer.Option("0,1,2,3,4", help="Curriculum stages episodes cycle through."),
    views: str = typer.Option("all", help="Comma-separated views or 'all'."),
    resolution: Optional[int] = typer.Option(None, help="Frame size (px); default: the model's input size."),
    model: str = typer.Option("rmtl-fetch-tiny", help="VLM spec (name, name:tag, hf-hub:..., local dir or file)."),
    batch_size: int = typer.Option(64, min=1, help="Images per VLM call."),
    workers: int = typer.Option(1, min=1, help="Render processes (Dask LocalCluster when > 1)."),
    dask_address: Optional[str] = typer.Option(None, help="Existing Dask scheduler address."),
    store: Optional[str] = typer.Option(None, help="Store path (default <data-dir>/stores/<name>.zarr)."),
    name: str = typer.Option("default", help="Dataset name for the default store path."),
    seed: int = typer.Option(0, help="Base episode seed."),
    noise_levels: Optional[str] = typer.Option(None, help="Comma-separated expert noise levels to cycle through "
                                                         "(instead of noise-std and 2x noise-std)."),
    render: Optional[str] = typer.Option(None, help="Render settings as JSON, e.g. '{\"mesh_reduction\": 0.75, "
                                                  "\"msaa_samples\": 0}' (docs/env.md)."),
    prefect: bool = typer.Option(False, "--prefect", help="Run as the 'render-and-embed/default' deployment on a local Prefect server."),
    data_dir: Optional[Path] = DataDirOption,
) -> None:
    """Render episodes into a Zarr store, embed them, build the FAISS cache, summarise reward quality."""
    import os

    from pipeline.render_and_embed import RenderAndEmbedConfig, format_summary, preflight, render_and_embed
    from rmtl.provenance import DATA_DIR_ENV

    if data_dir is not None:
        os.environ[DATA_DIR_ENV] = str(data_dir)
    cfg = RenderAndEmbedConfig.make(
        store=store, name=name, episodes=episodes, policy=policy, noise_std=noise_std,
        stages=_int_list(stages, "stages"), views=views, resolution=resolution, model=model,
        batch_size=batch_size, workers=workers, dask_address=dask_address, seed=seed,
        noise_levels=None if noise_levels is None else _float_list(noise_levels, "noise-levels"),
        **({} if render is None else {"render": _json_object(render, "render")}),
    )
    if prefect:
        preflight(cfg)  # the store path and settings, before a server and a model are started
        from flows.local import render_and_embed_deployment

        run, summary = render_and_embed_deployment(cfg)
        if summary is None:
            raise RmtlError(f"flow run did not complete: {getattr(run, 'state_message', run)}")
        typer.echo(format_summary(summary))
        return
    typer.echo(format_summary(render_and_embed(cfg)))


@app.command("embed")
def embed_cmd(
    store: str = typer.Option(..., help="Dataset store with frames (made by render-and-embed)."),
    model: str = typer.Option("rmtl-fetch-tiny", help="VLM spec (name, name:tag, hf-hub:..., local dir or file)."),
    batch_size: int = typer.Option(64, min=1, help="Images per VLM call."),
) -> None:
    """Embed a store's rows not yet embedded by a model, and the prompts' text (no rendering)."""
    from pipeline.embed import embed_store
    from rmtl.vlm import load_vlm
    from storage.dataset import DatasetStore

    DatasetStore.open(store, "r")  # a missing or foreign store fails before the model loads
    res = embed_store(store, load_vlm(model), batch_size=batch_size)
    copied = f" ({res.rows_copied} copied from {res.copied_from}: same image tower)" if res.rows_copied else ""
    typer.echo(f"store {res.store}: embedded {res.rows_embedded} rows{copied}; {res.rows_total} rows have "
               f"embeddings of {res.model_id}")


@store_app.command("verify")
def store_verify_cmd(store: str = typer.Argument(..., help="Dataset store path or URL.")) -> None:
    """Read every committed chunk of a store and name the damaged ones (array, chunk, rows); status 2 if any."""
    from storage.dataset import DatasetStore

    with DatasetStore.open(store, "r") as st:
        rep = st.verify()
    kind = "checksummed" if rep.checksums else "no checksums (an older store: changed bytes go unnoticed)"
    for d in rep.damage:
        typer.echo(f"DAMAGED {d.describe()}")
    typer.echo(f"{rep.store}: {rep.arrays} arrays, {rep.chunks} chunks read, {kind}; "
               f"{len(rep.damage) or 'no'} damaged")
    if rep.damage:
        raise RmtlError(f"store {rep.store} has {len(rep.damage)} damaged part(s), listed above; restore the store "
                        f"from a copy, or re-create it (rmtl render-and-embed --store NEW_PATH)")


@server_app.command("start")
def server_start(port: int = typer.Option(4200, help="Port on 127.0.0.1."), ui: bool = typer.Option(True)) -> None:
    """Start a background Prefect server and print the settings clients need."""
    from flows.server import start_background

    info = start_background(port=port, ui=ui)
    typer.echo(f"Prefect server at {info['url']} (log {info['log']})\n"
               f"export PREFECT_API_URL={info['url']} PREFECT_HOME={info['home']}")


@server_app.command("stop")
def server_stop() -> None:
    """Stop the background Prefect server."""
    from flows.server import stop_background

    typer.echo("stopped" if stop_background() else "no server was running")


@server_app.command("status")
def server_status_cmd() -> None:
    """Show the background Prefect server, if any."""
    from flows.server import server_status

    info = server_status()
    typer.echo(json.dumps(info, indent=2) if info else "not running")


@app.command("serve", context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def serve_cmd(ctx: typer.Context) -> None:
    """Serve the flows as deployments (options: rmtl serve --help)."""
    from flows.serve import main as serve_main

    raise typer.Exit(serve_main(list(ctx.args), prog=ctx.command_path))


@app.command(
    "train-reward-vlm",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
)
def train_reward_vlm_cmd(ctx: typer.Context) -> None:
    """Train the domain reward VLM (options: rmtl train-reward-vlm --help)."""
    from pipeline.train_vlm import main as train_main

    raise typer.Exit(train_main(list(ctx.args), prog=ctx.command_path))


ModelOption = typer.Option(None, "--model", help="Stored model id or spec (default: the store's only model).")
PromptsOption = typer.Option(None, "--prompts", help="Prompt-set YAML file or a shipped set's name (paper, single, "
                                                   "...); default: the paper's prompts. Add its text embeddings "
                                                   "first: rmtl embed-text.")


def _prompt_set(path: Optional[str]):
    """The prompt set of a --prompts value (None: the paper's prompts)."""
    if path is None:
        return None
    from rmtl.reward.prompt_sets import load_prompt_set

    return load_prompt_set(path)


@app.command("query")
def query_cmd(
    store: str = typer.Option(..., help="Dataset store with embeddings."),
    model: Optional[str] = ModelOption,
    alpha: float = typer.Option(0.9, help="Projection alpha."),
    radii: str = typer.Option("0,0.002,0.005,0.01,0.02", help="Cache radii (m) for hit rate vs reward error."),
    holdout: float = typer.Option(0.25, help="Fraction of episodes used as cache queries."),
    out: Optional[Path] = typer.Option(None, help="Output dir (default <store>.analysis/queries)."),
    prompts: Optional[str] = PromptsOption,
) -> None:
    """Reward-quality questions over a store: tables, JSON and PNG plots."""
    from pipeline.query import run_queries

    if out is not None:
        check_output_dir(out, "--out")
    run_queries(store, model, out_dir=out, alpha=alpha, radii=_float_list(radii, "radii"), holdout=holdout,
                prompts=_prompt_set(prompts))


@app.command("reward-quality")
def reward_quality_cmd(
    store: str = typer.Option(..., help="Dataset store with embeddings of both models."),
    model: str = typer.Option("rmtl-fetch-tiny", help="Model to judge: a model spec or a stored model id."),
    against: str = typer.Option("rmtl-fetch-tiny@random", help="Model to compare with (random weights): spec or stored id."),
    alpha: float = typer.Option(0.9, help="Projection alpha."),
    out: Optional[Path] = typer.Option(None, help="JSON path for all metrics and gates."),
    prompts: Optional[str] = PromptsOption,
) -> None:
    """Acceptance metrics of a reward model beside a random-weight one, with pass/fail (and per source: noise level, checkpoint)."""
    from rich.console import Console
    from rich.table import Table

    from pipeline.quality import GATES, gate_report
    from pipeline.render_and_embed import quality_summary

    if out is not None:
        check_output_file(out, "--out")
    pset = _prompt_set(prompts)
    m, r = quality_summary(store, model, alpha, pset), quality_summary(store, against, alpha, pset)
    gates = gate_report(m, r)
    table = Table(title=f"{store}: within-phase reward quality, multi-view mean, alpha {alpha}")
    for col in ("metric", "target", model, against):
        table.add_column(col)
    for key in ("approach_spearman", "approach_spread", "align_spearman", "align_spread", "grasp_auc",
                "grasp_spread", "right_prompt_accuracy", "step_variation"):
        table.add_row(key, str(GATES.get(key, "")), f"{m['mean'][key]:.4g}", f"{r['mean'][key]:.4g}")
    for name in m["goal_baseline_cosine"]:
        table.add_row(f"{name} goal-baseline cosine", "", f"{m['goal_baseline_cosine'][name]:.3f}",
                      f"{r['goal_baseline_cosine'][name]:.3f}")
    console = Console()
    console.print(table)
    for name, ok in gates.items():
        console.print(f"{'PASS' if ok else 'FAIL'}  {name}")
    from pipeline.gate_set import group_table, grouped_quality  # sources: noise levels, checkpoints

    groups = grouped_quality(store, model, alpha, pset)
    if len(groups) > 1:
        console.print(group_table(store, groups, model))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"store": store, "model": m, "against": r, "gates": gates, "groups": groups},
                                  indent=2, default=str))
        typer.echo(f"wrote {out}")


@app.command("alpha-sweep")
def alpha_sweep_cmd(
    store: str = typer.Option(..., help="Dataset store with embeddings."),
    model: Optional[str] = ModelOption,
    alphas: str = typer.Option("0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0", help="Alphas to score."),
    episode: Optional[int] = typer.Option(None, help="Episode for the per-step plot."),
    out: Optional[Path] = typer.Option(None, help="Output dir (default <store>.analysis)."),
    prompts: Optional[str] = PromptsOption,
) -> None:
    """Scores for every alpha from stored embeddings (paper Fig. 10/11): dataset + PNGs."""
    from pipeline.analysis import alpha_sweep

    if out is not None:
        check_output_dir(out, "--out")
    res = alpha_sweep(store, model, _float_list(alphas, "alphas"), prompts=_prompt_set(prompts), out_dir=out,
                      episode=episode)
    _echo_result(res.dataset, res.plots, res.summary)


@app.command("per-view-analysis")
def per_view_cmd(
    store: str = typer.Option(..., help="Dataset store with embeddings."),
    model: Optional[str] = ModelOption,
    alpha: float = typer.Option(0.9, help="Projection alpha."),
    episodes: Optional[str] = typer.Option(None, help="Comma-separated episodes to plot."),
    row: Optional[int] = typer.Option(None, help="Store row for the one-frame plot."),
    out: Optional[Path] = typer.Option(None, help="Output dir (default <store>.analysis)."),
    prompts: Optional[str] = PromptsOption,
) -> None:
    """Per-view vs mean scores, smoothness and disagreement (paper Fig. 3/8): dataset + PNGs."""
    from pipeline.analysis import per_view_analysis

    if out is not None:
        check_output_dir(out, "--out")
    eps = _int_list(episodes, "episodes") if episodes else None
    res = per_view_analysis(store, model, alpha, prompts=_prompt_set(prompts), out_dir=out, episodes=eps, row=row)
    _echo_result(res.dataset, res.plots, res.summary)


@app.command("bc-labels")
def bc_labels_cmd(
    out: Path = typer.Option(..., help="Store to write (states and rule phase labels, no frames)."),
    policy: str = typer.Option("expert", help="'expert', 'random' or an SB3 checkpoint (.zip)."),
    episodes: int = typer.Option(250, min=1, help="Episodes to roll out."),
    noise_std: float = typer.Option(0.15, min=0.0, help="Expert action noise."),
    stages: str = typer.Option("0,1,2,3,4", help="Curriculum stages episodes cycle through."),
    seed: int = typer.Option(0, help="Base episode seed."),
    overwrite: bool = typer.Option(False, help="Replace an existing store."),
    minari: Optional[str] = typer.Option(None, help="Also write a Minari dataset of this name (dense reference reward, "
                                                    "BC labels in its infos; under $MINARI_DATASETS_PATH)."),
) -> None:
    """Rule-phase labels on rollouts of a policy (Stage-2 behaviour-cloning data)."""
    from pipeline.analysis import bc_labels

    check_store_path(out, "--out")
    res = bc_labels(out, policy=policy, episodes=episodes, noise_std=noise_std,
                    stages=tuple(_int_list(stages, "stages")), seed=seed, overwrite=overwrite, minari=minari)
    typer.echo(f"{res}\nwrote {out}" + (f"\nwrote Minari dataset {res.minari}" if res.minari else ""))


@app.command("return-ranking")
def return_ranking_cmd(
    store: str = typer.Option(..., help="Dataset store with embeddings (all six views for the multi-view variants)."),
    model: Optional[str] = ModelOption,
    variants: str = typer.Option("rmtl,single_prompt_multi_view,single_prompt_single_view,rmtl_phase_offset",
                                 help="Comma-separated Stage-1 variants whose shaped return to rank."),
    bounds: str = typer.Option("adapted", help="'adapted': bounds where long training leaves them; 'running': "
                                               "start at 0.45/0.70 like a fresh env."),
    out: Optional[Path] = typer.Option(None, help="Output dir (default <store>.analysis/return_ranking)."),
) -> None:
    """ROC AUC of successful vs failed episodes for each reward variant's shaped return, from stored embeddings."""
    from pipeline.return_ranking import return_ranking

    res = return_ranking(store, model, [v.strip() for v in variants.split(",") if v.strip()], out_dir=out,
                         bounds=bounds)
    typer.echo("\n".join(f"wrote {p}" for p in res["files"].values()))


@app.command("diagnose-rollouts")
def diagnose_rollouts_cmd(
    store: str = typer.Option(..., help="Store of a policy's rollouts with embeddings (e.g. from rmtl gate-set --checkpoint)."),
    reference: Optional[str] = typer.Option(None, help="Store of reference (expert) episodes embedded by the same model."),
    model: Optional[str] = ModelOption,
    variants: str = typer.Option("rmtl,rmtl_phase_offset", help="Comma-separated Stage-1 variants; the first is traced and plotted."),
    episodes: int = typer.Option(4, min=1, help="Episodes shown in the traces and the montage (failures first)."),
    view: str = typer.Option("front", help="Camera view of the montage."),
    out: Optional[Path] = typer.Option(None, help="Output dir (default <store>.analysis/diagnosis)."),
) -> None:
    """A policy's own rollouts: VLM vs dense reward along them, what it does (PNG montage), whether it games the reward."""
    from pipeline.rollout_diagnosis import diagnose_rollouts

    res = diagnose_rollouts(store, reference, model, [v.strip() for v in variants.split(",") if v.strip()], out_dir=out,
                            montage_episodes=episodes, montage_view=view)
    typer.echo("\n".join(f"wrote {p}" for p in res["files"].values()))


@app.command("gate-set")
def gate_set_cmd(
    out: Path = typer.Option(..., help="Directory for the gate stores."),
    checkpoint: Optional[list[Path]] = typer.Option(None, help="Stage-1 checkpoint (or run dir) to roll out (repeatable)."),
    noise_levels: str = typer.Option("0.1,0.3,0.6,1.0", help="Expert noise levels ('none': no noisy-expert store)."),
    episodes: int = typer.Option(100, min=1, help="Episodes per store."),
    model: str = typer.Option("rmtl-fetch-tiny", help="VLM spec to embed with and judge."),
    against: str = typer.Option("rmtl-fetch-tiny@random", help="Comparison model embedded too ('none': skip)."),
    resolution: Optional[int] = typer.Option(None, help="Frame size (px); default: the model's input size."),
    workers: int = typer.Option(1, min=1, help="Render processes."),
    seed: int = typer.Option(50_000, help="Base episode seed."),
    alpha: float = typer.Option(0.9, help="Projection alpha."),
) -> None:
    """Off-expert gate set: noisy experts and learner checkpoints rendered and embedded; within-phase ranks per source."""
    from rich.console import Console

    from pipeline.gate_set import build_gate_set, gate_set_configs, group_table, grouped_quality

    levels = None if noise_levels.strip().lower() == "none" else _float_list(noise_levels, "noise levels")
    configs = gate_set_configs(out, checkpoints=checkpoint or [], noise_levels=levels, episodes=episodes,
                               model=model, seed=seed, resolution=resolution, workers=workers)
    build_gate_set(configs, against=None if against.lower() == "none" else against)
    for cfg in configs:
        Console().print(group_table(cfg.store_path(), grouped_quality(cfg.store_path(), model, alpha), model))
        typer.echo(f"wrote {cfg.store_path()}")


@app.command("embed-text")
def embed_text_cmd(
    store: str = typer.Option(..., help="Dataset store with image embeddings of the model."),
    prompts: str = typer.Option(..., help="Prompt-set YAML file, a directory of them, or a shipped set's name."),
    model: Optional[str] = typer.Option(None, help="Model spec (default: the spec of the store's only model)."),
    device: Optional[str] = typer.Option(None, help="Torch device (default: CUDA when present, else CPU)."),
) -> None:
    """Store the text embeddings of prompt sets: the text tower only, no frame read, no image encoded."""
    from pipeline.embed_text import embed_text
    from rmtl.reward.prompt_sets import load_prompt_sets

    for r in embed_text(store, load_prompt_sets(prompts), model, device=device):
        typer.echo(f"{r.store}: prompt set {r.prompt_set} ({r.prompt_set_id}), {r.texts} texts of {r.model_id}")


@app.command("prompt-study")
def prompt_study_cmd(
    store: str = typer.Option(..., help="Dataset store with image embeddings and the sets' text embeddings."),
    prompts: str = typer.Option(..., help="Directory of prompt-set YAML files (or one file)."),
    model: Optional[str] = ModelOption,
    alpha: float = typer.Option(0.9, help="Projection alpha."),
    bounds: str = typer.Option("adapted", help="Shaping bounds of the return ranking: 'adapted' or 'running'."),
    out: Optional[Path] = typer.Option(None, help="Output dir (default <store>.analysis/prompt_study)."),
) -> None:
    """Rank prompt sets on one store from stored embeddings: within-phase ranks, right prompt, spreads,
    success-vs-failure AUCs, flatness against the single prompt (table, JSON, CSV, PNG)."""
    from pipeline.prompt_study import prompt_study
    from rmtl.reward.prompt_sets import load_prompt_sets

    if out is not None:
        check_output_dir(out, "--out")
    prompt_study(store, load_prompt_sets(prompts), model, alpha=alpha, out_dir=out, bounds=bounds)


export_app = typer.Typer(no_args_is_help=True, help="Export a dataset store to other formats.")
app.add_typer(export_app, name="export")


@export_app.command("minari")
def export_minari_cmd(
    store: str = typer.Argument(..., help="Dataset store (schema v2: with actions)."),
    name: str = typer.Option(..., help="Dataset name: rmtl/NAME-v0 unless it has a namespace or a version."),
    prompts: str = typer.Option("paper", help="Prompt set of the VLM reward: a YAML file or a shipped set's name."),
    model: Optional[str] = ModelOption,
    reward: str = typer.Option("vlm", help="'vlm': the prompt set's shaped reward; 'dense': the dense reference."),
    alpha: float = typer.Option(0.9, help="Projection alpha."),
    env_reward: bool = typer.Option(True, help="Add the env's +1 on the success step."),
    overwrite: bool = typer.Option(False, help="Replace a Minari dataset of the same name."),
    data_dir: Optional[Path] = DataDirOption,
) -> None:
    """Write a store's episodes as a Minari dataset (observations, actions, rewards, terminations,
    truncations; infos: rule phase, BC label, VLM score) under $MINARI_DATASETS_PATH."""
    from pipeline.minari_export import export_minari

    res = export_minari(store, name, prompts=prompts, model=model, reward=reward, alpha=alpha, env_reward=env_reward,
                        overwrite=overwrite, data_dir=data_dir)
    typer.echo(f"wrote Minari dataset {res['dataset_id']} ({res['episodes']} episodes, {res['steps']} steps) at "
               f"{res['path']}; load it with MINARI_DATASETS_PATH={res['root']} and "
               f"minari.load_dataset({res['dataset_id']!r})")


def _echo_result(dataset, plots, summary) -> None:
    typer.echo(json.dumps(summary, indent=2, default=str))
    typer.echo(f"wrote {dataset}")
    for p in plots.values():
        typer.echo(f"wrote {p}")


def _float_list(text: str, what: str) -> list[float]:
    from rmtl.errors import ConfigError

    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated numbers, got {text!r}") from None


def _int_list(text: str, what: str) -> list[int]:
    from rmtl.errors import ConfigError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, got {text!r}") from None


def _invoke(argv: list[str] | None) -> Any:
    """Parse and run one command line; exceptions are left to :func:`rmtl.console.exit_code`
    (typer's own standalone handling would turn Ctrl-C and ``typer.Exit`` into return
    values and usage errors into multi-line panels)."""
    cmd = typer.main.get_command(app)
    args = sys.argv[1:] if argv is None else list(argv)
    with cmd.make_context("rmtl", args) as ctx:
        return cmd.invoke(ctx)


def run(argv: list[str] | None = None) -> int:
    """Run ``rmtl ARGV`` in this process and return its exit status (errors: one line on stderr)."""
    return exit_code(_invoke, argv)


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point: run the command and exit with its status (docs/errors.md)."""
    finish(run(argv))


if __name__ == "__main__":
    main()
