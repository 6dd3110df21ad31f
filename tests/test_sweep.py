"""Sweep files (checked before any server), the committed experiment sweeps, the run lock,
and a local sweep that skips what it finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rmtl.cli import run
from rmtl.train.sweep import LOCK_FILE, RunLock, lock_info, plan, run_starts, stage2_controls
from rmtl.train.sweep_file import load_sweep

ROOT = Path(__file__).resolve().parents[1]
TINY = {"n_envs": 2, "n_steps": 16, "batch_size": 16, "n_epochs": 2, "checkpoint_every": 64, "eval_every": 64,
        "eval_episodes": 2, "validation_episodes": 2, "test_episodes": 2, "torch_threads": 1, "vec_env": "dummy",
        "env.max_episode_steps": 16}


def _write(path: Path, data: object) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def _spec(root: Path, **extra: object) -> dict:
    return {"output_root": str(root), "steps": 64, "set": dict(TINY),
            "runs": [{"variants": ["rule_only"], "seeds": [0]}], **extra}


@pytest.mark.parametrize("content, words", [
    (None, ["does not exist"]),
    ("runs: [\n", ["not valid YAML"]),
    ({"output_root": None}, ["output_root is missing"]),
    ({"runs": [{"variants": ["no_such_variant"], "seeds": [0]}]}, ["unknown Stage-1 variant 'no_such_variant'"]),
    ({"set": {"n_env": 2}}, ["unknown override key 'n_env'", "rule_only_s0"]),
    ({"set": {"reward.nope": 1}}, ["unknown override key 'reward.nope'"]),
    ({"set": {"n_envs": 0}}, ["n_envs"]),
    ({"runs": [{"variants": ["rule_only"], "seeds": [0, 0]}]}, ["appears twice"]),
    ({"runs": [{"variants": ["rule_only"], "seeds": "0"}]}, ["seeds must be"]),
    ({"set": {"reward.model": "SET-ME"}, "runs": [{"variants": ["rmtl"], "seeds": [0]}]}, ["placeholder"]),
    ({"output_root": "s3://bucket/runs"}, ["not supported"]),
    ({"pools": "x"}, ["unknown key 'pools'"]),
    ({"runs": [{"stage": 2, "seeds": [0]}]}, ["worker is missing"]),
    ({"runs": [{"stage": 2, "worker": "w", "variants": ["rmtl"], "seeds": [0]}]}, ["unknown key 'variants'", "Stage-2"]),
    ({"runs": [{"stage": 3, "variants": ["rmtl"], "seeds": [0]}]}, ["stage must be 1"]),
    ({"runs": [{"stage": 2, "worker": "no/such/worker", "seeds": [0]}]}, ["stage2_s0"]),
    ({"runs": [{"variants": ["rule_only", "dense"], "seeds": [0], "conditions": {"a": {}}}]}, ["takes one variant"]),
    ({"runs": [{"variants": ["rule_only"], "seeds": [0], "conditions": {"a": {}}, "arms": {"b": {}}}]}, ["not both"]),
    ({"runs": [{"variants": ["rule_only"], "seeds": [0], "conditions": {"a": {"from": "no/such.yaml"}}}]},
     ["conditions.a.from no/such.yaml", "does not exist"]),
])
def test_bad_sweep_file_is_one_line_status_2_before_any_server(tmp_path, capsys, monkeypatch, content, words):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # nothing listens: a contact would say so
    path = tmp_path / "sweep.yaml"
    if content is not None:
        _write(path, content if isinstance(content, str) else {**_spec(tmp_path / "runs"), **content})
    rc = run(["sweep", str(path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert all(w in err for w in words) and "Prefect API" not in err and "Traceback" not in err, err


def test_sweep_without_api_says_how(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    rc = run(["sweep", str(_write(tmp_path / "s.yaml", _spec(tmp_path / "runs")))])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--local" in err and "PREFECT_API_URL" in err, err


def test_structure_sweep_reproduces_the_oracle_structure_runs():
    """Every run folder of results/oracle_structure/runs (the continued-rule diagnostic aside) is a
    run of the sweep under the same name, with the steps and checkpoint spacing it ran with; all
    are finished, so running the sweep trains nothing."""
    sweep = load_sweep(ROOT / "experiments" / "oracle_structure" / "structure.yaml")
    runs_dir = ROOT / "results" / "oracle_structure" / "runs"
    names = {r.name for r in sweep.runs}
    assert names == {p.name for p in runs_dir.iterdir() if p.is_dir()} - {"oracle_rmtl_s0_rule_continued"}
    for r in sweep.runs:
        saved = yaml.safe_load((runs_dir / r.name / "config.yaml").read_text())
        assert saved["variant"] == r.variant and saved["seed"] == r.seed
        assert saved["total_timesteps"] >= r.steps > saved["total_timesteps"] - 640
        for key in ("checkpoint_every", "eval_every", "vec_env", "torch_threads", "keep_results"):
            assert saved[key] == r.overrides[key], (r.name, key)
    assert all(state == "finished" for _, state in plan(sweep))
    assert sweep.report_dir == str(ROOT / "results" / "oracle_structure" / "report")


def test_learnability_sweeps_reproduce_the_map_runs():
    """The map's conditions and checks as sweeps: every run folder of results/learnability/runs under
    its name, with the steps, checkpoint spacing and reward error it ran with (a check's error from
    its committed replay fit, ``from:``); all finished, so running them trains nothing."""
    from rmtl.train.sweep_file import nest

    runs_dir = ROOT / "results" / "learnability" / "runs"
    sweeps = [load_sweep(ROOT / "experiments" / "learnability" / f) for f in ("conditions.yaml", "checks.yaml")]
    runs = [r for sw in sweeps for r in sw.runs]
    assert {r.name for r in runs} == {p.name for p in runs_dir.iterdir() if p.is_dir()} and len(runs) == 54
    assert [r.name for r in sweeps[0].runs[:2]] == ["grasp_sys_1.2_s0", "grasp_resting_1.0_s0"]  # seed-major
    for r in runs:
        saved = yaml.safe_load((runs_dir / r.name / "config.yaml").read_text())
        assert saved["variant"] == r.variant == "degraded_oracle" and saved["seed"] == r.seed
        assert r.name == f"{r.overrides['sweep_arm']}_s{r.seed}"
        assert saved["total_timesteps"] >= r.steps > saved["total_timesteps"] - 640
        for key in ("checkpoint_every", "eval_every", "vec_env", "torch_threads", "keep_results"):
            assert saved[key] == r.overrides[key], (r.name, key)
        error = nest({k: v for k, v in r.overrides.items() if k.startswith("reward.")}).get("reward", {}).get("error", {})
        for group, entries in error.items():
            for name, value in entries.items():
                got = saved["reward"]["error"][group][name]
                assert (got == pytest.approx(value) if not isinstance(value, dict) else
                        all(got[k] == pytest.approx(v) for k, v in value.items())), (r.name, group, name)
    replay = yaml.safe_load((ROOT / "results/learnability/replay_rmtl-fetch-tiny.yaml").read_text())["overrides"]
    tiny = next(r for r in runs if r.name == "replay_tiny_s0")
    assert all(tiny.overrides[k] == v for k, v in replay.items())
    assert all(state == "finished" for sw in sweeps for _, state in plan(sw))


def test_pixel_sweep_needs_its_model(tmp_path):
    from rmtl.vlm.registry import declared_renderer

    text = (ROOT / "experiments" / "pixel" / "pixel_rmtl.yaml").read_text()
    spec = yaml.safe_load(text)
    # The committed sweep names the chosen model (RULE.md), a project model that declares its renderer.
    model = spec["set"]["reward.model"]
    assert declared_renderer(model) is not None
    assert {r.overrides["reward.model"] for r in load_sweep(ROOT / "experiments" / "pixel" / "pixel_rmtl.yaml").runs} == {model}
    # A copy with the model left unset is refused before anything runs.
    unset = tmp_path / "pixel_unset.yaml"
    unset.write_text(text.replace(f"reward.model: {model}", "reward.model: SET-ME-reward-model"))
    with pytest.raises(Exception, match="placeholder"):
        load_sweep(unset)
    assert spec["steps"] == 600_000 and spec["set"]["vec_env"] == "workers" and spec["runs"][0]["seeds"] == [0, 1, 2]
    # RULE.md: checkpoints every 40k, runs kept where summarize.py reads them
    assert spec["set"]["checkpoint_every"] == 40_000 and spec["output_root"] == "results/pixel_rmtl/runs"


def test_lock_live_stale_and_refused(tmp_path):
    run_dir = tmp_path / "r"
    with RunLock(run_dir, stale_seconds=60):  # a run refused before its first file leaves no empty folder
        assert run_dir.is_dir()
    assert not run_dir.exists()
    run_dir.mkdir()  # a folder that was there stays
    with RunLock(run_dir, stale_seconds=60):
        assert lock_info(run_dir).state == "live"
        with RunLock(run_dir, stale_seconds=60):  # the same process again (a sweep calling the command): a no-op
            assert lock_info(run_dir).state == "live"
        assert lock_info(run_dir).state == "live"  # the inner exit left the outer holder's lock
        other = subprocess.run([sys.executable, "-c", "import sys; from rmtl.train.run.lock import RunLock\n"
                                "try: RunLock(sys.argv[1], stale_seconds=60).acquire()\n"
                                "except Exception as e: print(e); sys.exit(3)", str(run_dir)],
                               capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert other.returncode == 3 and "not starting a second copy" in other.stdout, other
    assert lock_info(run_dir).state == "free"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    (run_dir / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid}))
    assert lock_info(run_dir).state == "stale"  # this host, no such process
    # a killed trainer whose parent has not reaped it yet (a zombie) is gone too: a sweep started
    # right after a worker was killed must see its run as lost, not as still training
    zombie = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import psutil

        (run_dir / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": zombie.pid,
                                                     "pid_started": psutil.Process(zombie.pid).create_time()}))
        assert lock_info(run_dir).state == "live"
        zombie.kill()
        deadline = time.monotonic() + 10
        while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE  # not reaped: its pid still answers
        assert lock_info(run_dir).state == "stale"
    finally:
        zombie.kill()
        zombie.wait()
    with RunLock(run_dir, stale_seconds=60):  # taken over
        assert json.loads((run_dir / LOCK_FILE).read_text())["pid"] == os.getpid()
    (run_dir / LOCK_FILE).write_text(json.dumps({"host": "elsewhere", "pid": 1}))
    assert lock_info(run_dir, stale_seconds=60).state == "live"  # another host: its heartbeat decides
    old = time.time() - 120
    os.utime(run_dir / LOCK_FILE, (old, old))
    assert lock_info(run_dir, stale_seconds=60).state == "stale"


@pytest.mark.slow
def test_local_sweep_trains_once_then_skips(tmp_path, capsys):
    root = tmp_path / "runs"
    path = _write(tmp_path / "s.yaml", _spec(root, runs=[{"variants": ["rule_only"], "seeds": [0, 1]}]))
    assert run(["sweep", str(path), "--local"]) == 0
    assert "starting: rule_only_s1" in capsys.readouterr().out
    assert run(["sweep", str(path), "--local"]) == 0
    out = capsys.readouterr().out
    assert "done: rule_only_s0" in out and "done: rule_only_s1" in out and "starting" not in out
    for name in ("rule_only_s0", "rule_only_s1"):
        assert len(run_starts(root / name)) == 1 and (root / name / "selection.json").is_file()
        assert not (root / name / LOCK_FILE).exists()
    table = (root / "report" / "success_table.md").read_text()
    assert sum(ln.startswith("| rule_only |") for ln in table.splitlines()) == 2


@pytest.mark.slow
def test_train_flows_wrap_the_cli_entry_points(tmp_path, tiny_dense_run):
    """The flows' bodies (called without the Prefect engine): Stage 2 over a Stage-1 worker trains
    under the run's lock, then counts as finished; Stage 1 skips a finished run."""
    from flows.train import train_stage1_flow, train_stage2_flow

    params = dict(worker=str(tiny_dense_run), seed=0, output_dir=str(tmp_path / "s2"), total_timesteps=64,
                  overrides={"freeze_steps": 32, "checkpoint_every": 32, "eval_every": 64, "eval_episodes": 2,
                             "torch_threads": 1, "bc.episodes": 6, "bc.prefill_segments": 8, "bc.updates": 20})
    first = train_stage2_flow.fn(**params)
    assert first["status"] == "trained" and (tmp_path / "s2" / "summary.json").is_file()
    assert not (tmp_path / "s2" / LOCK_FILE).exists()
    assert train_stage2_flow.fn(**params)["status"] == "finished"
    cfg = yaml.safe_load((tiny_dense_run / "config.yaml").read_text())
    again = train_stage1_flow.fn(variant="dense_reference", seed=cfg["seed"], output_dir=str(tiny_dense_run),
                                 total_timesteps=cfg["total_timesteps"],
                                 # the run's rollout size: the config rounds steps up to whole rollouts of it
                                 overrides={"keep_results": False, **{k: cfg[k] for k in ("n_envs", "n_steps", "batch_size")}})
    assert again["status"] == "finished"


