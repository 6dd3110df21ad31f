"""Selection of the kept weights of domain-CLIP training: the prompt-free held-out caption loss,
early stopping, and both surviving a resume from checkpoint.pt."""

import csv

import numpy as np
import pytest

from pipeline.jobs.rollout import RolloutConfig, rollout_episodes
from pipeline.train_vlm import HeldOutCaptions, Selection, TrainingData, TrainVLMConfig, train_reward_vlm

VIEWS = ["wide_view", "close_up"]


@pytest.fixture(scope="module")
def data():
    """Four expert episodes and eight coverage scenes (one row each); with holdout 0.5 episode 0 and
    coverage scenes 7-11 are held out."""
    expert = RolloutConfig.make(episodes=4, views=VIEWS, resolution=64, stages=(0, 3))
    coverage = RolloutConfig.make(episodes=8, views=VIEWS, resolution=64, policy="coverage", seed=500)
    return TrainingData.concat([
        TrainingData.from_batches([rollout_episodes(expert, list(range(4)))], VIEWS, expert=True),
        TrainingData.from_batches([rollout_episodes(coverage, list(range(8)))], VIEWS, expert=False, episode_offset=4)])


def neutral_cfg(**changes) -> TrainVLMConfig:
    """A tiny prompt-neutral run from random weights; a large learning rate so that the held-out loss
    soon stops improving and patience ends the run."""
    base = dict(steps=30, batch_size=8, warmup_steps=0, lr=0.3, eval_every=1, checkpoint_every=1, holdout_fraction=0.5,
                device="cpu", captions="neutral", baseline_balance=0, select_by="caption_loss", patience_evals=3,
                caption_eval_samples=16, shift_augment=0)
    return TrainVLMConfig.make(**{**base, **changes})


def caption_losses(metrics: dict) -> dict[int, float]:
    return {int(k.removeprefix("step_")): v["held_out_caption_loss"] for k, v in metrics.items()
            if k.startswith("step_")}


def test_caption_loss_is_allowed_for_prompt_neutral_captions_and_patience_needs_an_objective():
    from rmtl.errors import ConfigError

    assert neutral_cfg().select_by == "caption_loss"
    with pytest.raises(ConfigError, match="select_by gate_margin"):
        neutral_cfg(select_by="gate_margin")
    with pytest.raises(ConfigError, match="patience_evals"):
        neutral_cfg(select_by="last")


def test_held_out_captions_sample_every_family(data):
    import torch

    from rmtl.tasks import get_task

    task = get_task()
    held = np.flatnonzero(data.holdout_mask(0.5))
    geometry = torch.from_numpy(task.soft_target_geometry(data.states)).float()
    sample = HeldOutCaptions(data, held, neutral_cfg(caption_eval_samples=64), task, geometry, lambda rows: None)
    assert set(sample.rows) <= set(held) and len(sample.rows) % 8 == 0
    assert data.expert[sample.rows].any() and not data.expert[sample.rows].all()


def test_selection_keeps_the_best_score_and_counts_evaluations_since():
    import torch

    model = torch.nn.Linear(1, 1)
    sel = Selection("caption_loss")
    for step, loss in ((1, 2.0), (2, 1.5), (3, 1.7), (4, 1.6)):
        sel.update({"held_out_caption_loss": loss}, step, model)
    assert sel.best[:2] == (-1.5, 2) and sel.since_best == 2
    assert sel.patience_spent(2) and not sel.patience_spent(3) and not sel.patience_spent(None)
    assert Selection.resumed("caption_loss", sel.state()).since_best == 2
    assert Selection.resumed("gate_margin", sel.state()).best is None  # another objective: start over
    last = Selection("last")
    last.update({"held_out_caption_loss": 1.0}, 1, model)
    assert last.best is None


