"""Everything a tuning run needs, built from a description that fits in a JSON object:
the model (any `MODEL_OR_FILE` spec, `synthetic:N` included), its batch, the target (a
TPU preset of the simulator, or `cpu`/`cuda`: onnxruntime on this machine, see
`superopt.xtat.targets`) and the rule library. The CLI, the benchmark, `--replay` and
evaluation workers all build their pipeline here, so the workload recorded in a database
is exactly what a rebuild needs.

A real target's pipeline has only the passes it offers (the rewrite plan and the rewrite
points); the plan's search and the screen of proposals (`superopt.xtat.screen`) price
graphs by this machine's measured per-op costs (`--op-cost torch`, kept in a cost
database), and the runner measures in onnxruntime (`superopt.xtat.realrunner`). Its
workload records the machine, the thread count and onnxruntime's version: a database
measured elsewhere or with other threads is refused on resume.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from superopt.ir.graph import Graph
from superopt.substitutions.text import format_rule
from superopt.tpu_sim import Simulator
from superopt.tpu_sim.tiling import DEFAULT_TILING
from superopt.xtat.passes.base import TunablePass
from superopt.xtat.passes.chunk import BatchChunks
from superopt.xtat.passes.fusion import FusionSites
from superopt.xtat.passes.kernel import FlagSites, TileSites
from superopt.xtat.passes.layout import LayoutSites
from superopt.xtat.passes.plan import RewritePlan
from superopt.xtat.passes.rewrite import RewriteSites
from superopt.xtat.pipeline import Pipeline
from superopt.xtat.realrunner import FINAL_ROUNDS, ROUNDS, WARMUP, RealRunner, Timer
from superopt.xtat.rules import RuleSet, rule_set
from superopt.xtat.runner import SimRunner
from superopt.xtat.space import digest
from superopt.xtat.stage import Candidate
from superopt.xtat.targets import Target, check_device, get_target

if TYPE_CHECKING:
    from superopt.xtat.plancache import PlanCache


def load_graph(model: str, batch: int | None) -> Graph:
    from superopt.importers import load_model

    return load_model(model, batch=batch)


PLAN_BUDGET = 20  # graphs TASO's search expands for the rewrite plan (TASO-only's budget)
PLAN_SEARCH = "backtracking"  # how the plan is searched (`passes.plan.PLAN_SEARCHES`)


def make_pipeline(sim: Simulator, rules: Any = None, check: bool = False,
                  plan_budget: int = PLAN_BUDGET, plan_search: str = PLAN_SEARCH
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

    tiling = sim.default_tiling

    def cost() -> object:
        # Priced as the session's default compiler compiles (its tile heuristic).
        return create_cost("sim", hardware=hw, default_tiling=tiling)

    # The key names a heuristic other than the default, so plan caches made before the
    # choice existed (all with the default's prices) still hit.
    key = f"sim:{hw}" if tiling == DEFAULT_TILING else f"sim:{hw}:{tiling}"
    return Pipeline([RewritePlan(rules, cost, plan_budget, cost_key=key, search=plan_search),
                     RewriteSites(rules),
                     LayoutSites(sim), FusionSites(sim), TileSites(sim), FlagSites(sim)],
                    check=check)


REWRITE_PASSES = ("plan", "rewrite")  # the passes that change the graph's values' recipe


def applied_rewrites(candidate: Candidate) -> list[str]:
    """The rules applied by the rewrite plan and the rewrite pass, in order."""
    return [r for name, rep in zip(candidate.names, candidate.reports, strict=True)
            if name in REWRITE_PASSES for r in rep.get("applied", [])]


def rewritten_graph(pipeline: Pipeline, candidate: Candidate) -> Graph:
    """The rewritten graph before folding (what the value check compares, and what a real
    target runs), with its batch in chunks where the pipeline has the chunk pass."""
    j = pipeline.index("rewrite")
    graph = pipeline.passes[j].rewritten(candidate.stages[j], candidate.configs[j])
    if "chunk" in pipeline.names:
        c = pipeline.index("chunk")
        chunks = pipeline.passes[c]
        assert isinstance(chunks, BatchChunks)
        graph = chunks.chunked(graph, candidate.stages[c], candidate.configs[c])
    return graph


@dataclass
class Session:
    spec: dict[str, Any]  # model, batch, hardware or target, rules, allow_unproved, default_tiling
    graph: Graph
    sim: Simulator | None  # None on a real target
    pipeline: Pipeline
    runner: SimRunner | RealRunner
    default: Candidate
    rules: RuleSet
    target: Target | None = None  # None: the simulator preset `sim.hw`
    screen: Any = None  # a real target's predictor of a candidate's time (`xtat.screen`)
    screen_hook: Any = None  # the tuner's screening hook built from it (`screen.screening`)

    @property
    def real(self) -> bool:
        return self.target is not None and self.target.real

    @property
    def workload(self) -> dict[str, Any]:
        """What the records database must match: the graph and what fixes its space."""
        out = {"graph": self.graph.structural_hash, "model": self.spec["model"],
               "batch": self.spec.get("batch"),
               "hardware": self.sim.hw.name if self.sim is not None else self.spec["machine"],
               "rules": list(self.rules.sources),
               "allow_unproved": bool(self.spec.get("allow_unproved")),
               "rules_digest": self.spec.get("rules_digest"),
               "plan_budget": int(self.spec.get("plan_budget", PLAN_BUDGET))}
        # Named only when not TASO's backtracking, so records made before the choice match.
        if self.spec.get("plan_search", PLAN_SEARCH) != PLAN_SEARCH:
            out["plan_search"] = self.spec["plan_search"]
        # Only a non-default tile heuristic is named, so records written before the choice
        # existed (all over the then default, now "legacy") do not match.
        if self.sim is not None and self.sim.default_tiling != DEFAULT_TILING:
            out["default_tiling"] = self.sim.default_tiling
        if self.real:
            assert self.target is not None
            out |= {k: self.spec[k] for k in REAL_WORKLOAD} | {"target": self.target.name}
            if self.spec.get("input_file"):
                # The input ran as the user's file: its times are not an export's.
                out["input_file"] = self.spec["input_file"]
        return out


# What a real target's measurements depend on besides the graph (recorded in the workload).
REAL_WORKLOAD = ("threads", "onnxruntime", "op_cost")


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


def open_session(spec: Mapping[str, Any], graph: Graph | None = None,
                 timer: Timer | None = None) -> Session:
    """`spec["target"]` (None: the TPU preset `spec["hardware"]`) picks the pipeline and
    the runner; on a real target `timer` replaces onnxruntime's (tests)."""
    from superopt.rewrite import Matcher

    spec = dict(spec)
    target = get_target(spec.get("target"), spec.get("hardware"))
    providers = check_device(target)
    if graph is None:
        graph = load_graph(spec["model"], spec.get("batch"))
    if target.real:
        return _open_real(spec, graph, target, providers, timer)
    spec["hardware"] = target.hardware
    sim = Simulator(spec.get("hardware"),
                    default_tiling=spec.get("default_tiling") or DEFAULT_TILING)
    rules = rule_set(spec.get("rules"), bool(spec.get("allow_unproved")))
    spec["rules_digest"] = digest("\n".join(sorted(format_rule(r) for r in rules.rules)))
    pipeline = make_pipeline(sim, Matcher(rules.rules),
                             plan_budget=int(spec.get("plan_budget", PLAN_BUDGET)),
                             plan_search=spec.get("plan_search") or PLAN_SEARCH)
    return Session(spec, graph, sim, pipeline, SimRunner(sim), pipeline.initial(graph), rules,
                   target)


