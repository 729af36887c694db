"""Kernel-level tuning across many kernels and several models: a task scheduler
(Ansor, Zheng et al. OSDI'20, section 6) against round-robin, behind `create(kind)`.

A *task* is one kernel signature (its tile and flags); the same signature in two models
is one task whose weight sums both. The objective is the workload's end-to-end time,
each model's time relative to its default (f = sum over models of T_m / T_m(default), so
each model counts alike whatever its size), and a task's weight is its kernels' share of
that: the sum over models of (kernels with the signature) / T_m(default).

Each scheduling step gives one task a *round* of `per_round` measurements of its next
options: the default configuration first, then tiles in the default compiler's
analytical order (the first `tiles`, as the joint schedule measures them), then every
flags combination on the best tile measured. A measurement is the kernel's simulated
time with the runner's seeded noise; the task keeps the configuration measured fastest.

Schedulers (`create(kind, **opts)`):

- `round-robin`: the tasks in turn;
- `gradient` (Ansor): after one warm-up round per task, the task with the most negative
  estimated gradient of f with respect to its rounds t_i,
  df/dt_i ~ w_i * (alpha * (g_i(t_i) - g_i(t_i - window)) / window
                   + (1 - alpha) * min(-g_i(t_i) / t_i, beta * C_i / max V_k - g_i(t_i))),
  g_i the task's best measured time after t_i rounds, C_i its work (FLOPs for kernels
  with an MXU product, bytes moved for the others: what bounds them), V_k = C_k / g_k
  over the tasks similar to i, i included. The first term is the recent gain per round,
  the second what is left: the optimistic guess that each round would gain as much as
  all rounds so far did on average, or that the task could run at `beta` times slower
  than the best speed a similar task reaches. Similar tasks (Ansor's N(i), its tasks'
  "tag") are kernels of the same computation at other shapes: the same fused ops, on the
  same unit (MXU or vector), reducing or not. With probability `epsilon` (Ansor's
  eps_random, 0.05) a step goes to a live task drawn at random (seeded by `seed`).
  Paper values: alpha 0.2, beta 2, window 3. Tasks whose options are all measured drop
  out of both schedulers.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from superopt.ir.errors import IRError
from superopt.tpu_sim import Flags, Simulator, all_flags, bounds_columns, default_flags
from superopt.xtat.passes.kernel import TileSites
from superopt.xtat.runner import SimRunner
from superopt.xtat.strategies.modelbased import check_options

TILES = 12  # tiles measured per task, in the analytical order (the joint schedule's top k)


@dataclass(frozen=True)
class Task:
    key: str  # the kernel signature digest
    sig: Any
    weight: float  # d f / d (this kernel's time): sum over models of count / T_m(default)
    counts: tuple[tuple[str, int], ...]  # (model, kernels with this signature)
    work: float  # C_i
    kind: str  # which tasks are similar (Ansor's N(i))
    default: tuple[Any, Flags]  # the default compiler's tile and flags
    tiles: tuple[Any, ...]  # tile options, analytical order, the default first


@dataclass
class TaskState:
    """A task's progress: the options measured, the best so far, the best after each of
    its rounds (g_i)."""

    task: Task
    measured: list[tuple[Any, Flags, float]] = field(default_factory=list)
    best: tuple[Any, Flags, float] | None = None
    history: list[float] = field(default_factory=list)
    queue: list[tuple[Any, Flags]] = field(default_factory=list)
    flags_queued: bool = False

    @property
    def rounds(self) -> int:
        return len(self.history)

    @property
    def done(self) -> bool:
        return not self.queue and self.flags_queued

    @property
    def g(self) -> float:
        return self.best[2] if self.best is not None else math.inf


class TaskScheduler(ABC):
    """Picks the task that gets the next round."""

    name = "scheduler"
    OPTIONS: ClassVar[dict[str, tuple[type, float | None, float | None, Any]]] = {}

    def __init__(self, **opts: Any) -> None:
        self.o = check_options(self.name, opts, self.OPTIONS)

    @abstractmethod
    def pick(self, states: Sequence[TaskState]) -> int | None:
        """The index of the next task (None: every task is done)."""


SCHEDULERS: dict[str, type[TaskScheduler]] = {}


def register(name: str) -> Callable[[type[TaskScheduler]], type[TaskScheduler]]:
    def deco(cls: type[TaskScheduler]) -> type[TaskScheduler]:
        SCHEDULERS[name] = cls
        cls.name = name
        return cls
    return deco


def create(kind: str, **opts: Any) -> TaskScheduler:
    """A task scheduler by name: round-robin or gradient."""
    cls = SCHEDULERS.get(kind)
    if cls is None:
        raise IRError(f"unknown task scheduler {kind!r}: expected one of "
                      f"{', '.join(sorted(SCHEDULERS))}")
    return cls(**opts)


@register("round-robin")
class RoundRobin(TaskScheduler):
    def __init__(self, **opts: Any) -> None:
        super().__init__(**opts)
        self.next = 0

    def pick(self, states: Sequence[TaskState]) -> int | None:
        n = len(states)
        for k in range(n):
            i = (self.next + k) % n
            if not states[i].done:
                self.next = i + 1
                return i
        return None


@register("gradient")
class Gradient(TaskScheduler):
    OPTIONS: ClassVar[dict[str, tuple[type, float | None, float | None, Any]]] = {
        "alpha": (float, 0.0, 1.0, 0.2),
        "beta": (float, 1e-9, None, 2.0),
        "window": (int, 1, None, 3),
        "epsilon": (float, 0.0, 1.0, 0.05),
        "seed": (int, 0, None, 0),
    }

    def __init__(self, **opts: Any) -> None:
        super().__init__(**opts)
        self.rng = random.Random(self.o["seed"])

    def gradient(self, i: int, states: Sequence[TaskState]) -> float:
        s = states[i]
        h, t = s.history, s.rounds
        w = self.o["window"]
        if not math.isfinite(s.g):
            return -math.inf  # nothing valid measured yet: anything is a gain
        # As Ansor: no backward term until the task has had `window` rounds after one.
        back = (h[-1] - h[-1 - w]) / w if t > w else 0.0
        speeds = [o.task.work / o.g for o in states
                  if o.task.kind == s.task.kind and math.isfinite(o.g) and o.g > 0]
        left = -s.g / t
        if speeds and s.task.work > 0:
            left = min(left, self.o["beta"] * s.task.work / max(speeds) - s.g)
        a = self.o["alpha"]
        return s.task.weight * (a * back + (1.0 - a) * left)

    def pick(self, states: Sequence[TaskState]) -> int | None:
        live = [i for i, s in enumerate(states) if not s.done]
        if not live:
            return None
        fresh = [i for i in live if states[i].rounds == 0]
        if fresh:  # the warm-up: one round each, in order
            return fresh[0]
        if self.rng.random() < self.o["epsilon"]:
            return live[self.rng.randrange(len(live))]
        return min(live, key=lambda i: (self.gradient(i, states), i))


# -- the workload -------------------------------------------------------------------------

def _kind(stats: Any) -> str:
    """Which tasks are similar (Ansor's N(i)): the same fused ops on the same unit. A
    coarser grouping (the unit alone) compared a small kernel, far from peak speed at any
    tile, with the fastest large one, so its bound promised a many-fold gain that no
    round delivered and the scheduler kept returning to it."""
    unit = ("mxu" if stats.gemm is not None else "vpu") + ("-reduce" if stats.reduction
                                                           else "")
    return f"{unit}:{'+'.join(stats.ops)}"


def _work(stats: Any) -> float:
    if stats.gemm is not None:
        return float(stats.flops)
    return float(stats.in_bytes + stats.out_bytes)


@dataclass
class Workload:
    """Tasks of several models on one simulator; `time(model, best)` sums a model's
    kernels under the given per-task configurations."""

    sim: Simulator
    tasks: list[Task]
    kernels: dict[str, dict[str, int]]  # model -> signature key -> count
    default_times: dict[str, float]

    def exact(self, task: Task, tile: Any, flags: Flags) -> float:
        c = self.sim.kernels.cost(task.sig, tile, flags)
        return c.time if c.valid else math.inf

    def model_times(self, configs: dict[str, tuple[Any, Flags]]) -> dict[str, float]:
        by_key = {t.key: t for t in self.tasks}
        return {m: sum(n * self.exact(by_key[k], *configs[k]) for k, n in ks.items())
                for m, ks in self.kernels.items()}

    def objective(self, configs: dict[str, tuple[Any, Flags]]) -> float:
        times = self.model_times(configs)
        return sum(times[m] / self.default_times[m] for m in times)


def workload(models: Sequence[str], hardware: str | None = None, batch: int | None = None,
             tiles: int = TILES, default_tiling: str | None = None) -> Workload:
    """The tasks of `models`' default programs (the default compiler's fusion, and its
    tiles by `default_tiling`: `tiling.DEFAULT_TILINGS`)."""
    from superopt.tpu_sim.tiling import DEFAULT_TILING
    from superopt.xtat.session import open_session

    default_tiling = default_tiling or DEFAULT_TILING
    sim = Simulator(hardware, default_tiling=default_tiling)
    tile_pass = TileSites(sim)
    kernels: dict[str, dict[str, int]] = {}
    default_times: dict[str, float] = {}
    sigs: dict[str, tuple[Any, Any, Flags]] = {}
    for m in models:
        s = open_session({"model": m, "batch": batch, "hardware": hardware,
                          "default_tiling": default_tiling})
        f = s.default.final
        counts: dict[str, int] = {}
        for key, sig in zip(f.sig_keys, f.signatures, strict=True):
            counts[key] = counts.get(key, 0) + 1
            sigs.setdefault(key, (sig, f.tiles[key], f.flags[key]))
        kernels[m] = counts
        default_times[m] = SimRunner(sim).time(s.default)
    tasks = []
    for key in sorted(sigs):
        sig, tile, flags = sigs[key]
        stats = sim.kernels.stats(sig)
        opts, _, _ = tile_pass.info(None, key, sig)  # type: ignore[arg-type]
        per = tuple((m, c[key]) for m, c in kernels.items() if key in c)
        weight = sum(n / default_times[m] for m, n in per)
        tasks.append(Task(key, sig, weight, per, _work(stats), _kind(stats), (tile, flags),
                          tuple(opts[:tiles])))
    return Workload(sim, tasks, kernels, default_times)


# -- the loop -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    measurement: int  # measurements so far
    task: str
    objective: float  # f under the best measured configurations (exact times)


def _default_flags(w: Workload, t: Task, tile: Any) -> Flags:
    """What the default compiler pairs with `tile` (as the flags pass's default)."""
    g = w.sim.kernels.stats(t.sig).gemm
    return default_flags(g.n if g is not None else None, tile, w.sim.hw,
                         bounds_columns(w.sim.kernels, t.sig, tile))


def _flag_options(w: Workload, t: Task, tile: Any) -> list[tuple[Any, Flags]]:
    dflt = _default_flags(w, t, tile)
    mxu = w.sim.kernels.stats(t.sig).gemm is not None
    return [(tile, f) for f in all_flags(mxu) if f != dflt]


def tune_tasks(w: Workload, scheduler: TaskScheduler, budget: int, per_round: int = 4,
               seed: int = 0, sigma: float | None = None) -> tuple[list[Step], list[TaskState]]:
    """Spend `budget` measurements on `w`'s tasks in rounds picked by `scheduler`; the
    objective after every measurement (module docstring)."""
    if budget < 1:
        raise IRError(f"budget must be >= 1, found {budget}")
    if per_round < 1:
        raise IRError(f"per_round must be >= 1, found {per_round}")
    runner = SimRunner(w.sim) if sigma is None else SimRunner(w.sim, sigma)
    states = []
    for t in w.tasks:
        tile, flags = t.default
        queue = [(tile, flags)] + [(tl, _default_flags(w, t, tl)) for tl in t.tiles
                                   if tl != tile]
        states.append(TaskState(t, queue=queue))
    configs = {t.key: t.default for t in w.tasks}
    f = w.objective(configs)
    exact = {t.key: w.exact(t, *t.default) for t in w.tasks}
    steps: list[Step] = []
    used = 0
    while used < budget:
        i = scheduler.pick(states)
        if i is None:
            break
        s = states[i]
        t = s.task
        for _ in range(per_round):
            if used >= budget:
                break
            if not s.queue and not s.flags_queued:
                s.flags_queued = True
                if s.best is not None and math.isfinite(s.best[2]):
                    s.queue = [o for o in _flag_options(w, t, s.best[0])
                               if (o[0], o[1]) not in {(a, b) for a, b, _ in s.measured}]
            if not s.queue:
                break
            tile, flags = s.queue.pop(0)
            e = w.exact(t, tile, flags)
            got = e * runner.noise(seed, t.key, tile, flags) if math.isfinite(e) else math.inf
            used += 1
            s.measured.append((tile, flags, got))
            if s.best is None or got < s.best[2]:
                s.best = (tile, flags, got)
                # The objective moves by this kernel's exact change, weighted.
                f += t.weight * (e - exact[t.key])
                exact[t.key] = e
                configs[t.key] = (tile, flags)
            steps.append(Step(used, t.key, f))
        s.history.append(s.g)
    return steps, states


__all__ = ["SCHEDULERS", "Step", "Task", "TaskScheduler", "TaskState", "Workload", "create",
           "tune_tasks", "workload"]
