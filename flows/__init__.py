"""Prefect flows over the pipeline steps (docs/flows.md).

Importing this package first makes ``import storage`` the project's top-level package
whatever comes first on ``sys.path`` (:func:`pin_storage`): a Prefect runner executes a flow run's on_crashed and
on_cancellation hooks with ``python .../prefect/runner/_workspace_runtime_bootstrap.py``, a
script, so ``prefect/runner`` is first on ``sys.path`` there and its ``storage.py`` would
otherwise shadow the package (``No module named 'storage.errors'``), and the hooks would
never run.

:func:`failure_line` and :func:`one_line_failures` give a flow's failure the one line the
console prints for the same error, as the flow run's state message and an ``error: ...``
log line (what ``prefect deployment run --watch`` and the UI show).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

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


def _send_logs() -> None:
    """Send the flow run's queued log lines to the API now (Prefect's log handler flush)."""
    import logging

    try:
        from prefect.logging.handlers import APILogHandler

        for handler in logging.getLogger("prefect.flow_runs").handlers + logging.getLogger("prefect").handlers:
            if isinstance(handler, APILogHandler):
                handler.flush()
                return
    except Exception:  # noqa: BLE001 - the logs still go with the usual batch
        pass


# -- failures as one line ----------------------------------------------------------------------
def failure_line(err: BaseException) -> str | None:
    """The one line the console prints for ``err`` (without ``error: ``): a project error, an
    invalid value, an OS error on a path; None for anything else (a bug: Prefect keeps its
    traceback)."""
    from rmtl.console import one_line, os_error_line
    from rmtl.errors import USER_ERRORS

    if isinstance(err, USER_ERRORS):
        return one_line(err)
    try:
        from pydantic import ValidationError
    except ImportError:  # pragma: no cover
        ValidationError = ()  # type: ignore[assignment]
    if ValidationError and isinstance(err, ValidationError):
        from rmtl.config import format_validation_error

        return one_line(format_validation_error(err.title, err))
    if isinstance(err, OSError):
        return one_line(os_error_line(err))
    return None


F = TypeVar("F", bound=Callable[..., Any])


def one_line_failures(fn: F) -> F:
    """Wrap a flow's body: a failure the console would print as one line ends the flow run
    Failed with exactly that line as its state message, after logging ``error: <line>`` on the
    flow run's log (so ``prefect deployment run --watch`` prints it before "Flow run finished in
    state 'Failed'"). A caller of the flow in-process still gets the original exception."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            line = failure_line(err)
            if line is None:
                raise
            from prefect import get_run_logger
            from prefect.states import Failed

            get_run_logger().error("error: %s", line)
            _send_logs()  # before the final state: `--watch` stops listening soon after it
            return Failed(message=line, data=err)

    return wrapper  # type: ignore[return-value]
