"""Pluggable graph cost functions for the optimizer: `create_cost("sim" | "torch" |
"onnxruntime" | "flops")`.

- `sim`: the TPU simulator's default-compiled time (`superopt.tpu_sim.evaluate`, noise
  free). Fusion and layouts make it a whole-graph cost, not a sum over ops.
- `torch`: TASO's cost, the sum over ops of each op's measured time, here on the torch
  backend (median of timed runs, cached per op signature: op, attributes, input types).
- `onnxruntime`: the same sum over ops, each op timed alone in onnxruntime (what a tuned
  model runs in on `--target cpu`).
- `simop`: the simulator's time of each op compiled alone, summed (no fusion): additive,
  so the optimizer prices rewrites from what they change; with `flops`, the `sim` cost's
  proxies.
- `flops`: an analytical per-op cost on a notional CPU (FLOPs / peak + bytes / bandwidth +
  a fixed cost per op), deterministic and instant; for tests and quick runs.

Every cost treats weight-only computations as free by default (`fold=True`): a compiler
evaluates them once (see `superopt.rewrite.fold`), and rewrites like batch-norm folding
only pay off under that assumption. Additive costs expose `op_cost`, which lets the
optimizer price a rewrite from the nodes it adds and removes without rebuilding the graph.
An op's signature also says which inputs are weights (weight-only values): when a model
runs, each weight is read once from memory while activations were just written, so the
torch cost measures weights out of cache (see `TorchOpCost`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from superopt.ir.analysis import COUNTS
from superopt.ir.errors import IRError
from superopt.ir.graph import AttrItems, Graph, GraphBuilder, Node
from superopt.ir.opdef import SOURCE, get_op
from superopt.ir.serialize import jsonable
from superopt.ir.types import TensorType
from superopt.rewrite.fold import fold_weights, weight_only

OpSignature = tuple[str, AttrItems, tuple[TensorType, ...], tuple[bool, ...]]


class CostError(IRError):
    """A cost function that cannot be created or cannot price a graph."""


class CostFunction(ABC):
    """Prices a whole graph; lower is better. `unit` names what the number measures."""

    name: str = "cost"
    unit: str = "s"
    additive: bool = False

    def __init__(self, fold: bool = True) -> None:
        self.fold = fold

    @abstractmethod
    def cost(self, graph: Graph) -> float: ...

    def describe(self) -> str:
        return self.name

    def proxies(self) -> tuple[AdditiveCost, ...]:
        """Additive costs that rank single rewrites for a whole-graph cost (the optimizer
        prices each rewrite point with each and builds only the best few of each)."""
        return (FlopsCost(fold=self.fold),)


class AdditiveCost(CostFunction):
    """Graph cost = sum of per-op costs over runtime ops (sources and, with `fold`,
    weight-only ops are free). Per-op costs are cached by signature."""

    additive = True

    def __init__(self, fold: bool = True) -> None:
        super().__init__(fold)
        self._cache: dict[OpSignature, float] = {}
        self._free: weakref.WeakKeyDictionary[Graph, tuple[bool, ...]] = \
            weakref.WeakKeyDictionary()

    @abstractmethod
    def measure(self, op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                outs: tuple[TensorType, ...], weights: tuple[bool, ...] = ()) -> float:
        """One op's cost; `weights[i]` says input i is a weight (empty: none is)."""

    def op_cost(self, op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                outs: tuple[TensorType, ...], weights: tuple[bool, ...] = ()) -> float:
        weights = weights if any(weights) else ()
        key = (op, attrs, ins, weights)
        got = self._cache.get(key)
        if got is None:
            got = float(self.measure(op, attrs, ins, outs, weights))
            self._cache[key] = got
        return got

    def node_cost(self, graph: Graph, node: Node) -> float:
        wo = weight_only(graph)
        return self.op_cost(node.op, node.attrs, tuple(graph.type_of(v) for v in node.inputs),
                            node.types, tuple(wo[v.node] for v in node.inputs))

    def free(self, graph: Graph) -> tuple[bool, ...]:
        """Per node: does it cost nothing (a source, or weight-only with `fold`)?"""
        flags = self._free.get(graph)
        if flags is None:
            flags = tuple(get_op(n.op).has(SOURCE) for n in graph.nodes)
            if self.fold:
                flags = tuple(a or b for a, b in zip(flags, weight_only(graph), strict=True))
            self._free[graph] = flags
        return flags

    def cost(self, graph: Graph) -> float:
        free = self.free(graph)
        return sum(self.node_cost(graph, n) for n in graph.nodes if not free[n.id])

    def breakdown(self, graph: Graph) -> dict[str, float]:
        """Cost per op name (for reports)."""
        free = self.free(graph)
        out: dict[str, float] = {}
        for n in graph.nodes:
            if not free[n.id]:
                out[n.op] = out.get(n.op, 0.0) + self.node_cost(graph, n)
        return out

    @property
    def cached(self) -> int:
        return len(self._cache)


