"""The Stage-2 manager (paper section 3.6, App. A, Table 2), one module per job:

- :mod:`~rmtl.train.stage2.manager.network`: :class:`ManagerNet` (MLP [128, 128] + K-way softmax on
  the 25-D state, input standardised with statistics fixed at BC time, shared across all
  envs) and the epsilon-greedy :func:`sample_decisions`.
- :mod:`~rmtl.train.stage2.manager.loss`: :func:`reinforce_loss`, the REINFORCE objective of
  docs/stage2.md, and :func:`segments_batch`, the finished segments as its tensors.
- :mod:`~rmtl.train.stage2.manager.bc`: :func:`bc_train`, the behaviour-cloning warm start on rule labels.
- :mod:`~rmtl.train.stage2.manager.progress`: :class:`ProgressSignal`, the manager-independent
  progress potential the segment returns are measured with.
- :mod:`~rmtl.train.stage2.manager.vec_env_hooks`: :class:`ManagerController` +
  :class:`ManagerDecide` / :class:`ManagerSegments`, the vec-env hooks that make the
  decisions and collect the segments (their timing convention is documented there).

The training hook and the saved form are in :mod:`rmtl.train.stage2.manager_callback`.
"""
