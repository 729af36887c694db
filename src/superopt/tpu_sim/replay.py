"""Replaying measured XLA kernels on the simulator: the TpuGraphs tile-size and layout data.

The TpuGraphs samples (package data `superopt/tpu_sim/data/`, `data_dir()`; decoded from
Google's public TpuGraphs repository, Apache-2.0, see the README there) hold real TPU v3 runtimes: per tuned kernel, the tile bounds each run
used and its time; for one whole program, the layout of each configurable node in each run.

`replay_tiles(kernel, hw)` imports a kernel's HLO (cost mode, `superopt.importers.hlo`), gives
the simulator the program's layouts, storage dtypes and fusion (one simulator kernel per HLO
kernel, multi-output fusions included), and simulates every measured tile configuration as a
`Bounds` tile. Config-free kernels (the reshapes) are simulated under the simulator's default
tile.

`replay_layouts(data, hw)` replays the layout program, which the IR cannot hold whole (while
loops, all-reduces, sorts): each configurable convolution is imported on its own (operands as
parameters) under a run's layouts, compiled by the default compiler with every kernel at the
tile the simulator times fastest (the measured program ran autotuned tiles; the default
compiler's analytical pick would add tile artefacts unrelated to layouts), and a run's
simulated change is the sum of its convolutions' changes from the default run. The primary
replay applies each run's *output* layouts: applying the operand layouts as given would put a
batch of 2 in lanes (64x padding) on the forward convolutions' activations, which costs the
measured program nothing, so XLA did not materialise them so (`mode="all"` shows that).

Metrics (`metrics`): Kendall's tau-b between simulated and measured times (ties counted as
the tau-b definition says), the measured time of the simulator's fastest configuration over
the measured best (top-1), the same for the configuration the default compiler's analytical
model picks among the measured candidates, and the mean absolute percentage error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType
from typing import Any

from superopt.importers.hlo import Computation, HloImport, HloModule, import_hlo, load_module
from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, Value
from superopt.tpu_sim.bounds import Bounds
from superopt.tpu_sim.compiler import compile_with, lay_out, simulator_for
from superopt.tpu_sim.config import DEFAULT_FLAGS, Config, Flags, Tile
from superopt.tpu_sim.flags import bounds_columns, default_flags
from superopt.tpu_sim.hardware import Hardware, get_hardware
from superopt.tpu_sim.kernel_costs import KernelCosts
from superopt.tpu_sim.kernel_time import KernelCost, tile_options
from superopt.tpu_sim.kernels import is_source, resolve_bitcasts
from superopt.tpu_sim.pipeline import Compiled
from superopt.tpu_sim.signature import Signature
from superopt.tpu_sim.simulate import simulate
from superopt.tpu_sim.simulator import Simulator

REPLAY_TILING = "legacy"  # the tile heuristic config-free kernels are replayed under

TILE_FILE = "op_tuning_data.json"
LAYOUT_FILE = "module_tuning_data_layout.json"


class ReplayError(IRError):
    """Measured data that cannot be replayed (missing file, unexpected structure)."""


def data_dir() -> Traversable:
    """The TpuGraphs samples shipped as package data (`superopt/tpu_sim/data/`, with their
    source and license note), found through `importlib.resources` so that an installed
    package reads them; nothing beside a checkout is searched."""
    return resources.files("superopt.tpu_sim").joinpath("data")


def _read(path: Traversable) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ReplayError(f"{path}: no such file") from None
    except ValueError as e:
        raise ReplayError(f"{path}: not JSON ({e})") from None


# ---- metrics ---------------------------------------------------------------------------------

def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b: (concordant - discordant) / sqrt((n0 - ties_x) (n0 - ties_y)), where
    n0 counts all pairs and ties_x (ties_y) the pairs tied in x (in y), joint ties included.
    NaN when either sequence is constant."""
    n = len(x)
    if n != len(y):
        raise ValueError(f"tau-b of sequences of lengths {n} and {len(y)}")
    x, y = [float(v) for v in x], [float(v) for v in y]
    conc = disc = tie_x = tie_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx = (x[i] > x[j]) - (x[i] < x[j])
            dy = (y[i] > y[j]) - (y[i] < y[j])
            if dx == 0:
                tie_x += 1
            if dy == 0:
                tie_y += 1
            if dx and dy:
                if dx == dy:
                    conc += 1
                else:
                    disc += 1
    pairs = n * (n - 1) // 2
    denom = math.sqrt((pairs - tie_x) * (pairs - tie_y))
    return (conc - disc) / denom if denom else math.nan


