"""A training run's life on disk: its directory (resume checks, stale files, logger, normaliser),
the checkpoints' artifacts, the CSV logs and the timings."""
