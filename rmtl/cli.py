"""The ``rmtl`` command. Each group lives with the package that owns the work; this
module only wires them together. Every way a command can end goes through
:mod:`rmtl.console` (one error line and status 2, 130 for Ctrl-C; docs/errors.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from rmtl.console import check_output_file, exit_code, finish
from rmtl.errors import RmtlError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="RMTL: phased multi-view VLM rewards for Fetch.")
env_app = typer.Typer(no_args_is_help=True, help="The Fetch pick-and-lift environment.")
app.add_typer(env_app, name="env")
from rmtl.train import cli as train_cli  # noqa: E402  (cheap: no torch)
from rmtl.train.cli import eval_cmd, report_cmd, train_app  # noqa: E402

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


def _render_and_embed_command():
    """``rmtl render-and-embed``: options generated from RenderAndEmbedConfig (rmtl.command_config)."""
    from pipeline.render_and_embed import RenderAndEmbedConfig
    from rmtl.command_config import config_command, option

    return config_command(RenderAndEmbedConfig, _render_and_embed, extra=[
        option("prefect", bool, typer.Option(False, "--prefect", help="Run as the 'render-and-embed/default' "
                                             "deployment on a local Prefect server.")),
        option("data_dir", Optional[Path], DataDirOption),
    ])


def _render_and_embed(cfg: Any, prefect: bool = False, data_dir: Optional[Path] = None) -> None:
    """Render episodes into a Zarr store, embed them, build the FAISS cache, summarise reward quality."""
    import os

    from pipeline.render_and_embed import format_summary, preflight, render_and_embed
    from rmtl.provenance import DATA_DIR_ENV

    if data_dir is not None:
        os.environ[DATA_DIR_ENV] = str(data_dir)
    if prefect:
        preflight(cfg)  # the store path and settings, before a server and a model are started
        from flows.local import render_and_embed_deployment

        run, summary = render_and_embed_deployment(cfg)
        if summary is None:
            raise RmtlError(f"flow run did not complete: {getattr(run, 'state_message', run)}")
        typer.echo(format_summary(summary))
        return
    typer.echo(format_summary(render_and_embed(cfg)))


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


ModelOption = typer.Option(None, "--model", help="Stored model id or spec (default: the store's only model).")
PromptsOption = typer.Option(None, "--prompts", help="Prompt-set YAML file or a shipped set's name (paper, single, "
                                                   "...); default: the paper's prompts. Add its text embeddings "
                                                   "first: rmtl embed-text.")


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

    from rmtl.tasks.fetch_lift.quality import GATES, gate_report
    from pipeline.render_and_embed import quality_summary

    if out is not None:
        check_output_file(out, "--out")
    from pipeline.analysis_commands import prompt_set_of

    pset = prompt_set_of(prompts)
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


def _float_list(text: str, what: str) -> list[float]:
    from rmtl.errors import ConfigError

    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated numbers, got {text!r}") from None


def _serve_command():
    from flows.serve import serve_command

    return serve_command()


def _train_vlm_command():
    from pipeline.train_vlm import train_vlm_command

    return train_vlm_command()


LAZY_COMMANDS = {
    ("render-and-embed",): (_render_and_embed_command, "Render episodes into a Zarr store, embed them, build the "
                                                       "FAISS cache, summarise reward quality."),
    ("train-reward-vlm",): (_train_vlm_command, "Train the domain reward VLM."),
    ("serve",): (_serve_command, "Serve the flows as deployments."),
    ("train", "stage1"): (train_cli.stage1_command, "Train the Stage-1 PPO worker (paper Table 1)."),
    ("train", "stage2"): (train_cli.stage2_command, "Train the Stage-2 manager over a Stage-1 worker (paper Table 2)."),
}
"""Commands whose options are generated from their config class (rmtl.command_config) when
they run: their config classes import the VLM stack or Prefect, which other commands skip."""


def command_group() -> Any:
    """The click group of ``rmtl``, generated commands included."""
    from pipeline.analysis_commands import COMMANDS
    from rmtl.command_config import config_command, lazy_command

    cmd = typer.main.get_command(app)
    for path, (load, short_help) in LAZY_COMMANDS.items():
        group = cmd
        for part in path[:-1]:
            group = group.commands[part]
        group.add_command(lazy_command(path[-1], load, short_help))
    for name, (cls, run_it) in COMMANDS.items():
        short = (run_it.__doc__ or "").strip().split("\n")[0]
        cmd.add_command(lazy_command(name, lambda cls=cls, run_it=run_it: config_command(cls, run_it), short))
    return cmd


def _invoke(argv: list[str] | None) -> Any:
    """Parse and run one command line; exceptions are left to :func:`rmtl.console.exit_code`
    (typer's own standalone handling would turn Ctrl-C and ``typer.Exit`` into return
    values and usage errors into multi-line panels)."""
    cmd = command_group()
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
