"""Stage-2 smoke: a tiny Stage-1 worker (rmtl-fetch-tiny@random, 2 views at 64 px, 2 envs), BC on
its rule rollouts, 128 Stage-2 steps with the actor frozen for the first 64, checkpoints, resume
(through the CLI), evaluation under each selector and the behavioural report."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch

from rmtl.errors import ConfigError
from rmtl.train.config import Stage2Config, stage1_config

VIEWS = ["wide_view", "close_up"]
MODEL = "rmtl-fetch-tiny@random"
STEPS, FREEZE = 128, 64  # 4 rollouts of 2 envs x 16 steps; the first two PPO updates are frozen


def small_stage1(variant, out, reward=None, **kw):
    """``reward``: the run's reward section (default: the VLM reward at smoke size)."""
    return stage1_config(
        variant, n_envs=2, n_steps=16, batch_size=16, n_epochs=2, total_timesteps=32, checkpoint_every=32,
        eval_every=0, eval_episodes=1, progress_bar=False, torch_threads=1, output_dir=str(out), vec_env="dummy",
        env={"views": VIEWS, "resolution": 64, "max_episode_steps": 16},
        reward=reward or {"model": MODEL, "views": VIEWS, "resolution": 64, "batch_size": 16}, **kw)


def small_stage2(worker, out, **kw):
    base = dict(worker=str(worker), total_timesteps=STEPS, freeze_steps=FREEZE, checkpoint_every=32, eval_every=64,
                eval_episodes=2, progress_bar=False, torch_threads=1, output_dir=str(out),
                bc={"episodes": 6, "prefill_segments": 8, "updates": 100})
    base.update(kw)
    return Stage2Config.make(**base)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, random_tiny_vlm):
    from rmtl.train.stage1 import train_stage1
    from rmtl.train.stage2.trainer import train_stage2

    root = tmp_path_factory.mktemp("stage2")
    worker = train_stage1(small_stage1("rmtl", root / "worker"), vlm=random_tiny_vlm)
    no_phase = train_stage1(small_stage1("no_phase_input", root / "no_phase", reward={"kind": "dense"}))
    run = train_stage2(small_stage2(worker, root / "s2"), vlm=random_tiny_vlm)
    return {"root": root, "worker": worker, "no_phase": no_phase, "run": run}


def _ck(run, step):
    return run / "checkpoints" / f"step_{step:09d}"


@pytest.mark.slow
def test_stage2_trains_checkpoints_and_logs(runs):
    from rmtl.train.run.csv_log import read_csv

    d = runs["run"]
    assert (d / "config.yaml").is_file() and (d / "run.json").is_file() and any((d / "tb").iterdir())
    assert sorted(p.name for p in (d / "checkpoints").glob("step_*")) == [f"step_{k:09d}" for k in (32, 64, 96, 128)]
    for k in (32, 64, 96, 128):
        assert (_ck(d, k) / "model.zip").is_file() and (_ck(d, k) / "manager.pt").is_file()
    # final/: the last checkpoint as policy only (what the results keep), loadable without checkpoints/
    from rmtl.train.stage2.manager_callback import load_manager

    final = torch.load(d / "final" / "manager.pt", weights_only=False)
    assert set(final) == {"net", "hidden", "horizon"}  # no optimiser, no random state
    last = torch.load(_ck(d, 128) / "manager.pt", weights_only=False)
    assert all(torch.equal(final["net"][k], last["net"][k]) for k in last["net"])
    assert load_manager(d / "final")[1] == last["horizon"] and (d / "final" / "meta.json").is_file()
    assert (d / "final" / "model.zip").stat().st_size < (_ck(d, 128) / "model.zip").stat().st_size
    assert [p.name for p in d.iterdir() if "final" in p.name] == ["final"]  # staged beside it and renamed: nothing left over
    bc = json.loads((d / "bc.json").read_text())
    assert bc["episodes_total"] == 6 and 0.0 <= bc["heldout_accuracy"] <= 1.0 and bc["updates"] == 100
    m = read_csv(d / "manager.csv")
    assert [r["timesteps"] for r in m] == [32, 64, 96, 128] and [r["updates"] for r in m] == [1, 2, 3, 4]
    assert all(r["segments"] >= 8 for r in m)  # ~32 transitions / H=3 per rollout
    keys = set().union(*read_csv(d / "progress_000000000.csv"))
    assert {"manager/entropy", "manager/agreement_rule", "manager/step_agreement_rule", "manager/segment_return",
            "manager/kl_rule", "rollout/success_rate", "worker/actor_frozen", "eval/success_rate",
            "eval/manager_decision_agreement_rule", "reward/reward"} <= keys
    assert [r["timesteps"] for r in read_csv(d / "eval.csv")] == [64, 128]
    s = json.loads((d / "summary.json").read_text())
    assert s["env_steps"] == STEPS and s["actor_unfrozen_at"] == 96
    meta = json.loads((_ck(d, 128) / "meta.json").read_text())
    assert meta["stage"] == 2 and meta["config"]["reward"]["model"] == MODEL


