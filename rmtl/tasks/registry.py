"""Tasks by name: the shipped ones register themselves lazily (building a task imports its
env), others with :func:`register_task` (e.g. a test's own task)."""

from __future__ import annotations

from collections.abc import Callable

from rmtl.errors import ConfigError
from rmtl.task import Task

DEFAULT_TASK = "fetch_lift"


def _fetch_lift() -> Task:
    from rmtl.tasks.fetch_lift.task import fetch_lift_task

    return fetch_lift_task()


_FACTORIES: dict[str, Callable[[], Task]] = {DEFAULT_TASK: _fetch_lift}
_BUILT: dict[str, Task] = {}


def register_task(task: Task | Callable[[], Task], name: str | None = None) -> None:
    """Make a task (or a factory building it on first use) known under its name."""
    key = name or (task.name if isinstance(task, Task) else None)
    if not key:
        raise ConfigError("register_task needs a Task or a name for its factory")
    _BUILT.pop(key, None)
    _FACTORIES[key] = (lambda: task) if isinstance(task, Task) else task


def task_names() -> list[str]:
    return sorted(_FACTORIES)


def task_views(views, name: str = DEFAULT_TASK) -> tuple[str, ...]:
    """Camera view names checked against task ``name``'s camera bank, in bank order (None or 'all':
    every camera); a ValueError naming the bank's views otherwise (config validators report it)."""
    from rmtl.env.cameras import resolve_views

    try:
        return resolve_views(views, tuple(get_task(name).camera_bank))
    except ConfigError as err:
        raise ValueError(str(err)) from None


def get_task(name: str = DEFAULT_TASK) -> Task:
    """The task registered as ``name`` (one line naming the known tasks if there is none)."""
    if name not in _FACTORIES:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(task_names())}")
    if name not in _BUILT:
        _BUILT[name] = _FACTORIES[name]()
    return _BUILT[name]
