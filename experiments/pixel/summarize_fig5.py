"""Fig. 5 with pixels (results/pixel_fig5/RULE.md) from the kept runs: the runs' table and the decisions.

    python experiments/pixel/summarize_fig5.py [--runs results/pixel_fig5/runs] [--out results/pixel_fig5]
    python experiments/pixel/summarize_fig5.py --runs results/pixel_fig5_r8/runs --out results/pixel_fig5_r8   # round 8

Claim 1: RMTL (three micro-task prompts, six views) against the single prompt with six views;
claim 2: the single prompt with six views against it with one view (``wide_view``). Each by the
seed-pair rule on best-on-validation test success, open until seeds 0-2 of both arms have finished.
Writes ``runs.md`` / ``runs.csv`` and ``decision.txt``; the figures are ``rmtl report``'s
(``results/pixel_fig5/report``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from summarize import run_row, seed_runs  # this script's folder
from summarize_structure import write_tables

REPO = Path(__file__).resolve().parents[2]
ARMS = {"rmtl": "RMTL", "single_prompt_multi_view": "single prompt + six views",
        "single_prompt_single_view": "single prompt + one view"}
COMPARISONS = [("claim 1, micro-task prompts", "rmtl", "single_prompt_multi_view"),
               ("claim 2, multi-view for the single prompt", "single_prompt_multi_view", "single_prompt_single_view")]


def runs_model(runs: Path) -> str:
    """The reward model the runs under ``runs`` trained with (their ``config.yaml``); one line if they differ."""
    models = {(yaml.safe_load(c.read_text()) or {}).get("reward", {}).get("model") for c in sorted(runs.glob("*/config.yaml"))}
    if len(models) != 1:
        raise SystemExit(f"error: the runs under {runs} trained with {sorted(map(str, models)) or 'no'} reward model(s); "
                         "Fig. 5 compares arms of one model: give --runs of one sweep")
    return str(models.pop())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=REPO / "results/pixel_fig5/runs")
    ap.add_argument("--out", type=Path, default=REPO / "results/pixel_fig5")
    a = ap.parse_args(argv)
    rows = {arm: [(d, run_row(d)) for d in seed_runs(a.runs, arm)] for arm in ARMS}
    header = (f"Fig. 5 arms on the prompt-neutral `{runs_model(a.runs)}` (`RULE.md`). Test success over 200 episodes with 95% "
              "Wilson intervals.")
    lines, decided = write_tables(rows, ARMS, header, COMPARISONS, a.out)
    print("\n".join([*lines, "", *decided]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