@pytest.mark.slow
def test_freeze_keeps_actor_bit_identical_then_trains_it(runs):
    from rmtl.train.eval.evaluate import load_checkpoint
    from rmtl.train.stage2.worker_freeze import actor_parameters

    w, _, _ = load_checkpoint(runs["worker"])
    w_actor = dict(actor_parameters(w.policy))
    w_all = dict(w.policy.named_parameters())
    assert {n.split(".")[0] for n in w_actor} == {"mlp_extractor", "action_net", "log_std"}
    for k in (32, 64, 96, 128):
        m, _, _ = load_checkpoint(_ck(runs["run"], k))
        actor = dict(actor_parameters(m.policy))
        same = all(torch.equal(actor[n], w_actor[n]) for n in w_actor)
        assert same == (k <= FREEZE), k
        critic = [n for n in w_all if n.startswith(("mlp_extractor.value_net", "value_net"))]
        assert critic and not all(torch.equal(dict(m.policy.named_parameters())[n], w_all[n]) for n in critic)
        assert m.learning_rate == (3e-4 if k <= FREEZE else 1e-4)


@pytest.mark.slow
def test_resume_through_cli_continues_and_refuses_changes(runs, random_tiny_vlm, tmp_path, capsys):
    from rmtl.cli import run
    from rmtl.train.run.csv_log import read_csv
    from rmtl.train.stage2.trainer import train_stage2

    d = tmp_path / "copy"
    shutil.copytree(runs["run"], d)
    before = torch.load(_ck(d, 128) / "manager.pt", weights_only=True)
    assert run(["train", "stage2", "--worker", str(runs["worker"]), "--config", str(d / "config.yaml"),
                "--out", str(d), "--steps", "160", "--no-progress"]) == 0
    assert "stage 2: 160 env steps" in capsys.readouterr().out
    assert (d / "run_resume_000000128.json").is_file() and (d / "progress_000000128.csv").is_file()
    m = read_csv(d / "manager.csv")
    assert [r["timesteps"] for r in m] == [32, 64, 96, 128, 160] and m[-1]["updates"] == 5
    after = torch.load(_ck(d, 160) / "manager.pt", weights_only=True)
    assert after["updates"] == 5
    assert not torch.equal(before["net"]["net.0.weight"], after["net"]["net.0.weight"])
    torch.testing.assert_close(before["net"]["mean"], after["net"]["mean"])  # BC normalisation kept
    with pytest.raises(ConfigError, match="different config"):
        train_stage2(small_stage2(runs["worker"], d, total_timesteps=192, manager={"kl_coef": 0.1}), vlm=random_tiny_vlm)


