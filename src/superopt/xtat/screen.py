"""Screening proposals by a cost model before measuring them, for targets where one
measurement takes seconds (a real CPU or GPU).

`Screened` wraps any search strategy. Each round it prices the strategy's proposals with
a predictor (`OpCostPredictor`: the sum of this machine's measured per-op costs over the
candidate's graph, `superopt.rewrite.cost`'s torch cost and its database, weight-only
computations free); a proposal priced more than `margin` above the incumbent is told to
the strategy as not worth measuring (an infinite time) and never runs; the rest are
measured, the cheapest first. The wrapped strategy is told every proposal's time, so its
own logic (a site's best option, patience) is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from superopt.ir.graph import Graph
from superopt.xtat.context import TuneContext
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy

# A proposal priced up to 1% above the incumbent is still measured: the per-op sum misses
# what onnxruntime's own fusions do to the graph, so a near tie is left to the measurement.
MARGIN = 0.01


class OpCostPredictor:
    """A candidate's predicted time: `cost` (an additive per-op cost) of its graph, cached
    by the graph's structural hash in this object."""

    def __init__(self, cost: Any, graph_of: Callable[[Candidate], Graph]) -> None:
        self.cost = cost
        self.graph_of = graph_of
        self._cache: dict[str, float] = {}

    def __call__(self, candidate: Candidate) -> float:
        g = self.graph_of(candidate)
        key = g.structural_hash
        got = self._cache.get(key)
        if got is None:
            got = self._cache[key] = float(self.cost.cost(g))
        return got


class Budgeted:
    """`predict`, limited to `limit` distinct candidates (by key): past that, every new
    proposal is priced 0.0, so the screen lets it through to be measured. A benchmark
    gives one column the same number of exact evaluations another column spent (issue
    49's equal information: joint's plan search prices graphs exactly, so XTAT-only may
    screen as many proposals with the exact simulator)."""

    def __init__(self, predict: Callable[[Candidate], float], limit: int) -> None:
        self.predict = predict
        self.limit = limit
        self._priced: dict[str, float] = {}

    @property
    def used(self) -> int:
        """Distinct candidates priced so far."""
        return len(self._priced)

    def priced(self, candidate: Candidate) -> bool:
        """Whether `candidate` was priced (not let through past the limit)."""
        return candidate.key in self._priced

    def __call__(self, candidate: Candidate) -> float:
        got = self._priced.get(candidate.key)
        if got is None:
            if len(self._priced) >= self.limit:
                return 0.0
            got = self._priced[candidate.key] = float(self.predict(candidate))
        return got


class Screened(SearchStrategy):
    PATIENCE = 1000  # rounds of rejected proposals in a row before the phase ends

    def __init__(self, inner: SearchStrategy, predict: Callable[[Candidate], float],
                 margin: float = MARGIN) -> None:
        super().__init__()
        self.inner = inner
        self.name = f"{inner.name}+screen"
        self.predict = predict
        self.margin = margin
        self.screened = 0  # proposals left unmeasured

    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        super().start(ctx, passes, budget)
        self.inner.start(ctx, passes, budget)

    def ask(self, n: int) -> list[Candidate]:
        # A strategy that keeps proposing only what the screen rejects (a random walk near
        # a good incumbent) is done: the screen ends the phase rather than spin.
        for _ in range(self.PATIENCE):
            props = self.inner.ask(n)
            if not props:
                return []
            base = self.ctx.best or self.ctx.default
            limit = self.predict(base) * (1.0 + self.margin)
            priced = [(self.predict(c), i, c) for i, c in enumerate(props)]
            rejected = [c for p, _, c in priced if p > limit]
            if rejected:
                self.screened += len(rejected)
                self.inner.tell(rejected, [math.inf] * len(rejected))
            out = [c for _, _, c in sorted((e for e in priced if e[0] <= limit),
                                           key=lambda e: (e[0], e[1]))]
            if out:
                return out
        return []

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        self.inner.tell(candidates, times)


# A phase option: this phase's proposals are all measured (the per-op cost cannot judge
# them: a real target's plan variants differ in what the runtime fuses, `tuner.make_schedule`).
UNSCREENED = "unscreened"


def screening(predict: Callable[[Candidate], float], margin: float = MARGIN,
              skip: Callable[[Any], bool] | None = None
              ) -> Callable[[SearchStrategy, Any], SearchStrategy]:
    """A `Tuner(wrap=...)` hook screening every phase's proposals by `predict` (the
    phases `skip` names, and those with the option `UNSCREENED`, keep their strategy as
    it is); its `screened()` counts the proposals left unmeasured in all phases."""
    created: list[Screened] = []

    def wrap(strategy: SearchStrategy, phase: Any) -> SearchStrategy:
        if (skip is not None and skip(phase)) or dict(getattr(phase, "options", ())).get(
                UNSCREENED):
            return strategy
        created.append(Screened(strategy, predict, margin))
        return created[-1]

    wrap.screened = lambda: sum(s.screened for s in created)  # type: ignore[attr-defined]
    return wrap


__all__ = ["MARGIN", "UNSCREENED", "Budgeted", "OpCostPredictor", "Screened", "screening"]
