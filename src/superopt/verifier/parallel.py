"""Running per-rule and per-axiom work in parallel.

Z3 objects cannot cross processes, so tasks are plain data (rules, settings) and each
worker builds its own encoding. `jobs <= 1` (and no executor named) runs in this process;
otherwise the tasks go to `superopt.executor` (a spawned process pool by default, Dask
when `executor` names it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from superopt.executor import default_workers, run_tasks

T = TypeVar("T")
R = TypeVar("R")


def default_jobs() -> int:
    return default_workers()


def run_parallel(fn: Callable[[T], R], tasks: Sequence[T], jobs: int,
                 progress: Callable[[R], None] | None = None,
                 executor: str | None = None) -> list[R]:
    """`[fn(t) for t in tasks]`, over `jobs` workers; `progress` sees each result as it
    completes. `fn` must be a module-level function (it is pickled by name)."""
    return run_tasks(fn, tasks, jobs, progress, executor)
