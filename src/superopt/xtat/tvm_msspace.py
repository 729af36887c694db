"""MetaSchedule's own design space of a kernel, searched by our strategies.

The knob space of `tvm_kernels.KnobSpace` is ours and weaker than MetaSchedule's: a
comparison over it measures the spaces, not the search. Here the space is MetaSchedule's:
for the workload `tune_metaschedule` tunes and the host target, its default space
generator (`PostOrderApply` with the target's default schedule rules, built through a
`TuneContext` as `tune_tir` builds it) gives a few design spaces (sketches). Each is a
schedule whose trace holds sampling instructions with MetaSchedule's sampled decisions.

- `MsSpace`: one site choosing the sketch, one site per sampling instruction of every
  sketch (keyed by sketch index, position in the trace and instruction kind). Options: a
  `SamplePerfectTile` takes every perfect factorization of its loop's extent into its n
  factors whose innermost respects `max_innermost_factor` (all kept: the largest site of
  the four kernels has about a thousand); a `SampleCategorical` its candidates' indices;
  a `SampleComputeLocation` inline (-2), root (-1) and every loop of its block's first
  consumer (which of them are legal depends on the tiles: TVM replaces an illegal one by
  the nearest legal one before it, so such a choice is the same schedule as another
  and `canonical` says so); any other sampling instruction only its sampled decision.
  Every site's default is MetaSchedule's sampled decision.
- A configuration's schedule: the chosen sketch's trace replayed with the chosen
  decisions on a fresh `Schedule` of the workload, then MetaSchedule's postprocessors for
  the target; `tvm_kernels.TvmMeasure` builds and times it like a knob configuration.
  A configuration that fails to replay or postprocess is an infinite-time trial.
- `MsPass`: the pass that carries these sites, so `tvm_kernels.search` drives any
  strategy over the space unchanged.
- `MsScreen`: MetaSchedule's own cost model (`XGBModel`: XGBoost over its per-store
  features of the scheduled program, trained on the measured time ratios as its search
  trains it) fitted on this run's measurements, as a `TuneContext.screen` for a strategy
  that picks its proposals by it (`guided`).

Not covered: MetaSchedule's `MutateParallel` changes the parallel extent annotated on the
outer loops, which is not a sampling instruction; here it stays as the sketch has it (on
one core with one TVM thread the parallel extent should matter little).

Counting trials: MetaSchedule's database commits a candidate that failed to build or
run as a trial (run time 1e10 s, see `tvm_kernels.read_ms_records`), as ours counts it.
A candidate that fails MetaSchedule's postprocessors is dropped by its search before it
is measured and is not a trial there; here it is (a failed trial), so the count is, if
anything, against our strategies.

TVM is imported inside functions only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from superopt.xtat.space import Choice, Site
from superopt.xtat.stage import Candidate
from superopt.xtat.tvm_kernels import Kernel, KnobPass, SiteSpace, host_target

SKETCH = "sketch"
MS_PASS = "ms"
TILE, CATEGORICAL, LOCATION = "SamplePerfectTile", "SampleCategorical", "SampleComputeLocation"


@dataclass(frozen=True)
class Sampling:
    """One sampling instruction of one sketch: where it is and MetaSchedule's decision."""

    sketch: int
    position: int  # index of the instruction in the sketch's trace
    kind: str
    decision: Choice  # tuple of ints (tiles) or int

    @property
    def key(self) -> str:
        return f"s{self.sketch}.{self.position:03d}.{self.kind}"


