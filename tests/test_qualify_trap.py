"""The trap share of a one-score reward (pipeline.qualify.trap): what it measures, when it holds a
verdict, and how `rmtl qualify` and `--compare` report it."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from pipeline.qualify.trap import TRAP_HOLD, trap_axes, trap_hold
from rmtl.errors import ConfigError


def test_the_trap_share_is_the_best_resting_gain_as_a_share_of_the_done_gain_and_ignores_affine_maps():
    resting = np.array([True, True, True, False, False])
    done = ~resting
    scores = np.array([0.1, 0.2, 0.5, 0.6, 0.8])  # resting median 0.2, max 0.5; done median 0.7
    a = trap_axes(scores, resting, done)
    assert a["trap_share"] == pytest.approx(0.3 / 0.5) and a["trap_ratio"] == pytest.approx(0.5 / 0.7)
    assert a["worst_row"] == 2 and (a["resting_scenes"], a["done_scenes"]) == (3, 2)
    moved = trap_axes(3.0 * scores - 7.0, resting, done)  # what the shaper's bounds do to a score
    assert moved["trap_share"] == pytest.approx(a["trap_share"])
    assert trap_axes(scores, resting, np.zeros(5, dtype=bool))["trap_share"] != trap_axes(scores, resting, done)["trap_share"]


def test_a_trap_share_at_the_hold_turns_any_verdict_into_does_not_teach_and_keeps_its_p():
    teaches = {"verdict": "teaches", "p_teaches": 0.9, "p_interval_90": [0.6, 0.97]}
    held = trap_hold(teaches, {"trap_share": TRAP_HOLD})
    assert held["verdict"] == "does not teach" and held["held"] == "trap" and held["p_teaches"] == 0.9
    assert "trap share" in held["why"]
    assert trap_hold(teaches, {"trap_share": TRAP_HOLD - 0.01}) == teaches
    assert trap_hold(teaches, {"not_measured": "phased"}) == teaches
    assert trap_hold(teaches, {"trap_share": float("nan")}) == teaches
    unmapped = trap_hold({"verdict": "unmapped", "why": "no one-score runs"}, {"trap_share": 1.2})
    assert unmapped["verdict"] == "does not teach" and unmapped["why"].endswith("no one-score runs")


def _families(tmp_path, trap_scenes):
    path = tmp_path / "families.yaml"
    path.write_text(yaml.safe_dump({"task": "fetch_lift", "seed": 123, "trap_scenes": trap_scenes, "families": {
        "expert": {"group": "expert", "policy": "expert", "noise_levels": [0.0], "episodes": 2, "stages": [2, 4]},
        "sit": {"group": "behaviour", "policy": "behaviour:sit_at_cube", "noise_std": 0.0, "episodes": 1, "stages": [0]}}}))
    return str(path)


@pytest.mark.slow
def test_qualify_flags_a_one_score_reward_that_pays_a_far_resting_pose_and_passes_one_that_does_not(tmp_path):
    """The degraded oracle's ``reach_pose`` confusion pays the hand held 23-42 cm out from a resting
    cube as the task done (scene 61 of the seed's coverage scenes is such a pose): the trap share
    reaches the hold; the clean one-score oracle's stays far below it. A phased reward is not measured."""
    from pipeline.qualify import format_report, qualify

    families = _families(tmp_path, {"episodes": 70, "seed": 720000})
    common = dict(model=None, families_file=families, small=False, data_dir=tmp_path, progress=False)
    trapped = qualify(reward={"kind": "degraded_oracle", "single_score": True,
                              "error": {"confusions": {"reach_pose": 1.0}}}, out_dir=tmp_path / "trap", **common)
    clean = qualify(reward={"kind": "degraded_oracle", "single_score": True}, out_dir=tmp_path / "clean", **common)
    phased = qualify(reward={"kind": "oracle"}, out_dir=tmp_path / "phased", **common)
    assert trapped["trap"]["trap_share"] >= TRAP_HOLD > 0.5 > clean["trap"]["trap_share"]
    assert trapped["map"]["verdict"] == "does not teach" and trapped["map"]["held"] == "trap"
    assert clean["map"].get("held") is None
    assert trapped["trap"]["resting_scenes"] == clean["trap"]["resting_scenes"] > 0
    assert "not_measured" in phased["trap"] and phased["map"].get("held") is None
    text = format_report(trapped)
    assert "trap (coverage scenes" in text and "verdict: does not teach" in text


def test_a_trap_scenes_section_that_is_not_counts_is_one_line(tmp_path):
    from pipeline.qualify.families import load_families, load_trap_scenes

    bad = _families(tmp_path, {"episodes": 40, "colour": "red"})
    with pytest.raises(ConfigError, match="trap_scenes must map episodes"):
        load_families(bad)
    none = tmp_path / "none.yaml"
    none.write_text(yaml.safe_dump({"task": "fetch_lift", "seed": 1, "families": {
        "expert": {"group": "expert", "policy": "expert", "episodes": 1}}}))
    assert load_trap_scenes(none) is None
    scenes = load_trap_scenes(_families(tmp_path, {"episodes": 40, "small": 8, "seed": 720000}), small=True)
    assert scenes.rollout == {"policy": "coverage", "episodes": 8, "seed": 720000} and scenes.group == "trap"


def test_the_shipped_set_measures_traps_on_coverage_scenes_of_their_own_seed():
    from pipeline.qualify.families import load_families, load_trap_scenes

    _, families = load_families()
    scenes = load_trap_scenes()
    assert scenes is not None and scenes.rollout["policy"] == "coverage"
    assert scenes.rollout["seed"] not in {f.rollout["seed"] for f in families}
    assert scenes.name not in {f.name for f in families}


def test_compare_ranks_a_configuration_held_by_its_trap_after_every_other():
    from pipeline.qualify.compare import ROW_AXES, format_compare
    from pipeline.qualify.configurations import comparison_rank

    def row(variant, p, held=None, share=None):
        return {"variant": variant, "configuration": {"single_prompt": share is not None, "views": ["a"]},
                "axes": dict.fromkeys(ROW_AXES, 0.5), "early_progress": {}, "behaviours_at_or_above_expert": [], "trap_share": share,
                "trap_ratio": share, "verdict": "does not teach" if held else "teaches", "held": held, "p_teaches": p,
                "p_interval_90": [p - 0.1, p + 0.05], "why": None}

    ranked = comparison_rank([row("one_view", 0.9, "trap", 0.95), row("six_views", 0.8, None, 0.4), row("rmtl", 0.6)])
    assert [r["variant"] for r in ranked] == ["six_views", "rmtl", "one_view"]
    table = format_compare({"model": "m", "ranked": ranked})
    assert "trap share (ratio)" in table and "0.95 (0.95)" in table and "| n/a |" in table
