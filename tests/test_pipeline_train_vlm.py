import json

import numpy as np
import pytest

from pipeline.rollout import RolloutConfig, rollout_episodes
from pipeline.train_vlm import TrainingData, TrainVLMConfig, soft_targets, task_geometry, train_reward_vlm


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
