import json
from pathlib import Path

import numpy as np
import pytest
from rmtl.tasks import get_task

from pipeline.jobs.rollout import RolloutConfig, rollout_episodes
from pipeline.train_vlm import (
    TrainingData,
    TrainVLMConfig,
    baseline_balance_penalty,
    gate_margin,
    soft_targets,
    task_geometry,
    train_reward_vlm,
    write_model_card,
)


@pytest.fixture(scope="module")
def data():
    cfg = RolloutConfig.make(episodes=4, views=["wide_view", "close_up"], resolution=64, stages=(0, 3))
    rows = rollout_episodes(cfg, [0, 1, 2, 3])
    return TrainingData.from_batches([rows], cfg.views, expert=True)


def test_soft_targets_are_row_stochastic_and_local():
    import torch

    g = torch.tensor([[0.0, 0, 0], [0.001, 0, 0], [1.0, 0, 0]])
    t = soft_targets(g, sigma=0.03)
    assert torch.allclose(t.sum(1), torch.ones(3))
    assert t[0, 1] > 0.4 and t[0, 2] < 1e-6
    assert torch.equal(soft_targets(g, 0.0), torch.eye(3))


def test_holdout_is_by_whole_episode(data):
    m = data.holdout_mask(0.5)
    for ep in np.unique(data.episode):
        assert len(set(m[data.episode == ep])) == 1


def test_task_geometry_shape(data):
    assert task_geometry(data.states).shape == (len(data), 5)


@pytest.mark.slow
def test_train_saves_loadable_model_and_resumes(tmp_path, data):
    from rmtl.vlm import load_vlm

    cfg = TrainVLMConfig.make(steps=3, batch_size=8, warmup_steps=1, eval_every=3, checkpoint_every=3,
                              holdout_fraction=0.5, device="cpu")
    metrics = train_reward_vlm(data, cfg, tmp_path, progress=False)
    assert {"random_init", "final"} <= set(metrics)
    assert (tmp_path / "metrics.json").is_file() and (tmp_path / "run.json").is_file()
    vlm = load_vlm(str(tmp_path), device="cpu")  # a trained directory is a model spec
    emb = vlm.encode_images(data.frames[:2, 0])
    assert emb.shape == (2, 128) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-4)
    # resume: a longer run continues from the checkpoint instead of starting over
    more = train_reward_vlm(data, cfg.replace(steps=5, eval_every=5, checkpoint_every=5), tmp_path, progress=False)
    log = (tmp_path / "train_log.csv").read_text()
    assert more["steps_done"] == 5 and "random_init" in more and log.count("\n") >= 2
    assert json.loads((tmp_path / "metrics.json").read_text())["steps_done"] == 5


@pytest.mark.slow
def test_a_stop_while_the_checkpoint_is_written_keeps_the_previous_one(tmp_path, data, monkeypatch):
    """The resume state is written whole: a stop half-way through writing it leaves the last
    complete checkpoint in place (and no staged file), so the same command resumes from it."""
    cfg = TrainVLMConfig.make(steps=2, batch_size=8, warmup_steps=0, eval_every=2, checkpoint_every=2,
                              holdout_fraction=0.5, device="cpu")
    train_reward_vlm(data, cfg, tmp_path, progress=False)
    before = (tmp_path / "checkpoint.pt").read_bytes()

    def torn_write(self, payload):  # half the bytes reach the disk, then the process is stopped
        with open(self, "wb") as f:
            f.write(bytes(payload)[: len(payload) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_bytes", torn_write)
    with pytest.raises(KeyboardInterrupt):
        train_reward_vlm(data, cfg.replace(steps=4, eval_every=4, checkpoint_every=2), tmp_path, progress=False)
    monkeypatch.undo()
    assert (tmp_path / "checkpoint.pt").read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))
    more = train_reward_vlm(data, cfg.replace(steps=4, eval_every=4, checkpoint_every=2), tmp_path, progress=False)
    assert more["steps_done"] == 4