def _stub(op: str, attrs: AttrItems, outs: tuple[TensorType, ...]) -> Node:
    return Node(0, op, (), attrs, outs)


class FlopsCost(AdditiveCost):
    """FLOPs / peak + bytes moved / bandwidth + a fixed cost per op, on a notional CPU
    (100 GFLOP/s, 20 GB/s, 5 us per op). Reshapes and splits move no bytes (views)."""

    name = "flops"

    def __init__(self, peak_flops: float = 1e11, bytes_per_s: float = 2e10,
                 per_op_s: float = 5e-6, fold: bool = True) -> None:
        super().__init__(fold)
        self.peak_flops, self.bytes_per_s, self.per_op_s = peak_flops, bytes_per_s, per_op_s

    def measure(self, op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                outs: tuple[TensorType, ...], weights: tuple[bool, ...] = ()) -> float:
        macs, other = COUNTS.get(op)(_stub(op, attrs, outs), ins)
        moved = 0 if op in ("reshape", "split") else sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)
        return (2 * macs + other) / self.peak_flops + moved / self.bytes_per_s + self.per_op_s

    def describe(self) -> str:
        return (f"flops (analytical: {self.peak_flops / 1e9:g} GFLOP/s, "
                f"{self.bytes_per_s / 1e9:g} GB/s, {self.per_op_s * 1e6:g} us per op)")


def signature_key(op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                  weights: tuple[bool, ...]) -> str:
    """A stable text key for an op signature (the database's key)."""
    return json.dumps([op, jsonable(attrs), [[list(t.shape), t.dtype.value] for t in ins],
                       [bool(w) for w in weights]], separators=(",", ":"))


