"""Learners: the Stage-1 PPO worker (paper section 3.5, Table 1) and the Stage-2 learned
manager (section 3.6, Table 2).

- :mod:`rmtl.train.config`: :class:`Stage1Config` (Table 1 defaults) and the named variants.
- :mod:`rmtl.train.envs.phase_observation`: phase one-hot observation, dense reference reward.
- :mod:`rmtl.train.callbacks`: curriculum, logging, periodic evaluation, checkpoints.
- :mod:`rmtl.train.envs.train_env`: the vec-env stack both stages train on, its reward source.
- :mod:`rmtl.train.run.run_dir`: run directories (resume checks, stale files, logger, normaliser).
- :mod:`rmtl.train.run_session`: the session both stages run around SB3's ``learn`` (restoring a
  checkpoint, reseeding, the eval env, wall time, the final checkpoint and evaluation).
- :mod:`rmtl.train.run.csv_log`: the runs' CSV logs.
- :mod:`rmtl.train.stage1`: :func:`train_stage1` (resumable).
- :mod:`rmtl.train.eval.evaluate`: :func:`evaluate_checkpoint` on the final (random-start) stage.
- :mod:`rmtl.train.eval.selection`: :func:`select_checkpoint` (best on validation seeds, reported
  on disjoint test seeds; the final checkpoint; the mean of the last 5 evaluations).
- :mod:`rmtl.train.report`: :func:`stage1_report` (paper Fig. 5, Fig. 6, final table),
  :func:`stage2_report` (Fig. 7 behavioural comparison).
- :mod:`rmtl.train.stage2.manager`: the manager net, BC, the REINFORCE loss, the progress potential and
  the vec-env hooks (one module each);
  :mod:`rmtl.train.stage2.manager_callback` (its update hook, :func:`load_manager`),
  :mod:`rmtl.train.stage2.bc_data` (BC labels), :mod:`rmtl.train.stage2.worker_freeze` (the frozen worker),
  :mod:`rmtl.train.stage2.selector_eval` (:func:`evaluate_selector`), :mod:`rmtl.train.stage2.manager_env`
  (the Stage-2 stack) and :mod:`rmtl.train.stage2.trainer` (:func:`train_stage2`; docs/stage2.md).

Everything is imported lazily (torch, open_clip and SB3 load only when used).
"""

from __future__ import annotations

from rmtl.lazy import lazy_attributes

_LAZY = {
    "VARIANTS": "rmtl.train.config", "CacheConfig": "rmtl.train.config", "DenseRewardConfig": "rmtl.train.config",
    "Stage1Config": "rmtl.train.config", "stage1_config": "rmtl.train.config",
    "train_stage1": "rmtl.train.stage1", "evaluate_checkpoint": "rmtl.train.eval.evaluate",
    "stage1_report": "rmtl.train.report", "select_checkpoint": "rmtl.train.eval.selection",
    "Stage2Config": "rmtl.train.config", "train_stage2": "rmtl.train.stage2.trainer", "stage2_report": "rmtl.train.report",
}

__all__ = list(_LAZY)

__getattr__ = lazy_attributes(__name__, _LAZY)
