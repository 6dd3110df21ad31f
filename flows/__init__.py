"""Prefect flows over the pipeline steps (docs/flows.md).

Importing this package first makes ``import storage`` the project's top-level package
whatever comes first on ``sys.path`` (:func:`pin_storage`): a Prefect runner executes a flow run's on_crashed and
on_cancellation hooks with ``python .../prefect/runner/_workspace_runtime_bootstrap.py``, a
script, so ``prefect/runner`` is first on ``sys.path`` there and its ``storage.py`` would
otherwise shadow the package (``No module named 'storage.errors'``), and the hooks would
never run.

What the flows share (their config parameter, retries, failures as one line) is
:mod:`flows.common`.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path
from typing import Any

_STORAGE = Path(__file__).resolve().parent.parent / "storage"
"""The project's top-level ``storage`` package (installed beside ``flows``)."""


def _is_ours(module: Any) -> bool:
    file = getattr(module, "__file__", None)
    try:
        return file is not None and Path(file).resolve() == _STORAGE / "__init__.py"
    except OSError:  # pragma: no cover
        return False


class _ProjectStorage(importlib.abc.MetaPathFinder):
    """Finds the top-level name ``storage`` in the project's folder, before ``sys.path`` is asked."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "storage":
            return None  # submodules: found through the package's __path__
        return importlib.util.spec_from_file_location("storage", _STORAGE / "__init__.py",
                                                      submodule_search_locations=[str(_STORAGE)])


def pin_storage() -> None:
    """Make ``import storage`` (and ``storage.<sub>``) the project's package whatever comes first
    on ``sys.path``: a finder ahead of ``sys.path`` answers for the name (nothing is imported
    now, so this costs nothing), and a shadowing ``storage`` module imported before (e.g.
    ``prefect/runner/storage.py`` as a top-level module) is dropped from ``sys.modules``."""
    if not (_STORAGE / "__init__.py").is_file():  # pragma: no cover - an install without the package
        return
    if not any(isinstance(f, _ProjectStorage) for f in sys.meta_path):
        sys.meta_path.insert(0, _ProjectStorage())
    current = sys.modules.get("storage")
    if current is not None and not _is_ours(current):
        for name in [n for n in sys.modules if n == "storage" or n.startswith("storage.")]:
            del sys.modules[name]


pin_storage()

