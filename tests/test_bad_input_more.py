"""Bad inputs that were silently accepted, ended in a traceback or were answered with a misleading
line: each runs the real command, ``python -m rmtl``, as a subprocess and
asserts its first error line (status 2, no traceback). The classes, not only these examples: one
check of conflicting aliases, a kind flag read as ``--set``, one YAML error line with its place,
a seed of 0 or more wherever a run seed is given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import command_env

pytestmark = pytest.mark.slow  # every case runs the real command as a subprocess

ROOT = Path(__file__).resolve().parent.parent


def rmtl(tmp: Path, *args: object, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rmtl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=command_env(tmp), cwd=tmp)


def first_line(r: subprocess.CompletedProcess) -> str:
    """The first stderr line of a refused command (status 2, no traceback)."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    assert lines and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr[-3000:]
    return lines[0]


SWEEP = """output_root: {root}
steps: 64
set: {{n_envs: 2, n_steps: 32, batch_size: 32, n_epochs: 1, eval_episodes: 1, checkpoint_every: 64, eval_every: 0,
      validation_episodes: 1, test_episodes: 1}}
runs:
  - {{variants: [rule_only], seeds: {seeds}}}
"""


def _sweep(tmp: Path, seeds: str = "[0]") -> Path:
    path = tmp / "sweep.yaml"
    path.write_text(SWEEP.format(root=tmp / "runs", seeds=seeds))
    return path


# ------------------------------------------------------------------ item 12: silently accepted
def test_conflicting_aliases_are_refused(tmp_path):
    line = first_line(rmtl(tmp_path, "train", "stage1", "--total-timesteps", 64, "--steps", 128, "--out", tmp_path / "r"))
    assert line == ("error: --total-timesteps 64 and --steps 128 set the same option (--total-timesteps) to different "
                    "values; give it once"), line
    line = first_line(rmtl(tmp_path, "train", "stage1", "--out", tmp_path / "a", "--output-dir", tmp_path / "b"))
    assert "set the same option (--output-dir)" in line, line
    assert not (tmp_path / "r").exists() and not (tmp_path / "a").exists()


def test_a_boolean_is_no_sweep_seed(tmp_path):
    line = first_line(rmtl(tmp_path, "sweep", _sweep(tmp_path, "[true]"), "--dry-run"))
    assert line.endswith("runs[0]: seeds must be a non-empty list of integers >= 0"), line


def test_dry_run_refuses_a_run_path_that_is_a_file(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "rule_only_s0").write_text("a file where the run would go")
    line = first_line(rmtl(tmp_path, "sweep", _sweep(tmp_path), "--dry-run"))
    assert "run rule_only_s0" in line and f"{tmp_path / 'runs' / 'rule_only_s0'} is a file, not a directory" in line


def test_report_refuses_a_run_whose_config_is_empty_or_not_a_run_config(tmp_path):
    for name, text in [("cfg_empty", ""), ("cfg_noseed", "variant: rmtl\n")]:
        run = tmp_path / name
        run.mkdir()
        (run / "config.yaml").write_text(text)
        (run / "eval.csv").write_text("timesteps,episodes,successes,success_rate,ci_low,ci_high\n")
        line = first_line(rmtl(tmp_path, "report", run, "--out", tmp_path / "rep"))
        assert line.startswith(f"error: skipped run {run}: {run / 'config.yaml'} "), line
        assert ("is empty, not the run's config" if not text else "has no seed, so it is not a run config") in line
        assert not list((tmp_path / "rep").glob("*")), "a run without a config is reported under no variant"


# ------------------------------------------------------------------------- item 13: tracebacks
def test_a_damaged_checkpoint_meta_under_sweep_local_is_one_line(tmp_path):
    ck = tmp_path / "runs" / "rule_only_s0" / "checkpoints" / "step_000000064"
    ck.mkdir(parents=True)
    with zipfile.ZipFile(ck / "model.zip", "w") as z:
        z.writestr("data", "{}")
        z.writestr("policy.pth", b"")
    (ck / "meta.json").write_text("{not json")
    (ck.parent / "latest.txt").write_text(ck.name)
    line = first_line(rmtl(tmp_path, "sweep", _sweep(tmp_path), "--local"))
    assert line.startswith(f"error: run directory {ck.parents[1]} cannot be resumed: {ck / 'meta.json'} is not valid "
                           f"JSON"), line
    assert "--fresh" in line


