"""The reward model every command and training config uses unless told otherwise (one place
to change it, e.g. to ``PE-Core-bigG-14-448:meta``, the paper's model)."""

DEFAULT_MODEL = "rmtl-fetch-tiny"
"""The offline default: the project's domain-trained small CLIP (weights ship in the package)."""

RANDOM_REFERENCE = f"{DEFAULT_MODEL}@random"
"""Its architecture with random weights: what the quality gates compare a model against."""
