"""The batch-chunk pass on a real target: its one site, the tuner choosing it on
measurements, the chunked graph run and checked, and a resumed run replaying it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from superopt.ir import interpret, random_feeds
from superopt.ir.graph import Graph
from superopt.rewrite.fold import weight_only
from superopt.xtat.passes.chunk import BatchChunks
from superopt.xtat.realrunner import RealRunner
from superopt.xtat.records import RecordsDB
from superopt.xtat.session import Session, open_session, rewritten_graph
from superopt.xtat.stage import Stage
from superopt.xtat.tuner import Tuner, TuneResult, make_schedule
from xtat.realcases import FakeTimer, dense_branches

CACHE = 100  # elements an op's output may have and stay "in cache"


def cache_cost(graph: Graph) -> float:
    """A CPU-like cost in which chunks can pay: each op that runs costs a fixed overhead
    plus its output's elements, three times as much per element once the output no
    longer fits `CACHE`. On dense_branches(rows=8, width=32) four chunks are the fastest:
    8 chunks pay the overhead twice as often, 2 still overflow."""
    folded = weight_only(graph)
    total = 0.0
    for n in graph.nodes:
        if n.is_source or folded[n.id]:
            continue
        size = n.type.size
        total += 50 + size * (3 if size > CACHE else 1)
    return 1e-6 * total


def _session(timer: FakeTimer) -> Session:
    return open_session({"model": "dense", "target": "cpu", "op_cost": "flops",
                         "plan_budget": 0}, dense_branches(2), timer=timer)


def _tune(session: Session, budget: int, db: RecordsDB | None = None
          ) -> tuple[Tuner, TuneResult]:
    tuner = Tuner(session.pipeline, session.runner, session.default, seed=0, db=db, batch=4)
    return tuner, tuner.run(make_schedule("joint", ("plan", "rewrite", "chunk")), budget)


def test_the_site_is_keyed_by_the_batch_and_offers_the_counts_that_divide_it() -> None:
    p = BatchChunks()
    (site,) = p.list_sites(Stage(dense_branches(2, rows=8)))
    assert site.key == "batch:8" and site.options == (1, 4, 8, 2) and site.default == 1
    (site,) = p.list_sites(Stage(dense_branches(2, rows=6)))
    assert site.options == (1, 2)
    assert p.list_sites(Stage(dense_branches(2, rows=1))) == []


def test_the_tuner_measures_the_chunks_and_keeps_the_fastest() -> None:
    timer = FakeTimer(cache_cost, sigma=0.01)
    session = _session(timer)
    _, result = _tune(session, 8)
    runner = session.runner
    assert isinstance(runner, RealRunner) and runner.final is not None and runner.final.kept
    assert dict(result.best.config("chunk").items()) == {"batch:8": 4}
    tuned = rewritten_graph(session.pipeline, result.best)
    # Judged apart from the runner: the cost says four chunks are faster, and the graph
    # the target ran and --out writes is chunked and computes the input's values.
    assert [n.op for n in tuned.nodes].count("split") == 1
    assert cache_cost(tuned) < cache_cost(session.graph)
    feeds = random_feeds(session.graph, seed=0)
    np.testing.assert_allclose(interpret(tuned, feeds)[0], interpret(session.graph, feeds)[0],
                               rtol=1e-12)
    report = result.best.reports[session.pipeline.index("chunk")]
    assert report["chunks"] == 4 and report["whole_ops"] == 0


def test_a_resumed_run_replays_the_chunk_choices(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    s1 = _session(FakeTimer(cache_cost, seed=1))
    with RecordsDB(path, s1.workload, {}) as db:
        _, r1 = _tune(s1, 4, db)
        rows = [(m.step, m.candidate, m.runtime) for m in db.measurements()]
    second = FakeTimer(cache_cost, seed=2)
    s2 = _session(second)
    with RecordsDB(path, s2.workload, {}, resume=True) as db:
        tuner, r2 = _tune(s2, 4, db)
        after = [(m.step, m.candidate, m.runtime) for m in db.measurements()]
    assert after == rows and tuner.measured == 0 and tuner.replayed == len(rows)
    assert r2.best.config("chunk").choices == r1.best.config("chunk").choices
