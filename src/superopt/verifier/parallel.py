"""A small process pool for per-rule and per-axiom work.

Z3 objects cannot cross processes, so tasks are plain data (rules, settings) and each
worker builds its own encoding. `jobs <= 1` runs in this process. Workers are spawned (not
forked) so that they start clean even when the caller runs threads (progress bars).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def default_jobs() -> int:
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1, 8))


def _init_worker() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def run_parallel(fn: Callable[[T], R], tasks: Sequence[T], jobs: int,
                 progress: Callable[[R], None] | None = None) -> list[R]:
    """`[fn(t) for t in tasks]`, over `jobs` processes; `progress` sees each result as it
    completes. `fn` must be a module-level function (it is pickled by name)."""
    if jobs <= 1 or len(tasks) <= 1:
        out = []
        for t in tasks:
            r = fn(t)
            if progress is not None:
                progress(r)
            out.append(r)
        return out
    results: list[Any] = [None] * len(tasks)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx,
                             initializer=_init_worker) as pool:
        pending = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = pending.pop(fut)
                results[i] = fut.result()
                if progress is not None:
                    progress(results[i])
    return results
