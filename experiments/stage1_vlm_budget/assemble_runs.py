"""Run directories for `rmtl report` from the committed results of earlier sessions.

The stores and checkpoints of earlier sessions are gone (only results/ is committed), so
each earlier run becomes a directory with a two-line config.yaml (variant, seed) and its
committed eval.csv / curriculum.csv; `rmtl report` reads nothing else for Fig. 5 and 6.
With a run's selection.json beside its eval.csv, the success table gets its final and
best-on-validation rows too.

    python experiments/stage1_vlm_budget/assemble_runs.py OUT_DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "results"
COMMITTED_RUNS = {
    # name: (variant, seed, eval.csv, curriculum.csv or None); a selection.json beside eval.csv is copied too
    "rmtl_s0": ("rmtl", 0, "stage1_fast/eval.csv", "stage1_fast/curriculum.csv"),
    "rmtl_phase_offset_s0": ("rmtl_phase_offset", 0, "stage1_phase_offset/eval.csv",
                             "stage1_phase_offset/curriculum.csv"),
    "dense_reference_s0": ("dense_reference", 0, "stage1_session1/dense_reference_eval.csv", None),
    "single_prompt_multi_view_s0": ("single_prompt_multi_view", 0, "stage1_single_prompt/eval.csv",
                                    "stage1_single_prompt/curriculum.csv"),
    "dense_reference_s1": ("dense_reference", 1, "stage1_vlm_budget/dense_reference_s1/eval.csv",
                           "stage1_vlm_budget/dense_reference_s1/curriculum.csv"),
    "dense_reference_s2": ("dense_reference", 2, "stage1_vlm_budget/dense_reference_s2/eval.csv",
                           "stage1_vlm_budget/dense_reference_s2/curriculum.csv"),
    "rmtl_s1": ("rmtl", 1, "stage1_vlm_budget/rmtl_s1/eval.csv", "stage1_vlm_budget/rmtl_s1/curriculum.csv"),
}


def main(out: Path) -> None:
    for name, (variant, seed, eval_csv, curriculum_csv) in COMMITTED_RUNS.items():
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.yaml").write_text(f"variant: {variant}\nseed: {seed}\n")
        shutil.copy(RESULTS / eval_csv, d / "eval.csv")
        if curriculum_csv:
            shutil.copy(RESULTS / curriculum_csv, d / "curriculum.csv")
        selection = (RESULTS / eval_csv).parent / "selection.json"
        if selection.is_file() and eval_csv.endswith("/eval.csv"):
            shutil.copy(selection, d / "selection.json")
        print(d)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
