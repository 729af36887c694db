"""The model-level PET pipeline behind `superopt mutants` and `benchmarks/mutants.py`.

For every distinct multi-linear subprogram of a model: generate candidates (the
transformation families, then the depth-first search), discard those that agree almost
nowhere (a 16-position probe), run the box test on the rest, keep the mutants that are
equal on at least `min_equal` of the output positions, correct them (exactly equivalent,
checked) and export each as a PET rule. Each kept mutant is costed (FLOPs and bytes
with weight-only work folded, as a compiler would), timed on the TPU simulator when it
is available, and the best ones per subprogram on the torch backend when asked.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from superopt.corrector.correct import (
    CorrectedMutant,
    CorrectionError,
    Cost,
    correct,
    cost,
    fold_weights,
)
from superopt.corrector.export import to_rule
from superopt.ir.errors import IRError
from superopt.ir.graph import Graph
from superopt.mutants.boxes import BoxError, is_kernel
from superopt.mutants.boxtest import box_test, screen
from superopt.mutants.families import Mutant, family_mutants
from superopt.mutants.generator import SearchStats, dfs_mutants
from superopt.mutants.subprograms import Subprogram, extract
from superopt.substitutions.rule import Rule

Timer = Callable[[Graph], float]


@dataclass(frozen=True)
class Settings:
    depth: int = 4
    max_ops: int = 4
    draws: int = 2
    min_equal: float = 0.5  # keep mutants equal on at least this fraction of positions
    dfs: bool = True
    dfs_states: int = 3000
    dfs_seconds: float = 3.0
    max_box_tests: int = 60  # box tests per subprogram (candidates in generation order)
    keep: int = 12  # mutants kept per subprogram (the best by simulated time or FLOPs)
    measure_top: int = 1  # mutants per subprogram timed on torch (0: none)
    torch_repeats: int = 3
    torch_max_gflop: float = 20.0  # skip torch timing of bigger subprograms


@dataclass(frozen=True)
class MutantResult:
    family: str
    detail: str
    corrected: CorrectedMutant
    cost_original: Cost
    cost_mutant: Cost
    cost_corrected: Cost
    rule: Rule
    sim_original: float | None = None
    sim_corrected: float | None = None
    torch_original: float | None = None
    torch_corrected: float | None = None

    @property
    def fully_equivalent(self) -> bool:
        return self.corrected.report.fully_equivalent

    @property
    def equal_fraction(self) -> float:
        return self.corrected.report.equal_fraction

    @property
    def extra_flops(self) -> int:
        return self.cost_corrected.flops - self.cost_mutant.flops

    @property
    def extra_bytes(self) -> int:
        return self.cost_corrected.bytes - self.cost_mutant.bytes

    @property
    def sim_gain(self) -> float | None:
        if self.sim_original is None or not self.sim_corrected:
            return None
        return self.sim_original / self.sim_corrected

    @property
    def torch_gain(self) -> float | None:
        if self.torch_original is None or not self.torch_corrected:
            return None
        return self.torch_original / self.torch_corrected

    def summary(self) -> dict[str, Any]:
        rep = self.corrected.report
        return {
            "family": self.family, "detail": self.detail, "rule": self.rule.name,
            "fully_equivalent": self.fully_equivalent,
            "equal_fraction": round(self.equal_fraction, 6),
            "boxes": rep.boxes, "wrong_boxes": rep.wrong_boxes,
            "box_test_evaluations": rep.evaluations, "output_positions": rep.positions,
            "corrections": len(self.corrected.corrections),
            "wrong_regions": [{"output": c.output, "region": [list(sp) for sp in c.region]}
                              for c in self.corrected.corrections],
            "fused_kernels": self.corrected.fused_kernels,
            "flops": {"original": self.cost_original.flops, "mutant": self.cost_mutant.flops,
                      "corrected": self.cost_corrected.flops},
            "bytes": {"original": self.cost_original.bytes, "mutant": self.cost_mutant.bytes,
                      "corrected": self.cost_corrected.bytes},
            "sim_s": {"original": self.sim_original, "corrected": self.sim_corrected},
            "torch_s": {"original": self.torch_original, "corrected": self.torch_corrected},
        }


@dataclass(frozen=True)
class SubprogramResult:
    sub: Subprogram
    candidates: int  # distinct candidates generated (families + search)
    from_families: int
    screened_out: int
    box_tested: int
    results: tuple[MutantResult, ...]  # kept mutants, best (simulated or FLOPs) first
    dfs: SearchStats
    seconds: float
    box_seconds: float
    errors: tuple[str, ...] = ()

    @property
    def full(self) -> int:
        return sum(r.fully_equivalent for r in self.results)

    @property
    def partial(self) -> int:
        return len(self.results) - self.full

    @property
    def best(self) -> MutantResult | None:
        return self.results[0] if self.results else None

    def describe(self) -> str:
        ops = [n.op for n in self.sub.graph.nodes if not n.is_named_source]
        first = next((n for n in self.sub.graph.nodes if is_kernel(n.op)), None)
        shape = ""
        if first is not None:
            shape = "x".join(str(d) for d in self.sub.graph.type_of(first.outputs[0]).shape)
        return f"{'+'.join(ops)} {shape}".strip()

    def summary(self) -> dict[str, Any]:
        return {
            "subprogram": self.sub.graph.name, "ops": self.describe(), "kind": self.sub.kind,
            "sites": len(self.sub.sites), "candidates": self.candidates,
            "from_families": self.from_families, "screened_out": self.screened_out,
            "box_tested": self.box_tested, "kept": len(self.results),
            "fully_equivalent": self.full, "partially_equivalent": self.partial,
            "dfs_states": self.dfs.states, "dfs_truncated": self.dfs.truncated,
            "seconds": round(self.seconds, 3), "box_test_seconds": round(self.box_seconds, 3),
            "mutants": [r.summary() for r in self.results], "errors": list(self.errors),
        }


@dataclass(frozen=True)
class ModelReport:
    model: str
    batch: int | None
    settings: Settings
    subprograms: tuple[SubprogramResult, ...]
    seconds: float
    simulator: bool
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def rules(self) -> list[Rule]:
        return [r.rule for s in self.subprograms for r in s.results]

    def summary(self) -> dict[str, Any]:
        return {
            "model": self.model, "batch": self.batch, "seconds": round(self.seconds, 3),
            "simulator": self.simulator, "settings": self.settings.__dict__,
            "subprograms": len(self.subprograms),
            "mutants": sum(len(s.results) for s in self.subprograms),
            "fully_equivalent": sum(s.full for s in self.subprograms),
            "partially_equivalent": sum(s.partial for s in self.subprograms),
            "details": [s.summary() for s in self.subprograms], **self.meta,
        }


def simulator() -> Timer | None:
    """Simulated time of a graph on the TPU simulator, if that package is available."""
    try:
        from superopt.tpu_sim import Simulator
    except ImportError:
        return None
    sim = Simulator()  # one set of kernel caches for every graph this timer sees

    def run(g: Graph) -> float:
        try:
            return float(sim.simulate(sim.compile(g)).time)
        except IRError:
            return math.inf

    return run


def torch_timer(repeats: int = 3) -> Timer:
    from superopt.backends import torch as tb

    return lambda g: float(tb.benchmark(g, warmup=1, repeats=repeats).median)


def candidates(g: Graph, settings: Settings) -> tuple[list[Mutant], int, SearchStats]:
    fams = family_mutants(g)
    stats = SearchStats()
    found = list(fams)
    if settings.dfs:
        more, stats = dfs_mutants(g, settings.depth, settings.dfs_states, settings.dfs_seconds)
        seen = {m.graph.structural_hash for m in fams}
        found += [m for m in more if m.graph.structural_hash not in seen]
    return found, len(fams), stats


def search_subprogram(sub: Subprogram, settings: Settings = Settings(), sim: Timer | None = None,
                      timer: Timer | None = None, prefix: str = "pet") -> SubprogramResult:
    t0 = time.perf_counter()
    g = sub.graph
    errors: list[str] = []
    try:
        found, n_fam, stats = candidates(g, settings)
    except Exception as e:  # a bug in one generator must not stop a model-wide search
        errors.append(f"generation: {type(e).__name__}: {e}")
        found, n_fam, stats = [], 0, SearchStats()
    results: list[MutantResult] = []
    screened = tested = 0
    box_seconds = 0.0
    cost_original = cost(g)
    sim_original = sim(g) if sim is not None else None
    for i, m in enumerate(found):
        try:
            if tested >= settings.max_box_tests:
                break
            if screen(g, m.graph) * 4 < settings.min_equal:
                screened += 1
                continue
            tested += 1
            tb = time.perf_counter()
            report = box_test(g, m.graph, settings.draws)
            box_seconds += time.perf_counter() - tb
            if report.equal_fraction < settings.min_equal:
                continue
            cm = correct(g, m.graph, report, draws=settings.draws)
        except BoxError as e:
            errors.append(f"{m.family}: {e}")
            continue
        except (CorrectionError, IRError, ValueError) as e:  # never expected: reported
            errors.append(f"{m.family}: {type(e).__name__}: {e}")
            continue
        folded = fold_weights(cm.corrected)
        name = f"{prefix}_{g.name.replace('.', '_')}_{m.family}_{i}"
        rule = to_rule(cm, name, {"model_subprogram": g.name, "family": m.family,
                                  "sites": len(sub.sites)})
        results.append(MutantResult(
            m.family, m.detail, cm, cost_original, cost(fold_weights(m.graph)), cost(folded),
            rule, sim_original, sim(folded) if sim is not None else None))
    if sim is not None:
        results.sort(key=lambda r: (r.sim_corrected if r.sim_corrected is not None else math.inf,
                                    r.cost_corrected.flops, r.cost_corrected.bytes))
    else:
        results.sort(key=lambda r: (r.cost_corrected.flops, r.cost_corrected.bytes))
    results = results[:settings.keep]
    if timer is not None and settings.measure_top > 0 and results \
            and cost_original.flops <= settings.torch_max_gflop * 1e9:
        t_orig = timer(g)
        for j in range(min(settings.measure_top, len(results))):
            r = results[j]
            results[j] = replace(r, torch_original=t_orig,
                                 torch_corrected=timer(fold_weights(r.corrected.corrected)))
    return SubprogramResult(sub, len(found), n_fam, screened, tested, tuple(results), stats,
                            time.perf_counter() - t0, box_seconds, tuple(errors))


def search_model(graph: Graph, settings: Settings = Settings(), batch: int | None = None,
                 use_sim: bool = True, use_torch: bool = False,
                 progress: Callable[[int, int, str], None] | None = None,
                 limit: int | None = None) -> ModelReport:
    """Run PET on every distinct subprogram of `graph` (the first `limit` if given)."""
    t0 = time.perf_counter()
    subs = extract(graph, settings.max_ops)
    if limit is not None:
        subs = subs[:limit]
    sim = simulator() if use_sim else None
    timer = torch_timer(settings.torch_repeats) if use_torch else None
    out = []
    for i, sub in enumerate(subs):
        if progress is not None:
            progress(i, len(subs), sub.graph.name)
        out.append(search_subprogram(sub, settings, sim, timer,
                                     prefix=f"pet_b{batch}" if batch else "pet"))
    if progress is not None:
        progress(len(subs), len(subs), "done")
    return ModelReport(graph.name, batch, settings, tuple(out), time.perf_counter() - t0,
                       sim is not None)
