"""Tasks: everything one task defines behind one :class:`Task` object, looked up by name.

- :mod:`rmtl.task`: the :class:`Task` object (below the learners, which take one injected).
- :mod:`rmtl.tasks.registry`: :func:`get_task`, :func:`register_task`.
- :mod:`rmtl.tasks.fetch_lift`: the Fetch pick-and-lift task (micro-task spec
  ``micro_tasks.yaml``, state layout and key, store layout, expert and degenerate behaviours,
  curriculum stages, dense reward, oracle progress, captions, reward-quality metrics;
  docs/architecture.md, "Where things live").
"""

from __future__ import annotations

from rmtl.tasks.registry import DEFAULT_TASK, get_task, register_task, task_names, task_views
from rmtl.task import Task

__all__ = ["DEFAULT_TASK", "Task", "get_task", "register_task", "task_names", "task_views"]
