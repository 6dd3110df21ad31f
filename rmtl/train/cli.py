"""What the ``rmtl train ...``, ``rmtl eval`` and ``rmtl report`` commands run, and the configs of
those that have no config class elsewhere (their command lines: rmtl.command_table)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import tyro
from pydantic import Field

from rmtl.config import MAX_EPISODES, Config
from rmtl.console import check_output_dir, check_output_file
from rmtl.errors import ConfigError
from rmtl.outputs import check_writable_into

class TrainOptions(Config):
    """How a training command runs (not part of the run's config)."""

    fresh: bool = False
    """Start over instead of resuming the run in the run directory; its files move to previous-<UTC time>/
    inside it (nothing is deleted)."""
    verbose: bool = False
    """Print SB3's log table, evaluations and checkpoints."""


def build_stage1(file_values: dict, overrides: dict) -> Any:
    """The Stage-1 config of a command line: the ``--config`` file, the variant (``--variant``, else the
    file's, else rmtl) applied on top of it, then the other values."""
    from rmtl.train.config import VARIANTS, Stage1Config, stage1_config

    overrides = dict(overrides)
    given = overrides.pop("variant", None)
    if given is not None and not str(given).strip():  # else '' silently trains the default variant
        raise ConfigError(f"--variant is empty; choose one of {', '.join(VARIANTS)}")
    variant = given or file_values.get("variant") or "rmtl"
    return stage1_config(str(variant), Stage1Config.make(**file_values) if file_values else None, **overrides)


def run_lock(run_dir: Path) -> Any:
    """The run lock (:class:`rmtl.train.run.lock.RunLock`) that every writer of a run takes: a
    training started, resumed or ``--fresh`` is refused in one line while another live process (a
    sweep's trainer, a second terminal) trains the run, and holds it while it trains."""
    from rmtl.train.run.lock import RunLock

    return RunLock(run_dir)


def run_stage1(cfg: Any, options: TrainOptions = TrainOptions()) -> None:
    """Train the Stage-1 PPO worker (paper Table 1); resumes when the run directory has checkpoints.
    --steps rounds up to whole rollouts of n_envs * n_steps env steps."""
    from rmtl.train.stage1 import train_stage1

    check_output_dir(cfg.run_dir(), "--out" if cfg.output_dir else "run directory")  # before the reward model loads
    with run_lock(cfg.run_dir()):
        run = train_stage1(cfg, resume=not options.fresh, verbose=int(options.verbose))
    summary = json.loads((run / "summary.json").read_text())
    ev = summary.get("final_eval") or {}
    print(f"{cfg.variant}: {summary['env_steps']} env steps in {summary['wall_seconds']:.0f} s; "
               f"final-stage success {ev.get('success_rate', float('nan')):.3f} "
               f"(95% CI {ev.get('ci_low', 0):.3f}-{ev.get('ci_high', 1):.3f}, {ev.get('episodes', 0)} episodes)\n"
               f"run directory {run}")


class EvalConfig(Config):
    """``rmtl eval CHECKPOINT``: success rate of a Stage-1 checkpoint on the fully random start."""

    checkpoint: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT")]
    """Checkpoint dir, its model.zip, or a run dir (latest checkpoint)."""
    episodes: int = Field(100, ge=1, le=MAX_EPISODES)
    """Seeded episodes on the final (random-start) stage."""
    seed: int = Field(1_000_000, ge=0)
    """Seed of the first episode (episode i uses seed + i)."""
    stochastic: bool = False
    """Sample actions instead of the deterministic mean."""
    out: str | None = None
    """Write the result as JSON here."""


def evaluate(cfg: EvalConfig) -> None:
    """Success rate (95% Wilson CI) of a Stage-1 checkpoint on the fully random start."""
    from rmtl.train.run.artifacts import normalizer_stats
    from rmtl.train.run.run_dir import check_model_file, checkpoint_meta, resolve_checkpoint

    ck = resolve_checkpoint(cfg.checkpoint)
    # A wrong path or a damaged checkpoint fails before MuJoCo and torch load.
    checkpoint_meta(ck)
    normalizer_stats(ck)  # a pickled normaliser is refused first: loading it could run code
    check_model_file(ck)
    out = Path(cfg.out) if cfg.out else None
    if out is not None:
        check_output_file(out, "--out")
    from rmtl.provenance import portable_values
    from rmtl.train.eval.evaluate import evaluate_checkpoint

    res = evaluate_checkpoint(cfg.checkpoint, cfg.episodes, cfg.seed, deterministic=not cfg.stochastic)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(portable_values(res.to_dict()), indent=1))
    print(f"{res.checkpoint} ({res.num_timesteps} env steps): {res}")


