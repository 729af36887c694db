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


def test_a_refused_scheduler_port_fails_at_once() -> None:
    # Dask's client retries a refused connection for its whole timeout (30 s); the probe
    # says so at once. Port 1 on localhost has no listener.
    import time

    t0 = time.monotonic()
    with pytest.raises(ExecutorError, match="cannot reach Dask .* connection refused"):
        run_tasks(math.isqrt, [1, 2], workers=1, executor="dask://127.0.0.1:1")
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("command", [["generate", "--out", "{tmp}/g.json"],
                                     ["verify", "{rules}"]])
def test_commands_refuse_an_unreachable_scheduler_before_any_work(
        command: list[str], tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from superopt.cli import main

    rules = Path(__file__).parents[1] / "benchmarks" / "data" / "taso_like.rules"
    argv = [a.format(tmp=tmp_path, rules=rules) for a in command]
    assert main([*argv, "--executor", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["superopt: error: cannot reach Dask (Dask scheduler at tcp://127.0.0.1:1): "
                   "connection refused"]
    assert not list(tmp_path.iterdir())
