"""Evaluating checkpoints on the final (random-start) stage, choosing one (validation seeds,
reported on test seeds) and keeping the results a run leaves for a fresh clone."""
