"""Executors for sharded work: a local process pool by default, Dask for a cluster.

Enumeration shards, rule checks and verification tasks are plain data handed to a
module-level function, so any `concurrent.futures.Executor` can run them. `open_executor`
makes one from a spec string, the value of the `--executor` flag:

- `process` (the default): a `ProcessPoolExecutor` of `workers` spawned processes
  (spawned, not forked, so that workers start clean even when the caller runs threads
  such as progress bars, and never inherit a Z3 context);
- `dask`: a local Dask cluster of `workers` single-threaded worker processes (what a
  laptop run looks like before moving to a cluster);
- `dask://HOST:PORT` or `tcp://HOST:PORT`: the Dask scheduler at that address; the
  cluster's workers run the tasks and `workers` only sizes how much is kept in flight.

Dask's executor is `Client.get_executor(pure=False)`: tasks are not deduplicated by
argument hash, since two shards with equal arguments are still two pieces of work whose
results the caller counts. Dask is imported only when asked for.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from superopt.ir.errors import IRError

T = TypeVar("T")
R = TypeVar("R")

KINDS = ("process", "dask")
DASK_CONNECT_TIMEOUT_S = 30.0  # how long to wait for a named scheduler's handshake
PROBE_TIMEOUT_S = 5.0  # how long to wait for its port to accept a connection at all


class ExecutorError(IRError):
    """An executor spec that names no executor, or a Dask setup that cannot start."""


@dataclass(frozen=True)
class ExecutorSpec:
    kind: str  # "process" or "dask"
    address: str | None = None  # a Dask scheduler; None: start a local cluster

    def describe(self, workers: int) -> str:
        n = f"{workers} worker{'' if workers == 1 else 's'}"
        if self.kind == "process":
            return f"process pool ({n})"
        if self.address is None:
            return f"local Dask cluster ({n})"
        return f"Dask scheduler at {self.address}"


def parse_executor(spec: str | None) -> ExecutorSpec:
    """`process`, `dask`, `dask://HOST:PORT` or `tcp://HOST:PORT` (None: process)."""
    text = (spec or "process").strip()
    if text == "process":
        return ExecutorSpec("process")
    if text == "dask":
        return ExecutorSpec("dask")
    for prefix in ("dask://", "tcp://"):
        if text.startswith(prefix):
            rest = text[len(prefix):]
            host, _, port = rest.rpartition(":")
            if not host or not port.isdigit():
                raise ExecutorError(f"executor {spec!r}: expected {prefix}HOST:PORT")
            return ExecutorSpec("dask", f"tcp://{rest}")
    raise ExecutorError(f"unknown executor {spec!r}: expected 'process', 'dask', "
                        "'dask://HOST:PORT' or 'tcp://HOST:PORT'")


def probe(spec: ExecutorSpec) -> None:
    """Fail at once when a named Dask scheduler's port does not accept connections: Dask's
    client retries a refused connection until its timeout (30 s) before it says so."""
    if spec.address is None:
        return
    import socket

    host, _, port = spec.address.removeprefix("tcp://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), PROBE_TIMEOUT_S).close()
    except (OSError, ValueError) as e:
        reason = "connection refused" if isinstance(e, ConnectionRefusedError) else str(e)
        raise ExecutorError(f"cannot reach Dask ({spec.describe(1)}): {reason}") from None


def check_executor(spec: str | None) -> ExecutorSpec:
    """Parse an --executor value and probe a named scheduler: before any work, so a bad
    spec or an unreachable cluster costs no run."""
    parsed = parse_executor(spec)
    probe(parsed)
    return parsed


def default_workers() -> int:
    """Cores this process may use, at most 8."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(n or 1, 8))


def _init_worker() -> None:
    # One thread per worker process: the pool already uses every core.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _guarded(initializer: Callable[[], None], parent: int) -> None:
    from superopt.interrupts import guard_worker

    guard_worker(parent)  # Ctrl-C is the parent's to handle; a SIGKILLed parent ends it
    initializer()


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """After an interrupt or error: waiting for the running tasks (as `with` would) can
    take as long as the whole run, so the workers are stopped now."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


@contextmanager
def open_executor(spec: str | ExecutorSpec | None, workers: int,
                  initializer: Callable[[], None] | None = None) -> Iterator[Executor]:
    """An executor for `spec` with `workers` workers, shut down on exit. `initializer`
    runs once in each process-pool worker (Dask workers are set up by their cluster)."""
    parsed = spec if isinstance(spec, ExecutorSpec) else parse_executor(spec)
    workers = max(1, workers)
    if parsed.kind == "process":
        init = initializer or _init_worker
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_guarded, initargs=(init, os.getpid()),
                                   mp_context=multiprocessing.get_context("spawn"))
        try:
            yield pool
        except BaseException:
            stop_pool(pool)
            raise
        pool.shutdown(wait=True)
        return
    probe(parsed)  # before importing Dask (seconds on a loaded machine)
    try:
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise ExecutorError("the Dask executor needs dask[distributed]: "
                            "pip install 'superopt[dask]'") from e
    cluster = None
    try:
        if parsed.address is None:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
        else:
            client = Client(parsed.address, timeout=DASK_CONNECT_TIMEOUT_S)
    except OSError as e:
        if cluster is not None:
            cluster.close()
        raise ExecutorError(f"cannot reach Dask ({parsed.describe(workers)}): {e}") from e
    try:
        yield client.get_executor(pure=False)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def run_tasks(fn: Callable[[T], R], tasks: Sequence[T], workers: int,
              progress: Callable[[R], None] | None = None, executor: str | None = None,
              initializer: Callable[[], None] | None = None) -> list[R]:
    """`[fn(t) for t in tasks]` on the executor `executor` (default: a process pool of
    `workers`; in this process when `workers <= 1` and no executor is named). `progress`
    sees each result as it completes. `fn` must be a module-level function (it is
    pickled by name)."""
    if executor is None and (workers <= 1 or len(tasks) <= 1):
        out = []
        for t in tasks:
            r = fn(t)
            if progress is not None:
                progress(r)
            out.append(r)
        return out
    results: list[Any] = [None] * len(tasks)
    if not tasks:
        return results
    with open_executor(executor, min(workers, len(tasks)), initializer) as pool:
        pending = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = pending.pop(fut)
                results[i] = fut.result()
                if progress is not None:
                    progress(results[i])
    return results
