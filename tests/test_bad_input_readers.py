"""Readers and messages: kept files that are truncated or of the wrong shape, input files whose
values were accepted unchecked, and lines that named the wrong problem. Each test runs the real
command, ``python -m rmtl``, as a subprocess and asserts its first error line (status 2, no
traceback). The classes: every kept JSON the report reads is checked before use, a families file
and a learnability map are checked value by value, a torch file torch's reader fails on is named
damaged, a folder under a file is never created, a mistyped option is said first with what it
may have meant, and a scheduler address must answer as a Dask scheduler."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import command_env

ROOT = Path(__file__).resolve().parent.parent
LEARNER = ROOT / "pipeline" / "qualify" / "qualification_learners" / "learner_oracle_learned"
FAMILY = ("task: fetch_lift\nseed: 700000\nfamilies:\n"
          "  expert: {{group: {group}, policy: expert, episodes: {episodes}}}\n")


def rmtl(tmp: Path, *args: object, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rmtl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=command_env(tmp), cwd=cwd or tmp)


def first_line(r: subprocess.CompletedProcess) -> str:
    """The first stderr line of a refused command (status 2, no traceback)."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    assert lines and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr[-3000:]
    return lines[0]


def _stage2_run(tmp: Path, name: str, manager: bytes = b"x") -> Path:
    """A Stage-2 run folder as the report's first checks see it: its config naming a worker, a final
    policy with meta.json and manager.pt (nothing here is loaded before the checks under test)."""
    run, worker = tmp / name, tmp / f"worker_{name}"
    (run / "final").mkdir(parents=True)
    worker.mkdir()
    (worker / "model.zip").write_bytes(b"worker")
    (run / "config.yaml").write_text(f"worker: {worker}\n")
    (run / "final" / "model.zip").write_bytes(b"policy")
    (run / "final" / "meta.json").write_text(json.dumps({"config": {"env": {}}}))
    (run / "final" / "manager.pt").write_bytes(manager)
    return run


# ------------------------------------------------------------------ rmtl report --stage 2
def test_report_stage2_without_a_run(tmp_path):
    line = first_line(rmtl(tmp_path, "report", "--stage", 2, "--out", tmp_path / "rep"))
    assert line.startswith("error: rmtl report --stage 2 needs the Stage-2 run to report: "
                           "rmtl report --stage 2 RUN"), line


def test_report_stage2_kept_arms_truncated_or_of_the_wrong_shape(tmp_path):
    a, b = _stage2_run(tmp_path, "a"), _stage2_run(tmp_path, "b")
    out = tmp_path / "rep"
    out.mkdir()
    kept = out / "arms_a.json"
    whole = json.dumps({"measured_on": {"episodes": 1}, "arms": {"worker_rule": {"successes": 1}}})
    for text, why in ((whole[:25], "is not valid JSON (truncated or damaged"),
                      ("[1, 2]", "is not a kept evaluation (a JSON object with 'measured_on' and 'arms' objects)"),
                      (whole, "is not a kept evaluation: arm 'worker_rule' has no valid 'episodes'")):
        kept.write_text(text)
        line = first_line(rmtl(tmp_path, "report", "--stage", 2, a, b, "--out", out))
        assert line.startswith(f"error: kept evaluation {kept} {why}"), line
        assert "pass --again" in line
        assert kept.read_text() == text  # left for the user to look at, never replaced


