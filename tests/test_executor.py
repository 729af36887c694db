"""The executors behind --executor: process pool and Dask give the same results."""

from __future__ import annotations

import math

import pytest

from superopt.executor import ExecutorError, ExecutorSpec, parse_executor, run_tasks


def test_parse_executor_specs() -> None:
    assert parse_executor(None) == ExecutorSpec("process")
    assert parse_executor("process") == ExecutorSpec("process")
    assert parse_executor("dask") == ExecutorSpec("dask")
    assert parse_executor("dask://10.0.0.5:8786") == ExecutorSpec("dask", "tcp://10.0.0.5:8786")
    assert parse_executor("tcp://sched:8786") == ExecutorSpec("dask", "tcp://sched:8786")
    for bad in ("threads", "dask://nohost", "tcp://:99", "dask://h:port"):
        with pytest.raises(ExecutorError, match="executor"):
            parse_executor(bad)


@pytest.mark.parametrize("executor", [None, "process", "dask"])
def test_every_executor_returns_every_result_in_task_order(executor: str | None) -> None:
    if executor == "dask":
        pytest.importorskip("distributed")
    # The task is a builtin, not a function of this module: a spawned worker unpickles it
    # by name, and this module is importable there only when the rootdir is on sys.path
    # (`python -m pytest`, not a bare `pytest`, which failed and left Dask hanging).
    tasks = [7, 100, 3, 65, 1000, 0, 49]  # distinct roots: the order shows
    seen: list[int] = []
    out = run_tasks(math.isqrt, tasks, workers=2, progress=seen.append, executor=executor)
    assert out == [math.isqrt(n) for n in tasks]
    assert sorted(seen) == sorted(out)  # progress saw each result once, in any order


def test_unreachable_dask_scheduler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed")
    import superopt.executor

    monkeypatch.setattr(superopt.executor, "DASK_CONNECT_TIMEOUT_S", 2.0)
    # Port 9 (discard) on localhost has no scheduler: connecting fails fast.
    with pytest.raises(ExecutorError, match="cannot reach Dask"):
        run_tasks(math.isqrt, [1, 2], workers=1, executor="tcp://127.0.0.1:9")
