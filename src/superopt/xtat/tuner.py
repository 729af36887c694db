"""The tuning loop: schedules of phases, measurement with records, the final pick.

A *schedule* is a list of phases, each a set of passes searched by one strategy with a
share of the budget:

- *kernel phases* (K below): tiles, then flags, every kernel at once (`parallel`: one
  measurement per option round, each kernel's time read from the run's profile; the
  `TILE_TOP_K` first tiles of `TileSites`' order: those that fit double-buffered first,
  the analytical model's order (ties broken by fewer grid steps as the default compiler
  breaks them: csrnet b1 1.432 -> 1.500 against ladder order, where 8-64-row tiles
  filled the top) interleaved with its 5% price bands by fewer steps (XTAT-only on
  csrnet b16 1.072 -> 1.100 and vgg19 b16 1.069 -> 1.092, 3 seeds); the `FLAGS_TOP_K`
  double-buffered flags settings). A kernel configuration measured once is never
  measured again, so a later K phase only tunes the kernels that graph changes made.
  Graph choices are then judged on tuned kernels: on benchmarks/joint.py's rows, K
  before the graph phases as well as after them took XTAT-only from 1.287 to 1.426 on
  csrnet b1 and 1.113 to 1.142 on vgg19 b1;
- `joint` (the default): the rewrite plan alone (TASO's search result: one measurement
  against the default compiler, kept if faster); K; layout + fusion by the graph
  strategy (`sweep` unless named: single-site moves; 35% of the budget, ended early
  after 40% of it without a new best); K; the greedy pass over
  the rewrite points
  of the graph it leaves (each point's options measured in turn on top of those layouts
  and kernels, the best kept: 15%, same patience); K. PET's corrected mutants and layout
  choices often fix the same inefficiency (a conv with few channels: vgg19 and csrnet at
  batch 16); judged after the layouts and tiles, a point whose gain they already took is
  not adopted (vgg19 b16: 1.069 against 1.048 for `rewrite_first`, 3 seeds, budget 300).
  The plan comes first because a graph change measured after K has its new kernels at
  the default tile against tuned ones: on inception_v3 b1 the plan measured after K was
  left (1.363x) and measured first it was kept (1.545x). Measured first, it is judged
  against the untuned default graph, so last comes the *revisit* (`revisit`: the best
  candidate with the plan switched to each other option: off, or the plan without some
  of its rules (`passes.plan`), and with each adopted rewrite point reverted, its
  kernels tuned as K tunes them, then compared): resnet18 b16 keeps the plan judged
  untuned (1.220x) and leaves it judged tuned (1.249x, XTAT-only's); csrnet b1 keeps
  it without PET's pad-conv-slice mutants (1.477x against 1.402x for the whole plan).
  The revisit tries the flips in the order of the analytical estimate and sets the
  layouts a flip brings back by it (`strategies.revisit`): csrnet b1 1.477 -> 1.488,
  median of 3 seeds, where the plan off needs its first conv's output W-minor. It
  reverts carried layouts that leave a flip's kernel no tile that fits (vgg19 b16's
  plan off was never measured finite), and a flip tuned to within 3% of the best gets
  `REGRAPH_BUDGET` measurements of its layout and fusion moves, the estimate's best
  first (vgg19 b16 1.087 -> 1.091, csrnet b16 1.098 -> 1.100, 3 seeds);
- `rewrite_first`: K; the greedy pass over the plan and the rewrite points first (15%),
  then rewrite + layout + fusion together by the graph strategy (35%, same patience); K;
  revisit;
- `plan_last`: `joint` without its first phase: XTAT-only's K, layout + fusion, K, then
  the rewrite points, K, and the plan judged only in the revisit (flipped on, its kernels
  tuned). The layouts are tuned on the original graph, so where the plan rewrites the
  kernels whose layouts pay (csrnet b1: PET's mutants of its 512-channel convs) the
  plan is not taken first and left: 1.489 against 1.402 for `joint` (1 seed), while
  inception_v3 b1 still takes the plan (1.544 against 1.542);
- `sequential`: each pass alone, in pipeline order (the plan measured once, the other
  graph passes by the chosen strategy), then K, then revisit;
- `custom`: the given passes together, by the given strategy, with the whole budget.

Without the rewrite passes `joint` and `rewrite_first` are the same: XTAT-only's K,
layout + fusion, K. On a real target every schedule starts with the batch's chunk count
(`CHUNK_PHASE`, the chunk pass: real targets only). Budgets count measurements (distinct candidates); the default
candidate is measurement 0, so the tuned result is never worse than the default
compiler's. A candidate the runner did not time (on a real target, one the runtime runs
as the incumbent's program: `RealRunner.untimed`) is recorded but does not count, up to
`FREE_PER_BUDGET` times the budget of them: on resnext50 b1, 8-11 of a budget of 16
went to batch-norm folds onnxruntime makes itself. A phase that finishes early leaves
its budget to the next. Candidates proposed again are not measured again. Budget left at
the end of the schedule goes to the schedule again, from the best candidate so far (with
a cost model ranking the proposals, `wrap`, the kernel phases then offer the model's
next-ranked options), until a whole pass measures nothing new (the run then reports
"no new candidates" rather than "budget").

Every measurement goes to the records database as it arrives. A resumed run replays the
search from the same seed and reads the recorded measurements in order instead of
measuring (a recorded candidate that differs from the replayed one is an error: the
database belongs to another run). The final pick takes the best few measured candidates
and compares their exact simulated times (as a benchmark would re-measure its finalists
many times), so noise cannot make the result slower than the default.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from superopt.ir.errors import IRError
from superopt.xtat.context import TuneContext
from superopt.xtat.pipeline import Pipeline
from superopt.xtat.realrunner import RealRunner
from superopt.xtat.records import RecordsDB, RecordsError
from superopt.xtat.runner import SimRunner
from superopt.xtat.screen import UNSCREENED
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies import DEFAULT_STRATEGY, create
from superopt.xtat.strategies.base import SearchStrategy

GRAPH_PASSES = ("plan", "rewrite", "layout", "fusion")
KERNEL_PASSES = ("tiling", "flags")
PASS_NAMES = GRAPH_PASSES + KERNEL_PASSES  # the simulator's passes
CHUNK_PASS = "chunk"  # the batch in chunks: real targets only (`superopt.xtat.targets`)
ALL_PASSES = (*GRAPH_PASSES[:2], CHUNK_PASS, *GRAPH_PASSES[2:], *KERNEL_PASSES)
SCHEDULES = ("joint", "plan_last", "rewrite_first", "sequential", "custom")
FINALISTS = 5
# Candidates a run may record untimed without counting them against its budget, per unit
# of budget (each still costs a graph build and, on a real target, a session).
FREE_PER_BUDGET = 3


TILE_TOP_K = 12  # tiles tried per kernel, in the analytical model's order (TileSites)
# Flag settings tried per kernel, in the kernel phases and the revisit: the double-buffered
# ones, listed first (`tpu_sim.all_flags`). Single buffering serialises each step's DMA and
# compute, so it only pays where a tile fits VMEM no other way, and such a kernel keeps its
# default. Half of the 25 rounds a flags phase took; the budget they leave goes to the
# graph phases (joint, 3 seeds, budget 300: bert_base b1 1.149 -> 1.160, b16 1.126 ->
# 1.132, inception_v3 b1 1.544 -> 1.548; ten other rows unchanged).
FLAGS_TOP_K = 12
# Measurements the revisit gives the layout and fusion moves of a flip it tuned to within
# a few percent of the best (`strategies.revisit`).
REGRAPH_BUDGET = 16


@dataclass(frozen=True)
class Phase:
    name: str
    passes: tuple[str, ...]
    strategy: str
    share: float
    options: tuple[tuple[str, Any], ...] = ()  # the strategy's options in this phase
    # End the phase early after this fraction of its budget without a new best (its
    # budget then goes to the later phases); None: run the whole budget.
    patience: float | None = None


GRAPH_SHARE = 0.5
REWRITE_SHARE = 0.15
# The revisit comes last and takes what the earlier phases leave; a share of its own would
# take budget from the layout and fusion phase.
REVISIT_SHARE = 0.0
PATIENCE = 0.4
# Every kernel at once from the run's profile: a round per option (at most TILE_TOP_K
# tiles, FLAGS_TOP_K flags settings), so the shares are caps that are seldom reached.
KERNEL_SHARE = 0.1
KERNEL_PHASES = (Phase("tiling", ("tiling",), "parallel", KERNEL_SHARE,
                       (("top_k", TILE_TOP_K),)),
                 Phase("flags", ("flags",), "parallel", KERNEL_SHARE,
                       (("top_k", FLAGS_TOP_K),)))

# The whole plan measured against the default graph (not its variants without one rule:
# the revisit judges those, with their kernels tuned).
PLAN_PHASE = Phase("plan", ("plan",), "exhaustive", 0.0, (("top_k", 2),))
# Without kernel passes (a real target: onnxruntime or torch picks its own kernels) there
# is no revisit, and the per-op cost the plan's search used misses the runtime's fusions:
# the plan phase also measures the plan without each of its most applied groups of rules,
# none screened out by that same per-op cost (resnext50 b1 in onnxruntime: the plan's
# add_pair_biases sums two branches' biases before the residual add, which unfuses the
# conv + add + relu that onnxruntime runs as one kernel; that group alone took 8% and
# left the plan 1.02x where its group merges gave 1.11x).
GRAPH_ONLY_PLAN_TOP_K = 6
# The batch in chunks (`passes.chunk`, real targets only): one site of up to three
# options, each measured on the best candidate so far, none screened out (a per-op cost
# sums the same work either way and cannot see the caches the chunks stay in). First in
# the schedule: it has the fewest options and, by hand, a large effect on batched rows
# (1.05-1.12x on the zoo's batch-16 transformer and mobile rows in onnxruntime), so a row
# cut short by a time limit still has it measured; the plan and the rewrite points are
# then judged on the chunked graph.
CHUNK_PHASE = Phase("chunk", (CHUNK_PASS,), "exhaustive", 0.2, ((UNSCREENED, True),))


def make_schedule(kind: str, passes: Sequence[str] = PASS_NAMES,
                  strategy: str = DEFAULT_STRATEGY) -> list[Phase]:
    """The phases of schedule `kind` restricted to `passes` (see the module docstring)."""
    unknown = [p for p in passes if p not in ALL_PASSES]
    if unknown:
        raise IRError(f"unknown pass {unknown[0]!r}: expected some of {', '.join(ALL_PASSES)}")
    if not passes:
        raise IRError("no pass to tune: name at least one of " + ", ".join(ALL_PASSES))
    if kind == "custom":
        return [Phase("+".join(p for p in ALL_PASSES if p in passes),
                      tuple(p for p in ALL_PASSES if p in passes), strategy, 1.0)]
    graph = Phase("graph", ("layout", "fusion"), strategy, GRAPH_SHARE - REWRITE_SHARE,
                  patience=PATIENCE)
    # Last, every rewrite choice judged again with the kernels on both sides tuned.
    revisit = Phase("revisit", ("plan", "rewrite"), "revisit", REVISIT_SHARE,
                    (("top_k", TILE_TOP_K), ("flags_top_k", FLAGS_TOP_K),
                     ("kernels", KERNEL_PASSES), ("both_ways", ("plan",)),
                     ("repair", ("layout",)), ("regraph", ("layout", "fusion")),
                     ("regraph_budget", REGRAPH_BUDGET)))
    plan = PLAN_PHASE
    if not any(p in passes for p in KERNEL_PASSES):
        # As large a share as the rewrite phase's: the phase ends when its options are
        # measured, and what it leaves goes to the phases after it.
        plan = replace(PLAN_PHASE, share=REWRITE_SHARE,
                       options=(("top_k", GRAPH_ONLY_PLAN_TOP_K), (UNSCREENED, True)))
    if kind in ("joint", "plan_last"):
        # joint: the plan before any kernel is tuned: measured after them, its new kernels
        # (at the default tile) would be compared with tuned ones. plan_last: only the
        # revisit (kernels tuned on both sides) judges it.
        first = [CHUNK_PHASE, plan] if kind == "joint" else [CHUNK_PHASE]
        phases = [*first, *KERNEL_PHASES, graph, *KERNEL_PHASES,
                  Phase("rewrite", ("rewrite",), "exhaustive", REWRITE_SHARE,
                        patience=PATIENCE), *KERNEL_PHASES, revisit]
    elif kind == "rewrite_first":
        # The plan is one all-or-nothing site: measured once in the greedy phase, then
        # left out of the graph search (a move that swaps the whole rewritten graph).
        phases = [CHUNK_PHASE, *KERNEL_PHASES,
                  Phase("rewrite", ("plan", "rewrite"), "exhaustive", REWRITE_SHARE,
                        patience=PATIENCE),
                  Phase("graph", GRAPH_PASSES[1:], strategy, GRAPH_SHARE - REWRITE_SHARE,
                        patience=PATIENCE), *KERNEL_PHASES, revisit]
    elif kind == "sequential":
        phases = [CHUNK_PHASE, plan] + [
            Phase(p, (p,), strategy, GRAPH_SHARE / (len(GRAPH_PASSES) - 1), patience=PATIENCE)
            for p in GRAPH_PASSES[1:]] + [*KERNEL_PHASES, revisit]
    else:
        raise IRError(f"unknown schedule {kind!r}: expected one of {', '.join(SCHEDULES)}")
    out: list[Phase] = []
    for ph in phases:
        kept = tuple(p for p in ph.passes if p in passes)
        options = ph.options
        if ph.strategy == "revisit":
            # Flips are judged on tuned kernels: without a kernel pass to tune, the
            # earlier phases have already measured them as they would be.
            kernels = tuple(p for p in KERNEL_PASSES if p in passes)
            if not kernels:
                continue
            graph = {k: tuple(p for p in dict(options)[k] if p in passes)
                     for k in ("repair", "regraph")}
            options = tuple((k, kernels if k == "kernels" else graph.get(k, v))
                            for k, v in options)
        if kept:
            out.append(Phase("+".join(kept), kept, ph.strategy, ph.share, options,
                             ph.patience))
    # A kernel phase repeated with no graph phase between (one left out) has nothing new
    # to measure.
    kept_phases: list[Phase] = []
    since: set[Phase] = set()
    for ph in out:
        if ph.strategy != "parallel":
            since.clear()
        elif ph in since:
            continue
        since.add(ph)
        kept_phases.append(ph)
    return kept_phases


@dataclass(frozen=True)
class Point:
    step: int
    measured: float
    best: float  # best measured so far
    phase: str


@dataclass
class TuneResult:
    default: Candidate
    default_time: float  # exact simulated time
    best: Candidate
    best_time: float  # exact simulated time of the pick
    evaluations: int  # measurements in the records (recorded before a resume included)
    measured: int  # measured in this process
    replayed: int  # read back from the records instead of measured
    wall_s: float
    history: list[Point] = field(default_factory=list)
    phases: list[tuple[str, int]] = field(default_factory=list)  # (phase, measurements)
    stopped: str = "budget"

    @property
    def speedup(self) -> float:
        return self.default_time / self.best_time if self.best_time > 0 else math.inf


Progress = Callable[["Tuner", str], None]
# Measures candidates with the given noise seeds (e.g. on an executor's workers).
Measure = Callable[[list[Candidate], list[int]], list[float]]
# Wraps each phase's strategy (e.g. a cost model's top-k ranking, superopt.xtat.models.topk).
Wrap = Callable[[SearchStrategy, Phase], SearchStrategy]


class Tuner:
    def __init__(self, pipeline: Pipeline, runner: SimRunner | RealRunner, default: Candidate,
                 seed: int = 0, db: RecordsDB | None = None, batch: int = 8,
                 progress: Progress | None = None, strategy_opts: dict | None = None,
                 measure: Measure | None = None, wrap: Wrap | None = None) -> None:
        self.pipeline = pipeline
        self.runner = runner
        self.seed = seed
        self.db = db
        self.batch = max(1, batch)
        self.progress = progress
        self.strategy_opts = strategy_opts or {}
        self.measure = measure
        self.wrap = wrap
        self.ctx = TuneContext(pipeline, default, np.random.default_rng(seed))
        # The runner's profile of each measurement feeds per-kernel strategies; it is
        # recomputed from the seed for a replayed measurement (the same numbers: the
        # simulator's noise is a function of the seed and the kernel's configuration).
        self.ctx.profiled = callable(getattr(runner, "profile", None))
        self.ctx.rejected = getattr(runner, "rejected", None)
        self.ctx.estimate = getattr(runner, "estimate", None)
        self.recorded = {m.step: m for m in db.measurements()} if db is not None else {}
        # A real target's runner measures each candidate against the incumbent (this
        # context's best) and keeps its noise model in the records (`xtat.realrunner`).
        bind = getattr(runner, "bind", None)
        if callable(bind):
            bind(self.ctx, db)
        self.times: dict[str, float] = {}
        # Steps the runner did not time, free of the budget (kept in the records' meta so a
        # resumed run replays the same limits).
        self.free: set[int] = set(db.get_meta("untimed") or ()) if db is not None else set()
        self.free_cap = 0  # set by `run` from its budget
        self.step = 0
        self.measured = 0
        self.replayed = 0
        self.history: list[Point] = []
        # A heap of (-time, promise, -step, candidate): the worst finalist on top.
        self.finalists: list[tuple[float, float, int, Candidate]] = []
        self.phase = ""
        self.strategy = ""

    # -- measuring ------------------------------------------------------------------------

    @property
    def spent(self) -> int:
        """Measurements that count against the budget: every step but the free ones."""
        return self._spent_before(self.step)

    def _spent_before(self, step: int) -> int:
        # A resumed run knows the free steps ahead of it too (from the records).
        return step - sum(1 for s in self.free if s < step)

    def _free(self, cand: Candidate, step: int) -> None:
        """Step `step` (just measured) is free when the runner did not time it."""
        untimed = getattr(self.runner, "untimed", None)
        if untimed is None or len(self.free) >= self.free_cap or not untimed(cand):
            return
        self.free.add(step)
        if self.db is not None:
            self.db.put_meta("untimed", sorted(self.free))

    def _record(self, cand: Candidate, t: float) -> None:
        self.step += 1
        self.times[cand.key] = t
        if self.ctx.profiled and math.isfinite(t):
            prof = self.runner.profile(cand, self.seed)
            if prof is not None:
                f = cand.final
                for key, kt in prof.items():
                    self.ctx.kernel_times[(key, f.tiles[key], f.flags[key])] = kt
        self.ctx.observe(cand, t)
        self.history.append(Point(self.step - 1, t, self.ctx.best_time, self.phase))
        # Equal times (a real runner reports every candidate that is not faster at the
        # incumbent's) are ranked by the runner's `promise` where it has one, then by
        # which came first.
        promise = getattr(self.runner, "promise", None)
        entry = (-t, promise(cand) if callable(promise) else 0.0, -(self.step - 1), cand)
        if len(self.finalists) < FINALISTS:
            heapq.heappush(self.finalists, entry)
        elif entry[:3] > self.finalists[0][:3]:
            heapq.heapreplace(self.finalists, entry)

    def evaluate(self, cands: Sequence[Candidate], limit: int) -> tuple[list[Candidate],
                                                                        list[float]]:
        """Measure `cands` in order until `limit` measurements count against the budget
        (repeats and untimed candidates are free); the new ones as one batch (through the
        executor when there is one)."""
        done: list[Candidate] = []
        fresh: list[tuple[Candidate, int]] = []  # (candidate, step) to measure
        planned: dict[str, None] = {}
        step = self.step
        # Which of this batch's candidates are free is known once they are measured: a
        # batch plans each as counted (so a resumed run, which knows, plans the same).
        spent = self.spent
        for c in cands:
            if c.key not in self.times and c.key not in planned:
                if spent + len(planned) >= limit:
                    break
                planned[c.key] = None
                rec = self.recorded.get(step)
                if rec is not None and rec.candidate != c.key:
                    raise RecordsError(f"{self.db.path}: step {step} recorded candidate "
                                       f"{rec.candidate}, the replayed search proposes "
                                       f"{c.key}: the database belongs to another run")
                if rec is None:
                    fresh.append((c, step))
                step += 1
            done.append(c)
        seeds = [self.seed for _ in fresh]
        start = time.perf_counter()
        if self.measure is not None and len(fresh) > 1:
            got = self.measure([c for c, _ in fresh], seeds)
        else:
            got = [self.runner.measure(c, sd) for (c, _), sd in zip(fresh, seeds, strict=True)]
        wall = (time.perf_counter() - start) / max(1, len(fresh))
        measured = {c.key: (t, sd) for (c, _), t, sd in zip(fresh, got, seeds, strict=True)}
        times = []
        for c in done:
            t = self.times.get(c.key)
            if t is None:
                rec = self.recorded.get(self.step)
                if rec is not None:
                    t = rec.runtime
                    self.replayed += 1
                else:
                    t, sd = measured[c.key]
                    if self.db is not None:
                        self.db.add(self.step, c.key, c.json, t, sd, self.strategy,
                                    self.phase, wall)
                    self.measured += 1
                    self._free(c, self.step)
                self._record(c, t)
            times.append(t)
        return done, times

    # -- the loop -----------------------------------------------------------------------

    def run(self, phases: Sequence[Phase], budget: int) -> TuneResult:
        if budget < 1:
            raise IRError(f"--budget must be >= 1, found {budget}")
        start = time.perf_counter()
        stopped = "budget"
        self.free_cap = FREE_PER_BUDGET * budget
        per_phase: list[tuple[str, int]] = []
        first = cycle = 0
        self.phase, self.strategy = "default", "default"
        self.evaluate([self.ctx.default], budget)
        try:
            while True:
                cycle_start = self.step
                for k, ph in enumerate(phases):
                    remaining = budget - self.spent
                    if remaining <= 0:
                        break
                    shares = sum(p.share for p in phases[k:])
                    limit = self.spent + (remaining if k == len(phases) - 1
                                          else max(1, round(remaining * ph.share / shares)))
                    self.phase, self.strategy = ph.name, ph.strategy
                    first = self.step
                    strat = create(ph.strategy, **(self.strategy_opts | dict(ph.options)))
                    if self.wrap is not None:
                        strat = self.wrap(strat, ph)
                    strat.start(self.ctx, ph.passes, limit - self.spent)
                    idle = 0
                    # Patience only when a later phase can use the budget left.
                    wait = None if ph.patience is None or k == len(phases) - 1 else max(
                        8, round(ph.patience * (limit - self.spent)))
                    best_at, best = self.spent, self.ctx.best_time
                    while self.spent < limit:
                        cands = strat.ask(self.batch)
                        if not cands:
                            break
                        before = self.step
                        done, times = self.evaluate(cands, limit)
                        strat.tell(done, times)
                        if self.progress is not None:
                            self.progress(self, ph.name)
                        idle = idle + 1 if self.step == before else 0
                        if idle > 200:  # only repeats for a long while: the space is exhausted
                            break
                        if self.ctx.best_time < best:
                            best_at, best = self.spent, self.ctx.best_time
                        elif wait is not None and self.spent - best_at >= wait:
                            break
                    if not cycle or self.step > first:  # a repeat that measured something
                        per_phase.append((ph.name, self.step - first))
                cycle += 1
                # Budget left after the schedule goes to it again, from the best so far
                # (with a cost model the kernel phases then offer the model's next-ranked
                # options); until a whole pass measures nothing new.
                if self.spent >= budget or self.step == cycle_start:
                    break
            if self.spent < budget:  # a whole pass measured nothing new: the space is done
                stopped = "no new candidates"
        except KeyboardInterrupt:
            stopped = "interrupted"
            if self.phase != "default" and (not per_phase or per_phase[-1][0] != self.phase):
                per_phase.append((self.phase, self.step - first))
        best, best_time = self.pick()
        return TuneResult(self.ctx.default, self.runner.time(self.ctx.default), best,
                          best_time, self.step, self.measured, self.replayed,
                          time.perf_counter() - start, self.history, per_phase, stopped)

    def pick(self) -> tuple[Candidate, float]:
        """The finalist with the least exact time (the default is always a finalist). A
        runner without exact times (a real target) picks by its own final comparison
        with the default, given the finalists fastest measured first."""
        choose = getattr(self.runner, "pick", None)
        if callable(choose):
            ranked = [e[3] for e in sorted(self.finalists, key=lambda e: (-e[0], -e[1], -e[2]))]
            return choose(self.ctx.default, ranked)
        pool = [e[3] for e in self.finalists] + [self.ctx.default]
        scored = sorted(((self.runner.time(c), i, c) for i, c in enumerate(pool)),
                        key=lambda e: (e[0], e[1]))
        return scored[0][2], scored[0][0]


__all__ = ["ALL_PASSES", "CHUNK_PASS", "GRAPH_PASSES", "KERNEL_PASSES", "PASS_NAMES", "SCHEDULES", "Phase", "TuneResult",
           "Tuner", "make_schedule"]
