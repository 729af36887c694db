"""Random search: each proposal is the default candidate with 1..`changes` random choices
changed (a uniform sample of the neighbourhood of the default compiler's program)."""

from __future__ import annotations

from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy, register


@register("random")
class RandomSearch(SearchStrategy):
    def ask(self, n: int) -> list[Candidate]:
        ctx = self.ctx
        k = int(self.opts.get("changes", 4))
        return [ctx.mutate(ctx.default, self.passes, 1 + int(ctx.rng.integers(k)))
                for _ in range(n)]
