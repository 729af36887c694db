"""Evolutionary search: a population of the best `population` candidates measured so far
(seeded with the default and its random mutants); each child is the crossover of two
tournament winners (per pass, each parent's choice with probability 1/2) followed by
1..`changes` random mutations."""

from __future__ import annotations

import math
from collections.abc import Sequence

from superopt.xtat.context import TuneContext
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy, register


@register("evolution")
class Evolution(SearchStrategy):
    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        super().start(ctx, passes, budget)
        self.size = int(self.opts.get("population", 16))
        self.changes = int(self.opts.get("changes", 2))
        self.tournament = int(self.opts.get("tournament", 3))
        base = ctx.best or ctx.default
        self.population: list[tuple[float, int, Candidate]] = [(ctx.best_time, 0, base)]
        self.born = 1

    def _pick(self) -> Candidate:
        rng = self.ctx.rng
        idx = [int(rng.integers(len(self.population))) for _ in range(self.tournament)]
        return min((self.population[i] for i in idx), key=lambda e: (e[0], e[1]))[2]

    def ask(self, n: int) -> list[Candidate]:
        ctx = self.ctx
        out = []
        for _ in range(n):
            if len(self.population) < 2:
                child = self.population[0][2]
            else:
                child = ctx.crossover(self._pick(), self._pick(), self.passes)
            out.append(ctx.mutate(child, self.passes, 1 + int(ctx.rng.integers(self.changes))))
        return out

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        keys = {c.key for _, _, c in self.population}
        for cand, t in zip(candidates, times, strict=True):
            if math.isfinite(t) and cand.key not in keys:
                self.population.append((t, self.born, cand))
                keys.add(cand.key)
                self.born += 1
        self.population.sort(key=lambda e: (e[0], e[1]))
        del self.population[self.size:]