# A real target's per-op cost (flops: no measuring, tests). By default each op is timed in
# the runtime the target measures in: onnxruntime ranks grouped convolutions the other way
# from torch (see `superopt.rewrite.cost.OrtOpCost`).
OP_COSTS = ("onnxruntime", "torch", "flops")


def _file_digest(path: Path) -> str:
    """The name and a content digest of a model file (its external data not read)."""
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"{path.name}:{h.hexdigest()}"


def _open_real(spec: dict[str, Any], graph: Graph, target: Target, providers: list[str],
               timer: Timer | None) -> Session:
    import platform

    from superopt.rewrite import Matcher, create_cost
    from superopt.rewrite.cost import processor_name
    from superopt.xtat.realrunner import OrtTimer, TorchTimer
    from superopt.xtat.screen import OpCostPredictor
    from superopt.xtat.targets import TORCH

    rules = rule_set(spec.get("rules") or list(target.rules), bool(spec.get("allow_unproved")))
    spec["rules_digest"] = digest("\n".join(sorted(format_rule(r) for r in rules.rules)))
    matcher = Matcher(rules.rules)
    threads = int(spec.get("threads") or 1)
    op_cost = spec.get("op_cost") or ("torch" if target.measures == TORCH else "onnxruntime")
    if op_cost not in OP_COSTS:
        raise ValueError(f"unknown op cost {op_cost!r}: expected one of {', '.join(OP_COSTS)}")
    device_name = ""
    if timer is None and target.measures == TORCH:
        import torch

        timer = TorchTimer(target.device, threads, int(spec.get("seed") or 0))
        # The runtime's version, under the key onnxruntime's has (the records' workload).
        version = f"torch {torch.__version__}"
        if target.device == "cuda":
            device_name = f", {torch.cuda.get_device_name()}"
    elif timer is None:
        timer = OrtTimer(providers, threads, int(spec.get("seed") or 0))
        import onnxruntime

        version = onnxruntime.__version__
    else:
        version = f"injected {type(timer).__name__}"
    # A model given as an .onnx file is timed as that file, not as superopt's export of
    # it: the input every candidate and the final comparison are measured against is
    # what the user runs (`OrtTimer.use_file`).
    model = str(spec["model"])
    if (isinstance(timer, OrtTimer) and model.lower().endswith(".onnx")
            and Path(model).is_file() and timer.use_file(graph, model)):
        spec["input_file"] = _file_digest(Path(model))
    spec |= {"threads": threads, "op_cost": op_cost, "onnxruntime": version,
             "machine": f"{target.device}: {processor_name()} ({platform.machine()}, "
                        f"{os.cpu_count()} cores{device_name})"}
    # Fewer, shorter samples than `optimize --cost torch`: the screen ranks; the paired
    # runs in onnxruntime judge.
    if op_cost == "torch":
        cost = create_cost("torch", device=target.device, threads=threads, samples=3,
                           min_sample_s=5e-3, database=spec.get("cost_db"))
    elif op_cost == "onnxruntime":
        cost = create_cost("onnxruntime", providers=providers, threads=threads, samples=3,
                           min_sample_s=5e-3, database=spec.get("cost_db"))
    else:
        cost = create_cost("flops")
    plan_budget = int(spec.get("plan_budget", PLAN_BUDGET))
    passes: list[TunablePass] = [
        RewritePlan(matcher, lambda: cost, plan_budget,
                    cost_key=f"{op_cost}:{spec['machine']}:{threads}",
                    search=spec.get("plan_search") or PLAN_SEARCH),
        RewriteSites(matcher)]
    if target.offers(BatchChunks):
        passes.append(BatchChunks())
    pipeline = Pipeline(passes)

    def graph_of(candidate: Candidate) -> Graph:
        return rewritten_graph(pipeline, candidate)

    runner = RealRunner(graph_of, timer, int(spec.get("rounds") or ROUNDS),
                        int(spec.get("warmup", WARMUP)),
                        int(spec.get("final_rounds") or FINAL_ROUNDS),
                        stop_early=bool(spec.get("stop_early", True)))
    return Session(spec, graph, None, pipeline, runner, pipeline.initial(graph), rules,
                   target, OpCostPredictor(cost, graph_of))


__all__ = ["OP_COSTS", "PLAN_BUDGET", "PLAN_SEARCH", "REAL_WORKLOAD", "REWRITE_PASSES", "Session", "applied_rewrites", "load_graph",
           "make_pipeline", "open_session", "rewritten_graph", "use_plan_cache"]