def test_report_stage2_truncated_manager(tmp_path):
    import io

    import torch

    buf = io.BytesIO()
    torch.save({"net": {"w": torch.zeros(64, 64)}, "hidden": [8], "horizon": 3}, buf)
    run = _stage2_run(tmp_path, "s2", manager=buf.getvalue()[: len(buf.getvalue()) // 2])
    line = first_line(rmtl(tmp_path, "report", "--stage", 2, run, "--out", tmp_path / "rep", "--episodes", 1))
    manager = run.resolve() / "final" / "manager.pt"
    assert line.startswith(f"error: {manager} (Stage-2 manager) is not a readable torch file "
                           f"(truncated or damaged"), line
    assert "cannot access" not in line


# ------------------------------------------------------------------ rmtl qualify
def test_families_file_values_are_checked(tmp_path):
    fam = tmp_path / "fam.yaml"
    for group, episodes, why in (("expert", -2, "episodes=-2: Input should be greater than or equal to 1"),
                                 ("expert", "two", "episodes='two': Input should be a valid integer"),
                                 ("experts", 1, "has an unknown group 'experts' (known: expert, noisy_expert, "
                                                "behaviour, learner)")):
        fam.write_text(FAMILY.format(group=group, episodes=episodes))
        line = first_line(rmtl(tmp_path, "qualify", "--reward", "oracle", "--families", fam, "--out", tmp_path / "q"))
        assert line.startswith(f"error: qualification families {fam}: family 'expert'"), line
        assert why in line, line
    assert not (tmp_path / "data" / "qualification").exists()  # refused before any rollout


def test_learnability_map_coefficients_are_numbers(tmp_path):
    fam = tmp_path / "fam.yaml"
    fam.write_text(FAMILY.format(group="expert", episodes=1))
    shipped = json.loads((ROOT / "rmtl" / "tasks" / "fetch_lift" / "learnability_map.json").read_text())
    shipped["coef"][0] = "0.5"
    bad = tmp_path / "map.json"
    bad.write_text(json.dumps(shipped))
    line = first_line(rmtl(tmp_path, "qualify", "--reward", "oracle", "--families", fam, "--map", bad))
    assert line == (f"error: learnability map {bad} does not follow its schema: bad config value "
                    f"LearnabilityMap.coef.0='0.5': Input should be a valid number; refit it with 'rmtl qualify "
                    f"fit-map'"), line


def test_map_option_given_a_directory(tmp_path):
    (tmp_path / "m").mkdir()
    line = first_line(rmtl(tmp_path, "qualify", "--reward", "oracle", "--map", tmp_path / "m"))
    assert line.startswith(f"error: --map {tmp_path / 'm'} is a directory; give the map's JSON file"), line


def test_reference_none_is_no_reference(tmp_path):
    # --help documents 'none'; the command now goes on to its next check (the conditions file)
    line = first_line(rmtl(tmp_path, "qualify", "fit-map", "--reference", "none", "--conditions",
                           tmp_path / "nope.yaml", "--out", tmp_path / "map"))
    assert line.startswith(f"error: sweep file {tmp_path / 'nope.yaml'} does not exist"), line


# ------------------------------------------------------------------ training inputs
def test_duplicate_hybrid_micro_task(tmp_path):
    line = first_line(rmtl(tmp_path, "train", "stage1", "--set", "reward.kind=hybrid",
                           "--set", "reward.vlm_micro_tasks=[grasp,grasp]", "--steps", 64, "--out", tmp_path / "r"))
    assert "reward.vlm_micro_tasks names 'grasp' more than once (grasp, grasp); give each micro-task once" in line, line
    assert not (tmp_path / "r").exists()


def test_truncated_init_policy_is_damaged_not_a_mismatch(tmp_path):
    policy = tmp_path / "policy"
    policy.mkdir()
    shutil.copy(LEARNER / "meta.json", policy / "meta.json")
    whole = (LEARNER / "model.zip").read_bytes()
    (policy / "model.zip").write_bytes(whole[: len(whole) // 2])
    line = first_line(rmtl(tmp_path, "train", "stage1", "--variant", "rule_only", "--init-policy", policy,
                           "--steps", 64, "--out", tmp_path / "r"))
    assert line.startswith(f"error: init_policy: {policy.resolve() / 'model.zip'} is not a readable SB3 model"), line
    assert "does not fit" not in line
    assert not (tmp_path / "r").exists()  # refused before its first file: no empty run folder left behind
    (tmp_path / "mine").mkdir()  # a folder the user made is theirs, empty or not
    first_line(rmtl(tmp_path, "train", "stage1", "--variant", "rule_only", "--init-policy", policy,
                    "--steps", 64, "--out", tmp_path / "mine"))
    assert (tmp_path / "mine").is_dir()


def test_sweep_output_root_that_is_a_file(tmp_path):
    root = tmp_path / "root"
    root.write_text("a file where the runs would go")
    sweep = tmp_path / "sweep.yaml"
    for out, why in ((root, f"output_root {root} is a file, not a directory"),
                     (root / "sub",
                      f"output_root {root / 'sub'} cannot be created: {root} is a file, not a directory")):
        sweep.write_text(f"output_root: {out}\nsteps: 64\nruns:\n  - {{variants: [rule_only], seeds: [0]}}\n")
        line = first_line(rmtl(tmp_path, "sweep", sweep, "--local"))
        assert line.startswith(f"error: sweep file {sweep}: {why}"), line
        assert "another process" not in line
    assert root.read_text() == "a file where the runs would go"


# ------------------------------------------------------------------ the command line
def test_a_mistyped_option_gets_did_you_mean(tmp_path):
    for args, expected in ((("train", "stage2", "--wroker", "x"), "No such option: --wroker (did you mean --worker?)"),
                           (("export", "lerobot", "--stor", "x"), "No such option: --stor (did you mean --store"),
                           (("train", "stage1", "--set", "reward.kind=vlm", "--reward.modle", "x"),
                            "No such option: --reward.modle (did you mean --reward.model")):
        line = first_line(rmtl(tmp_path, *args))
        assert line.startswith(f"error: {expected}"), line


def test_a_dask_address_that_is_no_scheduler(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "http.server did not start"
                time.sleep(0.2)
        address = f"tcp://127.0.0.1:{port}"
        line = first_line(rmtl(tmp_path, "render-and-embed", "--dask-address", address, "--episodes", 1,
                               "--store", tmp_path / "s.zarr"))
        assert line.startswith(f"error: {address} answers but is not a Dask scheduler "
                               f"(no Dask handshake within 5 s)"), line
        assert not (tmp_path / "s.zarr").exists()
    finally:
        server.terminate()
        server.wait(timeout=30)