class CostDatabase:
    """Measured per-op costs kept across runs, as TASO keeps them within one: a JSON-lines
    file, one measurement per line `{"context": ..., "key": ..., "s": seconds}`, appended
    as each is taken (an interrupted run keeps what it measured). Only lines whose context
    (device, threads, torch version, cache and sampling settings) equals this run's are
    used, so one file can serve several machines and settings. Re-running a search with a
    filled database prices every graph as before and makes the same choices."""

    def __init__(self, path: str | Path, context: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self._context = dict(context)
        self.context = json.dumps(self._context, sort_keys=True, separators=(",", ":"))
        self.entries: dict[str, float] = {}
        self.loaded = self.other_contexts = 0
        self._torn: int | None = None  # bytes before a cut-off last line, if there is one
        self._dir_ready = False
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise CostError(f"{self.path}: cannot read the cost database: {e}") from None
        lines = text.splitlines()
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if lineno == len(lines) and not text.endswith("\n"):
                # An append cut off by an interrupt: that one measurement is lost, not the
                # file; the next append first cuts the fragment off.
                try:
                    json.loads(line)
                except json.JSONDecodeError:
                    self._torn = len(text[:text.rfind("\n") + 1].encode())
                    continue
            try:
                rec = json.loads(line)
                ctx, key, seconds = rec["context"], rec["key"], rec["s"]
                if not isinstance(key, str) or not isinstance(seconds, int | float) \
                        or isinstance(seconds, bool) or not math.isfinite(seconds) \
                        or seconds < 0:
                    raise ValueError("'key' must be text and 's' a non-negative number")
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise CostError(f"{self.path}:{lineno}: not a cost record ({e})") from None
            if json.dumps(ctx, sort_keys=True, separators=(",", ":")) != self.context:
                self.other_contexts += 1
                continue
            self.entries[key] = float(seconds)
            self.loaded += 1

    def get(self, key: str) -> float | None:
        return self.entries.get(key)

    def put(self, key: str, seconds: float) -> None:
        self.entries[key] = seconds
        record = {"context": self._context, "key": key, "s": seconds}
        if not self._dir_ready:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._dir_ready = True
        if self._torn is not None:
            os.truncate(self.path, self._torn)
            self._torn = None
        with self.path.open("a") as f:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")


def last_level_cache_bytes(default: int = 32 << 20) -> int:
    """The largest CPU cache's size from sysfs (Linux), else `default`."""
    best = 0
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best or default


def processor_name() -> str:
    """The CPU model (Linux /proc/cpuinfo), else platform.processor()."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


class MeasuredOpCost(AdditiveCost):
    """An additive cost whose per-op costs are measured on this machine (`_time_op`),
    with an optional database of measurements kept across runs (`context` says what a
    measurement depends on besides the op)."""

    def __init__(self, fold: bool = True) -> None:
        super().__init__(fold)
        self.measured_s = 0.0  # wall time spent measuring
        self.reused = 0  # signatures priced from the database
        self.database: CostDatabase | None = None

    def _open_database(self, path: str | Path | None) -> None:
        """Keep measurements in `path` (called once the settings `context` reads are set)."""
        self.database = None if path is None else CostDatabase(path, self.context())

    samples: int
    min_sample_s: float

    @abstractmethod
    def context(self) -> dict[str, Any]: ...

    def _sampled(self, run: Callable[[int], float]) -> float:
        """The op's time from `run(reps)` (seconds per repeat): after a warm-up run, the
        fastest of `samples` samples of at least `min_sample_s` each. On a shared machine
        other load only ever adds time, so the minimum is the steadiest estimate."""
        run(1)  # warm-up: allocations, the kernel's first-call setup
        one = min(run(1) for _ in range(3))
        reps = max(1, min(1 << 16, math.ceil(self.min_sample_s / max(one, 1e-9))))
        return min(one, *(run(reps) for _ in range(self.samples)))

    @abstractmethod
    def _time_op(self, op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                 weights: tuple[bool, ...]) -> float:
        """One op's measured time in seconds."""

    def measure(self, op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                outs: tuple[TensorType, ...], weights: tuple[bool, ...] = ()) -> float:
        db = self.database
        key = ""
        if db is not None:
            key = signature_key(op, attrs, ins, weights)
            known = db.get(key)
            if known is not None:
                self.reused += 1
                return known
        t0 = time.perf_counter()
        try:
            seconds = self._time_op(op, attrs, ins, weights)
        finally:
            self.measured_s += time.perf_counter() - t0
        if db is not None:
            db.put(key, seconds)
        return seconds


class TorchOpCost(MeasuredOpCost):
    """TASO's cost model: each op timed alone on the torch backend (float32), cached per
    signature; the graph's cost is the sum.

    One sample repeats the op for at least `min_sample_s`; `samples` samples are taken and
    the fastest is kept: on a shared machine other load only ever adds time, so the minimum
    is the steadiest estimate of what the op itself costs. (With 2 ms samples a 3 ms
    matmul got one run per sample and its cost moved by up to 80% between measurements on
    the shared 2-core machine, enough to flip the search's choices; 10 ms x 7 keeps the
    spread of the sum within a few percent.) `threads` sets torch's intra-op
    threads while measuring (time the result with the same setting).

    Weight inputs are measured out of cache: the timing loop cycles through enough copies
    of them to fill `cold_bytes` (default twice the last-level cache, at most 256 MiB), as
    a model run reads each weight once, while activations were just written and stay hot.
    Timed hot, a weight sits in cache across repeats and the sum of per-op costs
    undershoots the model (BERT-base, 2 threads, quiet machine, two runs: hot sums 149 and 168 ms, cold 161 and
    168 ms, the model measured 172 and 173 ms). Cold, the saving of F.linear over matmul
    plus a bias add at (128 x 768) @ (768 x 3072) was 3.4-6.0% in five measurements (hot:
    1.7-7.1%)."""

    name = "torch"
    MAX_COPIES = 64
    MAX_COLD_BYTES = 256 << 20

    def __init__(self, device: str = "cpu", samples: int = 7, min_sample_s: float = 1e-2,
                 threads: int | None = None, fold: bool = True,
                 cold_bytes: int | None = None, database: str | Path | None = None) -> None:
        super().__init__(fold)
        self.device, self.samples, self.min_sample_s = device, samples, min_sample_s
        self.threads = threads
        # Twice the LLC evicts it; the cap bounds the copies' memory on many-core servers
        # (a 256 MiB LLC would otherwise ask for half a gigabyte per measured op).
        self.cold_bytes = min(2 * last_level_cache_bytes(), self.MAX_COLD_BYTES) \
            if cold_bytes is None else cold_bytes
        self._open_database(database)

    def context(self) -> dict[str, Any]:
        """What a measurement depends on besides the op (the database's context)."""
        import platform

        import torch

        return {"device": self.device, "torch": torch.__version__,
                "threads": self.threads or torch.get_num_threads(),
                "cold_bytes": self.cold_bytes, "samples": self.samples,
                "min_sample_s": self.min_sample_s, "machine": platform.machine(),
                "processor": processor_name()}

    def _time_op(self, op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                 weights: tuple[bool, ...]) -> float:
        import torch

        saved = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        try:
            return self._measure(op, attrs, ins, weights)
        finally:
            torch.set_num_threads(saved)

    def copies(self, ins: tuple[TensorType, ...], weights: tuple[bool, ...]) -> int:
        """How many copies of the weight inputs the timing loop cycles through."""
        nbytes = sum(t.nbytes for t, w in zip(ins, weights, strict=False) if w)
        if nbytes == 0 or self.cold_bytes <= 0:
            return 1
        return max(1, min(self.MAX_COPIES, math.ceil(self.cold_bytes / nbytes)))

    def _measure(self, op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                 weights: tuple[bool, ...]) -> float:
        from superopt.backends import torch as tb

        b = GraphBuilder(f"op.{op}")
        args = []
        for i, t in enumerate(ins):
            # Integer operands are indices (embedding ids): 0 is always in range.
            args.append(b.input(f"in{i}", t.shape, t.dtype, high=1))
        values = b.add(op, args, dict(attrs))
        program = tb.lower(b.build(list(values)), self.device)
        first = program.prepare()
        cold = [f"in{i}" for i, w in enumerate(weights) if w]
        variants = [first] + [{**first, **{n: first[n].clone() for n in cold}}
                              for _ in range(self.copies(ins, weights) - 1)]

        turn = itertools.cycle(variants)  # one rotation across all runs: none restarts hot

        def run(reps: int) -> float:
            start = time.perf_counter()
            for _ in range(reps):
                program.execute(next(turn))
            return (time.perf_counter() - start) / reps

        return self._sampled(run)

    def describe(self) -> str:
        threads = f", {self.threads} threads" if self.threads else ""
        return f"torch (per-op measured time on {self.device}{threads}, summed; TASO's cost)"


class OrtOpCost(MeasuredOpCost):
    """TASO's cost measured where a `--target cpu` (or cuda) model runs: each op exported
    alone to ONNX, its weights as initializers (onnxruntime pre-packs them and picks its
    blocked kernels as it does in a model), timed in onnxruntime with all of its graph
    optimizations on at `threads` intra-op threads; the graph's cost is the sum.

    Torch's per-op times rank some choices the other way: ResNeXt's 3x3 convolution over
    128 channels in 32 groups takes 0.97 ms in torch and 1.45 ms in onnxruntime (one
    thread), and merged into 8 groups of 16 channels 2.19 ms in torch but 1.06 ms in
    onnxruntime. One sample repeats the op for at least `min_sample_s`; the fastest of
    `samples` is kept (as for `TorchOpCost`). A run's fixed cost (onnxruntime's call and
    its Python side, measured once on a one-cell op) is taken off each op's time, so a
    rewrite that adds free reshapes is not charged one call per reshape."""

    name = "onnxruntime"

    def __init__(self, providers: tuple[str, ...] | list[str] = ("CPUExecutionProvider",),
                 samples: int = 7, min_sample_s: float = 1e-2, threads: int | None = 1,
                 fold: bool = True, database: str | Path | None = None,
                 seed: int = 0) -> None:
        super().__init__(fold)
        self.providers = list(providers)
        self.samples, self.min_sample_s = samples, min_sample_s
        self.threads = threads or 0  # 0: onnxruntime's default (all cores)
        self.seed = seed
        self._call_s: float | None = None  # onnxruntime's fixed cost per run
        self._open_database(database)

    def context(self) -> dict[str, Any]:
        """What a measurement depends on besides the op (the database's context)."""
        import platform

        import onnxruntime

        return {"runtime": "onnxruntime", "onnxruntime": onnxruntime.__version__,
                "providers": self.providers, "threads": self.threads,
                "samples": self.samples, "min_sample_s": self.min_sample_s,
                "machine": platform.machine(), "processor": processor_name()}

    def _time_op(self, op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                 weights: tuple[bool, ...]) -> float:
        if self._call_s is None:
            self._call_s = self._time(self._one_op("relu", (), (TensorType((1,)),), ()))
        return max(0.0, self._time(self._one_op(op, attrs, ins, weights)) - self._call_s)

    @staticmethod
    def _one_op(op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                weights: tuple[bool, ...]) -> Graph:
        b = GraphBuilder(f"op.{op}")
        args = []
        for i, t in enumerate(ins):
            if i < len(weights) and weights[i]:
                args.append(b.weight(f"in{i}", t.shape, t.dtype))
            else:
                # Integer operands are indices (embedding ids): 0 is always in range.
                args.append(b.input(f"in{i}", t.shape, t.dtype, high=1))
        return b.build(list(b.add(op, args, dict(attrs))))

    def _time(self, graph: Graph) -> float:
        import numpy as np
        import onnxruntime as ort

        from superopt.exporters.onnx import to_onnx
        from superopt.ir import random_feeds
        from superopt.ir.types import ORT_DTYPES

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        sess = ort.InferenceSession(to_onnx(graph, seed=self.seed).SerializeToString(), opts,
                                    providers=self.providers)
        drawn = random_feeds(graph, seed=self.seed)
        feeds = {i.name: np.asarray(drawn[i.name], dtype=ORT_DTYPES.get(i.type, None))
                 for i in sess.get_inputs()}

        def run(reps: int) -> float:
            start = time.perf_counter()
            for _ in range(reps):
                sess.run(None, feeds)
            return (time.perf_counter() - start) / reps

        return self._sampled(run)

    def describe(self) -> str:
        where = "CUDA" if self.providers[0].startswith("CUDA") else "CPU"
        threads = f", {self.threads} threads" if self.threads else ""
        return f"onnxruntime (per-op measured time on the {where}{threads}, summed)"


class SimCost(CostFunction):
    """The TPU simulator's default-compiled time of the graph (weight-only parts folded
    structurally first, with `fold`)."""

    name = "sim"

    def __init__(self, hardware: str | None = None, fold: bool = True,
                 default_tiling: str | None = None) -> None:
        super().__init__(fold)
        try:
            from superopt.tpu_sim import Simulator
            from superopt.tpu_sim.tiling import DEFAULT_TILING
        except ImportError as e:  # pragma: no cover - the simulator ships with the package
            raise CostError(f"the TPU simulator is not available: {e}") from None
        # One simulator for every graph costed: kernel costs are shared by signature. The
        # graphs are costed as the default compiler (`default_tiling`) compiles them.
        self.simulator = Simulator(hardware, default_tiling=default_tiling or DEFAULT_TILING)
        self.hardware = self.simulator.hw
        self.evaluations = 0
        self._proxies: tuple[AdditiveCost, ...] | None = None

    def cost(self, graph: Graph) -> float:
        if self.fold:
            graph = fold_weights(graph, evaluate=False).graph
        self.evaluations += 1
        t = float(self.simulator.evaluate(graph))
        return t if math.isfinite(t) else math.inf

    def describe(self) -> str:
        return f"sim (TPU {self.hardware.name} simulator, default compiler)"

    def proxies(self) -> tuple[AdditiveCost, ...]:
        # Kept: a search run again with this cost (the tuner's plan, per input graph)
        # reuses the per-op times priced before.
        if self._proxies is None:
            self._proxies = (*super().proxies(),
                             SimOpCost(fold=self.fold, simulator=self.simulator))
        return self._proxies


class SimOpCost(AdditiveCost):
    """Each op's simulated time compiled as a kernel of its own (default layout and tile;
    no fusion): the sim cost's additive proxy. The flops proxy ranks a rewrite by work
    and bytes, which misses what the simulated chip rewards: a grouped convolution with
    four channels per group runs on the vector unit at about 80 times its compute bound,
    and the dense convolution with a block-diagonal kernel that replaces it does 32 times
    its multiplies on the matrix unit in less time (ResNeXt-50's first stage, batch 16);
    under flops that rewrite ranks last and is never tried."""

    name = "simop"

    def __init__(self, hardware: str | None = None, fold: bool = True,
                 simulator: Any = None) -> None:
        super().__init__(fold)
        if simulator is None:
            from superopt.tpu_sim import Simulator

            simulator = Simulator(hardware)
        self.simulator = simulator

    def measure(self, op: str, attrs: AttrItems, ins: tuple[TensorType, ...],
                outs: tuple[TensorType, ...], weights: tuple[bool, ...] = ()) -> float:
        b = GraphBuilder(f"op.{op}")
        # A weight stays a weight: the simulator lays weights out for their consumer
        # (a convolution whose kernel is an activation is lowered another, slower way).
        args = [(b.weight if i < len(weights) and weights[i] else b.input)(
            f"in{i}", t.shape, t.dtype) for i, t in enumerate(ins)]
        values = b.add(op, args, dict(attrs))
        t = float(self.simulator.evaluate(b.build(list(values))))
        return t if math.isfinite(t) else math.inf

    def describe(self) -> str:
        return f"simop (TPU {self.simulator.hw.name} simulator, each op alone)"


COSTS: dict[str, Callable[..., CostFunction]] = {
    "flops": FlopsCost,
    "torch": TorchOpCost,
    "onnxruntime": OrtOpCost,
    "sim": SimCost,
    "simop": SimOpCost,
}


def sim_available() -> bool:
    try:
        import superopt.tpu_sim  # noqa: F401
    except ImportError:
        return False
    return True


def create_cost(name: str, **options: Any) -> CostFunction:
    """A cost function by name: sim, torch or flops (options go to its constructor)."""
    try:
        factory = COSTS[name]
    except KeyError:
        raise CostError(f"unknown cost {name!r}; expected one of {', '.join(COSTS)}") from None
    try:
        return factory(**options)
    except TypeError as e:
        raise CostError(f"cost {name!r}: {e}") from None
