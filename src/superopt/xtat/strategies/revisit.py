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
each site flipped to each option at most once and never back to an option it held: every
site's first flip (back to its default, or a `both_ways` site's first other option) comes
before any site's second, so the plan's variants do not starve the rewrite points of
budget.
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

Told = tuple[list[Candidate], list[float]]
# A flip is tuned only when its graph, all kernels untuned, is within this of the best's
# graph untuned: resnet18 b16 without the plan is 3.9% slower untuned and 2% faster
# tuned; inception_v3 and squeezenet without theirs are 13% and more slower untuned and
# slower tuned, and tuning such a flip costs some 40 measurements.
SLACK = 0.06


@register("revisit")
class Revisit(SearchStrategy):
    rankable = False  # its kernel rounds are `parallel`'s

    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        super().start(ctx, passes, budget)
        self.kernels = tuple(self.opts.get("kernels", ("tiling", "flags")))
        self.both = frozenset(self.opts.get("both_ways", ()))
        self.slack = float(self.opts.get("slack", SLACK))
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
        self.flow = self._flow()
        self.out: list[Candidate] | None = next(self.flow, None)

    def _next_flip(self) -> Candidate | None:
        """The best candidate with its next unflipped site flipped (None: none left)."""
        ctx = self.ctx
        base = ctx.best or ctx.default
        flips: list[list[tuple[str, str, object]]] = []
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
        for rank in range(max((len(f) for f in flips), default=0)):
            for f in flips:
                if rank < len(f) and f[rank] not in self.flipped:
                    self.flipped.add(f[rank])
                    name, key, to = f[rank]
                    return ctx.pipeline.with_choice(base, name, key, to, ctx.store)
        return None

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
            for name in self.kernels:
                key = "top_k" if name == "tiling" else f"{name}_top_k"
                tuner = Parallel(**({"top_k": self.opts[key]} if key in self.opts else {}))
                tuner.start_from(self.ctx, (name,), self.budget, cur, cur_t)
                while cands := tuner.ask(self.n):
                    done, times = yield cands
                    tuner.tell(done, times)
                    if len(done) < len(cands):
                        return
                cur, cur_t = tuner.base, tuner.base_time

    def ask(self, n: int) -> list[Candidate]:
        self.n = n
        return self.out or []

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        try:
            self.out = self.flow.send((list(candidates), list(times)))
        except StopIteration:
            self.out = None
