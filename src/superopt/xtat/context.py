"""What a search strategy sees: the pipeline, the candidates measured so far, the best
one, the global config store, a seeded random generator, the moves on candidates and,
where the runner profiles its runs, each kernel configuration's measured time (and, where
it has one, its analytical estimate of a candidate, or a cost model learned from this
run's measurements: `Screen`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from superopt.xtat.pipeline import Pipeline
from superopt.xtat.space import PassConfig, Site
from superopt.xtat.stage import Candidate
from superopt.xtat.store import ConfigStore


class Screen(Protocol):
    """A cost model learned from the measurements of this run, to pick which proposals
    are worth a measurement (as MetaSchedule's XGBoost model picks its evolutionary
    search's): whoever measures calls `update` with every new measurement; `predict`
    scores candidates, higher for one predicted faster (-inf: one that cannot run; all
    equal while the model has too few measurements to say)."""

    def predict(self, candidates: Sequence[Candidate]) -> np.ndarray: ...

    def update(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None: ...


@dataclass
class TuneContext:
    pipeline: Pipeline
    default: Candidate
    rng: np.random.Generator
    store: ConfigStore = field(default_factory=ConfigStore)
    best: Candidate | None = None
    best_time: float = float("inf")
    # (signature key, tile, flags) -> the kernel's measured time, from the profiles of
    # the measured candidates (filled by the tuner; empty when its runner has none).
    kernel_times: dict[tuple, float] = field(default_factory=dict)
    profiled: bool = False  # the runner reports per-kernel times
    # The kernels of a candidate the compiler rejects before running it (None: unknown).
    rejected: Callable[[Candidate], frozenset[str]] | None = None
    # The default compiler's analytical estimate of a candidate: free, for ranking
    # proposals only (None: the runner has none).
    estimate: Callable[[Candidate], float] | None = None
    # What makes a candidate the program it runs: two candidates of one identity are the
    # same program (None: each candidate key is its own). A space whose sites do not all
    # take effect (MetaSchedule's design space: the other sketches' decisions; a compute
    # location TVM moves) has many keys per program, and a strategy that plans rounds of
    # proposals should not fill them with programs it has measured.
    identity: Callable[[Candidate], str] | None = None
    # A cost model trained on this run's measurements (None: the runner has none).
    screen: Screen | None = None

    def tunable(self, candidate: Candidate, passes: Sequence[str]) -> list[tuple[str, Site]]:
        """(pass, site) for every site with a choice to make, in the given passes."""
        out = []
        for name in passes:
            j = self.pipeline.index(name)
            for s in self.pipeline.passes[j].sites(candidate.stages[j]).tunable:
                out.append((name, s))
        return out

    def per_kernel(self, pass_name: str) -> bool:
        """Whether each site of the pass is one kernel whose choice changes only that
        kernel's time (`TunablePass.per_kernel`: tiles, flags)."""
        return self.pipeline.passes[self.pipeline.index(pass_name)].per_kernel

    def choice(self, candidate: Candidate, pass_name: str, site: Site) -> object:
        return candidate.config(pass_name).choices.get(site.key, site.default)

    def mutate(self, candidate: Candidate, passes: Sequence[str], changes: int = 1
               ) -> Candidate:
        """`candidate` with `changes` random sites (of `passes`) set to another option.
        A pass is drawn first, then a site in it, so that a pass with few sites (rewrite
        points, kernel tiles) is not drowned by one with many (fusion nodes)."""
        out = candidate
        for _ in range(changes):
            drawn = self.draw_site(out, passes)
            if drawn is None:
                break
            name, site = drawn
            current = self.choice(out, name, site)
            others = [o for o in site.options if o != current]
            pick = others[int(self.rng.integers(len(others)))]
            out = self.pipeline.with_choice(out, name, site.key, pick, self.store)
        return out

    def sample(self, candidate: Candidate, passes: Sequence[str]) -> Candidate:
        """`candidate` with every tunable site of `passes` set to a uniformly drawn option
        (a default among them): a random point of the space, not of the candidate's
        neighbourhood. Passes are drawn in pipeline order, each on the stage the earlier
        draws made, so a later pass's sites are those that exist after them."""
        out = candidate
        for name in sorted(passes, key=self.pipeline.index):
            j = self.pipeline.index(name)
            sites = self.pipeline.passes[j].sites(out.stages[j])
            picks = {s.key: s.options[int(self.rng.integers(len(s.options)))]
                     for s in sites.tunable}
            configs = list(out.configs)
            configs[j] = PassConfig.of({k: v for k, v in picks.items()
                                        if v != sites[k].default})
            out = self.pipeline.build(out, configs, self.store)
        return out

    def draw_site(self, candidate: Candidate, passes: Sequence[str]
                  ) -> tuple[str, Site] | None:
        """A random tunable site of `passes` as `mutate` draws one: a pass first (of those
        with a site to tune), then a site in it. None when no pass has one."""
        live = []
        for n in passes:
            j = self.pipeline.index(n)
            tunable = self.pipeline.passes[j].sites(candidate.stages[j]).tunable
            if tunable:
                live.append((n, tunable))
        if not live:
            return None
        name, sites = live[int(self.rng.integers(len(live)))]
        return name, sites[int(self.rng.integers(len(sites)))]

    def crossover(self, a: Candidate, b: Candidate, passes: Sequence[str]) -> Candidate:
        """Per tuned pass, each choice of either parent taken with probability 1/2 (on
        `a`'s stages; XTAT-M repairs what no longer fits)."""
        configs = list(a.configs)
        for name in passes:
            j = self.pipeline.index(name)
            ca, cb = a.configs[j].choices, b.configs[j].choices
            keys = sorted(set(ca) | set(cb))
            merged = {}
            for k in keys:
                src = ca if self.rng.random() < 0.5 else cb
                if k in src:
                    merged[k] = src[k]
            sites = self.pipeline.passes[j].sites(a.stages[j])
            configs[j] = PassConfig.of({k: v for k, v in merged.items()
                                        if k in sites and v in sites[k].options
                                        and v != sites[k].default})
        return self.pipeline.build(a, configs, self.store)

    def kernel_time(self, candidate: Candidate, key: str) -> float | None:
        """The measured time of kernel `key` as `candidate` configures it (None: that
        configuration was never measured)."""
        f = candidate.final
        return self.kernel_times.get((key, f.tiles[key], f.flags[key]))

    def observe(self, candidate: Candidate, time: float) -> None:
        if time < self.best_time:
            self.best, self.best_time = candidate, time
            self.store.record(candidate)


__all__ = ["Screen", "TuneContext"]