@pytest.mark.slow
def test_caption_loss_selection_never_embeds_a_prompt_and_stops_early(tmp_path, data, monkeypatch):
    """Training and selection by held-out caption loss never pass an evaluated prompt text to the
    text tower. The held-out quality metrics logged at each evaluation (and the final report on the
    selected weights) do embed the paper prompts: that is reporting, not training or selection, so
    the spy ignores texts tokenized inside that evaluation and checks that it did see prompts there."""
    import pipeline.train_vlm.loop as loop
    from rmtl.tasks.fetch_lift.captions import evaluated_prompt_texts
    from rmtl.vlm import load_vlm

    reporting, seen, reported = [False], [], []
    report = loop.evaluate

    def reporting_evaluate(*args, **kwargs):
        reporting[0] = True
        try:
            return report(*args, **kwargs)
        finally:
            reporting[0] = False

    monkeypatch.setattr(loop, "evaluate", reporting_evaluate)
    vlm = load_vlm("rmtl-fetch-tiny@random", device="cpu", precision="fp32")
    tokenize = vlm.tokenizer

    def spy(texts):
        (reported if reporting[0] else seen).extend(texts)
        return tokenize(texts)

    vlm.tokenizer = spy
    cfg = neutral_cfg()
    metrics = train_reward_vlm(data, cfg, tmp_path, progress=False, vlm=vlm)

    prompts = [p.lower() for p in evaluated_prompt_texts()]
    assert seen and not [t for t in seen if any(p in t.lower() for p in prompts)]
    assert [t for t in reported if any(p in t.lower() for p in prompts)]  # the spy does see prompts
    # (a) the kept weights are those of the lowest held-out caption loss logged
    losses = {s: v for s, v in caption_losses(metrics).items() if s > 0}
    assert metrics["selected_step"] == min(losses, key=losses.get) and metrics["select_by"] == "caption_loss"
    with open(tmp_path / "train_log.csv") as f:
        logged = {int(r["step"]): float(r["held_out_caption_loss"]) for r in csv.DictReader(f) if r["held_out_caption_loss"]}
    assert logged == pytest.approx(losses)
    # (c) patience: stopped patience_evals evaluations after the best, before the step budget
    assert metrics["steps_done"] < cfg.steps and metrics["stopped_early_at"] == metrics["steps_done"]
    assert metrics["steps_done"] - metrics["selected_step"] == cfg.patience_evals * cfg.eval_every


@pytest.mark.slow
def test_resume_keeps_the_selection_state_and_the_patience_counter(tmp_path, data, monkeypatch):
    """A run stopped mid-way and re-run with the same config ends where an uninterrupted run ends:
    same evaluations, same kept step, same early stop."""
    from pipeline.train_vlm.loop import load_checkpoint

    cfg = neutral_cfg()
    whole = train_reward_vlm(data, cfg, tmp_path / "whole", progress=False)
    losses = caption_losses(whole)
    # Interrupt at the evaluation after the first one that did not improve: the checkpoint before it
    # holds a best step and a patience counter above zero.
    steps = sorted(s for s in losses if s > 0)
    worse = next(s for i, s in enumerate(steps) if i and losses[s] >= min(losses[t] for t in steps[:i]))
    assert worse < whole["steps_done"]
    calls, real_loss = [0], HeldOutCaptions.loss

    def interrupted(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == worse + 2:  # the random-weight reference, then one per step: this is step worse + 1
            raise KeyboardInterrupt
        return real_loss(self, *args, **kwargs)

    monkeypatch.setattr(HeldOutCaptions, "loss", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_reward_vlm(data, cfg, tmp_path / "resumed", progress=False)
    monkeypatch.setattr(HeldOutCaptions, "loss", real_loss)
    saved = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")
    assert saved["step"] == worse and saved["selection"]["since_best"] >= 1
    resumed = train_reward_vlm(data, cfg, tmp_path / "resumed", progress=False)
    assert caption_losses(resumed) == pytest.approx(losses, rel=1e-4)
    for key in ("steps_done", "selected_step", "stopped_early_at"):
        assert resumed[key] == whole[key]
    # Re-running a run that patience stopped trains no further.
    again = train_reward_vlm(data, cfg, tmp_path / "resumed", progress=False)
    assert again["steps_done"] == whole["steps_done"] and again["selected_step"] == whole["selected_step"]
