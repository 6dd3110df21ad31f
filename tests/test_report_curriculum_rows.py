"""Fig. 6 of a kept run without its checkpoints: env steps and episodes per level from curriculum.csv."""

import csv

from rmtl.train.report.runs import curriculum_from_rows, load_run


def test_levels_are_rebuilt_from_the_curriculum_rows(tmp_path):
    rows = [  # timesteps, stage, total episodes: 2 rollouts at level 0, 1 at level 1, 2 at level 0 again
        (640, 0, 16), (1280, 0, 32), (1920, 1, 50), (2560, 0, 66), (3200, 0, 80)]
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("variant: rmtl\nseed: 3\n")
    with open(run / "curriculum.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timesteps", "stage", "difficulty", "window_success_rate", "window_episodes", "episodes_in_stage",
                    "total_episodes"])
        for t, k, total in rows:
            w.writerow([t, k, 0.0, 0.1, 16, 0, total])
    c = load_run(run)["curriculum"]
    assert c["steps_per_stage"] == [2560, 640] and sum(c["steps_per_stage"]) == 3200
    assert c["episodes_per_stage"] == [62, 18] and c["successes_per_stage"] == [None, None]
    assert curriculum_from_rows([]) == {}