@pytest.mark.slow
def test_bf16_autocast_trains_fp32_weights_and_is_recorded(tmp_path, data):
    import torch

    from rmtl.vlm import load_vlm

    for flag in (True, False):
        cfg = TrainVLMConfig.make(steps=2, batch_size=8, warmup_steps=0, eval_every=2, checkpoint_every=2,
                                  holdout_fraction=0.5, device="cpu", bf16_autocast=flag, select_by="last")
        vlm = load_vlm("rmtl-fetch-tiny@random", device="cpu", precision="fp32")
        start = {k: v.clone() for k, v in vlm.model.state_dict().items()}
        metrics = train_reward_vlm(data, cfg, tmp_path / str(flag), progress=False, vlm=vlm)
        assert metrics["bf16_autocast"] is flag
        state = vlm.model.state_dict()
        assert all(v.dtype == torch.float32 for v in state.values() if v.is_floating_point())
        changed = [k for k in start if not torch.equal(start[k], state[k])]
        assert any(k.startswith("visual.") for k in changed) and any(not k.startswith("visual.") for k in changed)


def test_gate_margin_is_the_worst_gate_ratio():
    m = {"mean": {"approach_spearman": 0.8, "align_spearman": 0.45, "grasp_auc": 1.0, "right_prompt_accuracy": 0.95}}
    assert gate_margin(m) == pytest.approx(0.5)
    m["mean"]["grasp_auc"] = float("nan")  # an unmeasurable gate counts as failed
    assert gate_margin(m) < 0


@pytest.mark.slow
def test_fine_tune_keeps_the_best_held_out_weights(tmp_path, data):
    from rmtl.vlm import load_vlm

    first = tmp_path / "first"
    train_reward_vlm(data, TrainVLMConfig.make(steps=2, batch_size=8, warmup_steps=1, eval_every=2,
                                               holdout_fraction=0.5, device="cpu"), first, progress=False)
    cfg = TrainVLMConfig.make(steps=4, batch_size=8, warmup_steps=0, lr=0.5, eval_every=2, holdout_fraction=0.5,
                              device="cpu", init=str(first))
    metrics = train_reward_vlm(data, cfg, tmp_path / "tuned", progress=False)
    margins = {step: gate_margin(metrics[f"step_{step}"]) for step in (0, 2, 4)}
    chosen = metrics["selected_step"]
    assert margins[chosen] == max(margins.values()) and metrics["final"] == metrics[f"step_{chosen}"]
    frames = data.frames[:2, 0]
    tuned = load_vlm(str(tmp_path / "tuned"), device="cpu").encode_images(frames)
    start = load_vlm(str(first), device="cpu").encode_images(frames)
    if chosen == 0:  # no later evaluation beat the starting weights: they are what was saved
        np.testing.assert_allclose(tuned, start, atol=2e-3)
    else:
        assert not np.allclose(tuned, start, atol=2e-3)


@pytest.mark.slow
def test_locked_image_tower_trains_only_the_text_tower(tmp_path, data):
    import torch

    from rmtl.errors import ConfigError
    from rmtl.vlm import load_vlm

    with pytest.raises(ConfigError, match="needs trained weights"):
        TrainVLMConfig.make(tune="text")
    first = tmp_path / "first"
    train_reward_vlm(data, TrainVLMConfig.make(steps=1, batch_size=8, warmup_steps=0, eval_every=1,
                                               holdout_fraction=0.5, device="cpu"), first, progress=False)
    cfg = TrainVLMConfig.make(steps=3, batch_size=8, warmup_steps=0, lr=1e-2, eval_every=3, holdout_fraction=0.5,
                              device="cpu", init=str(first), tune="text", select_by="last")
    train_reward_vlm(data, cfg, tmp_path / "lit", progress=False)
    before = load_vlm(str(first), device="cpu").model.state_dict()
    after = load_vlm(str(tmp_path / "lit"), device="cpu").model.state_dict()
    visual = [k for k in before if k.startswith("visual.")]
    text = [k for k in before if not k.startswith("visual.") and k != "logit_scale"]
    assert visual and all(torch.equal(before[k], after[k]) for k in visual)
    assert any(not torch.equal(before[k], after[k]) for k in text)


