"""``rmtl view`` (docs/view.md): the session's tiny store (2 episodes, 2 views, 64 px, embedded by the
default model) and a committed policy's rollouts rendered on the fly, written as Rerun recordings and
read back with Rerun's own reader (``rerun.chunk.RrdReader``): every stream is there, and its numbers
are the ones the reward code computes (the stored embeddings scored by ``goal_baseline_scores``, the
rule's phases, and the shaped reward the exports pay). The HTML page is checked for structure (one
file, no external URL, the episodes' images) and, where Chromium is installed, rendered headless."""

from __future__ import annotations

import base64
import io
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rmtl.cli import run

REPO = Path(__file__).resolve().parent.parent
POLICY = REPO / "results" / "pixel_rmtl" / "runs" / "rmtl_s0" / "best"
"""A committed Stage-1 policy (the pixel RMTL learner's best on validation)."""
PROMPTS = ("baseline", "approach", "align", "grasp")
GOALS = PROMPTS[1:]


def _one_error_line(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


def _series(streams: dict, path: str) -> dict:
    """{step: value} of a scalar stream (one value per step)."""
    return {s: v[0] for s, v in streams[path]["Scalars:scalars"].items() if s is not None}


@pytest.fixture(scope="module")
def store_recording(tiny_store, tmp_path_factory):
    """``rmtl view --store S --prompts paper`` written to a file and read back."""
    from pipeline.view.recording import read_recording

    out = tmp_path_factory.mktemp("view") / "v.rrd"
    assert run(["view", "--store", str(tiny_store), "--prompts", "paper", "--out", str(out), "--no-progress"]) == 0
    return out, read_recording(out)


def test_recording_has_every_stream_of_every_episode(tiny_store, store_recording):
    from rerun.chunk import RrdReader
    from storage.dataset import DatasetStore

    out, streams = store_recording
    (entry,) = RrdReader(str(out)).recordings()
    assert entry.application_id == "rmtl view"
    with DatasetStore.open(tiny_store) as st:
        episodes, views = st.episodes(), st.views
    assert sorted(episodes) == [0, 1] and views == ["wide_view", "close_up"]
    for e, rows in episodes.items():
        root = f"/episode_{e}/main"
        steps = set(range(len(rows)))
        for v in views:
            images = streams[f"{root}/views/{v}"]["Image:buffer"]
            assert set(images) == steps and all(n == 64 * 64 * 3 for n in images.values())
        for v in (*views, "mean"):
            for p in PROMPTS:
                assert set(_series(streams, f"{root}/scores/{v}/{p}/raw")) == steps
            for g in GOALS:
                assert set(_series(streams, f"{root}/scores/{v}/{g}/projection")) == steps
            assert f"{root}/scores/{v}/baseline/projection" not in streams  # the baseline is no goal
        for name in ("active_score", "rule/phase", "env/success", "env/difficulty", "env/stage",
                     "state/gripper_cube_distance", "state/cube_height"):
            path = f"{root}/{name}" if "/" in name else f"{root}/reward/{name}"
            assert set(_series(streams, path)) == steps, name
        for name in ("u", "low", "high", "level", "delta", "reward"):  # paid from step 1: no reset-row reward
            assert set(_series(streams, f"{root}/reward/{name}")) == steps - {0}, name
        cards = streams[f"{root}/rule/micro_task"]["TextDocument:text"]
        assert set(cards) == steps
        assert "**source**: store" in streams[f"{root}/about"]["TextDocument:text"][None][0]
    assert not any(p.startswith("/episode_0/compare") for p in streams)


def test_recorded_numbers_are_the_reward_codes(tiny_store, store_recording):
    """Scores from the stored embeddings through the projection, the rule's phases, and the shaped
    reward the exports pay (the same replay over the same episodes)."""
    from pipeline.export.episode_rows import read_episodes
    from pipeline.stores.store_models import resolve_model_id
    from pipeline.stores.stored_text import text_embeddings
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.reward.prompt_sets import load_prompt_set
    from rmtl.tasks import get_task
    from storage.dataset import DatasetStore

    _, streams = store_recording
    task = get_task()
    pset = load_prompt_set("paper")
    with DatasetStore.open(tiny_store) as st:
        mid = resolve_model_id(st, None)
        text = text_embeddings(st, mid, pset)
        exported = read_episodes(st, "be viewed", pset)
        for e, rows in st.episodes().items():
            root = f"/episode_{e}/main"
            per_view = goal_baseline_scores(st.embeddings(mid, rows), text.goals, text.baseline, 0.9)  # [T, V, K]
            state = st.read(rows, fields=["state"])["state"]
            for k, g in enumerate(GOALS):
                got = _series(streams, f"{root}/scores/close_up/{g}/projection")
                np.testing.assert_allclose([got[t] for t in range(len(rows))], per_view[:, 1, k], rtol=1e-5, atol=1e-6)
                mean = _series(streams, f"{root}/scores/mean/{g}/projection")
                np.testing.assert_allclose([mean[t] for t in range(len(rows))], per_view[:, :, k].mean(axis=1),
                                           rtol=1e-5, atol=1e-6)
            phase = _series(streams, f"{root}/rule/phase")
            assert [int(phase[t]) for t in range(len(rows))] == task.phases(state).tolist()
            height = _series(streams, f"{root}/state/cube_height")
            np.testing.assert_allclose([height[t] for t in range(len(rows))], task.lift_height(state), atol=1e-6)
            reward = _series(streams, f"{root}/reward/reward")
            pos = exported.pos[e]
            np.testing.assert_allclose([reward[t] for t in range(1, len(rows))], exported.shaped[pos[1:]], atol=1e-6)
            u = np.array(list(_series(streams, f"{root}/reward/u").values()))
            assert np.all((u >= 0) & (u <= 1)) and max(reward.values()) <= 0
            raw = _series(streams, f"{root}/scores/wide_view/baseline/raw")
            assert all(-1 <= r <= 1 for r in raw.values())
            card = streams[f"{root}/rule/micro_task"]["TextDocument:text"][len(rows) - 1][0]
            assert card.startswith(f"## {task.micro_tasks.names[int(phase[len(rows) - 1])]} (phase ")


def test_a_second_model_is_logged_beside_the_first_on_the_same_frames(tiny_store, tmp_path, capsys):
    from pipeline.view.recording import read_recording

    out = tmp_path / "cmp.rrd"
    assert run(["view", "--store", str(tiny_store), "--episodes", "1", "--compare", "rmtl-fetch-tiny@random",
                "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "compare:" in printed and "rmtl-fetch-tiny__random (embedded now)" in printed
    streams = read_recording(out)
    assert not any(p.startswith("/episode_0/") for p in streams)  # only the episode asked for
    main = _series(streams, "/episode_1/main/scores/mean/grasp/projection")
    other = _series(streams, "/episode_1/compare/scores/mean/grasp/projection")
    assert set(main) == set(other) and not np.allclose(list(main.values()), list(other.values()))
    assert "/episode_1/compare/reward/u" in streams and "/episode_1/compare/views/wide_view" not in streams
    assert "rmtl-fetch-tiny__random" in streams["/episode_1/compare/about"]["TextDocument:text"][None][0]


def test_a_policys_rollouts_rendered_on_the_fly(tmp_path, capsys):
    """One episode of a committed policy: six cameras rendered now, scored by the reward model it learned
    from (its meta), with its rule phases, reward, curriculum stage and state facts."""
    from pipeline.view.recording import read_recording

    out = tmp_path / "policy.rrd"
    assert run(["view", "--policy", str(POLICY), "--episodes", "3", "--out", str(out), "--no-progress"]) == 0
    assert "rmtl-fetch-fast-r6-labelled" in capsys.readouterr().out
    streams = read_recording(out)
    root = "/episode_3/main"
    views = sorted(p.rsplit("/", 1)[1] for p in streams if p.startswith(f"{root}/views/"))
    assert views == sorted(["wide_view", "front", "front_side", "isometric", "side", "close_up"])
    steps = set(streams[f"{root}/views/front"]["Image:buffer"])
    assert 2 <= len(steps) <= 41 and min(steps) == 0
    assert set(_series(streams, f"{root}/scores/mean/align/projection")) == steps
    assert set(_series(streams, f"{root}/reward/reward")) == steps - {0}
    assert set(_series(streams, f"{root}/env/stage").values()) == {3.0}  # episode 3 of stages 0-4
    assert set(_series(streams, f"{root}/state/gripper_cube_distance")) == steps


def test_html_page_is_one_file_with_every_episode(tiny_store, tmp_path):
    from PIL import Image

    out = tmp_path / "page.html"
    assert run(["view", "--store", str(tiny_store), "--html", "--out", str(out), "--no-progress"]) == 0
    page = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:|#)""", page)  # everything inline
    assert "http://" not in page and "https://" not in page and "<script" not in page
    for e in (0, 1):
        for what in ("frames", "plots"):
            m = re.search(rf'alt="episode {e} {what}" src="data:image/(jpeg|png);base64,([^"]+)"', page)
            assert m, (e, what)
            img = Image.open(io.BytesIO(base64.b64decode(m.group(2))))
            assert img.width > 200 and img.height > 100
    assert page.count('<h2 id="episode-') == 2


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Chromium is not installed (CI machines have none)")
def test_html_page_renders_in_a_headless_browser(tiny_store, tmp_path):
    from PIL import Image

    out = tmp_path / "page.html"
    assert run(["view", "--store", str(tiny_store), "--html", "--episodes", "0", "--out", str(out),
                "--no-progress"]) == 0
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1000,900",
                    out.as_uri()], check=True, capture_output=True, timeout=120)
    pixels = np.asarray(Image.open(shot).convert("L"))
    assert pixels.shape == (900, 1000) and pixels.std() > 20  # not a blank page


def test_it_replaces_only_its_own_files(tiny_store, tmp_path, capsys):
    out = tmp_path / "v.rrd"
    args = ["view", "--store", str(tiny_store), "--episodes", "0", "--out", str(out), "--no-progress"]
    assert run(args) == 0 and run([*args, "--jpeg-quality", "80"]) == 0  # its own recording: replaced
    from pipeline.view.recording import read_recording

    jpeg = read_recording(out)["/episode_0/main/views/close_up"]
    assert "Image:buffer" not in jpeg and 0 < min(jpeg["EncodedImage:blob"].values()) < 64 * 64 * 3
    foreign = tmp_path / "notes.rrd"
    foreign.write_text("not a recording")
    assert run([*args[:-3], "--out", str(foreign), "--no-progress"]) == 2
    assert "did not write" in _one_error_line(capsys) and foreign.read_text() == "not a recording"
    page = tmp_path / "index.html"
    page.write_text("<html>mine</html>")
    assert run([*args[:-3], "--html", "--out", str(page), "--no-progress"]) == 2
    assert "did not write" in _one_error_line(capsys) and page.read_text() == "<html>mine</html>"


def test_default_output_is_beside_the_store(tiny_store_copy, capsys):
    assert run(["view", "--store", str(tiny_store_copy), "--episodes", "0", "--no-progress"]) == 0
    out = Path(f"{tiny_store_copy}.analysis") / "view.rrd"
    assert out.is_file() and f"wrote {out}" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    (["--store", "{tmp}/missing.zarr"], ["missing.zarr"]),
    (["--store", "{store}", "--episodes", "7"], ["no episode 7", "0-1"]),
    (["--store", "{store}", "--out", "{tmp}/v.png"], ["end the name with .rrd"]),
    (["--store", "{store}", "--html", "--out", "{tmp}/v.rrd"], ["end the name with .html"]),
    (["--store", "{store}", "--out", "{store}/v.rrd"], ["inside", "dataset store"]),
    (["--store", "{store}", "--compare", "{tmp}/nowhere.zarr"], ["does not exist"]),
    (["--store", "{store}", "--policy", str(POLICY)], ["not both"]),
    (["--store", "{store}", "--html", "--serve"], ["--html"]),
    (["--policy", "{tmp}"], ["not a Stage-1 checkpoint"]),
    (["--store", "{store}", "--model", "no-such-model"], ["unknown model"]),
])
def test_bad_input_is_one_line_and_status_2(tiny_store, tmp_path, capsys, args, words):
    argv = ["view", *[a.format(tmp=tmp_path, store=tiny_store) for a in args], "--no-progress"]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out.rrd")]
    assert run(argv) == 2
    line = _one_error_line(capsys)
    assert all(w in line for w in words), line
    assert not (tmp_path / "out.rrd").exists()