class Stage2ReportConfig(Config):
    """Fig. 7 of one Stage-2 run: the policies compared beside the worker with the manager."""

    no_phase: str | None = None
    """Stage 2: (a) Stage-1 no_phase_input run/checkpoint."""
    single_prompt: str | None = None
    """Stage 2: (d) Stage-1 single-prompt run/checkpoint."""
    episodes: int = Field(100, ge=1, le=MAX_EPISODES)
    """Stage 2: seeded random-start episodes per policy."""
    seed: int = Field(1_000_000, ge=0)
    """Stage 2: seed of the first episode."""
    traces: int = Field(4, ge=0)
    """Stage 2: episodes drawn in phase_traces.png."""


class ReportConfig(Stage2ReportConfig):
    """``rmtl report RUN...`` (Stage 1) and ``rmtl report --stage 2 RUN``."""

    runs: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="RUN...")]
    """Stage-1 run directories or directories of them, e.g. data/runs/stage1 (--stage 2: one Stage-2 run or
    checkpoint, or several Stage-2 run folders, one per worker)."""
    stage: int = Field(1, ge=1, le=2)
    """1: Fig. 5/6 and the success table of Stage-1 runs; 2: Fig. 7, the behaviour of a Stage-2 run (several
    runs, or --rule-continued: every arm per worker and pooled, with paired sign tests)."""
    no_phase: tuple[str, ...] = ()
    """Stage 2: (a) Stage-1 no_phase_input run/checkpoint (several Stage-2 runs: one run per Stage-2 run, in order)."""
    rule_continued: tuple[str, ...] = ()
    """Stage 2: each worker's rule-continued control (a Stage-1 run trained on from the worker with the rule), one
    per Stage-2 run, in order; given, even one run is reported as the per-worker and pooled Fig. 7."""
    again: bool = False
    """Stage 2, several runs: evaluate every worker again, even where --out keeps its arms measured on the same
    policies and episodes."""
    out: str | None = None
    """Output directory (default <data-dir>/reports/stage1 or .../stage2)."""
    data_dir: str | None = None
    """Data directory (default $RMTL_DATA_DIR or ./data)."""
    select: bool = True
    """Stage 1: evaluate checkpoints on validation/test seeds where selection.json lacks them."""
    validation_episodes: int = Field(100, ge=1, le=MAX_EPISODES)
    """Stage 1: validation episodes per checkpoint."""
    test_episodes: int = Field(200, ge=1, le=MAX_EPISODES)
    """Stage 1: test episodes of the best and the final checkpoint."""