def perfect_tiles(extent: int, n: int, max_innermost: int) -> list[tuple[int, ...]]:
    """Every way to write `extent` as a product of `n` factors (ordered, outermost first)
    whose innermost is at most `max_innermost` (no bound when it is not positive)."""

    def split(rest: int, k: int) -> Iterator[tuple[int, ...]]:
        if k == 1:
            yield (rest,)
            return
        for d in range(1, rest + 1):
            if rest % d == 0:
                for tail in split(rest // d, k - 1):
                    yield (d, *tail)

    return [t for t in split(extent, n) if max_innermost <= 0 or t[-1] <= max_innermost]


def _plain(decision: Any) -> Choice:
    """A trace decision (an FFI integer or array of them) as a hashable Python choice."""
    if decision is None:
        return None
    if isinstance(decision, int | np.integer):
        return int(decision)
    try:
        return tuple(int(x) for x in decision)
    except TypeError:
        return int(decision)


class MsSpace(SiteSpace):
    """MetaSchedule's design space of `kernel` on the host target as sites (module
    docstring). `rand_state` seeds MetaSchedule's sampling of the sketches' decisions
    (the defaults); the sites' keys and options do not depend on it."""

    def __init__(self, kernel: Kernel, rand_state: int = 1) -> None:
        from tvm.s_tir import meta_schedule as ms

        self.kernel = kernel
        # As tune_tir makes a task: the default space generator for the target.
        self.context = ms.TuneContext(mod=kernel.te_func(), target=host_target(),
                                      space_generator="post-order-apply", task_name="main",
                                      rand_state=rand_state, num_threads=1)
        self.workload = self.context.mod
        self.sketches = list(self.context.generate_design_space())
        self.postprocs = list(self.context.space_generator.postprocs or [])
        self.traces = [s.trace for s in self.sketches]
        self.samplings: list[list[Sampling]] = []
        sites = [Site(SKETCH, tuple(range(len(self.sketches))), 0,
                      label="MetaSchedule design space (sketch)")]
        for i in range(len(self.sketches)):
            found, own = self._sites_of(i)
            self.samplings.append(found)
            sites.extend(own)
        self.sites = tuple(sites)
        self.by_key = {s.key: s for s in sites}

    def _sites_of(self, sketch: int) -> tuple[list[Sampling], list[Site]]:
        """Replay a sketch as sampled, reading each sampling instruction's loop extent
        or consumer loops on the way: the options come from the workload's loops."""
        from tvm import s_tir

        sch = s_tir.Schedule(self.workload)
        found: list[Sampling] = []
        sites: list[Site] = []
        position = self._positions(sketch)

        def record(inst: Any, inputs: list[Any], attrs: list[Any], decision: Any) -> Any:
            kind = inst.kind.name
            if not kind.startswith("Sample"):
                return decision
            smp = Sampling(sketch, position[inst.__chandle__()], kind, _plain(decision))
            if kind == TILE:
                n, max_inner = int(attrs[0]), int(attrs[1])
                extent = int(sch.get(inputs[0]).extent)
                opts = perfect_tiles(extent, n, max_inner)
                label = f"sketch {sketch}: tile of a loop of {extent} into {n}"
            elif kind == CATEGORICAL:
                opts = list(range(len(attrs[0])))
                label = f"sketch {sketch}: one of {[int(c) for c in attrs[0]]}"
            elif kind == LOCATION:
                consumers = sch.get_consumers(inputs[0])
                loops = len(sch.get_loops(consumers[0])) if consumers else 0
                opts = [-2, -1, *range(loops)]
                label = f"sketch {sketch}: compute location of {sch.get(inputs[0]).name_hint}"
            else:  # a sampling this space does not vary: MetaSchedule's decision only
                opts = []
                label = f"sketch {sketch}: {kind} (fixed)"
            if smp.decision not in opts:
                opts.append(smp.decision)
            found.append(smp)
            sites.append(Site(smp.key, tuple(opts), smp.decision, label=label))
            return decision

        self.traces[sketch].apply_to_schedule(sch, remove_postproc=True,
                                              decision_provider=record)
        return found, sites

    def _positions(self, sketch: int) -> dict[int, int]:
        """A sketch's instructions by handle -> position (the trace holds them alive)."""
        return {inst.__chandle__(): i for i, inst in enumerate(self.traces[sketch].insts)}

    def size(self) -> int:
        """How many configurations make distinct requests (sketch and its own sites)."""
        return sum(math.prod(len(self.by_key[s.key].options) for s in smp)
                   for smp in self.samplings)

    def make_pass(self) -> MsPass:
        return MsPass(self)

    def replay(self, config: dict[str, Choice]) -> Any:
        """The chosen sketch's trace replayed with the configuration's decisions on a
        fresh schedule of the workload (no postprocessing; raises when TVM rejects it)."""
        from tvm import s_tir

        sketch = int(config[SKETCH])
        handles = [inst.__chandle__() for inst in self.traces[sketch].insts]
        by_handle = {handles[smp.position]: config[smp.key] for smp in self.samplings[sketch]}

        def decide(inst: Any, inputs: list[Any], attrs: list[Any], decision: Any) -> Any:
            choice = by_handle.get(inst.__chandle__(), decision)
            return list(choice) if isinstance(choice, tuple) else choice

        sch = s_tir.Schedule(self.workload)
        self.traces[sketch].apply_to_schedule(sch, remove_postproc=True,
                                              decision_provider=decide)
        return sch

    def canonical(self, config: dict[str, Choice]) -> dict[str, Choice]:
        """The chosen sketch and its sites' decisions as the replay took them: the other
        sketches' sites do not matter, and TVM moves an illegal compute location to a
        legal one (the same schedule as choosing that one). A configuration that does
        not replay keeps its own decisions (it is measured, as a failed trial)."""
        sketch = int(config[SKETCH])
        own = {SKETCH: sketch} | {s.key: config[s.key] for s in self.samplings[sketch]}
        try:
            trace = self.replay(config).trace
        except Exception:  # measured (and failed) once under its own name
            return own
        insts = list(trace.insts)
        for smp in self.samplings[sketch]:
            own[smp.key] = _plain(trace.get_decision(insts[smp.position]))
        return own

    def postprocessed(self, config: dict[str, Choice]) -> Any:
        """The configuration's schedule after MetaSchedule's postprocessors (raises when
        the replay fails or a postprocessor rejects the schedule)."""
        sch = self.replay(config)
        for post in self.postprocs:
            if not post.apply(sch):
                raise ValueError(f"postprocessor {type(post).__name__} rejected the schedule")
        return sch

    def schedule(self, config: dict[str, Choice]) -> Any:
        """The configuration's IRModule after MetaSchedule's postprocessors (raises as
        `postprocessed` does)."""
        return self.postprocessed(config).mod


def measure_candidates(space: MsSpace, configs: Sequence[dict[str, Choice]]
                       ) -> tuple[list[Any], list[int]]:
    """MetaSchedule's `MeasureCandidate` of each configuration's postprocessed schedule in
    `space`, with the indices of the configurations kept: one that does not schedule in
    the space (any more) is left out."""
    from tvm.s_tir import meta_schedule as ms

    args = ms.arg_info.ArgInfo.from_prim_func(space.workload["main"])
    cands, kept = [], []
    for i, config in enumerate(configs):
        try:
            sch = space.postprocessed(space.complete(config))
        except Exception:  # not a schedule of this space (any more)
            continue
        cands.append(ms.MeasureCandidate(sch, args))
        kept.append(i)
    return cands, kept


class MsScreen:
    """A `TuneContext.screen` over an `MsSpace`: MetaSchedule's XGBoost cost model on its
    per-store features, fitted on the measurements `update` is given (module docstring).
    Until `warmup` measurements are in, every score is 0 (the model's own warm-up draws
    random scores from numpy's global generator, which would make a run irreproducible).
    A candidate whose schedule fails to replay or postprocess scores -inf: it cannot run.
    The schedules of the last `predict` are kept for `update` (the measured candidates
    are among them); any other is rebuilt.

    `pretrain` fits the model on other kernels' measured schedules before the run (a
    cost model carried across workloads, as TenSet-style pre-training does): it then
    scores from the first proposal, with no warm-up. With `learn` False, `update` keeps
    nothing: the model stays the pre-trained one (the run's own few measurements of a
    kernel are one group against the prior's thousands, and a refit moves every score).
    With `own_after` > 0 a second model is fitted on the run's measurements alone, and
    once it has read `own_after` of them it scores instead of the first: the prior's
    pick of a start, then a model of this kernel alone, as MetaSchedule's own is (a prior
    refitted on a few hundred of the run's schedules is still mostly the other kernels':
    on the two matmuls a screen with such a model gained nothing after the switch). Measured
    (`guided_prior_late_own`, the matmuls, seeds 6-7): it did not help QKV either, which
    gained nothing after trial 64; the FFN gained 2-17% late (docs/benchmarks.md)."""

    def __init__(self, space: MsSpace, warmup: int = 16, seed: int = 0,
                 learn: bool = True, own_after: int = 0) -> None:
        from tvm.s_tir import meta_schedule as ms

        def xgb() -> Any:
            return ms.cost_model.XGBModel(
                config=ms.cost_model.xgb_model.XGBConfig(seed=seed, nthread=1),
                num_warmup_samples=0, verbose_eval=0)

        self.space, self.warmup, self.learn = space, warmup, learn
        self.model = xgb()
        self.own_after = own_after
        self.own = xgb() if own_after > 0 else None  # fitted on this run's measurements only
        self.own_seen = 0
        self.args = ms.arg_info.ArgInfo.from_prim_func(space.workload["main"])
        self.seen = 0
        self.prior = 0  # schedules of other kernels the model was pre-trained on
        self._last: dict[str, Any] = {}  # candidate key -> MeasureCandidate or None

    def pretrain(self, examples: Sequence[tuple[MsSpace, Sequence[dict[str, Choice]],
                                                Sequence[float]]]) -> int:
        """Fit the model on other kernels' measurements first: per kernel its space and
        its schedules' configurations with their measured seconds. Each kernel is its
        own group of MetaSchedule's model (whose target is the group's best time over
        each time), so kernels of different speeds train one model. A configuration that
        does not schedule in its space, or a failed run, is skipped. Returns the number
        of schedules read."""
        from tvm.s_tir import meta_schedule as ms

        read = 0
        for space, configs, seconds in examples:
            finite = [(c, t) for c, t in zip(configs, seconds, strict=True) if math.isfinite(t)]
            cands, kept = measure_candidates(space, [c for c, _ in finite])
            results = [ms.runner.RunnerResult(run_secs=[float(finite[i][1])], error_msg=None)
                       for i in kept]
            if cands:
                self.model.update(space.context, cands, results)
                read += len(cands)
        self.prior += read
        return read

    def _measure_candidate(self, cand: Candidate) -> Any:
        """The candidate's postprocessed schedule as MetaSchedule's `MeasureCandidate`
        (None when it does not schedule)."""
        from tvm.s_tir import meta_schedule as ms

        got = self._last.get(cand.key, False)
        if got is not False:
            return got
        try:
            sch = self.space.postprocessed(self.space.complete(cand.config(MS_PASS)))
        except Exception:  # not a schedule: it cannot run
            return None
        return ms.MeasureCandidate(sch, self.args)

    def predict(self, candidates: Sequence[Candidate]) -> np.ndarray:
        built = [self._measure_candidate(c) for c in candidates]
        self._last = {c.key: m for c, m in zip(candidates, built, strict=True)}
        out = np.full(len(built), -np.inf)
        ok = [i for i, m in enumerate(built) if m is not None]
        model = self.model
        if self.own is not None and self.own_seen >= self.own_after:
            model = self.own
        if ok and model.booster is not None and (
                model is self.own or self.prior or self.seen >= self.warmup):
            out[ok] = model.predict(self.space.context, [built[i] for i in ok])
        else:
            out[ok] = 0.0
        return out

    def update(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        from tvm.s_tir import meta_schedule as ms

        if not self.learn and self.own is None:
            return
        cands, results = [], []
        for c, t in zip(candidates, times, strict=True):
            m = self._measure_candidate(c)
            if m is None:
                continue
            cands.append(m)
            # A run that failed is MetaSchedule's failed result (its model reads 1e10 s).
            results.append(ms.runner.RunnerResult(
                run_secs=[float(t)] if math.isfinite(t) else None,
                error_msg=None if math.isfinite(t) else "failed"))
        if cands and self.learn:
            self.model.update(self.space.context, cands, results)
            self.seen += len(cands)
        if cands and self.own is not None:
            self.own.update(self.space.context, cands, results)
            self.own_seen += len(cands)


class MsPass(KnobPass):
    """The pass that carries an `MsSpace`'s sites (a `KnobPass` under its own name)."""

    name = MS_PASS


__all__ = ["MS_PASS", "SKETCH", "MsPass", "MsScreen", "MsSpace", "Sampling", "perfect_tiles"]