def test_spawn_without_a_display_says_so_before_any_work(tiny_store, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert run(["view", "--store", str(tiny_store), "--spawn", "--out", str(tmp_path / "v.rrd")]) == 2
    assert "needs a display" in _one_error_line(capsys)
    assert not (tmp_path / "v.rrd").exists()


def test_serve_hosts_the_web_viewer_until_ctrl_c(tiny_store, tmp_path):
    """``--serve``: Rerun's web viewer answers over HTTP; Ctrl-C stops it and the command ends normally."""
    import contextlib
    import os
    import signal
    import socket
    import sys
    import time
    import urllib.request

    from conftest import command_env

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 9876)) == 0:
            pytest.skip("port 9876 (Rerun's server) is taken here")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "v.rrd"
    proc = subprocess.Popen([sys.executable, "-m", "rmtl", "view", "--store", str(tiny_store), "--episodes", "0",
                             "--serve", "--web-port", str(port), "--out", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=command_env(tmp_path),
                            start_new_session=True,  # its own process group: the viewer it starts goes with it
                            # a suite started in the background by a shell inherits SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline, status = time.monotonic() + 300, None
        while status is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).status
            except OSError:
                time.sleep(1)
        assert status == 200, proc.poll()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0, stderr[-2000:]
    assert f"serving {out} to a browser at http://localhost:{port}/" in stdout and "stopped serving" in stdout
    assert out.is_file()


def test_readme_command_runs_as_written(tiny_store_copy, tmp_path, monkeypatch, capsys):
    """The README's 'look at the reward' line, on a store at the path it names."""
    text = (REPO / "README.md").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("rmtl view --store")]
    argv = shlex.split(line.split("#")[0])
    store = argv[argv.index("--store") + 1]
    monkeypatch.chdir(tmp_path)
    (tmp_path / store).parent.mkdir(parents=True)
    shutil.move(str(tiny_store_copy), tmp_path / store)
    assert run([*argv[1:], "--no-progress"]) == 0
    assert (tmp_path / f"{store}.analysis" / "view.rrd").is_file()


