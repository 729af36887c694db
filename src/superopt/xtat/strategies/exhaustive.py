"""Exhaustive search, one site at a time (coordinate descent): the sites of the tuned
passes are visited in order of weight (kernels sharing the site, most first); every
option of a site is measured on the best candidate so far, the best option is kept, then
the next site. With the kernel passes, whose sites are independent kernels, this is the
per-kernel exhaustive tile and flag search of XTAT. With `top_k`, only the first k
options of a site (in the order its pass gives them: tiles by the analytical model) are
measured, as XTAT measures a cost model's top candidates per kernel. On a per-kernel
pass (tiles, flags) an option whose kernel configuration a profile already timed is not
measured again (only the fastest such, where it beats the current choice)."""

from __future__ import annotations

from collections.abc import Sequence

from superopt.xtat.context import TuneContext
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy, register


@register("exhaustive")
class Exhaustive(SearchStrategy):
    """Options: `top_k` (see the module docstring) and `min_gain`: a site's best option
    replaces the incumbent only when it is at least this fraction faster (default 0).
    Changes within the noise fragment repeated layers into kernels with distinct
    signatures, each then tuned separately by the kernel passes."""

    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        super().start(ctx, passes, budget)
        self.done: set[tuple[str, str]] = set()
        self.queue: list[Candidate] = []
        self.base = ctx.best or ctx.default
        self.base_time = ctx.best_time
        self.open = 0  # candidates of the current site not yet told (tell is synchronous)
        self.site_best: tuple[float, Candidate] | None = None
        self.min_gain = float(self.opts.get("min_gain", 0.0))

    def _next_site(self) -> list[Candidate] | None:
        ctx = self.ctx
        base = self.base
        sites = [(n, s) for n, s in ctx.tunable(base, self.passes)
                 if (n, s.key) not in self.done]
        if not sites:
            return None
        name, site = min(sites, key=lambda t: (-t[1].weight, t[0], t[1].key))
        self.done.add((name, site.key))
        current = ctx.choice(base, name, site)
        k = self.opts.get("top_k")
        options = site.options if k is None else site.options[:int(k)]
        cands = [ctx.pipeline.with_choice(base, name, site.key, o, ctx.store)
                 for o in options if o != current]
        if ctx.profiled and ctx.per_kernel(name):
            cands = self._unmeasured(site.key, cands)
        return cands

    def _unmeasured(self, key: str, cands: list[Candidate]) -> list[Candidate]:
        """A per-kernel site's options whose kernel configuration no profile has timed,
        and the fastest timed one if it beats the current choice: the kernel's time does
        not depend on the rest of the candidate, so what was measured holds here."""
        ctx = self.ctx
        times = [ctx.kernel_time(c, key) for c in cands]
        known = [(t, i) for i, t in enumerate(times) if t is not None]
        fresh = [c for c, t in zip(cands, times, strict=True) if t is None]
        now = ctx.kernel_time(self.base, key)
        if known and now is not None and min(known)[0] < now:
            fresh.append(cands[min(known)[1]])
        return fresh

    def ask(self, n: int) -> list[Candidate]:
        while not self.queue:
            got = self._next_site()
            if got is None:
                return []
            if not got:  # nothing of this site to measure
                continue
            self.queue = got
            self.open = len(got)
            self.site_best = None
        out, self.queue = self.queue[:n], self.queue[n:]
        return out

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        for cand, t in zip(candidates, times, strict=True):
            self.open = max(0, self.open - 1)
            if self.site_best is None or t < self.site_best[0]:
                self.site_best = (t, cand)
        if not self.open and self.site_best is not None:
            t, cand = self.site_best
            if t < self.base_time * (1.0 - self.min_gain):
                self.base, self.base_time = cand, t
