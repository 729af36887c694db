"""Kernel-level tuning on real hardware through TVM: our search strategies and TVM's
MetaSchedule on the same conv/matmul kernels, measured by TVM on this CPU.

- `Kernel`: one conv2d or matmul of a zoo model (shape and FLOPs), as a TE workload.
- `KnobSpace`: an AutoTVM-template-like schedule space over the kernel's loops: a
  middle and an inner tile factor per spatial axis, an inner factor per reduction axis,
  where the reduction loops go between the tile levels, which spatial axis is innermost,
  whether the innermost loop is vectorized, an unroll limit, and whether the output is
  accumulated in a tile-sized buffer. Every knob is a `Site`, so the space is a pass.
- `ScheduleSpace`: what a space offers the shim and the measure (sites, the schedule of
  a configuration, its canonical form). `KnobSpace` is one; MetaSchedule's own design
  space searched by our strategies (`superopt.xtat.tvm_msspace.MsSpace`) is the other.
- `search`: drives a strategy of `superopt.xtat.strategies` (unchanged) through a
  one-pass `Pipeline` whose pass (`KnobPass`, or the space's own subclass) only carries
  the sites: a candidate's configuration *is* the schedule. Each new schedule costs one
  trial of a `Measure`; a candidate whose canonical form was measured before is answered
  from the cache and costs none (MetaSchedule's database also never measures a schedule
  twice).
- `TvmMeasure`: builds a configuration of either space with `tvm.tirx.build` for the host
  CPU, as MetaSchedule's `LocalBuilder` does, and times it with TVM's `time_evaluator`,
  with the evaluator settings that MetaSchedule's `LocalRunner` is given (`Evaluator`),
  so both sides measure alike.
- `tune_metaschedule`: `meta_schedule.tune_tir` on the same workload and target, and its
  trials' run times in the order they were committed to its database.

TVM is imported inside functions only: importing this module (and `superopt --help`)
costs nothing, and everything but the measurement runs without TVM installed (tests
drive the space and the shim with a fake measure).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from superopt.ir.graph import Graph, GraphBuilder
from superopt.xtat.context import Screen, TuneContext
from superopt.xtat.passes.base import PassResult, TunablePass
from superopt.xtat.pipeline import Pipeline
from superopt.xtat.space import Choice, PassConfig, Site
from superopt.xtat.stage import Candidate, Stage
from superopt.xtat.strategies.base import create

# Reduction placement among the tile levels (S0: outer tiles, S1: middle, S2: inner;
# R0: outer reduction, R1: inner reduction). The inner tiles stay innermost in all three
# so the innermost loop can be vectorized.
ORDERS: dict[str, tuple[str, ...]] = {
    "S0 R0 S1 R1 S2": ("S0", "R0", "S1", "R1", "S2"),
    "S0 S1 R0 R1 S2": ("S0", "S1", "R0", "R1", "S2"),
    "S0 R0 R1 S1 S2": ("S0", "R0", "R1", "S1", "S2"),
}
UNROLL = (0, 16, 64, 512)
PASS = "knobs"


@dataclass(frozen=True)
class Kernel:
    """A zoo model's conv2d (NCHW, OIHW weights) or matmul (MxK times KxN), batch 1."""

    name: str
    model: str
    op: str  # "conv2d" | "matmul"
    # matmul: (M, N, K); conv2d: (C, H, W, K, R, S, pad, stride)
    dims: tuple[int, ...]

    @property
    def out_hw(self) -> tuple[int, int]:
        _, h, w, _, r, s, pad, stride = self.dims
        return (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1

    def spatial(self) -> tuple[tuple[str, int], ...]:
        """The output loops (name, extent), in the output's order."""
        if self.op == "matmul":
            m, n, _ = self.dims
            return (("i", m), ("j", n))
        oh, ow = self.out_hw
        return (("k", self.dims[3]), ("y", oh), ("x", ow))

    def reduction(self) -> tuple[tuple[str, int], ...]:
        if self.op == "matmul":
            return (("r", self.dims[2]),)
        c, _, _, _, r, s, _, _ = self.dims
        return (("rc", c), ("ry", r), ("rx", s))

    @property
    def flops(self) -> float:
        out = math.prod(e for _, e in self.spatial())
        return 2.0 * out * math.prod(e for _, e in self.reduction())

    def shapes(self) -> dict[str, list[int]]:
        """The operand and result shapes (for the report)."""
        if self.op == "matmul":
            m, n, k = self.dims
            return {"A": [m, k], "B": [k, n], "C": [m, n]}
        c, h, w, k, r, s, _, _ = self.dims
        oh, ow = self.out_hw
        return {"data": [1, c, h, w], "weight": [k, c, r, s], "out": [1, k, oh, ow]}

    def graph(self) -> Graph:
        """The kernel as a one-op superopt graph (what the shim's stage holds)."""
        b = GraphBuilder(self.name)
        if self.op == "matmul":
            m, n, k = self.dims
            y = b.matmul(b.input("A", (m, k)), b.weight("B", (k, n)))
        else:
            c, h, w, k, r, s, pad, stride = self.dims
            y = b.conv2d(b.input("data", (1, c, h, w)), b.weight("weight", (k, c, r, s)),
                         stride=(stride, stride),
                         padding=(pad, pad, pad, pad) if pad else "valid")
        return b.build(y)

    def te_func(self) -> Any:
        """The kernel as a TIR PrimFunc made from TE (blocks "pad" (conv) and "out")."""
        from tvm import te

        if self.op == "matmul":
            m, n, k = self.dims
            a = te.placeholder((m, k), name="A")
            bw = te.placeholder((k, n), name="B")
            r = te.reduce_axis((0, k), name="r")
            out = te.compute((m, n), lambda i, j: te.sum(a[i, r] * bw[r, j], axis=r),
                             name="out")
            return te.create_prim_func([a, bw, out])
        c, h, w, k, rr, ss, pad, stride = self.dims
        oh, ow = self.out_hw
        data = te.placeholder((1, c, h, w), name="data")
        weight = te.placeholder((k, c, rr, ss), name="weight")
        hp, wp = h + 2 * pad, w + 2 * pad
        padded = te.compute(
            (1, c, hp, wp),
            lambda n, ci, yy, xx: te.if_then_else(
                te.all(yy >= pad, yy < h + pad, xx >= pad, xx < w + pad),
                data[n, ci, yy - pad, xx - pad], 0.0),
            name="pad")
        rc = te.reduce_axis((0, c), name="rc")
        ry = te.reduce_axis((0, rr), name="ry")
        rx = te.reduce_axis((0, ss), name="rx")
        # Batch 1: the batch axis is left out of the output loops (one spatial axis
        # fewer to tile) and put back as a unit dimension of the result.
        out = te.compute(
            (1, k, oh, ow),
            lambda n, kk, y, x: te.sum(
                padded[n, rc, y * stride + ry, x * stride + rx] * weight[kk, rc, ry, rx],
                axis=[rc, ry, rx]),
            name="out")
        return te.create_prim_func([data, weight, out])


# Two kernels of each model, shapes as `superopt.api.load` builds them (batch 1).
KERNELS: tuple[Kernel, ...] = (
    Kernel("resnet50_conv3x3_64", "resnet50", "conv2d", (64, 56, 56, 64, 3, 3, 1, 1)),
    Kernel("resnet50_conv1x1_64_256", "resnet50", "conv2d", (64, 56, 56, 256, 1, 1, 0, 1)),
    Kernel("bert_base_qkv_128x768x768", "bert_base", "matmul", (128, 768, 768)),
    Kernel("bert_base_ffn_128x768x3072", "bert_base", "matmul", (128, 3072, 768)),
)

# Other kernels of the same two models (batch 1), never compared: tuned only so that a
# cost model pre-trained on measured schedules sees more than the three kernels left
# when one of KERNELS is held out (a 1x1 conv's only neighbour there was a 3x3 one).
CORPUS: tuple[Kernel, ...] = (
    Kernel("resnet50_conv1x1_256_64", "resnet50", "conv2d", (256, 56, 56, 64, 1, 1, 0, 1)),
    Kernel("resnet50_conv1x1_64_64", "resnet50", "conv2d", (64, 56, 56, 64, 1, 1, 0, 1)),
    Kernel("resnet50_conv3x3_128", "resnet50", "conv2d", (128, 28, 28, 128, 3, 3, 1, 1)),
    Kernel("resnet50_conv1x1_128_512", "resnet50", "conv2d",
           (128, 28, 28, 512, 1, 1, 0, 1)),
    Kernel("bert_base_ffn2_128x3072x768", "bert_base", "matmul", (128, 768, 3072)),
)


def divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


class SiteSpace:
    """What both spaces share: a configuration is a dict from site key to choice."""

    sites: tuple[Site, ...]

    def complete(self, choices: PassConfig | dict[str, Choice]) -> dict[str, Choice]:
        """The full configuration: `choices` where given, each site's default elsewhere."""
        given = choices.choices if isinstance(choices, PassConfig) else choices
        return {s.key: given.get(s.key, s.default) for s in self.sites}

    def random(self, rng: np.random.Generator) -> dict[str, Choice]:
        return {s.key: s.options[int(rng.integers(len(s.options)))] for s in self.sites}


class KnobSpace(SiteSpace):
    """The schedule knobs of one kernel as sites (module docstring). A configuration is a
    dict from site key to choice; `sites` lists them with the naive schedule (no tiling,
    no vectorization, no unrolling, the reduction outermost) as the default."""

    def __init__(self, kernel: Kernel, max_inner: int = 64, max_tile: int = 256) -> None:
        self.kernel = kernel
        sites: list[Site] = []
        for name, ext in kernel.spatial():
            # (middle, inner) factors whose product divides the extent.
            opts = tuple((a, b) for b in divisors(ext, max_inner)
                         for a in divisors(ext // b, max_tile // b))
            sites.append(Site(f"tile_{name}", opts, (1, 1), label=f"{name} (middle, inner)"))
        for name, ext in kernel.reduction():
            if ext > 1:
                sites.append(Site(f"tile_{name}", tuple(divisors(ext, max_inner)), 1,
                                  label=f"{name} inner"))
        sp = [n for n, e in kernel.spatial() if e > 1]
        sites.append(Site("order", tuple(ORDERS), "S0 R0 S1 R1 S2", label="loop order"))
        sites.append(Site("inner", tuple(sp), sp[-1], label="innermost spatial axis"))
        sites.append(Site("vectorize", (False, True), False, label="vectorize innermost"))
        sites.append(Site("unroll", UNROLL, 0, label="auto-unroll max step"))
        sites.append(Site("cache", (False, True), False, label="accumulate per outer tile"))
        self.sites = tuple(sites)
        self.by_key = {s.key: s for s in sites}

    def size(self) -> int:
        return math.prod(len(s.options) for s in self.sites)

    def canonical(self, config: dict[str, Choice]) -> dict[str, Choice]:
        """Every knob matters, and distinct configurations are distinct schedules."""
        return config

    def make_pass(self) -> KnobPass:
        return KnobPass(self)

    def schedule(self, config: dict[str, Choice]) -> Any:
        """The kernel's IRModule scheduled by `config` (TVM's s_tir schedule primitives)."""
        from tvm import s_tir

        k = self.kernel
        sch = s_tir.Schedule(k.te_func())
        if k.op == "conv2d":
            sch.compute_inline(sch.get_sblock("pad"))
        blk = sch.get_sblock("out")
        loops = list(sch.get_loops(blk))
        spatial = k.spatial()
        if k.op == "conv2d":
            loops = loops[1:]  # the unit batch loop stays outermost
        s_loops, r_loops = loops[:len(spatial)], loops[len(spatial):]
        inner_axis = config["inner"]
        levels: dict[str, list[Any]] = {"S0": [], "S1": [], "S2": [], "R0": [], "R1": []}
        # The innermost spatial axis goes last in every spatial level.
        order = sorted(range(len(spatial)), key=lambda i: spatial[i][0] == inner_axis)
        parts: dict[int, list[Any]] = {}
        for i, (name, ext) in enumerate(spatial):
            mid, inn = config[f"tile_{name}"]
            parts[i] = list(sch.split(s_loops[i], [ext // (mid * inn), mid, inn]))
        for i in order:
            for lvl, loop in zip(("S0", "S1", "S2"), parts[i], strict=True):
                levels[lvl].append(loop)
        for (name, ext), loop in zip(k.reduction(), r_loops, strict=True):
            f = config.get(f"tile_{name}", 1)
            outer, inner = sch.split(loop, [ext // f, f])
            levels["R0"].append(outer)
            levels["R1"].append(inner)
        nest = [loop for lvl in ORDERS[config["order"]] for loop in levels[lvl]]
        sch.reorder(*nest)
        innermost = levels["S2"][-1]
        if config["cache"]:
            # The output tile of one S0 iteration accumulates in a buffer of its own,
            # written back once its reduction is done (MetaSchedule's cache-write idea).
            wb = sch.cache_write(blk, 0, "global")
            sch.reverse_compute_at(wb, levels["S0"][-1])
        if config["vectorize"]:
            sch.vectorize(innermost)
        if config["unroll"]:
            sch.annotate(nest[0], "pragma_auto_unroll_max_step", int(config["unroll"]))
            sch.annotate(nest[0], "pragma_unroll_explicit", 1)
        return sch.mod


class ScheduleSpace(Protocol):
    """A schedule space of one kernel as sites (`KnobSpace`, `tvm_msspace.MsSpace`)."""

    kernel: Kernel
    sites: tuple[Site, ...]

    def complete(self, choices: PassConfig | dict[str, Choice]) -> dict[str, Choice]:
        """The full configuration: `choices` where given, each site's default elsewhere."""
        ...

    def canonical(self, config: dict[str, Choice]) -> dict[str, Choice]:
        """The part of a full configuration that makes the schedule, as it takes effect:
        two configurations with the same canonical form are the same schedule."""
        ...

    def make_pass(self) -> KnobPass:
        """The pass that carries the sites (its `name` keys the candidates' configs)."""
        ...

    def schedule(self, config: dict[str, Choice]) -> Any:
        """The scheduled IRModule (raises when the configuration is not a schedule)."""
        ...


class KnobPass(TunablePass):
    """A pass that only carries the sites of a space: its stage is the kernel's graph,
    unchanged; the candidate's configuration of this pass is the schedule."""

    name = PASS

    def __init__(self, space: ScheduleSpace) -> None:
        self.space = space

    def list_sites(self, stage: Stage) -> list[Site]:
        return list(self.space.sites)

    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        return PassResult(stage, None, {"changed": len(config)})

    def requires(self, stage: Stage) -> None:
        return None

    def ensures(self, stage: Stage) -> None:
        return None


@dataclass(frozen=True)
class Trial:
    index: int  # 0-based, in measurement order
    seconds: float  # inf: the schedule failed to build or run
    config: dict[str, Any] = field(hash=False, compare=False)


Measure = Callable[[dict[str, Choice]], float]


def search(space: ScheduleSpace, strategy: str, seed: int, budget: int, measure: Measure,
           batch: int = 8, opts: dict[str, Any] | None = None, idle_rounds: int = 50,
           on_trial: Callable[[Trial], None] | None = None,
           screen: Screen | None = None) -> list[Trial]:
    """Tune `space` with the named strategy for `budget` trials (fewer when it stops
    proposing new schedules: `idle_rounds` asks in a row with nothing new). Trial 0 is
    the default schedule (the knobs' naive one, MetaSchedule's first sketch as it sampled
    it), measured before the strategy starts, as the tuner does, so that every strategy
    starts from a measured best. A trial records the canonical configuration. `screen`,
    a cost model the strategy may use to pick its proposals (`TuneContext.screen`), is
    updated with every batch's new measurements."""
    knob_pass = space.make_pass()
    pipeline = Pipeline([knob_pass])
    default = pipeline.initial(space.kernel.graph())
    idents: dict[str, tuple[str, dict[str, Any]]] = {}  # by candidate key

    def identity(cand: Candidate) -> str:
        """The candidate's schedule as it takes effect (`ScheduleSpace.canonical`)."""
        got = idents.get(cand.key)
        if got is None:
            config = space.complete(cand.config(knob_pass.name))
            canon = {k: _jsonable(v) for k, v in space.canonical(config).items()}
            got = idents[cand.key] = (json.dumps(canon, sort_keys=True), canon)
        return got[0]

    ctx = TuneContext(pipeline, default, np.random.default_rng(seed), identity=identity,
                      screen=screen)
    fresh: list[tuple[Candidate, float]] = []  # measured since the screen's last update
    times: dict[str, float] = {}  # by candidate key: no canonical form needed twice
    by_schedule: dict[str, float] = {}  # by canonical form: no schedule measured twice
    trials: list[Trial] = []

    def run(cand: Candidate) -> float:
        t = times.get(cand.key)
        if t is None:
            config = space.complete(cand.config(knob_pass.name))
            ident = identity(cand)
            canon = idents[cand.key][1]
            t = by_schedule.get(ident)
            if t is None:
                t = by_schedule[ident] = measure(config)
                trial = Trial(len(trials), t, canon)
                trials.append(trial)
                fresh.append((cand, t))
                if on_trial is not None:
                    on_trial(trial)
            times[cand.key] = t
        ctx.observe(cand, t)
        return t

    run(default)
    strat = create(strategy, **(opts or {}))
    strat.start(ctx, [knob_pass.name], budget)
    idle = 0
    while len(trials) < budget and idle < idle_rounds:
        cands = strat.ask(batch)
        if not cands:
            break
        before = len(trials)
        told, got = [], []
        for c in cands:
            if len(trials) >= budget and c.key not in times:
                break
            got.append(run(c))
            told.append(c)
        strat.tell(told, got)
        if screen is not None and fresh:
            screen.update([c for c, _ in fresh], [t for _, t in fresh])
        fresh.clear()
        idle = idle + 1 if len(trials) == before else 0
    return trials


def _jsonable(v: Choice) -> Any:
    return list(v) if isinstance(v, tuple) else v


def best_curve(seconds: Sequence[float]) -> list[float]:
    """The best time so far after each trial."""
    out, best = [], math.inf
    for t in seconds:
        best = min(best, t)
        out.append(best)
    return out


def trials_to(seconds: Sequence[float], target: float) -> int | None:
    """How many trials until one is at least as fast as `target` (None: none is)."""
    for i, t in enumerate(seconds):
        if t <= target:
            return i + 1
    return None


@dataclass(frozen=True)
class Evaluator:
    """TVM's timing settings, the same for both sides (MetaSchedule's `EvaluatorConfig`)."""

    number: int = 2
    repeat: int = 1
    min_repeat_ms: int = 50


def host_target() -> Any:
    """The LLVM target for this CPU, one core (TVM 0.27 takes targets as dicts)."""
    import tvm
    from tvm.target import codegen

    return tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(),
                              "num-cores": 1})


def _tensor(array: np.ndarray, dev: Any) -> Any:
    import tvm

    make = getattr(tvm.runtime, "tensor", None)
    return make(array, dev) if make is not None else tvm.nd.array(array, dev)


class TvmMeasure:
    """Build a configuration of `space` (either space) with TVM and time it (seconds per
    run; inf when it fails to schedule, build or run, or, with `check`, computes wrong
    values). Inputs are random, allocated once per kernel. `errors` says which step
    failed ("schedule:", "build:", "run:")."""

    def __init__(self, space: ScheduleSpace, evaluator: Evaluator = Evaluator(),
                 check: bool = False) -> None:
        import tvm

        self.space, self.evaluator, self.check = space, evaluator, check
        self.target = host_target()
        self.dev = tvm.cpu(0)
        rng = np.random.default_rng(0)
        shapes = list(space.kernel.shapes().values())
        self.arrays = [rng.standard_normal(s).astype("float32") for s in shapes[:-1]]
        self.arrays.append(np.zeros(shapes[-1], dtype="float32"))
        self.args = [_tensor(a, self.dev) for a in self.arrays]
        self.errors: list[str] = []
        self.build_s = 0.0

    def reference(self) -> np.ndarray:
        """The kernel's output by numpy (float64), to check a built schedule."""
        k = self.space.kernel
        a, w = (x.astype(np.float64) for x in self.arrays[:2])
        if k.op == "matmul":
            return a @ w
        _, _, _, kk, r, s, pad, stride = k.dims
        oh, ow = k.out_hw
        p = np.pad(a[0], ((0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((kk, oh, ow))
        for dy in range(r):
            for dx in range(s):
                win = p[:, dy:dy + stride * oh:stride, dx:dx + stride * ow:stride]
                out += np.einsum("kc,chw->khw", w[:, :, dy, dx], win)
        return out[None]

    def __call__(self, config: dict[str, Choice]) -> float:
        start = time.perf_counter()
        try:
            mod = self.space.schedule(config)
        except Exception as e:  # not a schedule (replay, postprocessing): an invalid trial
            self.build_s += time.perf_counter() - start
            self.errors.append(f"schedule: {type(e).__name__}: {str(e)[:200]}")
            return math.inf
        return self.time_module(mod, start)

    def time_module(self, mod: Any, start: float | None = None) -> float:
        """Build a scheduled IRModule the way MetaSchedule's `LocalBuilder` does (its
        weight-layout rewrite left out of the timed function), time it, and, with
        `check`, compare its values to numpy's (`start`: when scheduling began, for
        `build_s`)."""
        import tvm

        start = time.perf_counter() if start is None else start
        try:
            lib, timed = self.build(mod)
            # Without the layout rewrite the kernel reads its weight in a layout our
            # inputs are not in: the values are checked on the module as scheduled.
            exact = lib if not self.check or _same(timed, mod) else tvm.tirx.build(
                mod, target=self.target)
        except Exception as e:  # a schedule TVM rejects is an invalid trial, not a crash
            self.errors.append(f"build: {type(e).__name__}: {str(e)[:200]}")
            return math.inf
        finally:
            self.build_s += time.perf_counter() - start
        try:
            secs = self.run(lib)
            if self.check:
                exact["main"](*self.args)
                got = self.args[-1].numpy().astype(np.float64)
                want = self.reference()
                if not np.allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max()):
                    self.errors.append("run: wrong values")
                    return math.inf
        except Exception as e:
            self.errors.append(f"run: {type(e).__name__}: {str(e)[:200]}")
            return math.inf
        return secs

    def build(self, mod: Any) -> tuple[Any, Any]:
        """The library MetaSchedule's `LocalBuilder` would build from `mod` (its
        weight-layout rewrite block removed) and the module it was built from (raises
        when TVM rejects it)."""
        import tvm
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        timed = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        return tvm.tirx.build(timed, target=self.target), timed

    def run(self, lib: Any) -> float:
        """One timing of a built library, as MetaSchedule's runner times a trial (mean
        seconds per run over the evaluator's repeats)."""
        ev = self.evaluator
        f = lib.time_evaluator("main", self.dev, number=ev.number, repeat=ev.repeat,
                               min_repeat_ms=ev.min_repeat_ms)
        return float(np.mean(f(*self.args).results))


def _same(a: Any, b: Any) -> bool:
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b))


def tune_metaschedule(kernel: Kernel, budget: int, seed: int, work_dir: str | Path,
                      evaluator: Evaluator = Evaluator(), per_iter: int = 64
                      ) -> list[float]:
    """MetaSchedule (`tune_tir`, its default evolutionary search and XGBoost cost model)
    for `budget` trials on one core; the run time (mean seconds) of each trial in the
    order it was committed to the database (inf: failed to build or run)."""
    from tvm.s_tir import meta_schedule as ms

    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    # The builder worker imports TVM's tensor intrinsics on its first build (about 30 s
    # on one core here), past the default 30 s timeout: every build then times out.
    builder = ms.builder.LocalBuilder(max_workers=1, timeout_sec=180.0)
    runner = ms.runner.LocalRunner(timeout_sec=120.0, evaluator_config=ms.runner.EvaluatorConfig(
        number=evaluator.number, repeat=evaluator.repeat, min_repeat_ms=evaluator.min_repeat_ms,
        enable_cpu_cache_flush=False))
    ms.tune_tir(kernel.te_func(), host_target(), str(work), max_trials_global=budget,
                num_trials_per_iter=per_iter, builder=builder, runner=runner,
                database="json", seed=seed, num_tuning_cores=1)
    return read_ms_records(work / "database_tuning_record.json")


def read_ms_records(path: str | Path) -> list[float]:
    """Each trial's mean run time from a MetaSchedule JSON database, in file order (the
    order the tuner committed them: one line per trial)."""
    out = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)[1]
        secs = rec[1]
        vals = [float(s) for s in secs] if secs else []
        t = float(np.mean(vals)) if vals else math.inf
        # MetaSchedule stores 1e10 s for a candidate that failed to build or run.
        out.append(math.inf if t >= 1e9 else t)
    return out


def single_thread_env() -> None:
    """TVM's runtime threads: one (set before TVM starts its pool)."""
    os.environ.setdefault("TVM_NUM_THREADS", "1")


__all__ = ["CORPUS", "KERNELS", "ORDERS", "Evaluator", "Kernel", "KnobPass", "KnobSpace",
           "ScheduleSpace", "SiteSpace", "Trial", "TvmMeasure", "best_curve", "divisors", "host_target", "read_ms_records", "search",
           "trials_to", "tune_metaschedule"]