def test_shaped_terms_are_the_shapers_outputs_beside_its_reward():
    """The replay's terms (what the recording logs) with the reward every other replay pays."""
    from rmtl.reward.replay import shaped_rewards, shaped_terms
    from rmtl.reward.shaping import ShapingConfig

    rng = np.random.default_rng(0)
    active, phases = rng.uniform(0.4, 0.9, 30), rng.integers(0, 3, 30)
    episodes = [np.arange(0, 12), np.arange(12, 30)]
    for bounds in ("adapted", "running"):
        terms = shaped_terms(active, phases, episodes, ShapingConfig(), 3, bounds)
        assert {"reward", "u", "level", "trend", "momentum", "delta", "low", "high"} <= set(terms)
        np.testing.assert_array_equal(terms["reward"], shaped_rewards(active, phases, episodes, ShapingConfig(), 3,
                                                                      bounds))
        np.testing.assert_allclose(terms["level"], (phases + terms["u"]) / 3 - 1, atol=1e-6)
        u = np.clip((active - terms["low"]) / (terms["high"] - terms["low"]), 0, 1)
        np.testing.assert_allclose(terms["u"], u, atol=1e-5)
    assert shaped_terms(active, phases, [np.arange(5)], ShapingConfig(), 3, names=("u",)).keys() == {"u", "reward"}
