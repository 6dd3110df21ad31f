"""Stage 2: the learned manager over a frozen-then-unfrozen Stage-1 worker (docs/stage2.md)."""
