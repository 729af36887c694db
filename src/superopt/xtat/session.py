"""Everything a tuning run needs, built from a description that fits in a JSON object:
the model (any `MODEL_OR_FILE` spec, `synthetic:N` included), its batch, the hardware
preset and the rule library. The CLI, the benchmark, `--replay` and evaluation workers
all build their pipeline here, so the workload recorded in a database is exactly what a
rebuild needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from superopt.ir.graph import Graph
from superopt.tpu_sim import Simulator
from superopt.xtat.passes.fusion import FusionSites
from superopt.xtat.passes.kernel import FlagSites, TileSites
from superopt.xtat.passes.layout import LayoutSites
from superopt.xtat.passes.rewrite import RewriteSites
from superopt.xtat.pipeline import Pipeline
from superopt.xtat.runner import SimRunner
from superopt.xtat.space import digest
from superopt.xtat.stage import Candidate


def load_graph(model: str, batch: int | None) -> Graph:
    from superopt.importers import load_model

    return load_model(model, batch=batch)


def make_pipeline(sim: Simulator, rules: Any = None, check: bool = False) -> Pipeline:
    """The five passes in order; `rules`: a rule list, a `Matcher`, or a library spec
    (None: the starter library)."""
    from superopt.rewrite import Matcher, load_rules

    if rules is None or isinstance(rules, str):
        rules = Matcher(load_rules(rules)[0])
    return Pipeline([RewriteSites(rules), LayoutSites(sim), FusionSites(sim), TileSites(sim),
                     FlagSites(sim)], check=check)


@dataclass
class Session:
    spec: dict[str, Any]  # model, batch, hardware, rules
    graph: Graph
    sim: Simulator
    pipeline: Pipeline
    runner: SimRunner
    default: Candidate

    @property
    def workload(self) -> dict[str, Any]:
        """What the records database must match: the graph and what fixes its space."""
        return {"graph": self.graph.structural_hash, "model": self.spec["model"],
                "batch": self.spec.get("batch"), "hardware": self.sim.hw.name,
                "rules": self.spec.get("rules") or "starter",
                "rules_digest": self.spec.get("rules_digest")}


def open_session(spec: Mapping[str, Any], graph: Graph | None = None) -> Session:
    from superopt.rewrite import Matcher, load_rules

    spec = dict(spec)
    if graph is None:
        graph = load_graph(spec["model"], spec.get("batch"))
    sim = Simulator(spec.get("hardware"))
    rules, _ = load_rules(spec.get("rules"))
    spec["rules_digest"] = digest("\n".join(sorted(str(r) for r in rules)))
    pipeline = make_pipeline(sim, Matcher(rules))
    return Session(spec, graph, sim, pipeline, SimRunner(sim), pipeline.initial(graph))


__all__ = ["Session", "load_graph", "make_pipeline", "open_session"]
