"""The rewrite pass: every point where a rule (or a corrected PET mutant) applies is a site
whose options are "no rewrite" (None) or one of the sites of `superopt.rewrite` at that
point (by site key). One round: the sites are those of its input graph (the source
graph, or the graph a rewrite plan made: see `superopt.xtat.passes.plan`).

Rewrites such as batch-norm folding or merging matmuls leave weight-only computations
(rescaled or concatenated weights), which a compiler evaluates once, ahead of time; the
pass folds the ones its rewrites created into weights (structurally: the stage is for
costing), so the simulator does not charge them to every run. `rewritten(...)` gives the
unfolded graph, which is what values are checked on.
"""

from __future__ import annotations

from collections.abc import Iterable

from superopt.ir.graph import Graph
from superopt.ir.passes import compose
from superopt.rewrite.fold import fold_weights, foldable_hashes
from superopt.rewrite.match import Matcher
from superopt.rewrite.rewrite_pass import Point, RewritePass
from superopt.substitutions.rule import Rule
from superopt.xtat.passes.base import PassResult, TunablePass
from superopt.xtat.space import PassConfig, Site
from superopt.xtat.stage import Stage


class RewriteSites(TunablePass):
    name = "rewrite"

    def __init__(self, rules: Iterable[Rule] | Matcher) -> None:
        self.inner = RewritePass(rules)

    def points(self, stage: Stage) -> tuple[Point, ...]:
        """The rewrite points of the stage graph, matched once per stage (matching every
        rule against the graph again for each candidate dominated the search)."""
        got = stage.memo.get("rewrite_points")
        if got is None:
            got = stage.memo["rewrite_points"] = self.inner.points(stage.graph)
        return got

    def list_sites(self, stage: Stage) -> list[Site]:
        out = []
        for p in self.points(stage):
            srcs = sorted({s for o in p.options for n in o.nodes for s in stage.sources(n)})
            rules = ",".join(dict.fromkeys(o.rule for o in p.options))
            out.append(Site(p.key, (None, *(o.key for o in p.options)), None, tuple(srcs),
                            f"%{p.anchor} {stage.graph.nodes[p.anchor].op}: {rules}"))
        return out

    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        self.check_config(stage, config)
        choices = {k: v for k, v in config.items() if v is not None}
        # A rewrite plan before this pass hands its graph on unfolded, with what its own
        # input already computed as `fold_skip`: fold the rest even without a choice here.
        before = stage.memo.get("fold_skip")
        if not choices and before is None:
            return PassResult(stage, None, {"applied": [], "skipped": []})
        if choices:
            graph, run_origin, round_report = self.inner.apply_round(stage.graph, choices,
                                                                     self.points(stage))
            report = {"applied": [s.rule for s in round_report.applied],
                      "applied_sites": [s.key for s in round_report.applied],
                      "skipped": [f"{s.rule}: {why}" for s, why in round_report.skipped]}
        else:
            graph, run_origin = stage.graph, None
            report = {"applied": [], "skipped": []}
        if before is None:
            before = stage.memo.get("foldable")
            if before is None:
                before = stage.memo["foldable"] = foldable_hashes(stage.graph)
        folded = fold_weights(graph, evaluate=False, skip=before)
        origin = folded.origin if run_origin is None else compose(run_origin, folded.origin)
        to_source = origin if stage.to_source is None else compose(stage.to_source, origin)
        return PassResult(stage.evolve(graph=folded.graph, to_source=to_source), origin,
                          report | {"folded": folded.folded})

    def rewritten(self, stage: Stage, config: PassConfig) -> Graph:
        """The rewritten graph before folding (what the value check compares)."""
        choices = {k: v for k, v in config.items() if v is not None}
        if not choices:
            return stage.graph
        return self.inner.apply_round(stage.graph, choices, self.points(stage))[0]


__all__ = ["RewriteSites"]
