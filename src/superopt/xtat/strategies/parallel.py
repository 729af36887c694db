"""Per-kernel search in parallel: every kernel's next option in one measurement, each
kernel's time read back from the run's profile.

The kernel passes' sites are independent (`TunablePass.per_kernel`: a tile or flags
choice changes its own kernel's time and nothing else), and a profiled run reports each
kernel's time. So round r sets every site to its r-th option at once, one measurement,
and the profile tells how long each kernel took with it; after the last round every site
takes the option with its least measured kernel time and that candidate is measured (its
time is the sum of the times measured in the rounds). With k options per site this tunes
every kernel in k + 1 measurements, where `exhaustive` spends k per kernel. A kernel
configuration measured before (in any candidate of the run) is not measured again: a
round all of whose kernels are known is skipped, and so is a pass whose every option is.

Options: `top_k` (the first k options of each site in its pass's order: tiles by the
analytical model). Needs a runner that profiles (`TuneContext.profiled`). A round leaves a
kernel at its current choice when the compiler rejects the option for it
(`TuneContext.rejected`), so one kernel's tile that does not fit costs the others nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from superopt.ir.errors import IRError
from superopt.xtat.context import TuneContext
from superopt.xtat.space import PassConfig, Site
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy, register


@register("parallel")
class Parallel(SearchStrategy):
    rankable = False  # a round measures an option of every kernel at once

    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        self.start_from(ctx, passes, budget, ctx.best or ctx.default, ctx.best_time)

    def start_from(self, ctx: TuneContext, passes: Sequence[str], budget: int,
                   base: Candidate, base_time: float) -> None:
        """Tune the kernels of `base` (measured at `base_time`), which need not be the
        best candidate so far (`revisit` tunes a graph change's kernels this way)."""
        super().start(ctx, passes, budget)
        for name in passes:
            if not ctx.per_kernel(name):
                raise IRError(f"strategy 'parallel' tunes per-kernel passes (tiling, flags), "
                              f"not {name!r}: its sites' times are not read from a profile")
        if not ctx.profiled:
            raise IRError("strategy 'parallel' needs a runner that reports each kernel's "
                          "time (a profile): use 'exhaustive'")
        self.todo = list(passes)
        self.base, self.base_time = base, base_time
        self.queue: list[Candidate] = []
        self.pass_name = ""
        self.tried: dict[str, dict[object, Candidate]] = {}  # site -> option -> round
        self.final: Candidate | None = None
        self.k = self.opts.get("top_k")

    def _with(self, name: str, choice: dict[str, object], sites: dict[str, Site]
              ) -> Candidate:
        """The base with the given sites set (the others as the base has them)."""
        ctx = self.ctx
        j = ctx.pipeline.index(name)
        cfg = dict(self.base.configs[j].choices)
        for key, o in choice.items():
            if o == sites[key].default:
                cfg.pop(key, None)
            else:
                cfg[key] = o
        configs = list(self.base.configs)
        configs[j] = PassConfig.of(cfg)
        return ctx.pipeline.build(self.base, configs, ctx.store)

    def _rounds(self, name: str) -> list[Candidate]:
        """The rounds of pass `name` on the base that measure something new."""
        ctx = self.ctx
        sites = {s.key: s for _, s in ctx.tunable(self.base, (name,))}
        options = {key: list(s.options if self.k is None else s.options[:int(self.k)])
                   for key, s in sites.items()}
        current = {key: ctx.choice(self.base, name, s) for key, s in sites.items()}
        self.tried = {key: {current[key]: self.base} for key in sites}
        rounds = []
        for r in range(max((len(o) for o in options.values()), default=0)):
            choice = {key: opts[r] for key, opts in options.items()
                      if r < len(opts) and opts[r] != current[key]}
            cand = self._with(name, choice, sites) if choice else None
            if cand is not None and ctx.rejected is not None:
                bad = ctx.rejected(cand) & choice.keys()
                if bad:  # compiled, not run: those kernels stay as they are this round
                    choice = {k: o for k, o in choice.items() if k not in bad}
                    cand = self._with(name, choice, sites) if choice else None
            if cand is None:
                continue
            for key, o in choice.items():
                self.tried[key][o] = cand
            if any(ctx.kernel_time(cand, key) is None for key in choice):
                rounds.append(cand)
        return rounds

    def _best(self, name: str) -> Candidate:
        """The base with every site at its option of least measured kernel time."""
        ctx = self.ctx
        sites = {s.key: s for _, s in ctx.tunable(self.base, (name,))}
        choice = {}
        for key, by_option in self.tried.items():
            timed = [(t, i, o) for i, (o, cand) in enumerate(by_option.items())
                     if (t := ctx.kernel_time(cand, key)) is not None]
            if timed and key in sites:
                choice[key] = min(timed, key=lambda e: (e[0], e[1]))[2]
        return self._with(name, choice, sites)

    def ask(self, n: int) -> list[Candidate]:
        while not self.queue:
            if self.pass_name:
                # The rounds of the current pass are all told: its best combination.
                best, self.pass_name = self._best(self.pass_name), ""
                if best.key != self.base.key:
                    self.final = best
                    self.queue = [best]
                    break
            if not self.todo:
                return []
            self.pass_name = self.todo.pop(0)
            self.queue = self._rounds(self.pass_name)
        out, self.queue = self.queue[:n], self.queue[n:]
        return out

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        for cand, t in zip(candidates, times, strict=True):
            if self.final is not None and cand.key == self.final.key:
                if t <= self.base_time:
                    self.base, self.base_time = cand, t
                self.final = None
