"""Typer commands of the Stage-1 learner, registered by rmtl.cli:

    app.add_typer(train_app, name="train")       # rmtl train stage1 --variant rmtl ...
    app.command("eval")(eval_cmd)                # rmtl eval CKPT --episodes 100
    app.command("report")(report_cmd)            # rmtl report RUN... --out DIR
                                                 # rmtl train select RUN (best on validation, test seeds)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from rmtl.console import check_output_dir, check_output_file

train_app = typer.Typer(no_args_is_help=True, help="Train the learners (Stage 1: PPO worker).")


@train_app.command("stage1")
def stage1_cmd(
    variant: str = typer.Option("rmtl", help="Variant: rmtl, single_prompt_multi_view, single_prompt_single_view, "
                                             "no_curriculum, no_phase_input, dense_reference, rmtl_phase_offset, "
                                             "rmtl_no_trend_momentum (rmtl_no_phase_offset = rmtl, "
                                             "rmtl_level_only = rmtl_no_trend_momentum)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Total env steps (default 600000)."),
    seed: Optional[int] = typer.Option(None, help="Seed (default 0)."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML Stage1Config to start from (the variant is applied on top)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a field: key.sub=value (repeatable), "
                                                                 "e.g. --set reward.resolution=96 --set n_envs=8."),
    model: Optional[str] = typer.Option(None, help="Reward model spec (default rmtl-fetch-tiny)."),
    cache_store: Optional[str] = typer.Option(None, help="Dataset store whose FAISS cache serves the reward."),
    cache_radius: Optional[float] = typer.Option(None, help="Cache radius in key units (m)."),
    cache_grow: bool = typer.Option(False, help="Append cache misses to the store."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default <data-dir>/runs/stage1/<variant>_s<seed>)."),
    fresh: bool = typer.Option(False, help="Start over instead of resuming from the run directory's last checkpoint."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    verbose: bool = typer.Option(False, help="Print SB3's log table, evaluations and checkpoints."),
) -> None:
    """Train the Stage-1 PPO worker (paper Table 1); resumes when the run directory has checkpoints."""
    from rmtl.train.config import Stage1Config, deep_merge, parse_overrides, stage1_config
    from rmtl.train.stage1 import train_stage1

    base = Stage1Config.from_yaml(config) if config else None
    ov = parse_overrides(set_ or [])
    direct = _run_fields(steps, seed, out, progress)
    if model is not None:
        direct["reward"] = {"model": model}
    cache = {k: v for k, v in (("store", cache_store), ("radius", cache_radius)) if v is not None}
    if cache_grow:
        cache["grow"] = True
    if cache:
        direct["cache"] = cache
    cfg = stage1_config(variant, base, **deep_merge(direct, ov))
    check_output_dir(cfg.run_dir(), "--out" if out else "run directory")  # before the reward model loads
    run = train_stage1(cfg, resume=not fresh, verbose=int(verbose))
    summary = json.loads((run / "summary.json").read_text())
    ev = summary.get("final_eval") or {}
    typer.echo(f"{cfg.variant}: {summary['env_steps']} env steps in {summary['wall_seconds']:.0f} s; "
               f"final-stage success {ev.get('success_rate', float('nan')):.3f} "
               f"(95% CI {ev.get('ci_low', 0):.3f}-{ev.get('ci_high', 1):.3f}, {ev.get('episodes', 0)} episodes)\n"
               f"run directory {run}")


def eval_cmd(
    checkpoint: Path = typer.Argument(..., help="Checkpoint dir, its model.zip, or a run dir (latest checkpoint)."),
    episodes: int = typer.Option(100, min=1, help="Seeded episodes on the final (random-start) stage."),
    seed: int = typer.Option(1_000_000, help="Seed of the first episode (episode i uses seed + i)."),
    stochastic: bool = typer.Option(False, help="Sample actions instead of the deterministic mean."),
    out: Optional[Path] = typer.Option(None, help="Write the result as JSON here."),
) -> None:
    """Success rate (95% Wilson CI) of a Stage-1 checkpoint on the fully random start."""
    from rmtl.train.evaluate import evaluate_checkpoint

    if out is not None:
        check_output_file(out, "--out")
    res = evaluate_checkpoint(checkpoint, episodes, seed, deterministic=not stochastic)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res.to_dict(), indent=1))
    typer.echo(f"{res.checkpoint} ({res.num_timesteps} env steps): {res}")


def report_cmd(
    runs: List[Path] = typer.Argument(..., help="Stage-1 run directories."),
    out: Path = typer.Option(Path("results/stage1"), help="Output directory for PNG/CSV/MD."),
    select: bool = typer.Option(True, help="Evaluate checkpoints on validation/test seeds where selection.json "
                                           "lacks them (--no-select: use what is there)."),
    validation_episodes: int = typer.Option(100, min=1, help="Validation episodes per checkpoint."),
    test_episodes: int = typer.Option(200, min=1, help="Test episodes of the best and the final checkpoint."),
) -> None:
    """Paper Fig. 5 (success vs env steps), Fig. 6 (curriculum levels), and final / best-on-validation / last-5 success."""
    from rmtl.train.report import stage1_report

    check_output_dir(out, "--out")
    paths = stage1_report(runs, out, select=select, validation_episodes=validation_episodes,
                          test_episodes=test_episodes)
    typer.echo("\n".join(f"wrote {p}" for p in paths.values()))
    typer.echo(paths["success_table_md"].read_text())


@train_app.command("select")
def select_cmd(
    run: Path = typer.Argument(..., help="Stage-1 run directory."),
    validation_episodes: int = typer.Option(100, min=1, help="Validation episodes per checkpoint (seeds from 2000000)."),
    test_episodes: int = typer.Option(200, min=1, help="Test episodes of the best and final checkpoint (seeds from 3000000)."),
) -> None:
    """Best checkpoint on validation seeds, it and the final one on test seeds, mean of the last 5 evaluations."""
    from rmtl.train.selection import SELECTION_FILE, select_checkpoint

    sel = select_checkpoint(run, validation_episodes, test_episodes, verbose=True)
    best, final, last = sel["best"], sel["final"], sel["last_periodic"]
    typer.echo(f"best on validation: {best['checkpoint']} ({best['validation']['success_rate']:.3f}); test "
               f"{best['test']['success_rate']:.3f} ({best['test']['ci_low']:.3f}-{best['test']['ci_high']:.3f})\n"
               f"final {final['checkpoint']}: test {final['test']['success_rate']:.3f} "
               f"({final['test']['ci_low']:.3f}-{final['test']['ci_high']:.3f})")
    if last:
        typer.echo(f"last {last['n']} periodic evaluations: mean {last['mean_success_rate']:.3f} "
                   f"({last['ci_low']:.3f}-{last['ci_high']:.3f})")
    typer.echo(f"wrote {run / SELECTION_FILE}")


@train_app.command("stage2")
def stage2_cmd(
    worker: Path = typer.Option(..., "--worker", help="Stage-1 checkpoint dir, its model.zip, or a Stage-1 run dir (latest)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Stage-2 env steps (default 200000)."),
    seed: Optional[int] = typer.Option(None, help="Seed (default 0)."),
    bc_labels: Optional[str] = typer.Option(None, help="bc-labels dataset store (default: roll out the worker with the rule)."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML Stage2Config to start from."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a field: key.sub=value (repeatable), e.g. "
                                                                 "--set manager.kl_coef=0.1 --set stage1.n_envs=8."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default <data-dir>/runs/stage2/<worker run>_s<seed>)."),
    fresh: bool = typer.Option(False, help="Start over instead of resuming from the run directory's last checkpoint."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    verbose: bool = typer.Option(False, help="Print SB3's log table, BC accuracy, evaluations and checkpoints."),
) -> None:
    """Train the Stage-2 manager over a Stage-1 worker (paper Table 2); resumes when the run directory has checkpoints."""
    from rmtl.train.config import Stage2Config, deep_merge, parse_overrides
    from rmtl.train.stage2 import train_stage2

    data = Stage2Config.from_yaml(config).model_dump() if config else {}
    direct = {"worker": str(worker), **_run_fields(steps, seed, out, progress)}
    if bc_labels is not None:
        direct["bc"] = {"labels": bc_labels}
    cfg = Stage2Config.make(**deep_merge(deep_merge(data, direct), parse_overrides(set_ or [])))
    check_output_dir(cfg.run_dir(), "--out" if out else "run directory")  # before the reward model loads
    run = train_stage2(cfg, resume=not fresh, verbose=int(verbose))
    summary = json.loads((run / "summary.json").read_text())
    ev, bc = summary.get("final_eval") or {}, summary.get("bc") or {}
    typer.echo(f"stage 2: {summary['env_steps']} env steps in {summary['wall_seconds']:.0f} s; "
               f"BC held-out accuracy {bc.get('heldout_accuracy', float('nan')):.3f}; final-stage success with the "
               f"manager {ev.get('success_rate', float('nan')):.3f} "
               f"(95% CI {ev.get('ci_low', 0):.3f}-{ev.get('ci_high', 1):.3f}, {ev.get('episodes', 0)} episodes)\n"
               f"run directory {run}")


@train_app.command("stage2-report")
def stage2_report_cmd(
    run: Path = typer.Argument(..., help="Stage-2 run directory (or one of its checkpoints)."),
    no_phase: Optional[Path] = typer.Option(None, help="(a) Stage-1 no_phase_input run/checkpoint."),
    single_prompt: Optional[Path] = typer.Option(None, help="(d) Stage-1 single-prompt run/checkpoint."),
    episodes: int = typer.Option(100, min=1, help="Seeded random-start episodes per policy."),
    seed: int = typer.Option(1_000_000, help="Seed of the first episode."),
    traces: int = typer.Option(4, min=0, help="Episodes drawn in phase_traces.png."),
    out: Path = typer.Option(Path("results/stage2"), help="Output directory for CSV/MD/JSON/PNG."),
) -> None:
    """Paper Fig. 7: random-start success (95% CI) of PPO without phase input, worker + rule, worker + manager, single prompt."""
    from rmtl.train.report import stage2_report

    check_output_dir(out, "--out")
    _check_stage2_run(run)
    paths = stage2_report(run, out, no_phase=no_phase, single_prompt=single_prompt, episodes=episodes, seed=seed,
                          traces=traces)
    typer.echo("\n".join(f"wrote {p}" for p in paths.values()))
    typer.echo(paths["behaviour_md"].read_text())


def _check_stage2_run(run: Path) -> None:
    """A Stage-2 run directory or checkpoint, with the files the report reads (one line if not)."""
    from rmtl.errors import ConfigError
    from rmtl.train.evaluate import resolve_checkpoint

    ck = resolve_checkpoint(run)
    fix = "pass a run directory (or checkpoint) written by rmtl train stage2"
    try:
        meta = json.loads((ck / "meta.json").read_text())
    except FileNotFoundError:
        raise ConfigError(f"{ck} has no meta.json, so it is not a Stage-2 checkpoint; {fix}") from None
    except ValueError as e:
        raise ConfigError(f"{ck / 'meta.json'} is not valid JSON ({e}); {fix}") from None
    if not isinstance(meta, dict) or "env" not in (meta.get("config") or {}) or not (ck / "manager.pt").is_file():
        raise ConfigError(f"{ck} is not a Stage-2 checkpoint (its meta.json has no Stage-1 config, or it has no "
                          f"manager.pt); {fix}")


def _run_fields(steps: int | None, seed: int | None, out: Path | None, progress: bool) -> dict:
    """Config fields set by the options every training command shares (None: keep the default)."""
    fields: dict = {"progress_bar": progress}
    if steps is not None:
        fields["total_timesteps"] = steps
    if seed is not None:
        fields["seed"] = seed
    if out is not None:
        fields["output_dir"] = str(out)
    return fields
