"""Graph choices judged again, tuned against tuned: each changed choice of the best
candidate reverted, the kernels that brings back tuned from profiles, then compared.

A graph choice (the rewrite plan, a rewrite point) is judged when it is measured: its new
kernels then run at the default compiler's tiles and flags, while the kernels it replaces
have either been tuned already (the choice is judged late and looks worse than it is) or
not yet (it is judged early, against the default compiler, and kernel tuning may later
favour the graph it replaced: on resnet18 at batch 16 the rewrite plan is 4% faster than
the default graph untuned and 2% slower once both are tuned). This strategy runs after the
kernel phases: for each graph site of its passes whose choice in the best candidate
differs from the site's default (and each site of the `both_ways` passes whichever way
it is set, to each of its other options in the pass's `alternatives` order: a choice
such as the plan, judged once before anything was tuned, and its variants without some
of its rules), the best candidate with that one choice flipped is first screened (both
graphs with every kernel at its default configuration, times read from kernels measured
before where known: a flip more than `slack` slower is left), then measured, its kernels
are tuned as the `parallel` strategy tunes them (`kernels`: the per-kernel passes,
`top_k` tiles, `flags_top_k` flag settings; the kernels measured before cost nothing, so
a flip that brings back the kernels of an earlier candidate costs about one
measurement), and the tuned flip is measured. If it beats the best so far the tuner takes
it as its best (as any measurement); the next flip starts from whatever is then the best,
each site flipped to each option at most once and never back to an option it held.

A flip makes new sites in the later graph passes (a reverted rewrite brings back nodes
whose layouts were never tuned, and XTAT-M repair has no choice to carry to them where
the rewrite had changed their rank). Judged at their defaults they hide what the flip is
worth: on csrnet b1 the best holds PET's stack-height mutant of the first conv, the plan
without it is 484 us at its best kernels, and 462 us (XTAT-only's optimum) once that
conv's output is laid out W-minor. So where the runner has an analytical estimate
(`TuneContext.estimate`, free), the flips are tried in the order of their estimates with
every kernel untuned, lowest first (without an estimate: every site's first flip before
any site's second, so the plan's variants do not starve the rewrite points): budget is
what the revisit lacks (a flip's kernels take some 25 measurements at budget 300), and
the order spends it on the flips likeliest to win (on csrnet b1, the plan off). And
before a flip is measured, the new sites of the `repair` passes with a `promising`
option (for layouts: an order that pads the value less), the `REPAIR_SITES` most
promising, each take in turn the option that lowers the estimate most, if by more than
`REPAIR_GAIN` of the total (the estimate ranks the W-minor layout first of 68 single-site
moves on csrnet b1 without the plan).

A flip carries the best's layouts (XTAT-M), chosen on another graph: one may leave a
kernel of the flip no tile that fits VMEM (vgg19 b16 without the plan: a conv whose
output is laid out (0, 3, 2, 1) needs 39 MiB at its only tile; no flip of the plan was
ever measured finite). Such choices of the `repair` passes are reverted first, one at a
time, each kept reverted if fewer kernels are then left without a fitting tile.

The repair trusts the estimate and sets the flip's new sites only; a flip whose tuned
time comes within `REGRAPH_SLACK` of the best is then *regraphed*: the single moves of
its `regraph` passes (layout and fusion) measured, those the estimate prices lowest
first (the new sites' moves priced before the others, `REGRAPH_PRICED` at most), up to
`regraph_budget` measurements, a faster one kept and the moves going on from it, then
the kernels it changed tuned again. The old sites count too: their choices were made
on another graph. On csrnet b16 (seed 0, budget 300) the plan off, tuned, measured 1.0%
behind the best and stayed 1.085x (exact) against the plan's 1.093x; one old layout
site set as XTAT-only sets it takes it to 1.098x, and regraphed it ends at 1.100x
(XTAT-only's 1.1005x), which the tuner then keeps.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence

from superopt.ir.errors import IRError
from superopt.xtat.context import TuneContext
from superopt.xtat.space import PassConfig
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy, register
from superopt.xtat.strategies.parallel import Parallel
from superopt.xtat.strategies.sweep import price

Told = tuple[list[Candidate], list[float]]
Move = tuple[str, str, object]  # (pass, site key, the option flipped to)
# A flip is tuned only when its graph, all kernels untuned, is within this of the best's
# graph untuned: resnet18 b16 without the plan is 3.9% slower untuned and 2% faster tuned;
# csrnet b1's plan without PET's pad-conv-slice and stack-height mutants is 6.2% slower
# untuned and the fastest of its graphs tuned (a 6% slack left it untried in one seed of
# three: 1.477x against 1.503x); inception_v3 and squeezenet without theirs are 13% and
# more slower untuned and slower tuned, and tuning such a flip costs some 40 measurements.
SLACK = 0.10
# A repair move is taken when the estimate gains more than this share of the total: the
# estimate ignores DMA efficiency and the MXU's shape, so a smaller gain is as likely a
# loss (csrnet b1's W-minor conv output gains 3.4%).
REPAIR_GAIN = 0.002
# The new sites a repair estimates, the most promising first: each estimate rebuilds the
# candidate from the repaired pass on (nasnet_a without its plan: 357 new layout sites;
# with this cap its repair takes 1.8 s and finds three of the four it finds without).
REPAIR_SITES = 8
# A tuned flip this close to the best measured gets its layout and fusion moves measured
# (module docstring): csrnet b16 without the plan, its kernels tuned, measures 1.0% behind.
REGRAPH_SLACK = 0.03
# Moves the regraph prices by the estimate (one candidate build each): csrnet has 120
# layout and fusion moves, nasnet_a thousands.
REGRAPH_PRICED = 256


@register("revisit")
class Revisit(SearchStrategy):
    rankable = False  # its kernel rounds are `parallel`'s

    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        super().start(ctx, passes, budget)
        self.kernels = tuple(self.opts.get("kernels", ("tiling", "flags")))
        self.both = frozenset(self.opts.get("both_ways", ()))
        self.slack = float(self.opts.get("slack", SLACK))
        self.repair = tuple(self.opts.get("repair", ()))
        self.regraph = tuple(self.opts.get("regraph", ()))
        self.regraph_n = int(self.opts.get("regraph_budget", 0))
        for opt, names in (("repair", self.repair), ("regraph", self.regraph)):
            for name in names:
                if name not in ctx.pipeline.names:
                    raise IRError(f"strategy 'revisit': option {opt!r} names {name!r}, "
                                  f"which the pipeline lacks: expected some of "
                                  f"{', '.join(ctx.pipeline.names)}")
                if ctx.per_kernel(name):
                    raise IRError(f"strategy 'revisit': option {opt!r} takes graph passes, "
                                  f"not {name!r}: its kernel passes are the option "
                                  f"'kernels'")
        for name in passes:
            if ctx.per_kernel(name):
                raise IRError(f"strategy 'revisit' flips graph choices, not {name!r}: "
                              f"its kernel passes are the option 'kernels'")
        for name in self.kernels:
            if not ctx.per_kernel(name):
                raise IRError(f"strategy 'revisit' tunes per-kernel passes (tiling, flags) "
                              f"after a flip, not {name!r}")
        if not ctx.profiled:
            raise IRError("strategy 'revisit' needs a runner that reports each kernel's "
                          "time (a profile)")
        self.n = 8
        self.flipped: set[tuple[str, str, object]] = set()
        self.flip_base = ctx.best or ctx.default  # the best a flip was made from
        # The flips of one best candidate with their estimates (rebuilt when the best
        # changes): the order needs every flip's estimate, each flip needs it once.
        self.ranked: tuple[str, dict[Move, tuple[float, Candidate]]] = ("", {})
        self.flow = self._flow()
        self.out: list[Candidate] | None = next(self.flow, None)

    def _next_flip(self) -> Candidate | None:
        """The best candidate with its next unflipped site flipped (None: none left)."""
        ctx = self.ctx
        base = self.flip_base = ctx.best or ctx.default
        flips: list[list[Move]] = []
        for name, site in ctx.tunable(base, self.passes):
            now = ctx.choice(base, name, site)
            # What a site holds now was judged (a flip away from it was adopted): no flip
            # back to it.
            self.flipped.add((name, site.key, now))
            if name in self.both:
                # Every other option, nearest first as the pass orders them.
                j = ctx.pipeline.index(name)
                tos = ctx.pipeline.passes[j].alternatives(base.stages[j], site, now)
            elif now != site.default:
                tos = [site.default]
            else:
                continue
            flips.append([(name, site.key, to) for to in tos])
        if ctx.estimate is None:
            for rank in range(max((len(f) for f in flips), default=0)):
                for f in flips:
                    if rank < len(f) and f[rank] not in self.flipped:
                        self.flipped.add(f[rank])
                        name, key, to = f[rank]
                        return self._fit(
                            ctx.pipeline.with_choice(base, name, key, to, ctx.store))
            return None
        if self.ranked[0] != base.key:
            self.ranked = (base.key, {})
        known = self.ranked[1]
        scored = []
        for i, f in enumerate(flips):
            for rank, move in enumerate(f):
                if move in self.flipped:
                    continue
                got = known.get(move)
                if got is None:
                    name, key, to = move
                    flip = ctx.pipeline.with_choice(base, name, key, to, ctx.store)
                    got = known[move] = (ctx.estimate(self._untuned(flip)), flip)
                scored.append((got[0], rank, i, move))
        if not scored:
            return None
        move = min(scored)[3]
        self.flipped.add(move)
        return self._repair(base, self._fit(known[move][1]))

    def _fit(self, flip: Candidate) -> Candidate:
        """`flip` with those choices of the `repair` passes reverted, one at a time, that
        leave a kernel no configuration of the default compiler's that fits (module
        docstring); unchanged when every kernel fits."""
        ctx = self.ctx
        if ctx.rejected is None:
            return flip
        bad = ctx.rejected(self._untuned(flip))
        for name in self.repair:
            if not bad:
                break
            j = ctx.pipeline.index(name)
            for key in sorted(flip.configs[j].choices):
                site = ctx.pipeline.passes[j].sites(flip.stages[j]).get(key)
                if site is None:
                    continue
                c = ctx.pipeline.with_choice(flip, name, key, site.default)
                now = ctx.rejected(self._untuned(c))
                if len(now) < len(bad):
                    flip, bad = c, now
                    if not bad:
                        break
        return flip

    def _repair(self, base: Candidate, flip: Candidate) -> Candidate:
        """`flip` (of `base`) with the new sites of the `repair` passes set by the
        estimate (module docstring)."""
        ctx = self.ctx
        if ctx.estimate is None:
            return flip
        for name in self.repair:
            j = ctx.pipeline.index(name)
            p = ctx.pipeline.passes[j]
            old = p.sites(base.stages[j])
            given = flip.configs[j].choices
            # Sites the flip made whose choice nothing carried (XTAT-M, the store), the
            # most promising first; only the first REPAIR_SITES get estimates.
            hints = []
            for site in p.sites(flip.stages[j]).tunable:
                if site.key in old or site.key in given:
                    continue
                now = ctx.choice(flip, name, site)
                options = p.promising(flip.stages[j], flip.stages[j + 1], site, now)
                if options:
                    hints.append((-max(h for _, h in options), len(hints), site, options))
            cur = ctx.estimate(flip)
            for _, _, site, options in sorted(hints)[:REPAIR_SITES]:
                pick, pick_t = None, cur * (1.0 - REPAIR_GAIN)
                for option, _ in options:
                    c = ctx.pipeline.with_choice(flip, name, site.key, option)
                    t = ctx.estimate(c)
                    if t < pick_t:
                        pick, pick_t = c, t
                if pick is not None:
                    flip, cur = pick, pick_t
        return flip

    def _untuned(self, cand: Candidate) -> Candidate:
        """`cand` with every kernel at the default compiler's configuration."""
        ctx = self.ctx
        configs = list(cand.configs)
        for name in self.kernels:
            configs[ctx.pipeline.index(name)] = PassConfig.of({})
        return ctx.pipeline.build(cand, configs)

    def _known(self, cand: Candidate) -> float | None:
        """`cand`'s time from kernel times measured before (None: a kernel's unknown)."""
        total = 0.0
        for key in cand.final.sig_keys:
            t = self.ctx.kernel_time(cand, key)
            if t is None:
                return None
            total += t
        return total

    def _flow(self) -> Generator[list[Candidate], Told, None]:
        """Yields what to measure next and is sent what was measured of it; ends when
        no site is left or the budget ran out (fewer measured than asked)."""
        while (flip := self._next_flip()) is not None:
            # The screen: both graphs with untuned kernels (a fair comparison, mostly
            # known already), and no tuning for a flip far behind.
            untuned = []
            for c in (self._untuned(self.ctx.best or self.ctx.default), self._untuned(flip)):
                t = self._known(c)
                if t is None:
                    done, times = yield [c]
                    if not done:
                        return
                    t = times[0]
                untuned.append(t)
            if not untuned[1] <= untuned[0] * (1.0 + self.slack):
                continue
            done, times = yield [flip]
            if not done:
                return
            cur, cur_t = flip, times[0]
            if not math.isfinite(cur_t):
                continue
            base = self.flip_base
            got = yield from self._kernels(cur, cur_t)
            if got is None:
                return
            cur, cur_t = got
            if not (self.regraph and self.regraph_n > 0
                    and cur_t <= self.ctx.best_time * (1.0 + REGRAPH_SLACK)):
                continue
            got = yield from self._regraph(base, cur, cur_t)
            if got is None:
                return
            if got[0].key != cur.key:
                got = yield from self._kernels(*got)
                if got is None:
                    return

    def _kernels(self, cur: Candidate, cur_t: float
                 ) -> Generator[list[Candidate], Told, tuple[Candidate, float] | None]:
        """`cur`'s kernels tuned as `parallel` tunes them (None: the budget ran out)."""
        for name in self.kernels:
            key = "top_k" if name == "tiling" else f"{name}_top_k"
            tuner = Parallel(**({"top_k": self.opts[key]} if key in self.opts else {}))
            tuner.start_from(self.ctx, (name,), self.budget, cur, cur_t)
            while cands := tuner.ask(self.n):
                done, times = yield cands
                tuner.tell(done, times)
                if len(done) < len(cands):
                    return None
            cur, cur_t = tuner.base, tuner.base_time
        return cur, cur_t

    def _regraph(self, base: Candidate, cur: Candidate, cur_t: float
                 ) -> Generator[list[Candidate], Told, tuple[Candidate, float] | None]:
        """The single moves of `cur`'s sites of the `regraph` passes measured, those the
        estimate prices lowest first (the sites `cur` made, absent from `base`, priced
        before the others), at most `regraph_budget` measurements; a faster move is kept
        and the moves go on from it (None: the budget ran out)."""
        ctx = self.ctx
        old = {name: set(ctx.pipeline.passes[ctx.pipeline.index(name)]
                         .sites(base.stages[ctx.pipeline.index(name)]))
               for name in self.regraph}
        tried: set[Move] = set()
        delta: dict[Move, float] = {}
        spent = 0
        while spent < self.regraph_n:
            fresh: list[Move] = []
            kept: list[Move] = []
            for name, site in ctx.tunable(cur, self.regraph):
                now = ctx.choice(cur, name, site)
                (kept if site.key in old[name] else fresh).extend(
                    (name, site.key, o) for o in site.options
                    if o != now and (name, site.key, o) not in tried)
            if not fresh and not kept:
                break
            # The flip's new sites first, then the others (their choices were made on
            # another graph), each group in the seeded order.
            moves = [fresh[i] for i in ctx.rng.permutation(len(fresh))] + [
                kept[i] for i in ctx.rng.permutation(len(kept))]
            if ctx.estimate is not None:
                # The first REGRAPH_PRICED moves priced, each once, on the candidate it
                # was first offered on (a gain far away does not change a move's price,
                # as in `ranked`); the lowest first, the unpriced after them.
                price(ctx, cur, moves[:REGRAPH_PRICED], delta, REGRAPH_PRICED)
                moves.sort(key=lambda m: delta.get(m, math.inf))
            batch = moves[:min(self.n, self.regraph_n - spent)]
            tried.update(batch)
            cands = [ctx.pipeline.with_choice(cur, *m, ctx.store) for m in batch]
            done, times = yield cands
            spent += len(cands)
            if len(done) < len(cands):
                return None
            t, i = min((t, i) for i, t in enumerate(times))
            if t < cur_t:
                cur, cur_t = done[i], t
        return cur, cur_t

    def ask(self, n: int) -> list[Candidate]:
        self.n = n
        return self.out or []

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        try:
            self.out = self.flow.send((list(candidates), list(times)))
        except StopIteration:
            self.out = None