def test_a_report_tells_sweep_arms_of_one_variant_and_seed_apart(tmp_path, tiny_dense_run):
    """Arms share a variant and a seed; the report names them by their run folders, never pooling them."""
    import shutil

    from rmtl.train.report.runs import load_runs

    dirs = [tmp_path / "dense_reference_lr_low_s0", tmp_path / "dense_reference_lr_high_s0"]
    for d in dirs:
        shutil.copytree(tiny_dense_run, d)
    runs, skipped = load_runs([*dirs, tiny_dense_run])
    assert not skipped
    assert [r["variant"] for r in runs[:2]] == ["dense_reference_lr_low", "dense_reference_lr_high"]
    alone, _ = load_runs([dirs[0]])
    assert alone[0]["variant"] == "dense_reference"  # one run per variant and seed keeps its variant's name


def test_a_sweep_arm_is_recorded_in_the_run_config_and_names_the_run(tmp_path, tiny_dense_run):
    """The hybrids' sweep records each arm in its runs' config; a report names a run by the arm it
    records, whatever its folder is called and even alone."""
    import shutil

    from rmtl.train.report.runs import load_runs
    from rmtl.train.sweep_file import stage1_run_config

    sweep = load_sweep(ROOT / "experiments" / "learnability" / "hybrids.yaml")
    arms = {r.name: r.overrides.get("sweep_arm") for r in sweep.runs}
    assert arms and all(arm and f"_{arm}_s" in name for name, arm in arms.items())
    r = sweep.runs[0]
    assert stage1_run_config(r.variant, r.seed, r.overrides, r.output_dir, r.steps).sweep_arm == arms[r.name]
    plain = load_sweep(ROOT / "experiments" / "oracle_structure" / "structure.yaml")
    assert all("sweep_arm" not in r.overrides for r in plain.runs)  # no arms: nothing recorded
    d = tmp_path / "some_folder"
    shutil.copytree(tiny_dense_run, d)
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    (d / "config.yaml").write_text(yaml.safe_dump({**cfg, "sweep_arm": "lr_low"}))
    runs, skipped = load_runs([d])
    assert not skipped and runs[0]["variant"] == "dense_reference_lr_low"


