"""What the jobs over a store share: where the store is (:class:`StoreLocation`, the one rule
of every job with a flow: its command, its flow and a Python caller), and what every analysis
of its embeddings takes (:class:`StoreQuestion`, :class:`PromptedQuestion`)."""

from __future__ import annotations

from typing import Any

from rmtl.config import Config


class StoreLocation(Config):
    """A store named by path or URL, or by a name under the data directory."""

    store: str | None = None
    """Store path or URL; default <data dir>/stores/<name>.zarr."""
    name: str = "default"
    """Dataset name used for the default store path."""

    def store_path(self) -> str:
        from rmtl.provenance import data_dir

        return self.store or str(data_dir() / "stores" / f"{self.name}.zarr")


class StoreQuestion(Config):
    """What every analysis of a store's embeddings takes."""

    store: str
    """Dataset store with embeddings."""
    model: str | None = None
    """Stored model id or spec (default: the store's only model, else the default model rmtl-fetch-tiny when stored)."""
    out: str | None = None
    """Output directory (default under <store>.analysis)."""


class PromptedQuestion(StoreQuestion):
    prompts: str | None = None
    """Prompt-set YAML file or a shipped set's name (default: the paper's prompts; add its text
    embeddings first: rmtl embed-text)."""


class LocatedQuestion(StoreLocation, PromptedQuestion):
    """A prompted question of a job with a flow: its store by path or by name (StoreLocation comes
    first so its optional ``store`` wins; the commands without a flow keep ``--store`` required)."""


def prompt_set_of(path: str | None) -> Any:
    """The prompt set of a ``prompts`` value (None: the paper's prompts)."""
    if path is None:
        return None
    from rmtl.reward.prompt_sets import load_prompt_set

    return load_prompt_set(path)
