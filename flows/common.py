"""What every flow shares: its one parameter ``config`` read as its config class (:func:`as_config`,
:func:`flow_parameters`), retries that skip user errors (:func:`retry_unless_user_error`), and a
failure as the one line the console prints for the same error (:func:`failure_line`,
:func:`one_line_failures`): the flow run's state message and an ``error: ...`` log line (what
``prefect deployment run --watch`` and the UI show).

Nothing here imports Prefect at module level.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rmtl.config import Config
from rmtl.errors import USER_ERRORS, ConfigError

C = TypeVar("C", bound=Config)
F = TypeVar("F", bound=Callable[..., Any])


# -- the config parameter ----------------------------------------------------------------------
def as_config(cls: type[C], value: Any) -> C:
    """A flow's ``config`` parameter as ``cls``: an instance as given (in-process), a deployment
    run's JSON mapping built by ``cls.make``. The flows leave Prefect's own validation off, so a
    bad value is the config's one line, not a pydantic report."""
    if isinstance(value, cls):
        return value
    if isinstance(value, Config):  # another class (or a copy Prefect rebuilt): its values
        value = value.model_dump()
    if not isinstance(value, Mapping):
        raise ConfigError(f"config must be a {cls.__name__} or a mapping of its fields, got {type(value).__name__}")
    return cls.make(**value)


def flow_parameters(cfg: Config) -> dict:
    """A flow's parameters for a config (JSON-ready: what a deployment run takes)."""
    return {"config": cfg.model_dump(mode="json")}


def retry_unless_user_error(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect retry condition: retry unexpected failures, never a user error."""
    try:
        state.result(raise_on_failure=True)
    except USER_ERRORS:
        return False
    except Exception:
        return True
    return True


# -- failures as one line ----------------------------------------------------------------------
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


def failure_line(err: BaseException) -> str | None:
    """The one line the console prints for ``err`` (without ``error: ``): a project error, an
    invalid value, an OS error on a path; None for anything else (a bug: Prefect keeps its
    traceback)."""
    from pydantic import ValidationError

    from rmtl.console import one_line, os_error_line

    if isinstance(err, USER_ERRORS):
        return one_line(err)
    if isinstance(err, ValidationError):
        from rmtl.config import format_validation_error

        return one_line(format_validation_error(err.title, err))
    if isinstance(err, OSError):
        return one_line(os_error_line(err))
    return None


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