@dataclass(frozen=True)
class Metrics:
    rows: int
    tau: float  # NaN with fewer than two distinct measured (or simulated) times
    top1: float  # measured time of the simulator's pick / measured best
    default: float  # measured time of the default compiler's pick / measured best
    xla_default: float  # measured time of XLA's own default / measured best
    mape: float

    def to_json(self) -> dict[str, float | int | None]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in self.__dict__.items()}


def metrics(simulated: Sequence[float], measured: Sequence[float], default_pick: int,
            xla_default: int | None) -> Metrics:
    best = min(measured)
    pick = min(range(len(simulated)), key=lambda i: (simulated[i], i))
    mape = sum(abs(s - m) / m for s, m in zip(simulated, measured, strict=True)) / len(measured)
    return Metrics(len(measured), kendall_tau_b(simulated, measured), measured[pick] / best,
                   measured[default_pick] / best,
                   measured[xla_default] / best if xla_default is not None else math.nan, mape)


# ---- building the simulator's configuration from an import ---------------------------------

def kernel_config(imp: HloImport) -> tuple[Config, dict[str, int]]:
    """The simulator configuration that reproduces the program's kernels: its layouts and
    storage dtypes, and fusion decisions that make each HLO kernel one simulator kernel.
    Returns it with each kernel's root in the laid-out graph."""
    lo = lay_out(imp.graph, imp.layouts, imp.dtypes)
    laid = lo.graph
    fwd: dict[int, int] = {}
    owner: dict[int, str] = {}
    for k in imp.kernels:
        for n in k.nodes:
            owner.setdefault(n, k.name)
    for new, olds in sorted(lo.origin.items()):
        for old in olds:
            # The first laid-out node of the same op is the program's own; a later one is a
            # copy the layout pass added (a layout-changing copy that is a graph output gets
            # one back to row-major, whose origin is that copy too). Taking the later one made
            # a copy.25-like kernel "copy, then copy back", tiled in the wrong order.
            if laid.nodes[new].op == imp.graph.nodes[old].op:
                fwd.setdefault(old, new)
    resolved = resolve_bitcasts(laid, lo.bitcasts)
    outputs = {v.node for v in laid.outputs}
    fusion: dict[int, bool | int] = {}
    for n in laid.nodes:
        if is_source(n.op):
            continue
        olds = lo.origin.get(n.id, ())
        # Members fuse into their consumers; a layout op the layout pass inserted joins the
        # kernel of the node it was made for, except the copies of graph outputs back to
        # row-major (the simulator's convention, not the program's: they stay apart).
        fusion[n.id] = n.id not in outputs and any(o in owner for o in olds)
    roots: dict[str, int] = {}
    for k in imp.kernels:
        outs = []
        for v in k.outputs:
            if v.node not in fwd:
                continue
            r = resolved.get(fwd[v.node], Value(fwd[v.node], v.index))
            if not is_source(laid.nodes[r.node].op):
                outs.append(r.node)
        if not outs:
            continue
        root = max(outs)
        for o in set(outs):
            fusion[o] = False if o == root else root
        roots[k.name] = root
    return Config(layouts=lo.layouts, fusion=fusion, dtypes=imp.dtypes), roots


# ---- tile replay -----------------------------------------------------------------------------

@dataclass(frozen=True)
class TileRow:
    bounds: Bounds | None  # None: a config-free kernel
    measured_s: float | None  # None for an erroneous run
    is_default: bool
    error: bool


@dataclass(frozen=True)
class TileKernel:
    name: str
    module: Mapping[str, Any]
    rows: tuple[TileRow, ...]

    @property
    def tunable(self) -> bool:
        return any(r.bounds is not None for r in self.rows)

    @cached_property
    def imported(self) -> HloImport:
        return import_hlo(self.module, proxies=True, name=self.name)


