"""Simulated annealing on log time: each round proposes `n` neighbours of the current
candidate (1..`changes` random choices changed); they are taken in order, each accepted
when faster or with probability exp(-(log t - log t_cur) / T). T falls geometrically from
`t0` to `t1` over the strategy's budget (defaults: 1% to 0.01% slower accepted at even
odds, i.e. small steps across plateaus early, greedy at the end). It starts from the best
candidate so far, or from the default one with `start="default"` (a second start in a
schedule, away from where an earlier phase led)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from superopt.ir.errors import IRError
from superopt.xtat.context import TuneContext
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy, register


@register("anneal")
class Anneal(SearchStrategy):
    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        super().start(ctx, passes, budget)
        if self.opts.get("start", "best") not in ("best", "default"):
            raise IRError(f"anneal: start must be best or default, found {self.opts['start']!r}")
        if self.opts.get("start") == "default" and ctx.best is not None:
            # Its time is not kept here: the first ask proposes it again (a repeat costs no
            # measurement) and tell reads the time back.
            self.current, self.current_time = ctx.default, math.inf
        else:
            self.current, self.current_time = ctx.best or ctx.default, ctx.best_time
        self.t0 = float(self.opts.get("t0", 0.01 / math.log(2)))
        self.t1 = float(self.opts.get("t1", 0.0001 / math.log(2)))
        self.changes = int(self.opts.get("changes", 2))
        self.seen = 0

    def temperature(self) -> float:
        frac = min(1.0, self.seen / max(1, self.budget))
        return self.t0 * (self.t1 / self.t0) ** frac

    def ask(self, n: int) -> list[Candidate]:
        ctx = self.ctx
        again = [] if math.isfinite(self.current_time) else [self.current]
        return again + [ctx.mutate(self.current, self.passes,
                                   1 + int(ctx.rng.integers(self.changes)))
                        for _ in range(n - len(again))]

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        for cand, t in zip(candidates, times, strict=True):
            self.seen += 1
            if not math.isfinite(t):
                continue
            if not math.isfinite(self.current_time) or t <= self.current_time:
                self.current, self.current_time = cand, t
                continue
            delta = math.log(t) - math.log(self.current_time)
            if self.ctx.rng.random() < math.exp(-delta / self.temperature()):
                self.current, self.current_time = cand, t
