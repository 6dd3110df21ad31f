"""``rmtl qualify``: will this scorer teach? Its quality metrics on the qualification set, its
battery of degenerate behaviours, and where it sits on the learnability map (docs/reward_quality.md).

The qualification set is a list of rollout families (``qualification_families.yaml``, beside this file): the
noise-free expert, noisy experts, the task's degenerate behaviours and committed learners'
policies. A scorer that reads state (``oracle``, ``degraded_oracle``, ``rule_only``) is scored on
the families' states, rolled out without rendering and cached; a VLM is scored on the same
episodes rendered on the model's declared renderer into one store per family and embedded once.

The verdict comes from the task's learnability map (``Task.learnability_map``, shipped with the
task's package: ``rmtl/tasks/fetch_lift/learnability_map.json``, refitted by ``rmtl qualify fit-map``
from the degraded-oracle runs of a sweep of conditions, ``pipeline/qualify/fit.py``): the fitted
probability that a run on this scorer teaches (test success >= 0.5 at 300k steps) with a bootstrap
interval, and the outcomes of the nearest mapped conditions. The map's axes, their directions and
its plot come from the task (``Task.map_axes``, ``Task.map_plane``).
"""

from __future__ import annotations

from pipeline.qualify.families import FAMILIES_FILE, Family, StateSet, file_slug, load_families, state_set
from pipeline.qualify.scores import STATE_KINDS, state_scorer, kind_scores, windowed_scores, frames_folder, model_scores, hybrid_scores
from pipeline.qualify.metrics import BOOTSTRAP, map_axes, better, no_scorer_metrics, scorer_metrics, pooled_metrics
from pipeline.qualify.battery import battery, single_prompt_battery
from pipeline.qualify.learnability_map import (MAP_VERSION, LearnabilityMap, LogisticFit, MappedCondition, load_map, map_support,
                                               outside_support, map_verdict, scorer_verdict, fit_replayed_error, plot_map)
from pipeline.qualify.report import qualify, format_report
from pipeline.qualify.compare import compare, format_compare
from pipeline.qualify.configurations import VLM_VARIANTS, RewardConfiguration, configuration
from pipeline.qualify.fit import fit_map


def __getattr__(name: str):
    # METRICS, BETTER and NO_SCORER_METRICS: the default task's (pipeline.qualify.metrics)
    from pipeline.qualify import metrics

    return getattr(metrics, name)


__all__ = [
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
    "map_axes",
    "better",
    "no_scorer_metrics",
    "BOOTSTRAP",
    "scorer_metrics",
    "pooled_metrics",
    "battery",
    "single_prompt_battery",
    "MAP_VERSION",
    "LearnabilityMap",
    "LogisticFit",
    "MappedCondition",
    "load_map",
    "map_support",
    "outside_support",
    "map_verdict",
    "scorer_verdict",
    "fit_replayed_error",
    "plot_map",
    "qualify",
    "format_report",
    "compare",
    "format_compare",
    "VLM_VARIANTS",
    "RewardConfiguration",
    "configuration",
    "fit_map",
]
