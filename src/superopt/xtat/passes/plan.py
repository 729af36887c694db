"""The rewrite-plan pass: the result of TASO's cost-model search as one choice.

The rewrite pass offers every rewrite point of its input graph, one round: it cannot reach
rewrites that only exist after another rewrite (merging two convolutions once their batch
norms are folded into them), nor take a step that pays off two steps later. TASO's
backtracking search (`superopt.rewrite.optimize`) does both, with a cost model and without
measuring. This pass runs that search once per input graph (cached by the graph's
structural hash, in the pass object) and offers its result as a single site, "plan", with
the options "no plan" (the default) and the plan (keyed by the digest of its steps). The
rewrite pass after it then refines the planned graph point by point, and layout, fusion,
tiles and flags are tuned on whatever the two produce (XTAT-M repairs their choices when
the plan is switched).

The planned graph is handed on unfolded (the value check needs it runnable); the
rewrite pass folds the weight-only computations the plan created (the stage memo's
`fold_skip` names what the source graph already computed, which stays as it was).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from superopt.ir.graph import Graph
from superopt.ir.passes import Origin, compose
from superopt.rewrite.fold import foldable_values
from superopt.rewrite.match import Matcher
from superopt.xtat.passes.base import PassResult, TunablePass
from superopt.xtat.space import PassConfig, Site, digest
from superopt.xtat.stage import Stage

PLAN_SITE = "plan"


@dataclass(frozen=True)
class Plan:
    """TASO's search result on one graph, as this pass uses it."""

    option: str  # "taso:<digest of the steps>"
    graph: Graph
    origin: Origin
    rules: tuple[str, ...]  # one entry per rewrite applied, in order
    cost_before: float
    cost_after: float
    evaluations: int  # graphs the search priced with its cost model (not measurements)
    seconds: float


class RewritePlan(TunablePass):
    """Options: `budget` (graphs TASO's search expands), `alpha` (its backtracking
    relaxation) and `cost` (a factory of the `superopt.rewrite` cost function it uses;
    the session passes the simulator's default-compiled time, as the TASO-only baseline
    uses it)."""

    name = "plan"

    def __init__(self, rules: Matcher, cost: Callable[[], object] | None, budget: int = 20,
                 alpha: float = 1.05) -> None:
        self.matcher = rules
        self.cost_factory = cost
        self.budget = budget
        self.alpha = alpha
        self._cost: object | None = None
        self._plans: dict[str, Plan | None] = {}  # graph structural hash -> plan

    def plan(self, graph: Graph) -> Plan | None:
        """The plan for `graph` (None: no search configured, or it found nothing)."""
        key = graph.structural_hash
        if key in self._plans:
            return self._plans[key]
        got = None
        if self.cost_factory is not None and self.budget > 0:
            from superopt.rewrite import optimize

            if self._cost is None:
                self._cost = self.cost_factory()
            res = optimize(graph, self.matcher, self._cost, alpha=self.alpha,
                           budget=self.budget)
            if res.steps and res.cost_after < res.cost_before:
                steps = [[s.rule, list(s.sites)] for s in res.steps]
                got = Plan(f"taso:{digest(str(steps), 12)}", res.graph, res.origin,
                           tuple(s.rule for s in res.steps for _ in s.sites),
                           res.cost_before, res.cost_after, res.evaluated, res.seconds)
        self._plans[key] = got
        return got

    def list_sites(self, stage: Stage) -> list[Site]:
        p = self.plan(stage.graph)
        if p is None:
            return []
        counts = ", ".join(f"{r} x{n}" for r, n in Counter(p.rules).items())
        # Weight: visited before any single rewrite point by the greedy strategies.
        return [Site(PLAN_SITE, (None, p.option), None, (),
                     f"TASO plan: {len(p.rules)} rewrites ({counts})",
                     weight=float(len(stage.graph.nodes)))]

    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        self.check_config(stage, config)
        if config.choices.get(PLAN_SITE) is None:
            return PassResult(stage, None, {"applied": [], "plan": None})
        p = self.plan(stage.graph)
        assert p is not None  # check_config found the site
        to_source = p.origin if stage.to_source is None else compose(stage.to_source,
                                                                     p.origin)
        out = stage.evolve(graph=p.graph, to_source=to_source)
        hashes = stage.graph.node_hashes
        out.memo["fold_skip"] = frozenset(hashes[v.node] for v in foldable_values(stage.graph))
        return PassResult(out, p.origin, {
            "applied": list(p.rules), "plan": p.option, "plan_cost_before": p.cost_before,
            "plan_cost_after": p.cost_after, "plan_evaluations": p.evaluations})


__all__ = ["PLAN_SITE", "Plan", "RewritePlan"]