def load_tiles(path: Traversable | None = None) -> tuple[TileKernel, ...]:
    """The tile-size data (`op_tuning_data.json`), rows in file order."""
    path = path or data_dir() / TILE_FILE
    data = _read(path)
    out = []
    for k in data.get("kernels", ()):
        rows = []
        for c in k["configs"]:
            ob, kb = tuple(c["output_bounds"]), tuple(c["kernel_bounds"])
            t = c.get("compute_time_ns")
            bad = bool(c.get("error")) or t is None or t <= 1
            rows.append(TileRow(Bounds(ob, kb) if ob else None,
                                None if bad else float(t) * 1e-9, bool(c.get("is_default")),
                                bad))
        out.append(TileKernel(k["name"], k, tuple(rows)))
    if not out:
        raise ReplayError(f"{path}: no kernels")
    return tuple(out)


@dataclass(frozen=True)
class TileReplay:
    """One kernel's replay: per valid row, simulated and measured seconds."""

    name: str
    hw: str
    rows: tuple[TileRow, ...]  # valid rows only
    simulated: tuple[float, ...]
    measured: tuple[float, ...]
    default_pick: int  # row the default compiler's analytical model picks
    xla_default: int | None  # XLA's own default row
    invalid: tuple[str, ...]  # rows the simulator calls invalid (VMEM), as "bounds: why"
    error_rows_invalid: int  # measured errors the simulator also calls invalid
    error_rows: int

    @property
    def metrics(self) -> Metrics:
        return metrics(self.simulated, self.measured, self.default_pick, self.xla_default)

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.name, "hardware": self.hw, **self.metrics.to_json(),
                "invalid_in_simulator": list(self.invalid),
                "measured_errors": self.error_rows,
                "measured_errors_invalid_in_simulator": self.error_rows_invalid}


@dataclass(frozen=True, eq=False)
class PreparedKernel:
    """A kernel imported and compiled once: its simulator signature and, per valid row, the
    tile to cost. Costing it under other constants re-runs only the time model."""

    name: str
    sig: Signature
    rows: tuple[TileRow, ...]  # valid rows
    tiles: tuple[Tile, ...]
    measured: tuple[float, ...]
    error_tiles: tuple[Tile, ...]  # rows whose measurement failed (bounds only)
    xla_default: int | None
    tunable: bool

    def flags(self, model: KernelCosts, tile: Tile) -> Flags:
        g = model.stats(self.sig).gemm
        if g is None:
            return DEFAULT_FLAGS
        return default_flags(g.n, (0, 0, 0), model.hw, bounds_columns(model, self.sig, tile))

    def costs(self, model: KernelCosts) -> list[KernelCost]:
        return [model.cost(self.sig, t, self.flags(model, t)) for t in self.tiles]

    def times(self, model: KernelCosts) -> list[float]:
        return [c.time for c in self.costs(model)]

    def default_pick(self, model: KernelCosts) -> int:
        """The row the default compiler (`model.default_tiling`) picks among the measured
        ones, each row's tile under the flags the flags pass gives it."""
        if not self.tunable:
            return 0
        return model.default_index(self.sig, self.tiles)


def prepare(kernel: TileKernel) -> PreparedKernel:
    """Import and compile a kernel once (signatures do not depend on the constants)."""
    imp = kernel.imported
    config, roots = kernel_config(imp)
    if kernel.name not in roots:
        raise ReplayError(f"{kernel.name}: the import has no kernel of that name")
    # A config-free kernel (the reshapes) ran at a tile of XLA's that the data do not
    # record; it is replayed at the legacy default compiler's tile, fixed, so that the
    # calibration (and every figure fitted on it) does not move when the default
    # compiler's heuristic does.
    compiled = compile_with(imp.graph, config,
                            sim=Simulator(get_hardware("v3"), default_tiling=REPLAY_TILING))
    root = roots[kernel.name]
    k = compiled.kernel_by_root.get(root)
    if k is None or compiled.partition.repaired:
        raise ReplayError(f"{kernel.name}: the simulator did not form the program's kernel "
                          f"({compiled.partition.repaired})")
    sig = compiled.signatures[compiled.kernels.index(k)]
    valid = tuple(r for r in kernel.rows if not r.error)
    tiles = tuple(r.bounds if r.bounds is not None else compiled.config.tiles[root]
                  for r in valid)
    xla = next((i for i, r in enumerate(valid) if r.is_default), None)
    errors = tuple(r.bounds for r in kernel.rows if r.error and r.bounds is not None)
    return PreparedKernel(kernel.name, sig, valid, tiles,
                          tuple(float(r.measured_s) for r in valid),  # type: ignore[arg-type]
                          errors, xla, kernel.tunable)


