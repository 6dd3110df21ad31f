"""Learners: the Stage-1 PPO worker (paper section 3.5, Table 1) and the Stage-2 learned
manager (section 3.6, Table 2). Grouped by job, each group importing only the ones below it
(the ``train-layers`` contract in pyproject.toml):

- :mod:`rmtl.train.cli`: the ``rmtl train`` / ``eval`` / ``report`` commands.
- :mod:`rmtl.train.report`: ``stage1`` (:func:`stage1_report`: paper Fig. 5, Fig. 6, final table),
  ``stage2`` (:func:`stage2_report`: Fig. 7 behavioural comparison), ``runs`` (reading run directories).
- :mod:`rmtl.train.stage1`: :func:`train_stage1` (resumable).
- :mod:`rmtl.train.stage2`: Stage 2 (docs/stage2.md): ``trainer`` (:func:`train_stage2`),
  ``manager_env`` (the Stage-1 stack with the manager's hooks), ``manager/`` (the net, BC, the
  REINFORCE loss, the progress potential, the vec-env hooks; one module each),
  ``manager_callback`` (its update hook, :func:`load_manager`), ``bc_data`` (BC labels),
  ``worker_freeze`` (the frozen worker), ``selector_eval`` (:func:`evaluate_selector`).
- :mod:`rmtl.train.callbacks`: curriculum, training statistics, periodic evaluation.
- :mod:`rmtl.train.eval`: ``evaluate`` (:func:`evaluate_checkpoint` on the final, random-start
  stage), ``selection`` (:func:`select_checkpoint`: best on validation seeds, reported on disjoint
  test seeds; the final checkpoint; the mean of the last 5 evaluations), ``committed`` (what a run
  keeps for a fresh clone: ``resume/``, ``best/``).
- :mod:`rmtl.train.envs`: the vec-env stack both stages train on: ``train_env`` (the stack, its
  reward source), ``process_group`` (sub-envs stepped in worker processes), ``phase_observation``
  (the phase one-hot).
- :mod:`rmtl.train.run`: a run's life: ``session`` (:class:`RunSession`, around SB3's ``learn``:
  restoring, reseeding, the logger, the eval env, wall time, and the only writer of checkpoints),
  ``checkpoints`` (their directories and the callback that asks the session for one),
  ``run_dir`` (resume checks, stale files, logger, normaliser), ``artifacts`` (normaliser and
  torch state files), ``csv_log``, ``timing``.
- :mod:`rmtl.train.config`: :class:`Stage1Config` (Table 1 defaults; steps rounded up to whole
  rollouts), :class:`Stage2Config`; below it :mod:`rmtl.train.variants` (the named variants, variants.yaml)
  and :mod:`rmtl.train.reward_layout` (configs of reward layout v1 read into the tagged one).

Everything is imported lazily (torch, open_clip and SB3 load only when used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmtl.lazy import lazy_attributes

if TYPE_CHECKING:  # the same names, for type checkers and IDEs (at run time: _LAZY)
    from rmtl.train.config import VARIANTS, CacheConfig, DenseRewardConfig, Stage1Config, stage1_config, Stage2Config
    from rmtl.train.stage1 import train_stage1
    from rmtl.train.eval.evaluate import evaluate_checkpoint
    from rmtl.train.report.stage1 import stage1_report
    from rmtl.train.report.stage2 import stage2_report
    from rmtl.train.eval.selection import select_checkpoint
    from rmtl.train.stage2.trainer import train_stage2

_LAZY = {
    "VARIANTS": "rmtl.train.config", "CacheConfig": "rmtl.train.config", "DenseRewardConfig": "rmtl.train.config",
    "Stage1Config": "rmtl.train.config", "stage1_config": "rmtl.train.config",
    "train_stage1": "rmtl.train.stage1", "evaluate_checkpoint": "rmtl.train.eval.evaluate",
    "stage1_report": "rmtl.train.report.stage1", "select_checkpoint": "rmtl.train.eval.selection",
    "Stage2Config": "rmtl.train.config", "train_stage2": "rmtl.train.stage2.trainer", "stage2_report": "rmtl.train.report.stage2",
}

__all__ = [
    "VARIANTS", "CacheConfig", "DenseRewardConfig", "Stage1Config", "stage1_config", "train_stage1",
    "evaluate_checkpoint", "stage1_report", "select_checkpoint", "Stage2Config", "train_stage2", "stage2_report",
]

__getattr__ = lazy_attributes(__name__, _LAZY)
