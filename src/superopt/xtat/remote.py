"""Measuring candidates on `superopt.executor` workers (a process pool or Dask).

A task is plain data: the session spec (model, batch, hardware, rules), a chunk of
candidates as their canonical configuration JSON and the noise seed of each. A worker
opens the session once per spec and keeps it in its `WorkerState` (one per process, so the
stages it builds are reused across tasks), rebuilds each candidate from its configuration
and measures it. The driver checks that each rebuilt candidate has the key it sent, and
alone writes the records database.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from superopt.xtat.runner import SimRunner
from superopt.xtat.space import PassConfig, digest
from superopt.xtat.stage import Candidate


class WorkerState:
    """What one worker process has built: sessions by spec digest (at most a few)."""

    def __init__(self) -> None:
        self.sessions: dict[str, Any] = {}

    def session(self, spec: dict[str, Any]) -> Any:
        from superopt.xtat.session import open_session, use_plan_cache

        key = digest(json.dumps(spec, sort_keys=True))
        got = self.sessions.get(key)
        if got is None:
            if len(self.sessions) >= 4:
                self.sessions.clear()
            got = self.sessions[key] = open_session(spec)
            cache = spec.get("plan_cache")
            if cache and Path(cache).is_file():
                # The driver's plan searches (an eqsat plan's graph): read, never searched
                # again here. A worker that cannot see the file searches for itself, and
                # a plan it finds otherwise fails the driver's check of candidate keys.
                use_plan_cache(got, cache, read_only=True)
        return got


_STATE = WorkerState()  # this worker process's state


def measure_task(task: tuple[dict[str, Any], list[tuple[str, int]]]) -> list[tuple[str, float]]:
    spec, items = task
    session = _STATE.session(spec)
    out = []
    for config_json, seed in items:
        config = json.loads(config_json)
        configs = [PassConfig.from_json(config.get(n, {})) for n in session.pipeline.names]
        cand = session.pipeline.from_configs(session.graph, configs)
        out.append((cand.key, session.runner.measure(cand, seed)))
    return out


class RemoteMeasure:
    def __init__(self, pool: Executor, spec: dict[str, Any], runner: SimRunner,
                 workers: int = 2) -> None:
        self.pool = pool
        self.spec = {k: spec.get(k) for k in ("model", "batch", "hardware", "rules",
                                               "allow_unproved", "plan_budget", "plan_search",
                                               "default_tiling", "plan_cache")
                     if k in spec}
        self.runner = runner
        self.workers = max(1, workers)

    def __call__(self, cands: Sequence[Candidate], seeds: Sequence[int]) -> list[float]:
        items = [(c.json, s) for c, s in zip(cands, seeds, strict=True)]
        per = -(-len(items) // self.workers)
        chunks = [items[i:i + per] for i in range(0, len(items), per)]
        futures = [self.pool.submit(measure_task, (self.spec, ch)) for ch in chunks]
        got = [r for f in futures for r in f.result()]
        out = []
        for c, (key, t) in zip(cands, got, strict=True):
            if key != c.key:
                raise RuntimeError(f"a worker rebuilt candidate {c.key} as {key}")
            out.append(t)
        return out


__all__ = ["RemoteMeasure", "WorkerState", "measure_task"]