def test_qualify_seed_below_zero(tmp_path):
    line = first_line(rmtl(tmp_path, "qualify", "--reward", "oracle", "--seed", -1, "--small"))
    assert line == "error: --seed must be an integer >= 0 (a run seed), got -1", line


FAMILIES = "task: fetch_lift\nseed: 700000\nfamilies:\n  expert: {group: expert, policy: expert, noise_levels: [0.0], episodes: 1}\n"


def test_qualify_families_file_without_families(tmp_path):
    for text in ("task: fetch_lift\nseed: 1\nfamilies: {}\n",):
        (tmp_path / "fam.yaml").write_text(text)
        line = first_line(rmtl(tmp_path, "qualify", "--reward", "oracle", "--families", tmp_path / "fam.yaml"))
        assert line.startswith(f"error: qualification families {tmp_path / 'fam.yaml'} lists no families"), line
    (tmp_path / "fam.yaml").write_text("families: [\n")
    line = first_line(rmtl(tmp_path, "qualify", "--reward", "oracle", "--families", tmp_path / "fam.yaml"))
    assert "fam.yaml is not valid YAML at line 2, column 1: " in line, line


def test_a_damaged_cached_qualification_state_file_is_one_line(tmp_path):
    fam = tmp_path / "fam.yaml"
    fam.write_text(FAMILIES)
    r = rmtl(tmp_path, "qualify", "--reward", "oracle", "--families", fam, "--out", tmp_path / "q")
    assert r.returncode == 0, r.stderr[-3000:]
    (cached,) = (tmp_path / "data" / "qualification" / "full" / "states").glob("expert-*.npz")
    whole = cached.read_bytes()
    for damaged in (whole[: len(whole) // 3], os.urandom(500)):
        cached.write_bytes(damaged)
        line = first_line(rmtl(tmp_path, "qualify", "--reward", "oracle", "--families", fam, "--out", tmp_path / "q"))
        assert line.startswith(f"error: the cached states of family expert, {cached}, are damaged"), line
        assert "delete that file and run again" in line


def test_a_negative_error_seed_is_refused(tmp_path):
    line = first_line(rmtl(tmp_path, "train", "stage1", "--set", "reward.kind=degraded_oracle",
                           "--set", "reward.error.seed=-1", "--steps", 64, "--out", tmp_path / "r"))
    assert "reward.error.seed=-1: Input should be greater than or equal to 0" in line, line
    line = first_line(rmtl(tmp_path, "qualify", "--reward", "degraded_oracle", "--set", "reward_config.error.seed=-2",
                           "--small"))  # refused before any rollout
    assert "error.seed" in line and "greater than or equal to 0" in line, line
    line = first_line(rmtl(tmp_path, "train", "stage1", "--seed", -1, "--steps", 64, "--out", tmp_path / "r"))
    assert "'--seed'" in line and "greater than or equal to 0" in line, line


def test_train_reward_vlm_without_data(tmp_path):
    line = first_line(rmtl(tmp_path, "train-reward-vlm", "--out", tmp_path / "v"))
    assert line.startswith("error: train-reward-vlm has no training data: give --store STORE"), line
    assert not (tmp_path / "v").exists()


# ------------------------------------------------------------------------- item 14: misleading
def test_a_kind_switched_by_set_keeps_the_commands_model(tmp_path):
    line = first_line(rmtl(tmp_path, "train", "stage1", "--set", "reward.kind=hybrid",
                           "--set", "reward.vlm_micro_tasks=[nosuch]", "--steps", 64, "--out", tmp_path / "r"))
    assert "reward.vlm_micro_tasks names ['nosuch']; this task's micro-tasks are approach, align, grasp" in line, line
    assert "PE-Core" not in line
    (tmp_path / "c.yaml").write_text("reward: {kind: hybrid, vlm_micro_tasks: [nosuch]}\n")
    line = first_line(rmtl(tmp_path, "train", "stage1", "--config", tmp_path / "c.yaml", "--out", tmp_path / "r"))
    assert "vlm_micro_tasks names ['nosuch']" in line and "PE-Core" not in line, line
    from rmtl.default_model import DEFAULT_MODEL
    from rmtl.train.config import stage1_config

    assert stage1_config("rmtl", reward={"kind": "hybrid"}).reward.model == DEFAULT_MODEL


def test_reward_kind_flag_takes_every_kind(tmp_path):
    line = first_line(rmtl(tmp_path, "train", "stage1", "--reward.kind", "degraded_oracle",
                           "--reward.error.seed", -1, "--steps", 64, "--out", tmp_path / "r"))
    assert "reward.error.seed=-1" in line and "not one of vlm" not in line, line
    line = first_line(rmtl(tmp_path, "train", "stage1", "--reward.kind", "nosuch", "--out", tmp_path / "r"))
    assert "unknown reward kind 'nosuch'; known kinds: degraded_oracle, dense, hybrid, oracle, rule_only, vlm" in line
    r = rmtl(tmp_path, "train", "stage1", "--help")
    assert r.returncode == 0 and "{degraded_oracle,dense,hybrid,oracle,rule_only,vlm}" in r.stdout


def test_report_without_runs_says_what_it_needs(tmp_path):
    line = first_line(rmtl(tmp_path, "report"))
    assert line.startswith("error: rmtl report needs the runs to report: rmtl report RUN_DIR...") and \
        "only Stage-2" not in line, line
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x").mkdir()
    (tmp_path / "empty" / "x" / "config.yaml").write_text("worker: w\nseed: 0\n")
    line = first_line(rmtl(tmp_path, "report", tmp_path / "empty"))
    assert "only Stage-2 runs" in line, line  # said only where there are Stage-2 runs


def test_a_random_bytes_manager_is_no_pickle(tmp_path):
    ck = tmp_path / "run" / "checkpoints" / "step_000000064"
    ck.mkdir(parents=True)
    (ck.parent / "latest.txt").write_text(ck.name)
    (ck / "model.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    (ck / "meta.json").write_text(json.dumps({"num_timesteps": 64, "config": {"env": {}}}))
    for junk in (os.urandom(400), b"hello world, not torch"):
        (ck / "manager.pt").write_bytes(junk)
        line = first_line(rmtl(tmp_path, "report", "--stage", 2, tmp_path / "run", "--out", tmp_path / "rep"))
        assert line.startswith(f"error: {ck / 'manager.pt'} (Stage-2 manager) is not a readable torch file"), line
        assert "could run code" not in line


@pytest.mark.parametrize("text, where", [("seed: [1\n  a: b\n", "line 2, column 4"), ("a: 1\n b: 2\n", "line 2, column 3"),
                                         ('a: "x\n', "line 2, column 1")])
def test_yaml_errors_name_line_and_column(tmp_path, text, where):
    (tmp_path / "c.yaml").write_text(text)
    line = first_line(rmtl(tmp_path, "train", "stage1", "--config", tmp_path / "c.yaml"))
    assert line.startswith(f"error: config file {tmp_path / 'c.yaml'} is not valid YAML at {where}: "), line
    (tmp_path / "sweep.yaml").write_text(f"output_root: x\nruns:\n{text}")
    line = first_line(rmtl(tmp_path, "sweep", tmp_path / "sweep.yaml", "--dry-run"))
    assert line.startswith(f"error: sweep file {tmp_path / 'sweep.yaml'} is not valid YAML at line "), line


def test_a_value_after_a_switch_is_named(tmp_path):
    line = first_line(rmtl(tmp_path, "train", "stage1", "--progress-bar", "true", "--out", tmp_path / "r"))
    assert line == ("error: '--progress-bar' takes no value (a switch: --progress-bar turns it on, --no-progress-bar "
                    "off), but 'true' follows it; see 'rmtl train stage1 --help'"), line
    line = first_line(rmtl(tmp_path, "train", "stage1", "--out", tmp_path / "r", "stray"))
    assert "unexpected value 'stray'" in line and "No such option" not in line, line
