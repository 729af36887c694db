"""The compiler driver's core: `Compiled` and the four passes run in order on a cache owner.

`run_passes(sim, graph, config)` runs layout -> fusion -> tiling -> flags (each pass in
its own module) and returns a `Compiled`. It needs from `sim` only what `Caches` names
(the hardware, the `KernelCosts`, the cached layout pass and priority fusion), so it sits
below `simulator.Simulator`, which implements `Caches` and calls it from `.compile`; the
module-level `compiler.compile_with` (fresh `Simulator` when none is given) sits above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Protocol

from superopt.ir.graph import Graph, Value
from superopt.ir.passes import Origin
from superopt.ir.types import DType
from superopt.tpu_sim.config import DEFAULT_FLAGS, Config, Flags, InvalidConfig, Tile
from superopt.tpu_sim.flags import bounds_columns, default_flags
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.kernel_costs import KernelCosts
from superopt.tpu_sim.kernels import Kernel, Kernels, form_kernels
from superopt.tpu_sim.layout import Layout, NodeLayouts
from superopt.tpu_sim.layout_pass import LaidOut
from superopt.tpu_sim.signature import Signature


class Caches(Protocol):
    """What the passes and the timing need of the object that owns the caches (in practice
    a `simulator.Simulator`; a protocol so that this layer does not import the driver)."""

    hw: Hardware
    kernels: KernelCosts

    def lay_out(self, graph: Graph, layouts: Mapping[Value, Layout] | None = None,
                dtypes: Mapping[Value, DType] | None = None) -> LaidOut: ...

    def fusion_default(self, laid: LaidOut) -> dict[int, bool]: ...

    def default_fusion(self, laid: LaidOut) -> tuple[Mapping[int, bool], Kernels | None]: ...

    def graph_totals(self, graph: Graph) -> tuple[float, float]: ...


@dataclass(frozen=True, eq=False)
class Compiled:
    """A graph compiled for one core: laid out, fused into kernels, tiled and flagged."""

    source: Graph
    graph: Graph  # the laid-out graph (layout ops inserted)
    origin: Origin  # laid-out node -> source node ids
    layouts: NodeLayouts  # every value of `graph`
    config: Config  # complete: layouts of `source`, fusion of `graph`, tiles and flags
    partition: Kernels
    signatures: tuple[Signature, ...]  # per kernel, the cost model's cache key
    hw: Hardware
    # The simulator that compiled it: `simulate(compiled)` reuses its kernel caches.
    simulator: Caches | None = field(default=None, repr=False)

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        return self.partition.kernels

    @cached_property
    def kernel_by_root(self) -> Mapping[int, Kernel]:
        return MappingProxyType({k.root: k for k in self.kernels})

    def tile(self, kernel: Kernel) -> Tile:
        return self.config.tiles[kernel.root]

    def flags(self, kernel: Kernel) -> Flags:
        return self.config.flags.get(kernel.root, DEFAULT_FLAGS)


def default_choice(model: KernelCosts, sig: Signature, tile: Tile | None = None,
                   flags: Flags | None = None) -> tuple[Tile, Flags]:
    """The kernel's tile and flags: the given ones, the default compiler's for the rest
    (its tile heuristic under the given or default flags, then its flags for that tile)."""
    if tile is None:
        tile = model.default_tile(sig, flags or DEFAULT_FLAGS)
    if flags is None:
        g = model.stats(sig).gemm
        flags = default_flags(g.n if g is not None else None, tile, model.hw,
                              bounds_columns(model, sig, tile))
    return tile, flags


def run_passes(sim: Caches, graph: Graph, config: Config | None, fusion_default: str
               ) -> Compiled:
    """Lay out, fuse, tile and flag `graph` on `sim`'s caches, taking every choice `config`
    makes and the default compiler's for the rest (`compiler.compile_with` documents the
    options); the caller pauses the garbage collector."""
    hw = sim.hw
    config = config or Config()
    if fusion_default not in ("priority", "none"):
        raise InvalidConfig(f"fusion_default must be 'priority' or 'none', found "
                            f"{fusion_default!r}")
    lo = sim.lay_out(graph, config.layouts, config.dtypes)
    layouts, laid, origin, laid_layouts, bitcasts = (lo.layouts, lo.graph, lo.origin,
                                                     lo.laid_layouts, lo.bitcasts)
    given = config.fusion
    n_laid = len(laid.nodes)
    if any(not isinstance(k, int) or not 0 <= k < n_laid for k in given):
        bad = next(k for k in given if not isinstance(k, int) or not 0 <= k < n_laid)
        raise InvalidConfig(f"fusion decision for node {bad!r}, which the laid-out graph "
                            f"{laid.name!r} (nodes %0..%{n_laid - 1}) lacks")
    for k, d in given.items():
        if not isinstance(d, bool) and not (isinstance(d, int) and k < d < n_laid):
            raise InvalidConfig(f"fusion decision of %{k} must be a bool or the root of a "
                                f"later kernel, found {d!r}")
    formed: Kernels | None = None
    if len(given) >= n_laid:
        fusion = dict(given)
    elif fusion_default == "priority":
        decided, formed = sim.default_fusion(lo)
        fusion = dict(decided)
        fusion.update(given)
    else:
        fusion = {i: bool(given.get(i, False)) for i in range(n_laid)}
    # The default decisions' partition is already formed (`default_fusion`); decisions
    # that repeat default ones (the same bools) form the same kernels.
    if formed is not None and all(d is decided.get(k) for k, d in given.items()):
        partition = formed
    else:
        partition = form_kernels(laid, laid_layouts, fusion, bitcasts, lo.consumers)
    model = sim.kernels
    sigs = tuple(lo.signature(k, partition.resolved, model) for k in partition.kernels)
    tiles: dict[int, tuple[int, ...]] = {}
    flags: dict[int, Flags] = {}
    for k, sig in zip(partition.kernels, sigs, strict=True):
        tiles[k.root], flags[k.root] = default_choice(model, sig, config.tiles.get(k.root),
                                                      config.flags.get(k.root))
    full = Config(layouts, MappingProxyType(fusion), MappingProxyType(tiles),
                  MappingProxyType(flags))
    return Compiled(graph, laid, origin, laid_layouts, full, partition, sigs, hw, sim)


__all__ = ["Caches", "Compiled", "default_choice", "run_passes"]