@pytest.mark.slow
def test_evaluate_selectors_and_behaviour_report(runs, tmp_path):
    from rmtl.cli import run
    from rmtl.train.eval.evaluate import load_checkpoint
    from rmtl.train.run.csv_log import read_csv
    from rmtl.train.stage2.manager_callback import load_manager
    from rmtl.train.stage2.selector_eval import evaluate_selector

    from rmtl.tasks.fetch_lift.env import EnvConfig

    model, meta, _ = load_checkpoint(runs["run"])
    net, horizon = load_manager(runs["run"])
    env_config = EnvConfig.make(**meta["config"]["env"])
    a = evaluate_selector(model, env_config, 2, 7, selector="manager", manager=net, horizon=horizon, traces=1)
    b = evaluate_selector(model, env_config, 2, 7, selector="manager", manager=net, horizon=horizon)
    assert a.result == b.result and 0.0 <= a.decision_agreement <= 1.0  # seeded, greedy
    tr = a.traces[0]
    assert len(a.traces) == 1 and len(tr["phase"]) == len(tr["rule"]) == len(tr["distance"]) > 0
    # The manager's phase only changes at multiples of H.
    changes = [t for t in range(1, len(tr["phase"])) if tr["phase"][t] != tr["phase"][t - 1]]
    assert all(t % horizon == 0 for t in changes)
    # Per-episode outcomes in seed order and per-phase step counts, for paired comparisons of selectors.
    assert len(a.episode_success) == 2 and sum(a.episode_success) == a.result.successes
    assert len(a.phase_steps) == len(a.rule_phase_steps) == net.num_phases
    assert sum(a.phase_steps) == sum(a.rule_phase_steps) >= len(tr["phase"])
    assert a.phase_steps[:] != [0] * net.num_phases
    r = evaluate_selector(model, env_config, 2, 7, selector="rule")
    assert r.phase_steps == r.rule_phase_steps and r.step_agreement == 1.0

    out = tmp_path / "rep"
    assert run(["report", "--stage", "2", str(runs["run"]), "--no-phase", str(runs["no_phase"]),
                "--single-prompt", str(runs["worker"]), "--episodes", "2", "--traces", "2", "--out", str(out)]) == 0
    rows = read_csv(out / "behaviour.csv")
    assert [x["policy"] for x in rows] == ["ppo_no_phase_input", "worker_rule", "stage1_worker_rule", "worker_manager",
                                          "worker_manager_bc", "single_prompt"]
    assert all(0.0 <= x["ci_low"] <= x["success_rate"] <= x["ci_high"] <= 1.0 for x in rows)
    assert rows[1]["step_agreement_rule"] == 1.0 and rows[0]["step_agreement_rule"] == "" and rows[0]["paper_success"] == 0.89
    info = json.loads((out / "behaviour.json").read_text())
    assert info["bc_heldout_accuracy"] is not None and info["paper_agreement"] == 0.73
    assert (out / "phase_traces.png").stat().st_size > 1000 and "learned manager" in (out / "behaviour.md").read_text()
    assert np.isfinite(info["eval_decision_agreement_rule"])


def test_single_prompt_worker_is_refused(tmp_path):
    """One phase (single prompt): nothing for a manager to choose; refused before anything is built."""
    from rmtl.train.stage2.trainer import worker_stage1_config

    ck = tmp_path / "checkpoints" / "step_000000032"
    ck.mkdir(parents=True)
    (ck / "model.zip").write_bytes(b"")
    for variant, ok in (("single_prompt_multi_view", False), ("rmtl", True)):
        cfg = small_stage1(variant, tmp_path)
        (ck / "meta.json").write_text(json.dumps({"config": cfg.model_dump(mode="json")}))
        if ok:
            assert worker_stage1_config(small_stage2(ck, tmp_path / "s2")).variant == "rmtl"
        else:
            with pytest.raises(ConfigError, match="single-prompt worker"):
                worker_stage1_config(small_stage2(ck, tmp_path / "s2"))


@pytest.mark.slow
def test_stage2_arms_compare_per_worker_and_pooled(runs):
    """The arms of one worker on the same seeded episodes, paired per episode; pooling two workers
    concatenates their episodes; the sign test counts only the discordant episodes."""
    from rmtl.train.stage2.compare import WorkerArms, compare, evaluate_arms, phase_shares, pooled, sign_test

    arms = evaluate_arms(WorkerArms(worker=runs["worker"], stage2=runs["run"], rule_continued=runs["worker"],
                                    no_phase=runs["no_phase"]), episodes=2, seed=7, echo=lambda s: None)
    assert set(arms) >= {"worker_rule", "worker_manager", "stage2_worker_rule", "worker_manager_bc", "rule_continued"}
    assert all(len(a["episode_success"]) == 2 and sum(a["episode_success"]) == a["successes"] for a in arms.values())
    # the control here is the worker itself: the same policy under the rule on the same seeds
    assert arms["rule_continued"]["episode_success"] == arms["worker_rule"]["episode_success"]
    pool = pooled({"w0": arms, "w1": arms})
    assert pool["worker_manager"]["episodes"] == 4 and set(pool) <= set(arms)
    assert pool["worker_rule"]["phase_steps"] == [2 * x for x in arms["worker_rule"]["phase_steps"]]
    c = compare(pool, "worker_manager", "worker_rule")
    assert c["a_only"] + c["b_only"] <= 4 and 0.0 <= c["p"] <= 1.0 and compare(pool, "worker_manager", "nope") is None
    share, rule = phase_shares(arms["worker_rule"], ["approach", "align", "grasp"])
    assert share == rule and abs(sum(share.values()) - 1.0) < 1e-9
    assert sign_test([True] * 9 + [False], [False] * 9 + [True]) == {"a_only": 9, "b_only": 1, "p": 0.021484375}
    assert sign_test([True, False], [True, False])["p"] == 1.0


