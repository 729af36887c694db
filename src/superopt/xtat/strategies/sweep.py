"""Local search by single moves: every single-site move of the best candidate (one site
of the tuned passes set to another option), in a seeded random order, each measured once;
the first one faster than the base becomes the base and the sweep goes on over the moves
left and those the change opened (a move measured on an earlier base is not tried
again). When no single move is left it goes on with random double moves (two sites at
once, as `anneal` proposes them), still taking only faster ones.

Why not annealing alone: on csrnet at batch 1, with the kernels tuned, one layout site
out of 17 (two of its four options) makes the program 3.7% faster and no other single
layout or fusion move of the 120 helps; annealing drew it after about 250 measurements
(a random move touches it with odds of about 1 in 70, and a move accepted uphill before
it hides its gain), the sweep within the first 120. Measured before choosing it (XTAT-only
schedule, budget 300, 3 seeds, median speedup, annealing against the sweep in the layout
and fusion phase): csrnet b1 1.426 / 1.432, bert-small b16 1.152 / 1.182, resnext50 b16
1.046 / 1.052, vgg19 b1 1.142 / 1.146, inception_v3 b1 1.358 / 1.357, squeezenet b1 and
resnet50 b16 equal.
"""

from __future__ import annotations

from collections.abc import Sequence

from superopt.xtat.context import TuneContext
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy, register

Move = tuple[str, str, object]  # (pass, site key, option)


def price(ctx: TuneContext, base: Candidate, moves: Sequence[Move],
          delta: dict[Move, float], limit: int) -> int:
    """Prices, in order, up to `limit` of `moves` not in `delta` yet: each move's change
    of the analytical estimate from `base` (one candidate build each; `ctx.estimate`
    must be set), kept in `delta`. Returns how many it priced."""
    now = ctx.estimate(base)
    n = 0
    for move in moves:
        if n >= limit:
            break
        if move not in delta:
            delta[move] = ctx.estimate(ctx.pipeline.with_choice(base, *move, ctx.store)) - now
            n += 1
    return n


@register("sweep")
class Sweep(SearchStrategy):
    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        super().start(ctx, passes, budget)
        self.base = ctx.best or ctx.default
        self.base_time = ctx.best_time
        self.tried: set[Move] = set()
        self.moves: list[Move] = []
        self._moves()

    def _moves(self) -> None:
        """The base's single moves not measured yet, shuffled."""
        ctx = self.ctx
        moves = []
        for name, site in ctx.tunable(self.base, self.passes):
            now = ctx.choice(self.base, name, site)
            moves += [(name, site.key, o) for o in site.options
                      if o != now and (name, site.key, o) not in self.tried]
        self.moves = [moves[i] for i in ctx.rng.permutation(len(moves))]

    def ask(self, n: int) -> list[Candidate]:
        ctx = self.ctx
        out = []
        while self.moves and len(out) < n:
            move = self.moves.pop()
            self.tried.add(move)
            out.append(ctx.pipeline.with_choice(self.base, *move, ctx.store))
        # Every single move measured: double moves (a site whose gain needs another).
        out += [ctx.mutate(self.base, self.passes, 2) for _ in range(n - len(out))]
        return out

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        better = False
        for cand, t in zip(candidates, times, strict=True):
            if t < self.base_time:
                self.base, self.base_time, better = cand, t, True
        if better:
            # Moves measured on the old base are not tried again: most sites are far
            # from each other, and trying every move again after each gain would spend
            # the budget on the first few.
            self._moves()