@pytest.mark.slow
def test_a_sweep_runs_stage2_groups_and_gives_each_run_its_seed(tmp_path, capsys, tiny_dense_run):
    """A Stage-2 group trains the manager over each seed's worker (``{seed}`` in its path) with its
    own Stage2Config keys; a Stage-1 arm's ``{seed}`` value is its run's seed; the Stage-1 run warm-started
    from the worker is its rule-continued control, and the report is Fig. 7 with both, not a Stage-1
    report; a second pass skips both finished runs."""
    import shutil

    for seed in (0, 1):
        shutil.copytree(tiny_dense_run, tmp_path / f"w_s{seed}")
    root = tmp_path / "runs"
    s2 = {"freeze_steps": 32, "checkpoint_every": 32, "eval_every": 64, "eval_episodes": 2, "torch_threads": 1,
          "bc.episodes": 6, "bc.prefill_segments": 8, "bc.updates": 20}
    spec = {"output_root": str(root), "steps": 64, "runs": [
        {"stage": 2, "name": "manager", "worker": str(tmp_path / "w_s{seed}"), "seeds": [1], "set": s2},
        {"variants": ["rule_only"], "seeds": [0, 1], "set": dict(TINY),
         "arms": {"warm": {"init_policy": str(tmp_path / "w_s{seed}")}}}]}
    path = _write(tmp_path / "s.yaml", spec)
    sweep = load_sweep(path)
    by_name = {r.name: r for r in sweep.runs}
    assert list(by_name) == ["manager_s1", "rule_only_warm_s0", "rule_only_warm_s1"]
    assert by_name["manager_s1"].stage == 2 and by_name["manager_s1"].worker == str(tmp_path / "w_s1")
    assert by_name["rule_only_warm_s1"].overrides["init_policy"] == str(tmp_path / "w_s1")
    assert by_name["rule_only_warm_s0"].overrides["init_policy"] == str(tmp_path / "w_s0")
    assert [r.name for r in stage2_controls(sweep)] == ["rule_only_warm_s1"]  # seed 0 has no Stage-2 run
    spec["runs"][1]["seeds"] = [1]  # train the Stage-2 run and its control
    _write(path, spec)
    assert run(["sweep", str(path), "--local"]) == 0
    out = capsys.readouterr().out
    assert "starting: manager_s1" in out and "starting: rule_only_warm_s1" in out
    run_dir = root / "manager_s1"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 64 and summary["seed"] == 1 and "/w_s1/" in summary["worker"]
    assert run_starts(run_dir)[0]["stage"] == 2 and not (run_dir / LOCK_FILE).exists()
    fig7 = json.loads((root / "report" / "fig7.json").read_text())
    assert list(fig7["workers"]) == ["manager_s1"]
    arms = fig7["workers"]["manager_s1"]
    assert arms["rule_continued"]["episodes"] == TINY["test_episodes"] == arms["worker_manager"]["episodes"]
    assert not (root / "report" / "stage1").exists()  # the only Stage-1 run is the control, in Fig. 7
    assert run(["sweep", str(path), "--local"]) == 0
    assert "done: manager_s1" in capsys.readouterr().out
