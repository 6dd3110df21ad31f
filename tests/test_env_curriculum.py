import numpy as np
import pytest

from rmtl.env.curriculum import CurriculumStage, ReverseCurriculum
from rmtl.errors import ConfigError
from rmtl.tasks.fetch_lift.curriculum_stages import PAPER_STAGES


def feed(cur, successes, failures):
    advanced = False
    for s in [True] * successes + [False] * failures:
        advanced |= cur.record(s)
    return advanced


def test_paper_stages():
    assert [s.difficulty for s in PAPER_STAGES] == [0, 0.15, 0.4, 0.65, 1.0]
    assert [s.min_episodes for s in PAPER_STAGES] == [50, 80, 120, 150, 0]
    assert PAPER_STAGES[-1].success_threshold is None


def test_does_not_advance_until_window_full():
    cur = ReverseCurriculum(PAPER_STAGES, window=100)
    for _ in range(99):
        assert not cur.record(True)
    assert cur.stage_index == 0
    assert cur.record(True)  # 100th success fills the window
    assert cur.stage_index == 1


def test_threshold_met_exactly_vs_one_short():
    cur = ReverseCurriculum(PAPER_STAGES, window=100)
    feed(cur, 0, 51)
    feed(cur, 49, 0)  # 49/100 = 0.49 < 0.5 with a full window
    assert cur.stage_index == 0
    assert cur.record(True)  # oldest failure leaves the window: 50/100 = 0.5 meets the gate
    assert cur.stage_index == 1


def test_min_episodes_gate_with_small_window():
    stages = (CurriculumStage(0, 0, 0.1, 0.5, 50), CurriculumStage(1, 0.9, 1, None, 0))
    cur = ReverseCurriculum(stages, window=10)
    for _ in range(49):
        assert not cur.record(True)  # window full and 100% success, but only 49 episodes
    assert cur.record(True)
    assert cur.is_final


def test_window_cleared_on_advance_and_final_stage_never_advances():
    cur = ReverseCurriculum(PAPER_STAGES, window=100, start_stage=3)
    assert feed(cur, 150, 0)
    assert cur.is_final and cur.episodes_in_stage == 0 and cur.success_rate == 0.0
    assert not feed(cur, 500, 0)
    assert cur.stage_index == 4


def test_sample_difficulty_within_stage_range():
    cur = ReverseCurriculum(PAPER_STAGES, start_stage=2)
    rng = np.random.default_rng(0)
    u = [cur.sample_difficulty(rng) for _ in range(200)]
    assert min(u) >= 0.25 and max(u) <= 0.5


def test_state_dict_round_trip():
    cur = ReverseCurriculum(PAPER_STAGES, window=100)
    feed(cur, 100, 3)
    other = ReverseCurriculum(PAPER_STAGES, window=100)
    other.load_state_dict(cur.state_dict())
    assert other.state_dict() == cur.state_dict()


@pytest.mark.parametrize("kwargs", [{"window": 0}, {"start_stage": 7}, {"stages": ()}])
def test_bad_curriculum_config(kwargs):
    with pytest.raises(ConfigError):
        ReverseCurriculum(**{"stages": PAPER_STAGES, **kwargs})
