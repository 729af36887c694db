"""The pass pipeline: build candidates, rebuild from the first changed pass, and make the
later configurations well-formed in one place (XTAT-M).

`build(base, configs)` reuses `base`'s stages up to the first pass whose configuration
changed and rebuilds the rest. A rebuilt stage can have other sites than the one it
replaces (a rewrite removed nodes, a layout change re-hashed every node behind a copy, a
fusion change made new kernels), so each later configuration is repaired: a site keeps
its choice when its key survives; a choice whose site vanished moves to the new sites
descending from the same source nodes (`origin`); a site the old stage did not have takes
the global config store's best choice for its key; everything else is the pass default.
"""

from __future__ import annotations

from collections.abc import Sequence

from superopt.ir.graph import Graph
from superopt.xtat.passes.base import PassResult, TunablePass
from superopt.xtat.space import EMPTY, PassConfig
from superopt.xtat.stage import Candidate, Stage
from superopt.xtat.store import ConfigStore


class Pipeline:
    def __init__(self, passes: Sequence[TunablePass], check: bool = False) -> None:
        self.passes = tuple(passes)
        self.names = tuple(p.name for p in self.passes)
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"pass names repeat: {self.names}")
        self.check = check

    def index(self, name: str) -> int:
        return self.names.index(name)

    def initial(self, graph: Graph) -> Candidate:
        """The default compiler's candidate: every pass at its default."""
        stages = [Stage(graph)]
        reports = []
        for p in self.passes:
            r = self._run(p, stages[-1], EMPTY)
            stages.append(r.stage)
            reports.append(r.report)
        return Candidate(self.names, tuple(EMPTY for _ in self.passes), tuple(stages),
                         tuple(reports))

    def _run(self, p: TunablePass, stage: Stage, config: PassConfig) -> PassResult:
        if self.check:
            p.requires(stage)
        r = p.apply(stage, config)
        if self.check:
            p.ensures(r.stage)
        return r

    def build(self, base: Candidate, configs: Sequence[PassConfig],
              store: ConfigStore | None = None) -> Candidate:
        """The candidate with `configs`, rebuilt from `base` where they differ."""
        first = next((i for i, (a, b) in enumerate(zip(base.configs, configs, strict=True))
                      if a is not b and a.choices != b.choices), None)
        if first is None:
            return base
        stages = list(base.stages[:first + 1])
        reports = list(base.reports[:first])
        out_configs = list(base.configs[:first])
        for j in range(first, len(self.passes)):
            p = self.passes[j]
            config = configs[j]
            if j > first and stages[j] is not base.stages[j]:
                config = self.repair(p, stages[j], config, base.stages[j], store)
            r = self._run(p, stages[j], config)
            stages.append(r.stage)
            reports.append(r.report)
            out_configs.append(config)
        return Candidate(self.names, tuple(out_configs), tuple(stages), tuple(reports))

    def with_choice(self, base: Candidate, pass_name: str, key: str, choice: object,
                    store: ConfigStore | None = None) -> Candidate:
        """`base` with one site's choice changed (and everything after it repaired)."""
        j = self.index(pass_name)
        site = self.passes[j].sites(base.stages[j])[key]
        configs = list(base.configs)
        configs[j] = configs[j].with_choice(site, choice)
        return self.build(base, configs, store)

    @staticmethod
    def repair(p: TunablePass, new: Stage, config: PassConfig, old: Stage,
               store: ConfigStore | None) -> PassConfig:
        """`config` (made for `old`) made well-formed on `new` (XTAT-M; module docstring)."""
        sites = p.sites(new)
        old_sites = p.sites(old)
        out: dict[str, object] = {}
        given = config.choices
        for key, choice in config.items():
            site = sites.get(key)
            if site is not None:
                if choice in site.options and choice != site.default:
                    out[key] = choice
                continue
            before = old_sites.get(key)
            if before is None:
                continue
            for s in sites.by_sources(before.sources):
                if s.key in given or s.key in out or s.key in old_sites:
                    continue
                if choice in s.options and choice != s.default:
                    out[s.key] = choice
        if store is not None:
            for key, choice in store.entries(p.name):
                if key in out or key in given or key in old_sites:
                    continue
                site = sites.get(key)
                if site is not None and choice in site.options and choice != site.default:
                    out[key] = choice
        return PassConfig.of(out)

    def from_configs(self, graph: Graph, configs: Sequence[PassConfig]) -> Candidate:
        """Rebuild a recorded candidate (no repair: every key must exist)."""
        cand = self.initial(graph)
        for j, config in enumerate(configs):
            if config.choices:
                new = list(cand.configs)
                new[j] = config
                cand = self.build(cand, new)
        return cand


__all__ = ["Pipeline"]
