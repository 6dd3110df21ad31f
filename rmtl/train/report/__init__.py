"""Reports over finished runs, one module each: :mod:`~rmtl.train.report.stage1` (paper Fig. 5 and
Fig. 6, the final success tables), :mod:`~rmtl.train.report.stage2` (Fig. 7's behavioural comparison)
and :mod:`~rmtl.train.report.runs` (reading run directories for them)."""
