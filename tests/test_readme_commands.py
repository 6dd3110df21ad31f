"""README commands run as written: ``rmtl report`` over the default run layout, the analysis
commands after ``rmtl embed --model rmtl-fetch-tiny@random`` (a store of two models), where
``rmtl report`` writes, and what ``rmtl bc-labels`` prints (docs/stage1.md, docs/analysis.md)."""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from rmtl.cli import run
from rmtl.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
KEPT_RUNS = REPO / "results" / "stage1_vlm_budget"
"""Stage-1 runs kept as their logs (config.yaml, eval.csv, curriculum.csv)."""


def readme_command(prefix: str) -> list[str]:
    """The README's command line starting with ``prefix`` (comment dropped), split like a shell."""
    text = (REPO / "README.md").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    return shlex.split(line.split("#")[0])


def shell_expand(args: list[str]) -> list[str]:
    """Globs expanded as bash would (a pattern with no match stays as it is)."""
    return [a for arg in args for a in (sorted(glob.glob(arg)) if any(c in arg for c in "*?[") else [arg]) or [arg]]


@pytest.fixture
def run_layout(tmp_path, monkeypatch):
    """A checkout-like working directory with the default layout: two Stage-1 runs under
    data/runs/stage1 and one Stage-2 run under data/runs/stage2; no $RMTL_DATA_DIR."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RMTL_DATA_DIR", raising=False)
    for name in ("rmtl_s1", "dense_reference_s1"):
        d = tmp_path / "data" / "runs" / "stage1" / name
        d.mkdir(parents=True)
        for f in ("config.yaml", "eval.csv", "curriculum.csv"):
            shutil.copy(KEPT_RUNS / name / f, d / f)
    s2 = tmp_path / "data" / "runs" / "stage2" / "rmtl_s1_s0"
    s2.mkdir(parents=True)
    (s2 / "config.yaml").write_text("worker: data/runs/stage1/rmtl_s1\nseed: 0\n")
    return tmp_path


def _reported_runs(root: Path) -> list[str]:
    from rmtl.train.run.csv_log import read_csv

    return sorted(Path(r["run"]).name for r in read_csv(root / "data" / "reports" / "stage1" / "final_success.csv"))


@pytest.mark.parametrize("form", ["readme", "data/runs/*", "data/runs"])
def test_report_takes_the_default_run_layout_and_writes_to_the_data_dir(run_layout, capsys, form):
    args = readme_command("rmtl report data/runs") if form == "readme" else ["rmtl", "report", form]
    argv = shell_expand(args[1:]) + ["--no-select"]
    assert run(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert _reported_runs(run_layout) == ["dense_reference_s1", "rmtl_s1"]
    assert ("passed over 1 Stage-2 run" in out) == (form != "readme")
    # nothing written outside the data directory (run from a checkout, that is the source tree)
    assert sorted(p.name for p in run_layout.iterdir()) == ["data"]
    assert f"wrote {run_layout / 'data' / 'reports' / 'stage1' / 'success_table.md'}" in out


def test_report_refuses_a_stage2_run_and_a_directory_without_runs(run_layout, capsys):
    (run_layout / "empty").mkdir()
    for argv, words in [(["report", "data/runs/stage2/rmtl_s1_s0"], ["is a Stage-2 run", "rmtl report --stage 2"]),
                        (["report", "empty"], ["holds none", "data/runs/stage1"]),
                        (["report", "data/runs/stage2"], ["no Stage-1 runs", "--stage 2"])]:
        assert run(argv) == 2
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(lines) == 1 and all(w in lines[0] for w in words), lines


@pytest.fixture(scope="module")
def two_model_store(tiny_store, tmp_path_factory):
    """A rendered store embedded by the default model (a copy of the session's tiny store), then by
    its random-weight twin, as the README's ``rmtl embed --model rmtl-fetch-tiny@random``."""
    from conftest import copy_store
    from pipeline.jobs.embed import embed_store

    store = str(copy_store(tiny_store, tmp_path_factory.mktemp("two_models")))
    embed_store(store, "rmtl-fetch-tiny@random", progress=False)
    return store


def test_commands_after_embed_use_the_default_model(two_model_store, tmp_path, capsys, monkeypatch):
    from rmtl.vlm.spec import parse_spec
    from storage.dataset import DatasetStore

    monkeypatch.setenv("RMTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    default = parse_spec("rmtl-fetch-tiny").model_id
    with DatasetStore.open(two_model_store) as st:
        assert sorted(st.model_ids()) == sorted([default, "rmtl-fetch-tiny__random"])
    text = (REPO / "README.md").read_text()
    after = text[text.index("rmtl embed --store S --model rmtl-fetch-tiny@random"):].split("```")[0]
    assert re.search(r"^rmtl query --store S --prompts", after, re.M)  # the lines this test runs
    assert re.search(r"^rmtl export minari S --prompts paper --name NAME", after, re.M)
    for argv in (["embed-text", "--store", two_model_store, "--prompts", "paraphrase_new"],
                 ["query", "--store", two_model_store, "--prompts", "paraphrase_new", "--out", str(tmp_path / "q")],
                 ["export", "minari", two_model_store, "--prompts", "paper", "--name", "readme"]):
        rc = run(argv)
        captured = capsys.readouterr()
        assert rc == 0, (argv, captured.err[-2000:])
        if argv[0] == "embed-text":
            assert f"texts of {default}" in captured.out  # not the random model's
    from rmtl.reward.prompt_sets import load_prompt_set

    new_set = load_prompt_set("paraphrase_new").id
    with DatasetStore.open(two_model_store) as st:
        assert new_set in st.prompt_set_ids(default) and new_set not in st.prompt_set_ids("rmtl-fetch-tiny__random")
    # the export wrote under this data directory and left no Minari path behind in the process
    assert (tmp_path / "data" / "minari" / "rmtl" / "readme-v0").is_dir()
    assert "MINARI_DATASETS_PATH" not in os.environ
    queries = json.loads((tmp_path / "q" / "queries.json").read_text())
    assert default in json.dumps(queries) and "rmtl-fetch-tiny__random" not in json.dumps(queries)


def test_several_models_without_the_default_ask_for_one(tmp_path):
    import numpy as np

    from pipeline.stores.store_models import resolve_model_id
    from rmtl.tasks.fetch_lift.layout import store_description
    from storage.dataset import DatasetStore
    from storage.testing import synthetic_rows

    with DatasetStore.create(tmp_path / "s.zarr", **store_description(), views=["a", "b"], resolution=8) as st:
        st.append(synthetic_rows(0, 4))
        for model in ("m1", "m2"):
            st.add_embeddings(model, 0, np.ones((4, 2, 4), np.float32))
        with pytest.raises(ConfigError, match=r"several models \['m1', 'm2'\] and none is the default "
                                              r"rmtl-fetch-tiny; name one with --model"):
            resolve_model_id(st, None)
        assert resolve_model_id(st, "m2") == "m2"


def test_bc_labels_prints_a_readable_summary(tmp_path, capsys):
    out = tmp_path / "bc.zarr"
    assert run(["bc-labels", "--out", str(out), "--episodes", "2"]) == 0
    text = capsys.readouterr().out
    lines = text[text.index("rolled out"):].strip().splitlines()  # after the progress line
    assert "BCLabelsResult(" not in text and "{" not in text
    assert re.fullmatch(r"rolled out 2 episode\(s\); the store holds 2 episodes, \d+ rows", lines[0]), lines
    counts = dict(re.findall(r"(approach|align|grasp) (\d+) \(\d+%\)", lines[1]))
    from storage.dataset import DatasetStore

    with DatasetStore.open(out) as st:
        assert sum(map(int, counts.values())) == len(st) and lines[0].endswith(f"{len(st)} rows")
    assert lines[-1] == f"wrote {out}"
    assert run(["bc-labels", "--out", str(out), "--episodes", "3"]) == 0  # resumed: says so
    assert "rolled out 1 new episode(s), 2 were already there (resumed)" in capsys.readouterr().out