def report(cfg: ReportConfig) -> None:
    """Stage 1: paper Fig. 5 (success vs env steps), Fig. 6 (curriculum levels), final / best-on-validation /
    last-5 success. Stage 2 (--stage 2): Fig. 7, random-start success (95% CI) of PPO without phase input,
    worker + rule, worker + manager, single prompt; over several workers (several runs or --rule-continued):
    every arm per worker and pooled on the same episodes, with paired sign tests."""
    from rmtl.errors import ConfigError

    # Not a path relative to the working directory: run from a checkout, that is the source tree.
    out = Path(cfg.out) if cfg.out else report_dir(cfg.stage, cfg.data_dir)
    check_output_dir(out, "--out")
    check_writable_into(out, own=(), writes="a report")  # never into a store, its cache, a run, a model, an export
    if cfg.stage == 2:
        if not cfg.runs:
            raise ConfigError("rmtl report --stage 2 needs the Stage-2 run to report: rmtl report --stage 2 RUN (a run "
                              "directory or checkpoint written by rmtl train stage2), or several run folders, one "
                              "per worker")
        if len(cfg.runs) > 1 or cfg.rule_continued:
            _stage2_workers_report(out, cfg)
            return
        if len(cfg.no_phase) > 1:
            raise ConfigError(f"--no-phase gives {len(cfg.no_phase)} runs for one Stage-2 run; give one")
        _stage2_report(Path(cfg.runs[0]), out, cfg, no_phase=cfg.no_phase[0] if cfg.no_phase else None)
        return
    from rmtl.console import report as error_line
    from rmtl.train.report.runs import load_runs, stage1_run_dirs
    from rmtl.train.report.stage1 import stage1_report

    run_dirs, skipped = stage1_run_dirs(cfg.runs)
    if skipped:
        print(f"passed over {len(skipped)} Stage-2 run(s) ({', '.join(map(str, skipped))}); report each with "
                   f"rmtl report --stage 2 RUN")
    runs, damaged = load_runs(run_dirs)  # a run with a damaged file is named and left out, not a traceback
    if runs:
        paths = stage1_report(runs, out, select=cfg.select,
                              validation_episodes=cfg.validation_episodes, test_episodes=cfg.test_episodes)
        print("\n".join(f"wrote {p}" for p in paths.values()))
        print(paths["success_table_md"].read_text())
    for line in damaged:
        error_line(line)
    if damaged:
        raise SystemExit(2)


def _stage2_report(run: Path, out: Path, cfg: Stage2ReportConfig, no_phase: str | None) -> None:
    from rmtl.train.report.stage2 import stage2_report

    _check_stage2_run(run)
    paths = stage2_report(run, out, no_phase=no_phase and Path(no_phase),
                          single_prompt=cfg.single_prompt and Path(cfg.single_prompt), episodes=cfg.episodes,
                          seed=cfg.seed, traces=cfg.traces)
    print("\n".join(f"wrote {p}" for p in paths.values()))
    print(paths["behaviour_md"].read_text())


class SelectConfig(Config):
    """``rmtl train select RUN``."""

    run: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN")]
    """Stage-1 run directory."""
    validation_episodes: int = Field(100, ge=1, le=MAX_EPISODES)
    """Validation episodes per checkpoint (seeds from 2000000)."""
    test_episodes: int = Field(200, ge=1, le=MAX_EPISODES)
    """Test episodes of the best and final checkpoint (seeds from 3000000)."""


def select(cfg: SelectConfig) -> None:
    """Best checkpoint on validation seeds, it and the final one on test seeds, mean of the last 5 evaluations."""
    from rmtl.train.run.run_dir import checkpoint_meta

    run = Path(cfg.run)
    if run.is_file():
        raise ConfigError(f"{run} is a file, not a run directory; pass the directory written by rmtl train stage1 "
                          f"(the one holding checkpoints/), e.g. {run.parent}")
    if not run.is_dir():  # before MuJoCo and torch load
        raise ConfigError(f"run directory {run} does not exist; pass a directory written by rmtl train stage1")
    for ck in sorted(run.glob("checkpoints/step_*")):
        checkpoint_meta(ck)
    from rmtl.train.eval.selection import SELECTION_FILE, select_checkpoint

    sel = select_checkpoint(Path(cfg.run), cfg.validation_episodes, cfg.test_episodes, verbose=True)
    best, final, last = sel["best"], sel["final"], sel["last_periodic"]
    print(f"best on validation: {best['checkpoint']} ({best['validation']['success_rate']:.3f}); test "
               f"{best['test']['success_rate']:.3f} ({best['test']['ci_low']:.3f}-{best['test']['ci_high']:.3f})\n"
               f"final {final['checkpoint']}: test {final['test']['success_rate']:.3f} "
               f"({final['test']['ci_low']:.3f}-{final['test']['ci_high']:.3f})")
    if last:
        print(f"last {last['n']} periodic evaluations: mean {last['mean_success_rate']:.3f} "
                   f"({last['ci_low']:.3f}-{last['ci_high']:.3f})")
    print(f"wrote {Path(cfg.run) / SELECTION_FILE}")