@dataclass(frozen=True)
class Skipped:
    """A kernel of a data file that could not be replayed, and why (one line)."""

    name: str
    reason: str


def prepare_all(kernels: Sequence[TileKernel]) -> tuple[tuple[PreparedKernel, ...],
                                                        tuple[Skipped, ...]]:
    """`prepare` each kernel; one that does not import or compile (an opcode the importer
    lacks, a kernel the simulator cannot form) is skipped with its reason and the rest go
    on, so one unfamiliar kernel does not stop a calibration over a whole file."""
    done: list[PreparedKernel] = []
    skipped: list[Skipped] = []
    for k in kernels:
        try:
            done.append(prepare(k))
        except IRError as e:  # import, replay and compile errors all derive from it
            skipped.append(Skipped(k.name, " ".join(str(e).split())))
        except (ArithmeticError, LookupError, TypeError, ValueError) as e:
            # A simulator bug on an unfamiliar kernel: named as one, not a traceback that
            # ends the run over the other kernels.
            skipped.append(Skipped(k.name, f"internal error {type(e).__name__}: {e}"))
    return tuple(done), tuple(skipped)


def replay_tiles(kernel: TileKernel | PreparedKernel, hw: Hardware | str = "v3",
                 model: KernelCosts | None = None) -> TileReplay:
    """Simulate every measured configuration of `kernel` (see the module docstring)."""
    hw = get_hardware(hw)
    pk = kernel if isinstance(kernel, PreparedKernel) else prepare(kernel)
    model = model or KernelCosts(hw)
    costs = pk.costs(model)
    invalid = tuple(f"{_short(t)}: {c.problem}" for t, c in zip(pk.tiles, costs, strict=True)
                    if not c.valid)
    err_invalid = sum(1 for t in pk.error_tiles
                      if not model.cost(pk.sig, t, pk.flags(model, t)).valid)
    return TileReplay(pk.name, hw.name, pk.rows, tuple(c.time for c in costs), pk.measured,
                      pk.default_pick(model), pk.xla_default, invalid, err_invalid,
                      len(pk.error_tiles))


def _short(tile: object) -> str:
    return tile.short() if isinstance(tile, Bounds) else "x".join(str(t) for t in tile)


# ---- layout replay -----------------------------------------------------------------------

@dataclass(frozen=True)
class LayoutNode:
    """A configurable node of the layout program: its tensors (roles, shapes, layouts)."""

    index: int
    name: str
    opcode: str
    roles: tuple[str, ...]
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class LayoutRun:
    index: int
    measured_s: float | None
    is_default: bool
    layouts: tuple[tuple[tuple[int, ...], ...], ...]  # per node, per tensor: minor prefix


@dataclass(frozen=True)
class LayoutData:
    module: HloModule
    nodes: tuple[LayoutNode, ...]
    runs: tuple[LayoutRun, ...]  # valid runs

    @property
    def default(self) -> LayoutRun:
        return next(r for r in self.runs if r.is_default)


def load_layouts(path: Traversable | None = None) -> LayoutData:
    """The layout data (`module_tuning_data_layout.json`): the program and its valid runs."""
    path = path or data_dir() / LAYOUT_FILE
    data = _read(path)
    module = load_module(data, name=str(data.get("module", {}).get("name", "layout program")))
    nodes = tuple(LayoutNode(int(n["config_index"]), n["name"], n["opcode"],
                             tuple(n["tensor_roles"]),
                             tuple(len(t["dims"]) for t in n["tensor_shapes"]))
                  for n in data["configurable_nodes"])
    runs = []
    for r in data["runs"]:
        t = r.get("compute_time_ns")
        if r.get("error") or t is None or t <= 1:
            continue
        runs.append(LayoutRun(int(r["run_index"]), float(t) * 1e-9, bool(r.get("is_default")),
                              tuple(tuple(tuple(int(d) for d in lay) for lay in node)
                                    for node in r["node_layouts"])))
    if not any(r.is_default for r in runs):
        raise ReplayError(f"{path}: no valid default run")
    return LayoutData(module, nodes, tuple(runs))


def complete_layout(prefix: Sequence[int], base: Sequence[int]) -> tuple[int, ...]:
    """A whole minor-to-major order from its most-minor part (the rest as in `base`)."""
    return (*prefix, *(d for d in base if d not in prefix))