def test_baseline_balance_penalty_is_zero_only_for_equal_goal_baseline_cosines():
    import torch

    baseline = torch.tensor([1.0, 0.0, 0.0])
    equal = torch.tensor([[0.5, 0.866, 0.0], [0.5, 0.0, 0.866], [0.5, -0.866, 0.0]])
    assert baseline_balance_penalty(equal, baseline).item() == pytest.approx(0.0, abs=1e-9)
    unequal = torch.tensor([[0.9, 0.436, 0.0], [0.5, 0.0, 0.866], [-0.1, 0.995, 0.0]])
    cos = np.array([0.9, 0.5, -0.1])
    assert baseline_balance_penalty(unequal, baseline).item() == pytest.approx(((cos - cos.mean()) ** 2).sum(), rel=1e-5)


@pytest.mark.slow
def test_baseline_balance_pulls_goal_baseline_cosines_together(tmp_path, data):
    # The shipped model's prompts sit at very different distances from the baseline.
    spreads = {}
    for weight in (0.0, 100.0):
        cfg = TrainVLMConfig.make(steps=20, batch_size=8, warmup_steps=0, lr=3e-3, eval_every=20, holdout_fraction=0.5,
                                  device="cpu", init="rmtl-fetch-tiny", tune="text", select_by="last",
                                  baseline_balance=weight)
        metrics = train_reward_vlm(data, cfg, tmp_path / f"w{weight}", progress=False)
        cosine = np.array(list(metrics["final"]["goal_baseline_cosine"].values()))
        spreads[weight] = cosine.max() - cosine.min()
    assert spreads[0.0] > 0.3 and spreads[100.0] < 0.5 * spreads[0.0], spreads


@pytest.mark.slow
def test_from_stores_reads_stored_image_embeddings_of_the_init_model(tiny_store, tmp_path):
    from pipeline.train_vlm import encode_rows
    from rmtl.vlm import load_vlm

    store = str(tiny_store)  # 2 episodes, 2 views, 64 px, embedded by rmtl-fetch-tiny (read only)
    data = TrainingData.from_stores([store], embeddings_of="rmtl-fetch-tiny")
    assert data.image_embeddings is not None and data.image_embeddings.shape == (len(data), 2, 128)
    fresh = encode_rows(load_vlm("rmtl-fetch-tiny", device="cpu"), data, np.arange(3))
    np.testing.assert_allclose(data.image_embeddings[:3], fresh, atol=2e-3)
    assert TrainingData.from_stores([store], embeddings_of="rmtl-fetch-tiny@random").image_embeddings is None
    # Another model id (here one with no embeddings in the store) whose image tower is the
    # stored model's: found through the tower id.
    tower = load_vlm("rmtl-fetch-tiny", device="cpu").image_tower_id
    found = TrainingData.from_stores([store], embeddings_of="rmtl-fetch-tiny@random", image_tower=tower)
    np.testing.assert_array_equal(found.image_embeddings, data.image_embeddings)
    assert TrainingData.from_stores([store], embeddings_of="rmtl-fetch-tiny@random",
                                    image_tower="0" * 12).image_embeddings is None
    # With the embeddings standing in, only held-out rows' frames are read, and they are
    # the same frames; asking for any other row's frames says so.
    lean = TrainingData.from_stores([store, store], embeddings_of="rmtl-fetch-tiny", holdout_fraction=0.5)
    held = np.flatnonzero(lean.holdout_mask(0.5))
    assert 0 < len(held) < len(lean) and lean.frames.shape == (len(lean), *data.frames.shape[1:])
    full = TrainingData.from_stores([store, store])
    np.testing.assert_array_equal(lean.frames[held], full.frames[held])
    with pytest.raises(ValueError, match="were not loaded"):
        lean.frames[np.flatnonzero(~lean.holdout_mask(0.5))[:1]]
    cfg = TrainVLMConfig.make(steps=2, batch_size=4, warmup_steps=0, eval_every=2, holdout_fraction=0.5, device="cpu",
                              init="rmtl-fetch-tiny", tune="text", select_by="last")
    metrics = train_reward_vlm(lean, cfg, tmp_path / "lean", progress=False)
    assert "random_init" in metrics and metrics["steps_done"] == 2


