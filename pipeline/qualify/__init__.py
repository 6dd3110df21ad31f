"""``rmtl qualify``: will this scorer teach? Its quality metrics on the qualification set, its
battery of degenerate behaviours, and where it sits on the learnability map (docs/reward_quality.md).

The qualification set is a list of rollout families (``qualification_families.yaml``): the
noise-free expert, noisy experts, the task's degenerate behaviours and committed learners'
policies. A scorer that reads state (``oracle``, ``degraded_oracle``, ``rule_only``) is scored on
the families' states, rolled out without rendering and cached; a VLM is scored on the same
episodes rendered on the model's declared renderer into one store per family and embedded once.

The verdict comes from the task's learnability map (``Task.learnability_map``, shipped with the
task's package: ``rmtl/tasks/fetch_lift/learnability_map.json``, fitted by ``experiments/learnability/fit_map.py`` from the degraded-oracle runs): the fitted probability
that a run on this scorer teaches (test success >= 0.5 at 300k steps) with a bootstrap interval,
and the outcomes of the nearest mapped conditions.
"""

from __future__ import annotations

from pipeline.qualify.families import REPO, FAMILIES_FILE, Family, StateSet, file_slug, load_families, state_set
from pipeline.qualify.scores import STATE_KINDS, state_scorer, kind_scores, windowed_scores, frames_folder, model_scores, hybrid_scores
from pipeline.qualify.metrics import METRICS, BETTER, NO_SCORER_METRICS, BOOTSTRAP, scorer_metrics, pooled_metrics
from pipeline.qualify.battery import battery, single_prompt_battery
from pipeline.qualify.learnability_map import load_map, map_support, outside_support, map_verdict, scorer_verdict, fit_replayed_error, plot_map
from pipeline.qualify.report import qualify, format_report

__all__ = [
    "REPO",
    "FAMILIES_FILE",
    "Family",
    "StateSet",
    "file_slug",
    "load_families",
    "state_set",
    "STATE_KINDS",
    "state_scorer",
    "kind_scores",
    "windowed_scores",
    "frames_folder",
    "model_scores",
    "hybrid_scores",
    "METRICS",
    "BETTER",
    "NO_SCORER_METRICS",
    "BOOTSTRAP",
    "scorer_metrics",
    "pooled_metrics",
    "battery",
    "single_prompt_battery",
    "load_map",
    "map_support",
    "outside_support",
    "map_verdict",
    "scorer_verdict",
    "fit_replayed_error",
    "plot_map",
    "qualify",
    "format_report",
]