def _with_layouts(module: HloModule, name: str, layouts: Sequence[tuple[int, ...]],
                  roles: Sequence[str]) -> HloModule:
    """The module with instruction `name` and its operands laid out as `layouts` (per tensor
    role: output, then operands in order); empty entries keep the program's layout."""
    comp = module.entry_computation
    ins = module.instruction(name)
    changed: dict[int, dict[str, Any]] = {}
    targets = [ins["id"], *ins.get("operand_ids", ())]
    for tid, lay, _ in zip(targets, layouts, roles, strict=False):
        if not lay:
            continue
        old = comp.by_id[tid]
        rank = len(old["shape"]["dims"])
        base = old["shape"].get("minor_to_major") or list(range(rank - 1, -1, -1))
        changed[tid] = {**old, "shape": {**old["shape"],
                                         "minor_to_major": list(complete_layout(lay,
                                                                                base))}}
    if not changed:
        return module
    instrs = tuple(changed.get(i["id"], i) for i in comp.instructions)
    new_comp = Computation(comp.id, comp.name, comp.root_id, instrs,
                           {i["id"]: i for i in instrs})
    comps = dict(module.computations)
    comps[comp.id] = new_comp
    return HloModule(module.name, MappingProxyType(comps), module.entry, module.source)


def _output_copies(compiled: Compiled) -> set[int]:
    """Layout ops the layout pass added to copy graph outputs back to row-major."""
    g = compiled.graph
    return {v.node for v in g.outputs if g.nodes[v.node].op == "layout" and not any(
        compiled.source.nodes[o].op == "layout" for o in compiled.origin.get(v.node, ()))}


def compile_program(graph: Graph, config: Config, hw: Hardware) -> Compiled:
    """Compile with the default compiler, except that the copies of graph outputs back to
    row-major (the simulator's convention for graph outputs, not the program's) stay kernels
    of their own: what they copy is materialised as the program would."""
    compiled = compile_with(graph, config, hw)
    copies = _output_copies(compiled)
    if not copies:
        return compiled
    fusion = dict(compiled.config.fusion)
    resolved = compiled.partition.resolved
    for c in copies:
        fusion[c] = False
        src = compiled.graph.nodes[c].inputs[0]
        fusion[resolved.get(src.node, src).node] = False
    return compile_with(graph, compiled.config.with_(fusion=fusion, tiles={}, flags={}), hw)


def best_tiles(compiled: Compiled) -> Compiled:
    """`compiled` with every kernel at the tile the simulator times fastest among its tile
    options (as a measured program's autotuned tiles would be), under default flags."""
    model = simulator_for(compiled.hw, compiled.simulator).kernels
    tiles, flags = {}, {}
    for k, sig in zip(compiled.kernels, compiled.signatures, strict=True):
        stats = model.stats(sig)
        best = None
        for tile in tile_options(stats):
            f = default_flags(stats.gemm.n if stats.gemm is not None else None, tile,
                              compiled.hw)
            c = model.cost(sig, tile, f)
            if c.valid and (best is None or c.time < best[0]):
                best = (c.time, tile, f)
        if best is not None:
            tiles[k.root], flags[k.root] = best[1], best[2]
    return compile_with(compiled.source, compiled.config.with_(tiles=tiles, flags=flags),
                        compiled.hw)


def program_time(compiled: Compiled) -> float:
    """Simulated time of a compiled graph without the kernels that only copy its outputs
    back to row-major (see `compile_program`)."""
    copies = _output_copies(compiled)
    return sum(r.time for r in simulate(compiled).kernels if r.root not in copies)


