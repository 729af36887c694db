"""`Simulator(hw)`: the simulator's caches, owned by one object, and its entry points.

A `Simulator` holds every cache the compiler and the simulator use, for one hardware
preset: kernel statistics, costs and default tiles by kernel signature (`KernelCosts`,
`.kernels`), per-op costs for priority fusion, layout-pass results and per-graph totals.
Nothing is cached at module level: drop a `Simulator` or call `.clear()` to forget.
Layout-pass results and graph totals are keyed by content (the graph's nodes' structural
hashes in order, its outputs and name, plus the layout overrides and storage dtypes), so a rebuilt
but equal graph or configuration hits them; both caches are bounded LRUs.

The `Simulator` is the compiler driver: `.compile` runs the passes (`pipeline.run_passes`:
`layout_pass`, `fusion`, `tiling`, `flags`, each in its own module), `.simulate` and
`.measure` time the result (`timing`), and the kernel costs come from `KernelCosts`
(`kernel_costs`; re-exported here, where it used to live). Everything it runs sits below
it; the module-level `compile_with`, `compile_default` (`compiler`), `simulate`, `measure`
and `evaluate` (`simulate`), which take an optional `sim` and make a fresh `Simulator`
without one, sit above it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from superopt.ir.graph import Graph, Value
from superopt.ir.types import DType
from superopt.tpu_sim import layout_pass
from superopt.tpu_sim.config import Config
from superopt.tpu_sim.fusion import priority_fusion
from superopt.tpu_sim.hardware import Hardware, get_hardware
from superopt.tpu_sim.kernel_costs import KernelCosts
from superopt.tpu_sim.kernels import Kernels, form_kernels
from superopt.tpu_sim.layout import Layout, NodeLayouts, paused_gc
from superopt.tpu_sim.layout_pass import LaidOut
from superopt.tpu_sim.pipeline import Compiled, default_choice, run_passes
from superopt.tpu_sim.tiling import DEFAULT_TILING, check_default_tiling
from superopt.tpu_sim.timing import (
    NOISE_SIGMA,
    Simulation,
    compiled_time,
    graph_totals,
    time_compiled,
    with_noise,
)

V = TypeVar("V")


def graph_key(graph: Graph) -> tuple[bytes, ...]:
    """The graph's content in node order: every node's structural hash (op, attributes,
    inputs' hashes). Numbering matters, unlike `Graph.structural_hash`: layout overrides and
    fusion choices name nodes by id. (Outputs and name are in `GraphCache`'s fingerprint.)
    The tuple is the graph's own cached `node_hashes`: comparing it with itself is a pass of
    pointer comparisons, where digesting it on every lookup would cost milliseconds."""
    return graph.node_hashes


class GraphCache(Generic[V]):
    """A bounded LRU of results per (graph, extra key), keyed by content (`graph_key`).

    A graph's content key costs about 5 us a node the first time (its structural hashes),
    so it is computed only when needed: entries are filed under a cheap fingerprint
    (name, size, outputs, last node) and the content keys are compared only within a
    fingerprint, so a graph compiled once, or a stream of different graphs, pays nothing.
    """

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        # fingerprint -> [graph, extra, content key (None until needed), value]
        self._entries: OrderedDict[tuple, list[list[Any]]] = OrderedDict()
        self._size = 0

    @staticmethod
    def _fingerprint(graph: Graph, extra: object) -> tuple:
        return (graph.name, len(graph.nodes), graph.outputs,
                graph.nodes[-1] if graph.nodes else None, extra)

    def get(self, graph: Graph, extra: object) -> V | None:
        fp = self._fingerprint(graph, extra)
        bucket = self._entries.get(fp)
        if not bucket:
            return None
        key = graph_key(graph)
        for entry in bucket:
            if entry[2] is None:
                entry[2] = graph_key(entry[0])
            if entry[2] == key:
                self._entries.move_to_end(fp)
                return entry[3]
        return None

    def put(self, graph: Graph, extra: object, value: V) -> None:
        fp = self._fingerprint(graph, extra)
        bucket = self._entries.setdefault(fp, [])
        key = graph_key(graph) if bucket else None
        for entry in bucket:
            if entry[2] is None:
                entry[2] = graph_key(entry[0])
            if entry[2] == key:
                entry[3] = value
                return
        bucket.append([graph, extra, key, value])
        self._entries.move_to_end(fp)
        self._size += 1
        while self._size > self.max_entries:
            _, old = self._entries.popitem(last=False)
            self._size -= len(old)

    def clear(self) -> None:
        self._entries.clear()
        self._size = 0

    def __len__(self) -> int:
        return self._size


def layouts_key(layouts: Mapping[Value, Layout] | None) -> object:
    """Content key of layout overrides: None for none, a `NodeLayouts` as itself (hashed
    by content, once), a sparse mapping as sorted (node, index, layout) triples."""
    if isinstance(layouts, NodeLayouts):  # first: its len() walks every node
        return layouts if layouts.per_node else None
    if not layouts:
        return None
    return ("sparse", tuple(sorted((v.node, v.index, tuple(lay)) for v, lay in layouts.items())))


def dtypes_key(dtypes: Mapping[Value, DType] | None) -> object:
    if not dtypes:
        return None
    return tuple(sorted(((v.node, v.index), dt) for v, dt in dtypes.items()))


class Simulator:
    """The simulator for one hardware preset and every cache it keeps (module docstring).

    `kernels` is the `KernelCosts` of the preset. Equal inputs give bit-identical results
    whatever the caches hold; a fresh `Simulator` only takes longer.
    """

    def __init__(self, hw: Hardware | str | None = None, max_laid: int = 8,
                 max_graphs: int = 64, default_tiling: str = DEFAULT_TILING) -> None:
        self.hw = get_hardware(hw)
        self.default_tiling = check_default_tiling(default_tiling)
        self.kernels = KernelCosts(self.hw, default_tiling=default_tiling)
        self.op_costs: dict[tuple, tuple[float, float, bool, tuple]] = {}
        self._laid: GraphCache[LaidOut] = GraphCache(max_laid)
        self._totals: GraphCache[tuple[float, float]] = GraphCache(max_graphs)

    def __repr__(self) -> str:
        extra = "" if self.default_tiling == DEFAULT_TILING else f", {self.default_tiling}"
        return f"Simulator({self.hw.name}{extra})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (e.g. with a Compiled sent to a worker) without its caches.
        return (Simulator, (self.hw, 8, 64, self.default_tiling))

    def clear(self) -> None:
        """Forget every cached result (for cold-start timing)."""
        self.kernels = KernelCosts(self.hw, default_tiling=self.default_tiling)
        self.op_costs.clear()
        self._laid.clear()
        self._totals.clear()

    # ---- passes ----------------------------------------------------------------------

    def lay_out(self, graph: Graph, layouts: Mapping[Value, Layout] | None = None,
                dtypes: Mapping[Value, DType] | None = None) -> LaidOut:
        """Assign layouts (`layouts` as overrides), run the layout pass and derive what
        later passes need, cached by content: a tuner that changes only fusion, tiles or
        flags skips the pass on every evaluation."""
        try:
            extra = (layouts_key(layouts), dtypes_key(dtypes))
        except (AttributeError, TypeError):  # not Values: let the pass report it
            extra = None
        got = self._laid.get(graph, extra) if extra is not None else None
        if got is not None:
            return got
        laid = layout_pass.lay_out(graph, layouts, dtypes)
        if extra is not None:
            self._laid.put(graph, extra, laid)
            # Passing back the assigned layouts (a compiled configuration's) reproduces
            # them exactly, so the same result serves that key too.
            self._laid.put(graph, (laid.layouts, extra[1]), laid)
        return laid

    def fusion_default(self, laid: LaidOut) -> dict[int, bool]:
        """Priority fusion's decision per node of the laid-out graph (see `fusion`), less
        any fusion the default compiler cannot tile: a fused kernel whose default tile
        does not fit VMEM (a reduction over a whole image fused into its consumer, whose
        grid tiles only the small output) is split back into its ops, as XLA does not
        form a fusion it cannot emit. Programs whose fused kernels all fit are unchanged.
        A fresh dict (callers add their own decisions to it)."""
        return dict(self.default_fusion(laid)[0])

    def default_fusion(self, laid: LaidOut) -> tuple[Mapping[int, bool], Kernels | None]:
        """`fusion_default`'s decisions, and their partition when no kernel was split back
        (None otherwise), computed once per laid-out graph and kept on it under this
        simulator's hardware and tile heuristic, the only other things they depend on."""
        key = (self.hw, self.default_tiling)
        got = laid.default_fusions.get(key)
        if got is not None:
            return got
        fusion = priority_fusion(laid.graph, laid.laid_layouts, self.hw, laid.bitcasts,
                                 laid.stored, self.op_costs, laid.consumers)
        part = form_kernels(laid.graph, laid.laid_layouts, fusion, laid.bitcasts,
                            laid.consumers)
        split = False
        for k in part.kernels:
            if len(k) < 2:
                continue
            sig = laid.signature(k, part.resolved, self.kernels)
            tile, flags = default_choice(self.kernels, sig)
            if not self.kernels.cost(sig, tile, flags).valid:
                for m in k.nodes:
                    if m != k.root:
                        fusion[m] = False
                split = True
        # One round: a split kernel's ops are valid alone, or no fusion would help them.
        got = laid.default_fusions[key] = (MappingProxyType(fusion), None if split else part)
        return got

    def compile(self, graph: Graph, config: Config | None = None,
                fusion_default: str = "priority") -> Compiled:
        """`compiler.compile_with` on this simulator's caches: the four passes in order
        (`pipeline.run_passes`)."""
        with paused_gc():
            return run_passes(self, graph, config, fusion_default)

    # ---- timing -------------------------------------------------------------------------

    def simulate(self, compiled: Compiled) -> Simulation:
        """The noise-free run of `compiled` with this simulator's kernel costs."""
        with paused_gc():
            return time_compiled(compiled, self)

    def measure(self, compiled: Compiled, seed: int, sigma: float = NOISE_SIGMA) -> float:
        """The run's time with seeded noise (`simulate.measure`)."""
        return with_noise(self.simulate(compiled), seed, sigma)

    def evaluate(self, graph: Graph, config: Config | None = None, seed: int | None = None
                 ) -> float:
        """Compile under `config` (defaults elsewhere) and time it: simulated, or measured
        with noise when a seed is given."""
        compiled = self.compile(graph, config)
        if seed is None:
            with paused_gc():
                return compiled_time(compiled, self)
        return self.measure(compiled, seed)

    def graph_totals(self, graph: Graph) -> tuple[float, float]:
        """(useful FLOPs, compulsory bytes) of a graph, cached by content."""
        got = self._totals.get(graph, None)
        if got is None:
            got = graph_totals(graph, self.hw)
            self._totals.put(graph, None, got)
        return got


__all__ = ["GraphCache", "KernelCosts", "Simulator", "dtypes_key", "graph_key", "layouts_key"]
