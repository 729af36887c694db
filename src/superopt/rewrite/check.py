"""Checks that a rewritten graph is right and faster: equal values, side-by-side timing.

`check_values` runs both graphs on the same random inputs with the float64 reference
interpreter (weights without data are drawn by name, so both graphs see the same weights)
and compares every output relative to its scale. `time_side_by_side` times several graphs
on the torch backend in one interleaved loop (graph A, graph B, graph A, ...), so load
changes on a shared machine hit every graph alike; it reports the median per graph.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph
from superopt.ir.interpret import interpret, random_feeds

# Asked after every round with the seconds so far (one list per run, a value per round):
# True ends the loop early, when the rounds left could no longer change what it decides.
StopRule = Callable[[Sequence[Sequence[float]]], bool]


@dataclass(frozen=True)
class ValueCheck:
    ok: bool
    max_rel_err: float  # worst output: max |after - before| / max |before|
    max_abs_err: float
    rtol: float
    problem: str = ""

    def summary(self) -> str:
        head = "equal values" if self.ok else "VALUES DIFFER"
        text = f"{head}: max relative error {self.max_rel_err:.2e} (tolerance {self.rtol:g})"
        return f"{text}; {self.problem}" if self.problem else text


def check_values(before: Graph, after: Graph, feeds: Mapping[str, Any] | None = None,
                 rtol: float = 1e-5, seed: int = 0) -> ValueCheck:
    """Compare the outputs of two graphs on the same inputs (reference semantics).

    The default tolerance allows for weights folded into float32 data."""
    if feeds is None:
        # Weights without data are drawn once here rather than once per graph (they are
        # drawn by name, so the values are the ones each interpretation would draw).
        feeds = random_feeds(before, seed=seed, include_weights=True)
    a = interpret(before, _known(before, feeds), seed=seed)
    b = interpret(after, _known(after, feeds), seed=seed)
    assert isinstance(a, tuple) and isinstance(b, tuple)
    if len(a) != len(b):
        return ValueCheck(False, np.inf, np.inf, rtol, f"{len(a)} outputs before, {len(b)} after")
    worst_rel = worst_abs = 0.0
    special = 0  # non-finite reference values, equal on both sides
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x.shape != y.shape:
            return ValueCheck(False, np.inf, np.inf, rtol,
                              f"output {i}: shape {list(x.shape)} before, {list(y.shape)} after")
        if x.size == 0:
            continue
        # NaN compares false with everything: left to max() it would read as no error at
        # all. A non-finite value must be the same non-finite value on the other side.
        finite = np.isfinite(x)
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if not (same | finite).all():
            n = int((~same & ~finite).sum())
            return ValueCheck(False, np.inf, np.inf, rtol,
                              f"output {i}: {n} NaN/inf values of the original differ after")
        if not np.isfinite(y[finite]).all():
            n = int((~np.isfinite(y) & finite).sum())
            return ValueCheck(False, np.inf, np.inf, rtol,
                              f"output {i}: {n} NaN/inf values where the original is finite")
        special += int((~finite).sum())
        err = float(np.max(np.abs(x[finite] - y[finite]), initial=0.0))
        scale = float(np.max(np.abs(x[finite]), initial=0.0))
        rel = err / scale if scale > 0 else (0.0 if err == 0 else np.inf)
        worst_rel, worst_abs = max(worst_rel, rel), max(worst_abs, err)
    warning = f"warning: {special} NaN/inf values in the original's outputs (equal after)" \
        if special else ""
    return ValueCheck(bool(worst_rel <= rtol), worst_rel, worst_abs, rtol, warning)


def _known(graph: Graph, feeds: Mapping[str, Any]) -> dict[str, Any]:
    names = {n.attr("name") for n in graph.nodes if n.is_named_source}
    return {k: v for k, v in feeds.items() if k in names}


@dataclass(frozen=True)
class SideBySide:
    """Seconds per run of each graph, from one interleaved loop."""

    medians: tuple[float, ...]
    mins: tuple[float, ...]
    times: tuple[tuple[float, ...], ...]
    device: str
    threads: int

    @classmethod
    def of(cls, times: Sequence[Sequence[float]], device: str, threads: int) -> SideBySide:
        """The comparison of per-graph round times `times` (medians and minima derived)."""
        rounds = tuple(tuple(float(x) for x in t) for t in times)
        return cls(tuple(statistics.median(t) for t in rounds), tuple(min(t) for t in rounds),
                   rounds, device, threads)

    def ratio(self, i: int = 0, j: int = 1) -> float:
        """How many times faster graph j runs than graph i: the median over rounds of
        time_i / time_j within a round (the two runs of a round are adjacent, so they
        share the machine's load at that moment)."""
        return statistics.median(self.ratios(i, j))

    def ratios(self, i: int = 0, j: int = 1) -> list[float]:
        """Per round: time of graph i / time of graph j."""
        return [a / b for a, b in zip(self.times[i], self.times[j], strict=True)]

    def ratio_ci(self, i: int = 0, j: int = 1, level: float = 0.95, resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float]:
        """A percentile-bootstrap confidence interval of `ratio(i, j)`: rounds resampled
        with replacement, the median ratio of each resample. "Measurably faster" means
        this interval lies above 1; the interquartile range of single rounds says how
        noisy one round is, not how certain the median is."""
        r = np.asarray(self.ratios(i, j))
        if r.size < 2:
            return float(r[0]), float(r[0])
        rng = np.random.default_rng(seed)
        meds = np.median(r[rng.integers(0, r.size, size=(resamples, r.size))], axis=1)
        lo, hi = np.quantile(meds, [(1 - level) / 2, (1 + level) / 2])
        return float(lo), float(hi)


def time_side_by_side(graphs: Sequence[Graph], feeds: Mapping[str, Any] | None = None,
                      repeats: int = 10, warmup: int = 2, device: str = "cpu",
                      seed: int = 0, threads: int | None = None,
                      stop: StopRule | None = None) -> SideBySide:
    """Time each graph on the torch backend (float32), interleaving the runs. `threads`
    sets torch's intra-op threads for the measurement (restored afterwards); `stop` as
    `interleave` takes it."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if repeats < 1 or warmup < 0:
        raise IRError(f"timing needs repeats >= 1 and warmup >= 0, found {repeats}, {warmup}")
    import torch

    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _interleaved(graphs, feeds, repeats, warmup, device, seed, stop)
    finally:
        torch.set_num_threads(saved)


def _interleaved(graphs: Sequence[Graph], feeds: Mapping[str, Any] | None, repeats: int,
                 warmup: int, device: str, seed: int, stop: StopRule | None) -> SideBySide:
    import torch

    from superopt.backends import torch as tb

    if feeds is None and graphs:
        feeds = random_feeds(graphs[0], seed=seed)
    programs = [tb.lower(g, device, seed=seed) for g in graphs]
    sources = [p.prepare(feeds) for p in programs]
    cuda = programs[0].device.type == "cuda" if programs else False

    def run(k: int) -> Callable[[], object]:
        def call() -> object:
            out = programs[k].execute(sources[k])
            if cuda:
                torch.cuda.synchronize(programs[k].device)
            return out
        return call

    return interleave([run(k) for k in range(len(programs))], repeats, warmup, device,
                      torch.get_num_threads(), stop)


def interleave(runs: Sequence[Callable[[], object]], repeats: int, warmup: int,
               device: str = "cpu", threads: int = 1,
               stop: StopRule | None = None) -> SideBySide:
    """Time each of `runs` (any callables: a lowered graph, an onnxruntime session, a
    compiled module) in paired rounds: every round runs each once, in alternating order,
    so the runs of a round share the machine's load at that moment. `stop`, asked after
    each round, may end the loop before `repeats` rounds."""
    def once(k: int) -> float:
        start = time.perf_counter()
        out = runs[k]()
        elapsed = time.perf_counter() - start
        del out
        return elapsed

    for _ in range(warmup):
        for k in range(len(runs)):
            once(k)
    times: list[list[float]] = [[] for _ in runs]
    for r in range(repeats):
        order = range(len(runs)) if r % 2 == 0 else reversed(range(len(runs)))
        for k in order:
            times[k].append(once(k))
        if stop is not None and r + 1 < repeats and stop(times):
            break
    return SideBySide.of(times, device, threads)