@dataclass(frozen=True)
class LayoutReplay:
    """Per valid run of the layout program: measured time and the simulated change of the
    configurable convolutions' time from the default run."""

    mode: str  # "outputs": the runs' output layouts; "all": every tensor's
    runs: tuple[LayoutRun, ...]
    measured: tuple[float, ...]
    delta: tuple[float, ...]  # simulated seconds relative to the default run
    levels: tuple[str, ...]  # measured level of each run (A, B, C, ...)
    offsets: Mapping[str, float]  # measured offset of each level from the fastest (seconds)
    node_times: Mapping[str, float]  # default run: simulated seconds per configurable conv

    @cached_property
    def assigned(self) -> tuple[str, ...]:
        """Each run's simulated delta assigned to the nearest measured level offset."""
        names = sorted(self.offsets, key=self.offsets.__getitem__)
        base = self.offsets[self.levels[self._default]]
        return tuple(min(names, key=lambda n: abs(self.offsets[n] - base - d))
                     for d in self.delta)

    @property
    def _default(self) -> int:
        return next(i for i, r in enumerate(self.runs) if r.is_default)

    @property
    def reproduced(self) -> bool:
        """Every run's simulated delta is nearest its own measured level."""
        return self.assigned == self.levels

    def level_means(self) -> dict[str, float]:
        """Mean simulated delta of the runs of each measured level (seconds)."""
        out: dict[str, list[float]] = {}
        for lv, d in zip(self.levels, self.delta, strict=True):
            out.setdefault(lv, []).append(d)
        return {lv: sum(v) / len(v) for lv, v in sorted(out.items())}

    def to_json(self) -> dict[str, Any]:
        correct = sum(a == b for a, b in zip(self.assigned, self.levels, strict=True))
        counts: dict[str, int] = {}
        for lv in self.levels:
            counts[lv] = counts.get(lv, 0) + 1
        return {
            "mode": self.mode, "runs": len(self.runs), "reproduced": self.reproduced,
            "runs_at_their_level": correct,
            "levels": {lv: {"runs": counts[lv], "measured_offset_ms": self.offsets[lv] * 1e3,
                            "simulated_mean_delta_ms": m * 1e3}
                       for lv, m in self.level_means().items()},
            "per_run": [{"run": r.index, "measured_ms": t * 1e3, "level": lv,
                         "simulated_delta_ms": d * 1e3, "assigned": a}
                        for r, t, lv, d, a in zip(self.runs, self.measured, self.levels,
                                                  self.delta, self.assigned, strict=True)],
        }


def measured_levels(times: Sequence[float], gap: float = 2e-3) -> tuple[tuple[str, ...],
                                                                         dict[str, float]]:
    """Group runs into levels: sorted times split wherever two neighbours differ by more than
    `gap` seconds (the program's repeat noise is tens of microseconds, its levels 7 ms
    apart). Returns each run's level (A fastest) and each level's offset from level A."""
    order = sorted(range(len(times)), key=lambda i: times[i])
    labels = [""] * len(times)
    starts: list[float] = []
    level = -1
    prev = None
    for i in order:
        if prev is None or times[i] - prev > gap:
            level += 1
            starts.append(times[i])
        labels[i] = chr(ord("A") + level)
        prev = times[i]
    means: dict[str, list[float]] = {}
    for lab, t in zip(labels, times, strict=True):
        means.setdefault(lab, []).append(t)
    first = sum(means["A"]) / len(means["A"])
    return tuple(labels), {k: sum(v) / len(v) - first for k, v in means.items()}


def replay_layouts(data: LayoutData, hw: Hardware | str = "v3", mode: str = "outputs"
                   ) -> LayoutReplay:
    """Simulate the layout program's configurable convolutions under every run's layouts.

    Each convolution is imported on its own (its operands become parameters) with the run's
    layouts and compiled by the default compiler; a run's simulated change is the sum over
    convolutions of the change of their time from the default run's. `mode="outputs"` applies
    each run's output layouts (the operands keep the program's layouts); `mode="all"` applies
    the operand layouts too. The reshapes among the configurable nodes (of scalars and of
    u32[96,96,96] masks) are not replayed."""
    if mode not in ("outputs", "all"):
        raise ReplayError(f"mode must be 'outputs' or 'all', found {mode!r}")
    hw = get_hardware(hw)
    convs = [n for n in data.nodes if n.opcode == "convolution"]
    cache: dict[tuple[str, tuple[tuple[int, ...], ...]], float] = {}

    def conv_time(node: LayoutNode, run: LayoutRun) -> float:
        lays = run.layouts[node.index]
        if mode == "outputs":
            lays = (lays[0], *(() for _ in lays[1:]))
        key = (node.name, lays)
        got = cache.get(key)
        if got is None:
            module = _with_layouts(data.module, node.name, lays, node.roles)
            imp = import_hlo(module, roots=[node.name], proxies=True)
            compiled = best_tiles(compile_program(
                imp.graph, Config(layouts=imp.layouts, dtypes=imp.dtypes), hw))
            got = cache[key] = program_time(compiled)
        return got

    default = data.default
    base = {n.name: conv_time(n, default) for n in convs}
    deltas = []
    for run in data.runs:
        deltas.append(sum(conv_time(n, run) - base[n.name] for n in convs))
    measured = tuple(float(r.measured_s) for r in data.runs)  # type: ignore[arg-type]
    levels, offsets = measured_levels(measured)
    return LayoutReplay(mode, data.runs, measured, tuple(deltas), levels, offsets, base)