def test_model_card_says_where_the_weights_started_and_the_goal_baseline_cosines(tmp_path):
    mean = {k: 0.5 for k in ("approach_spearman", "approach_spread", "align_spearman", "align_spread", "grasp_auc",
                             "grasp_spread", "right_prompt_accuracy", "step_variation")}
    metrics = {"final": {"mean": mean, "goal_baseline_cosine": {"approach": 0.7, "align": 0.71, "grasp": 0.72}},
               "random_init": {"mean": mean}, "steps_done": 4, "selected_step": 2, "init_model_id": "m__abcd1234"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    scratch = write_model_card(tmp_path / "a", TrainVLMConfig.make(), "d", metrics, "cmd").read_text()
    assert "trained from random weights" in scratch and "0.700/0.710/0.720" in scratch
    tuned = write_model_card(tmp_path / "b", TrainVLMConfig.make(init="x", tune="text"), "d", metrics, "cmd").read_text()
    assert "fine-tuned from `m__abcd1234` (text tower only, image tower locked)" in tuned
    assert "weights of step 2" in tuned
    assert "- renderer: not one setting" in tuned
    (tmp_path / "c").mkdir()
    rendered = write_model_card(tmp_path / "c", TrainVLMConfig.make(), "d", metrics, "cmd",
                                {"msaa_samples": 0, "mesh_reduction": 0.9}).read_text()
    assert '- renderer: {"mesh_reduction": 0.9, "msaa_samples": 0} (its training frames' in rendered


def test_model_card_command_is_the_one_that_ran():
    from pipeline.train_vlm import invoking_command

    assert invoking_command(["/x/pipeline/train_vlm.py", "--out", "a b"]) == "python -m pipeline.train_vlm --out 'a b'"
    # called from another script (a round's driver): that script is the command, not train_vlm
    assert invoking_command(["/elsewhere/round4_gpu.py", "--round", "5"]) == "python /elsewhere/round4_gpu.py --round 5"


def parse_args(argv):
    """(config, data options) the train-reward-vlm command gets from ``argv``."""
    from rmtl.command_table import COMMANDS
    from rmtl.config_cli import parse

    cfg, options = parse(COMMANDS["train-reward-vlm"], argv, "train-reward-vlm")
    return cfg, options.model_dump()


def test_command_line_flags_parse_words_and_none_and_keep_unset_defaults(tmp_path):
    cfg, options = parse_args(["--out", "x", "--target-prompt-rate", "none", "--select-by", "last", "--lr", "2e-4"])
    assert cfg.target_prompt_rate is None and cfg.select_by == "last" and cfg.lr == 2e-4
    assert cfg.baseline_balance == TrainVLMConfig().baseline_balance  # not given: the default
    assert str(options["out"]) == "x" and options["store"] == ()
    cfg, _ = parse_args(["--out", "x", "--target-prompt-rate", "0.6", "--init", "rmtl-fetch-tiny", "--tune", "text"])
    assert cfg.target_prompt_rate == 0.6 and cfg.init == "rmtl-fetch-tiny"
    (tmp_path / "c.yaml").write_text("lr: 0.001\nsteps: 7\n")  # file, then options, then --set
    cfg, _ = parse_args(["--out", "x", "--config", str(tmp_path / "c.yaml"), "--steps", "9", "--set", "lr=0.002"])
    assert (cfg.lr, cfg.steps) == (0.002, 9)


def _training_texts(vlm):
    """Record every text tokenized while the model is in training mode (evaluation runs in eval mode)."""
    seen = []
    tokenize = vlm.tokenizer

    def spy(texts):
        if vlm.model.training:
            seen.extend(texts)
        return tokenize(texts)

    vlm.tokenizer = spy
    return seen


@pytest.mark.slow
def test_prompt_neutral_training_never_sees_an_evaluated_prompt(tmp_path, data):
    import torch

    from rmtl.errors import ConfigError
    from rmtl.vlm import load_vlm
    from rmtl.tasks.fetch_lift.captions import evaluated_prompt_texts

    prompts = [p.lower() for p in evaluated_prompt_texts()]
    base = dict(steps=3, batch_size=16, warmup_steps=0, eval_every=3, holdout_fraction=0.5, device="cpu",
                init="rmtl-fetch-tiny", tune="text")
    for bad, match in (({}, "baseline_balance"), ({"baseline_balance": 0}, "select_by gate_margin"),
                       ({"baseline_balance": 0, "select_by": "last"}, "reset_text_tower")):
        with pytest.raises(ConfigError, match=match):
            TrainVLMConfig.make(**base, captions="neutral", **bad)
    neutral = TrainVLMConfig.make(**base, captions="neutral", baseline_balance=0, select_by="last", reset_text_tower=True)
    runs = {}
    for name, cfg in (("neutral", neutral), ("graded", TrainVLMConfig.make(**base, select_by="last"))):
        vlm = load_vlm(cfg.init, device="cpu", precision="fp32")
        seen = runs[name] = _training_texts(vlm)
        train_reward_vlm(data, cfg, tmp_path / name, progress=False, vlm=vlm)
        assert seen
    assert not [t for t in runs["neutral"] if any(p in t.lower() for p in prompts)]
    assert [t for t in runs["graded"] if any(p in t.lower() for p in prompts)]  # the spy does see prompts
    # The neutral model's text tower started random: far from the shipped one; its image tower is the shipped one.
    shipped = load_vlm("rmtl-fetch-tiny", device="cpu").model.state_dict()
    trained = load_vlm(str(tmp_path / "neutral"), device="cpu").model.state_dict()
    assert all(torch.equal(shipped[k], trained[k]) for k in shipped if k.startswith("visual."))
    text = [k for k in shipped if not k.startswith("visual.") and shipped[k].is_floating_point() and shipped[k].numel() > 1000]
    assert text and all(not torch.allclose(shipped[k], trained[k], atol=0.05) for k in text)
    card = write_model_card(tmp_path / "neutral", neutral, "d", json.loads((tmp_path / "neutral" / "metrics.json").read_text()),
                            "cmd").read_text()
    assert "prompt-neutral" in card and "text tower trained from random weights" in card
    # The trainer's audit of its captions is on the card. It checks every phrasing of every shipped prompt
    # set, a wider list than the five texts the `neutral` vocabulary was written against, and finds some
    # of the paraphrase sets' phrasings there.
    audit = json.loads((tmp_path / "neutral" / "metrics.json").read_text())["caption_leak_audit"]
    assert f"- leak check: {audit['exact_leaks']} exact leaks and {audit['near_paraphrases']} near paraphrases" in card
    assert audit["captions"] > 0 and audit["evaluated_texts"] > len(prompts) - 1
    graded = json.loads((tmp_path / "graded" / "metrics.json").read_text())
    assert "caption_leak_audit" not in graded  # graded captions hold the prompts by design: nothing to audit


def test_reset_text_tower_keeps_the_image_tower():
    import torch

    from pipeline.train_vlm import reset_text_tower
    from rmtl.vlm import load_vlm

    vlm = load_vlm("rmtl-fetch-tiny", device="cpu", precision="fp32")
    before = {k: v.clone() for k, v in vlm.model.state_dict().items()}
    torch.manual_seed(3)
    reset_text_tower(vlm, "rmtl-fetch-tiny", "cpu")
    torch.manual_seed(3)
    fresh = load_vlm("rmtl-fetch-tiny@random", device="cpu", precision="fp32").model.state_dict()
    after = vlm.model.state_dict()
    for k in before:
        if k.startswith("visual."):
            assert torch.equal(after[k], before[k])
        else:
            assert torch.equal(after[k], fresh[k])


def test_row_frames_hold_some_rows_and_name_the_missing_ones():
    from pipeline.train_vlm import RowFrames

    frames = np.arange(2 * 3, dtype=np.uint8).reshape(2, 1, 1, 1, 3)
    held = RowFrames(np.array([1, 3]), frames, 5)
    assert held.shape == (5, 1, 1, 1, 3) and len(held) == 5
    np.testing.assert_array_equal(held[[3, 1]], frames[[1, 0]])
    for rows in ([4], [0, 1]):
        with pytest.raises(ValueError, match="were not loaded"):
            held[rows]
    with pytest.raises(ValueError, match=r"rows \[2\] were not loaded"):  # a store with no held-out row
        RowFrames(np.array([], dtype=np.int64), frames[:0], 3)[[2]]
    joined = RowFrames.concat([frames, held])  # a dense part and a held part
    np.testing.assert_array_equal(joined[[0, 1, 5]], frames[[0, 1, 1]])


@pytest.mark.slow
def test_training_streams_a_store_larger_than_the_frame_cap_in_bounded_memory(tmp_path):
    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, render_and_embed
    from storage.dataset import DatasetStore

    store = str(tmp_path / "s.zarr")
    render_and_embed(RenderAndEmbedConfig.make(store=store, episodes=3, views=["wide_view", "close_up"],
                                               resolution=64, model="rmtl-fetch-fast@random"), progress=False)
    with DatasetStore.open(store, "r") as s:
        frame_bytes = s.read(fields=["frames"])["frames"].nbytes
    cap_gb = frame_bytes / 4 / 2**30  # a quarter of the store's frames
    data = TrainingData.from_stores([store], stream=True, holdout_fraction=0.34)
    held = data.holdout_mask(0.34)
    assert 0 < held.sum() < len(data)
    with pytest.raises(ValueError, match="were not loaded"):  # only held-out frames were read
        data.frames[np.flatnonzero(~held)[:1]]
    cfg = TrainVLMConfig.make(model="rmtl-fetch-fast", steps=12, batch_size=8, warmup_steps=1, eval_every=12,
                              checkpoint_every=12, holdout_fraction=0.34, device="cpu", frame_cache_gb=cap_gb)
    metrics = train_reward_vlm(data, cfg, tmp_path / "out", progress=False)
    fs = metrics["frame_stream"]
    assert fs["peak_bytes"] <= fs["cap_bytes"] < frame_bytes
    assert fs["bytes_read"] > fs["cap_bytes"]  # blocks came and went: the stream went past its buffer
    assert metrics["steps_done"] == 12


@pytest.mark.parametrize("name", ["rmtl-fetch-fast", "rmtl-fetch-fast-r5", "rmtl-fetch-fast-r6",
                                  "rmtl-fetch-fast-r6-labelled", "rmtl-fetch-fast-r7",
                                  "rmtl-fetch-fast-r8"])
def test_the_fast_models_load_by_name_and_score_through_the_openclip_path(name):
    from rmtl.reward.prompts import embed_prompts
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.vlm import load_vlm

    vlm = load_vlm(name, device="cpu")  # the shipped weights, by name
    assert vlm.image_size == 64 and vlm.model_id.startswith(f"{name}__")
    assert vlm.model_id != load_vlm(f"{name}@random", device="cpu").model_id
    frames = np.random.default_rng(0).integers(0, 255, (4, 64, 64, 3), dtype=np.uint8)
    emb = vlm.encode_images(frames)
    assert emb.shape == (4, 128) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-4)
    text = embed_prompts(vlm.encode_text, get_task().prompts())
    scores = goal_baseline_scores(emb, text.goals, text.baseline, 0.9)
    assert scores.shape[0] == 4 and np.all(np.isfinite(scores))