@pytest.mark.slow
def test_report_of_several_stage2_runs_per_worker_and_pooled(runs, tmp_path, monkeypatch, capsys):
    """``rmtl report --stage 2 RUN RUN``: every arm of each worker on the same episodes, per worker and
    pooled with sign tests; a worker's arms measured on the same policies are kept, a changed one is
    measured again; controls given for fewer runs than passed: one line, status 2, nothing written."""
    import rmtl.train.report.stage2_workers as sw
    from rmtl.cli import run
    from rmtl.train.run.csv_log import read_csv

    a, b = tmp_path / "manager_s0", tmp_path / "manager_s1"
    shutil.copytree(runs["run"], a)
    # b as results keep a finished run: final/ (policy only), no checkpoints/
    shutil.copytree(runs["run"], b, ignore=shutil.ignore_patterns("checkpoints"))
    out = tmp_path / "fig7"
    argv = ["report", "--stage", "2", str(a), str(b), "--rule-continued", str(runs["worker"]), str(runs["worker"]),
            "--episodes", "2", "--seed", "7", "--out", str(out)]
    assert run(argv) == 0
    rows = read_csv(out / "fig7.csv")
    assert {r["worker"] for r in rows} == {"manager_s0", "manager_s1", "pooled"}
    by = {(r["worker"], r["arm"]): r for r in rows}
    assert by[("pooled", "worker_manager")]["episodes"] == 4 and by[("manager_s0", "worker_manager")]["episodes"] == 2
    # the same policies (b's final/ is a's last checkpoint) on the same seeds: the pool is twice one worker
    assert by[("manager_s1", "worker_manager")]["checkpoint"].endswith("manager_s1/final")
    for arm in ("worker_rule", "worker_manager", "rule_continued"):
        assert by[("pooled", arm)]["successes"] == 2 * by[("manager_s0", arm)]["successes"]
    info = json.loads((out / "fig7.json").read_text())
    c = info["comparisons_pooled"]["worker_manager_vs_rule_continued"]
    assert c["a_only"] + c["b_only"] <= 4 and 0.0 <= c["p"] <= 1.0
    assert abs(sum(info["manager_phase_share"].values()) - 1.0) < 1e-9
    assert (out / "fig7.png").stat().st_size > 1000 and "pooled over 2 workers" in (out / "fig7.md").read_text()

    measured = []
    real = sw.evaluate_arms
    monkeypatch.setattr(sw, "evaluate_arms", lambda arms, *x, **k: measured.append(arms.stage2.name) or real(arms, *x, **k))
    assert run(argv) == 0 and measured == []  # kept: the same policies and episodes
    for f in (a / "final" / "model.zip", b / "final" / "model.zip"):  # a clone or a copy: new times, the same bytes
        os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    assert run(argv) == 0 and measured == []
    (b / "manager_bc.pt").unlink()  # b's arms change: its BC-only manager is gone
    assert run(argv) == 0 and measured == ["manager_s1"]
    assert ("manager_s1", "worker_manager_bc") not in {(r["worker"], r["arm"]) for r in read_csv(out / "fig7.csv")}

    one = tmp_path / "one"  # one run with its control: the same tables, one worker and the pool
    assert run(["report", "--stage", "2", str(a), "--rule-continued", str(runs["worker"]), "--episodes", "2",
                "--seed", "7", "--out", str(one)]) == 0
    assert {r["worker"] for r in read_csv(one / "fig7.csv")} == {"manager_s0", "pooled"}

    capsys.readouterr()
    bad = tmp_path / "bad"
    assert run(["report", "--stage", "2", str(a), str(b), "--rule-continued", str(runs["worker"]),
                "--out", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rule-continued gives 1 run(s) for 2 Stage-2 runs" in err[0] and not bad.exists()


@pytest.mark.slow
def test_a_kept_final_policy_counts_as_a_run(runs, tmp_path):
    """A folder holding only a Stage-2 run's final/ is a run: a fresh start moves it aside instead of
    writing the new run's final/ over it; the output guard's twin of the marker list says the same."""
    from rmtl import outputs
    from rmtl.train.run.run_dir import RUN_MARKERS, run_files

    kept = tmp_path / "kept"
    shutil.copytree(runs["run"] / "final", kept / "final")
    assert run_files(kept) == ["final"]
    assert set(outputs._RUN_MARKERS) == set(RUN_MARKERS)