@dataclass(frozen=True)
class DefaultLayoutRank:
    """Where the default compiler's own layout assignment falls among the measured runs of
    the layout program: the configurable convolutions' outputs left to the layout pass
    (their operands keep the program's layouts, as in `mode="outputs"`), simulated like a
    run, and placed by that simulated change among the runs' simulated changes and at the
    nearest measured level."""

    delta: float  # simulated seconds relative to XLA's default run
    rank: int  # runs whose simulated change is below ours (0: ours is the fastest)
    runs: int
    level: str  # the measured level nearest our simulated change
    xla_level: str  # the measured level of XLA's default run
    xla_rank: int  # runs measured faster than XLA's default run
    same_as_run: int | None  # a run whose output layouts equal ours (then measured), or None
    layouts: Mapping[str, tuple[int, ...]]  # conv -> our output minor-to-major order

    def to_json(self) -> dict[str, Any]:
        return {"simulated_delta_ms": self.delta * 1e3, "rank": self.rank, "runs": self.runs,
                "level": self.level, "xla_default_level": self.xla_level,
                "xla_default_rank_measured": self.xla_rank, "same_as_run": self.same_as_run,
                "layouts": {k: list(v) for k, v in self.layouts.items()}}


def default_layout_rank(data: LayoutData, replayed: LayoutReplay,
                        hw: Hardware | str = "v3") -> DefaultLayoutRank:
    """Our default compiler's layouts for the program's configurable convolutions, ranked
    among the measured runs (`DefaultLayoutRank`); `replayed` is `replay_layouts(data, hw,
    "outputs")`."""
    if replayed.mode != "outputs":
        raise ReplayError("the default layouts are ranked against the 'outputs' replay")
    hw = get_hardware(hw)
    convs = [n for n in data.nodes if n.opcode == "convolution"]
    delta = 0.0
    ours: dict[str, tuple[int, ...]] = {}
    for n in convs:
        imp = import_hlo(data.module, roots=[n.name], proxies=True)
        out = imp.values[n.name]
        layouts = {v: lay for v, lay in imp.layouts.items() if v != out}
        compiled = best_tiles(compile_program(
            imp.graph, Config(layouts=layouts, dtypes=imp.dtypes), hw))
        got = compiled.config.layouts.get(out)
        ours[n.name] = tuple(got) if got is not None else ()
        delta += program_time(compiled) - replayed.node_times[n.name]
    rank = sum(1 for d in replayed.delta if d < delta)
    names = sorted(replayed.offsets, key=replayed.offsets.__getitem__)
    base = replayed.offsets[replayed.levels[replayed._default]]
    level = min(names, key=lambda lv: abs(replayed.offsets[lv] - base - delta))
    xla = replayed._default
    xla_rank = sum(1 for t in replayed.measured if t < replayed.measured[xla])
    same = None
    for run in data.runs:
        outs = {n.name: complete_layout(run.layouts[n.index][0], ours[n.name])
                if run.layouts[n.index] and run.layouts[n.index][0] else None for n in convs}
        if all(o is not None and o == ours[k] for k, o in outs.items()):
            same = run.index
            break
    return DefaultLayoutRank(delta, rank, len(replayed.delta), level,
                             replayed.levels[xla], xla_rank, same, MappingProxyType(ours))


__all__ = [
    "LAYOUT_FILE",
    "TILE_FILE",
    "DefaultLayoutRank",
    "LayoutData",
    "LayoutNode",
    "LayoutReplay",
    "LayoutRun",
    "Metrics",
    "PreparedKernel",
    "ReplayError",
    "Skipped",
    "TileKernel",
    "TileReplay",
    "TileRow",
    "best_tiles",
    "compile_program",
    "complete_layout",
    "data_dir",
    "default_layout_rank",
    "kendall_tau_b",
    "kernel_config",
    "load_layouts",
    "load_tiles",
    "measured_levels",
    "metrics",
    "prepare",
    "prepare_all",
    "program_time",
    "replay_layouts",
    "replay_tiles",
]
