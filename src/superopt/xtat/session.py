"""Everything a tuning run needs, built from a description that fits in a JSON object:
the model (any `MODEL_OR_FILE` spec, `synthetic:N` included), its batch, the hardware
preset and the rule library. The CLI, the benchmark, `--replay` and evaluation workers
all build their pipeline here, so the workload recorded in a database is exactly what a
rebuild needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from superopt.ir.graph import Graph
from superopt.substitutions.text import format_rule
from superopt.tpu_sim import Simulator
from superopt.tpu_sim.tiling import DEFAULT_TILING
from superopt.xtat.passes.fusion import FusionSites
from superopt.xtat.passes.kernel import FlagSites, TileSites
from superopt.xtat.passes.layout import LayoutSites
from superopt.xtat.passes.plan import RewritePlan
from superopt.xtat.passes.rewrite import RewriteSites
from superopt.xtat.pipeline import Pipeline
from superopt.xtat.rules import RuleSet, rule_set
from superopt.xtat.runner import SimRunner
from superopt.xtat.space import digest
from superopt.xtat.stage import Candidate

if TYPE_CHECKING:
    from superopt.xtat.plancache import PlanCache


def load_graph(model: str, batch: int | None) -> Graph:
    from superopt.importers import load_model

    return load_model(model, batch=batch)


PLAN_BUDGET = 20  # graphs TASO's search expands for the rewrite plan (TASO-only's budget)


def make_pipeline(sim: Simulator, rules: Any = None, check: bool = False,
                  plan_budget: int = PLAN_BUDGET, plan_search: str = "backtracking"
                  ) -> Pipeline:
    """The six passes in order; `rules`: a rule list, a `Matcher`, or rule sources
    (None: the verified starter library; see `superopt.xtat.rules`). The rewrite plan
    searches with the simulator's default-compiled time as its cost model, by TASO's
    backtracking or (`plan_search="eqsat"`) by equality saturation."""
    from superopt.rewrite import Matcher, create_cost

    if rules is None or (isinstance(rules, str | list | tuple) and all(
            isinstance(r, str) for r in rules)):
        rules = Matcher(rule_set(rules).rules)
    hw = sim.hw.name

    def cost() -> object:
        return create_cost("sim", hardware=hw)

    return Pipeline([RewritePlan(rules, cost, plan_budget, cost_key=f"sim:{hw}",
                                 search=plan_search),
                     RewriteSites(rules),
                     LayoutSites(sim), FusionSites(sim), TileSites(sim), FlagSites(sim)],
                    check=check)


REWRITE_PASSES = ("plan", "rewrite")  # the passes that change the graph's values' recipe


def applied_rewrites(candidate: Candidate) -> list[str]:
    """The rules applied by the rewrite plan and the rewrite pass, in order."""
    return [r for name, rep in zip(candidate.names, candidate.reports, strict=True)
            if name in REWRITE_PASSES for r in rep.get("applied", [])]


def rewritten_graph(pipeline: Pipeline, candidate: Candidate) -> Graph:
    """The rewritten graph before folding (what the value check compares)."""
    j = pipeline.index("rewrite")
    return pipeline.passes[j].rewritten(candidate.stages[j], candidate.configs[j])


@dataclass
class Session:
    spec: dict[str, Any]  # model, batch, hardware, rules, allow_unproved, default_tiling
    graph: Graph
    sim: Simulator
    pipeline: Pipeline
    runner: SimRunner
    default: Candidate
    rules: RuleSet

    @property
    def workload(self) -> dict[str, Any]:
        """What the records database must match: the graph and what fixes its space."""
        return {"graph": self.graph.structural_hash, "model": self.spec["model"],
                "batch": self.spec.get("batch"), "hardware": self.sim.hw.name,
                "rules": list(self.rules.sources),
                "allow_unproved": bool(self.spec.get("allow_unproved")),
                "rules_digest": self.spec.get("rules_digest"),
                "plan_budget": int(self.spec.get("plan_budget", PLAN_BUDGET)),
                # Only a non-default heuristic is named, so records written before the
                # choice existed (all over the then default, now "legacy") do not match.
                **({"default_tiling": self.sim.default_tiling}
                   if self.sim.default_tiling != DEFAULT_TILING else {})}


def use_plan_cache(session: Session, path: str | Path | None,
                   read_only: bool = False) -> PlanCache | None:
    """Keep the session's plan searches in the SQLite file `path` (`xtat.plancache`): a
    records database, or a cache shared by benchmark rows (`read_only`: only read the
    searches it holds). None: no cache. The caller closes the cache it gets."""
    if path is None:
        return None
    from superopt.xtat.plancache import PlanCache

    cache = PlanCache(path, read_only)
    session.pipeline.passes[session.pipeline.index("plan")].cache = cache  # type: ignore[attr-defined]
    return cache


def open_session(spec: Mapping[str, Any], graph: Graph | None = None) -> Session:
    from superopt.rewrite import Matcher

    spec = dict(spec)
    if graph is None:
        graph = load_graph(spec["model"], spec.get("batch"))
    sim = Simulator(spec.get("hardware"),
                    default_tiling=spec.get("default_tiling") or DEFAULT_TILING)
    rules = rule_set(spec.get("rules"), bool(spec.get("allow_unproved")))
    spec["rules_digest"] = digest("\n".join(sorted(format_rule(r) for r in rules.rules)))
    pipeline = make_pipeline(sim, Matcher(rules.rules),
                             plan_budget=int(spec.get("plan_budget", PLAN_BUDGET)))
    return Session(spec, graph, sim, pipeline, SimRunner(sim), pipeline.initial(graph), rules)


__all__ = ["PLAN_BUDGET", "REWRITE_PASSES", "Session", "applied_rewrites", "load_graph",
           "make_pipeline", "open_session", "rewritten_graph", "use_plan_cache"]