def run_stage2(cfg: Any, options: TrainOptions = TrainOptions()) -> None:
    """Train the Stage-2 manager over a Stage-1 worker (paper Table 2); resumes when the run directory has checkpoints."""
    from rmtl.train.run.run_dir import checkpoint_meta, resolve_checkpoint

    checkpoint_meta(resolve_checkpoint(cfg.worker))  # a damaged worker checkpoint fails before torch loads
    from rmtl.train.stage2.trainer import train_stage2

    check_output_dir(cfg.run_dir(), "--out" if cfg.output_dir else "run directory")  # before the reward model loads
    with run_lock(cfg.run_dir()):
        run = train_stage2(cfg, resume=not options.fresh, verbose=int(options.verbose))
    summary = json.loads((run / "summary.json").read_text())
    ev, bc = summary.get("final_eval") or {}, summary.get("bc") or {}
    print(f"stage 2: {summary['env_steps']} env steps in {summary['wall_seconds']:.0f} s; "
               f"BC held-out accuracy {bc.get('heldout_accuracy', float('nan')):.3f}; final-stage success with the "
               f"manager {ev.get('success_rate', float('nan')):.3f} "
               f"(95% CI {ev.get('ci_low', 0):.3f}-{ev.get('ci_high', 1):.3f}, {ev.get('episodes', 0)} episodes)\n"
               f"run directory {run}")


class Stage2ReportAliasConfig(Stage2ReportConfig):
    """``rmtl train stage2-report RUN``: the earlier name of ``rmtl report --stage 2``."""

    run: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN")]
    """Stage-2 run directory (or one of its checkpoints)."""
    out: str | None = None
    """Output directory for CSV/MD/JSON/PNG (default <data-dir>/reports/stage2)."""
    data_dir: str | None = None
    """Data directory (default $RMTL_DATA_DIR or ./data)."""


def report_dir(stage: int, data_dir: str | None = None) -> Path:
    """Where ``rmtl report`` writes by default: ``<data dir>/reports/stage<k>``."""
    from rmtl.provenance import data_dir as resolve_data_dir

    return resolve_data_dir(data_dir) / "reports" / f"stage{stage}"


def stage2_report_alias(cfg: Stage2ReportAliasConfig) -> None:
    """The earlier name of ``rmtl report --stage 2``."""
    out = Path(cfg.out) if cfg.out else report_dir(2, cfg.data_dir)
    check_output_dir(out, "--out")
    check_writable_into(out, own=(), writes="a report")
    _stage2_report(Path(cfg.run), out, cfg, no_phase=cfg.no_phase)


def _stage2_workers_report(out: Path, cfg: ReportConfig) -> None:
    """Fig. 7 over several workers: each Stage-2 run's arms on the same episodes, per worker and pooled."""
    if cfg.single_prompt:
        raise ConfigError("--single-prompt is for the report of one Stage-2 run; leave it out with several")
    for run in cfg.runs:
        _check_stage2_run(Path(run))
    for what, extra in (("--rule-continued", cfg.rule_continued), ("--no-phase", cfg.no_phase)):
        missing = next((r for r in extra if not Path(r).is_dir()), None)
        if missing:
            raise ConfigError(f"{what} {missing} is not a run folder; pass the Stage-1 run folders, one per Stage-2 run")
    from rmtl.train.report.stage2_workers import worker_arms, workers_report

    arms = worker_arms([Path(r) for r in cfg.runs], [Path(r) for r in cfg.rule_continued],
                       [Path(r) for r in cfg.no_phase])
    paths = workers_report(arms, out, episodes=cfg.episodes, seed=cfg.seed, again=cfg.again)
    print("\n".join(f"wrote {p}" for p in paths.values()))
    print(paths["fig7_md"].read_text())


def _check_stage2_run(run: Path) -> None:
    """A Stage-2 run directory or checkpoint, with the files the report reads (one line if not)."""
    from rmtl.errors import ConfigError
    from rmtl.train.eval.evaluate import resolve_checkpoint

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
