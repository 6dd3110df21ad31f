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


_REPORTED = "_rmtl_reported_as_one_line"
"""Attribute set on an exception whose one line a flow run has logged (:func:`one_line_failures`)."""
_ENGINE_RECORDS = ("Engine execution exited with unexpected exception", "Task run failed with exception")
"""How Prefect's engines begin the records they log with a failure's traceback."""


class _NoTracebackOfUserErrors:
    """A logging filter for Prefect's flow-run and task-run loggers: drops the engines' records
    that carry the traceback of a user error (a task's failure, the flow engine's "Engine execution
    exited with unexpected exception" when the flow returned its Failed state), since the flow run
    logs that error as one line (:func:`one_line_failures`). Bugs keep their tracebacks."""

    def filter(self, record: Any) -> bool:
        exc = record.exc_info[1] if isinstance(record.exc_info, tuple) else None
        if exc is None or not str(record.msg).startswith(_ENGINE_RECORDS):
            return True
        return not (getattr(exc, _REPORTED, False) or failure_line(exc) is not None)


def _quiet_engine_tracebacks() -> None:
    """Install :class:`_NoTracebackOfUserErrors` on Prefect's run loggers (once per process)."""
    import logging

    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoTracebackOfUserErrors) for f in logger.filters):
            logger.addFilter(_NoTracebackOfUserErrors())


def one_line_failures(fn: F) -> F:
    """Wrap a flow's body: a failure the console would print as one line ends the flow run
    Failed with exactly that line as its state message, after logging ``error: <line>`` on the
    flow run's log (so ``prefect deployment run --watch`` prints it just before "Flow run finished
    in state 'Failed'", with no engine traceback: :class:`_NoTracebackOfUserErrors`). A caller of
    the flow in-process still gets the original exception."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _quiet_engine_tracebacks()
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
            try:
                setattr(err, _REPORTED, True)
            except AttributeError:  # pragma: no cover - an exception type with __slots__
                pass
            return Failed(message=line, data=err)

    return wrapper  # type: ignore[return-value]


# -- a wait, told where a flow run's watchers look -----------------------------------------------
def run_notice(line: str) -> None:
    """Tell a flow run's watchers something it waits for (one line, e.g. a Dask scheduler with no
    worker): a warning on the flow run's log (what ``prefect deployment run --watch``, the UI and
    the serving process's stderr show) and the message of its Running state (``prefect flow-run
    inspect``, the UI's state badge). Outside a flow run: stderr."""
    import sys

    try:
        from prefect import get_run_logger
        from prefect.context import FlowRunContext, TaskRunContext

        logger = get_run_logger()
    except Exception:  # noqa: BLE001 - MissingContextError: not in a run
        print(line, file=sys.stderr, flush=True)
        return
    logger.warning(line)
    _send_logs()
    ctx = FlowRunContext.get()
    flow_run_id = getattr(getattr(ctx, "flow_run", None), "id", None)
    if flow_run_id is None:
        task_ctx = TaskRunContext.get()
        flow_run_id = getattr(getattr(task_ctx, "task_run", None), "flow_run_id", None)
    if flow_run_id is not None:
        _running_message(flow_run_id, line)


def _running_message(flow_run_id: Any, line: str) -> None:
    """Set the flow run's state to Running with ``line`` as its message (forced: it is Running
    already; Prefect counts the entry in ``run_count``). Never fails the run."""
    try:
        from prefect.client.orchestration import get_client
        from prefect.states import Running

        with get_client(sync_client=True) as client:
            client.set_flow_run_state(flow_run_id, Running(message=line), force=True)
    except Exception:  # noqa: BLE001 - the log line has said it already
        pass
