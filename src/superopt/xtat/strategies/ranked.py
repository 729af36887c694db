"""The sweep with its single moves in the order of the analytical estimate: every single
move of the best candidate measured once, the one whose candidate the default compiler's
model (`TuneContext.estimate`, no measurement) prices lowest first, ties in the seeded
random order; the first faster one becomes the base, as in `sweep`.

Why: a graph phase sees hundreds of single moves (bert_base: 549 layout and fusion sites)
and a budget of a few dozen measurements for them, so the random order finds a
few-percent move (bert_small b1 after PET's merged matmul: three layout copies fused,
2 us each) in some seeds and not in others. Ordered by the estimate, the moves
it prices as gains come first.

Not the default yet: `benchmarks/results/joint_ranked.json` (joint.py's XTAT-only and
joint columns with this strategy, budget 300, 3 seeds, 18 rows without nasnet_a) has
joint's geomean 1.2591 -> 1.2666 and XTAT-only's 1.1837 -> 1.1868 over the sweep; joint
gains most on bert (bert_base b16 1.125 -> 1.159, bert_small b16 1.208 -> 1.244) and
inception_v3 b16 (1.380 -> 1.409), but loses on csrnet b1 (1.499 -> 1.477: two seeds of
three end with 6-7 rewrites of the plan's PET mutants applied instead of 3, one of the
sweep's did) and resnet50 b16 (1.120 -> 1.116), and pricing every move was slow on large
graphs (below). Those figures were measured before
`LaidOut.signature` keyed its cache by a kernel's inputs and outputs as well as its
members: with many candidates built on one layout a kernel could take another's
signature (squeezenet b1: the pick priced 1% low), so they need measuring again.

Pricing costs a candidate build per move, so a phase prices at most `prices` (8) moves
per measurement of its budget, in the seeded order; the moves left unpriced are measured
as if the estimate saw no change in them. XTAT-only on nasnet_a b1, seed 0, budget 300:
1.2473x in 57 s with the allowance, 1.2505x in 255 s without, the sweep's 1.2225x in 7 s.

Each move's estimated change is computed when the move is first offered and kept, keyed
by the move (pass, site key, option: content keys), so that a gain elsewhere does not
re-price every move (a far-away site's change does not change); sites the gain
re-hashed are new moves and priced then. The estimate is the sum of the kernels'
analytical times: it costs one candidate build per move, as measuring it would, but no
measurement. Without an estimate (a runner without one) this is the sweep.
"""

from __future__ import annotations

from collections.abc import Sequence

from superopt.xtat.context import TuneContext
from superopt.xtat.strategies.base import register
from superopt.xtat.strategies.sweep import Move, Sweep, price

# Moves priced per measurement of the phase's budget, at most (option `prices`): pricing
# is one candidate build, as costly as the simulator's measurement (nasnet_a: 2356 layout
# and fusion moves at 51 ms each, rebuilt as gains re-hash sites; csrnet: 120 at 8 ms).
PRICES = 8


@register("ranked")
class Ranked(Sweep):
    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        self.delta: dict[Move, float] = {}  # a move -> its estimated change when offered
        self.prices_left = int(self.opts.get("prices", PRICES)) * max(0, budget)
        super().start(ctx, passes, budget)

    def _moves(self) -> None:
        super()._moves()
        ctx = self.ctx
        if ctx.estimate is None:
            return
        # In the seeded order: what the allowance leaves unpriced is random.
        self.prices_left -= price(ctx, self.base, self.moves, self.delta, self.prices_left)
        # `ask` pops from the end: the lowest estimate last; a stable sort keeps the
        # seeded order among equal estimates (most fusion moves change no kernel's tile).
        # A move left unpriced counts as no change: after the priced gains, before the
        # priced losses.
        self.moves.sort(key=lambda m: -self.delta.get(m, 0.0))
