"""The default compiler: the XLA-like baseline every tuner must beat, and `validate`.

`compile_default(graph)` runs four passes, each in its own module, and returns a complete,
valid configuration:

1. Layouts (`layout_pass`): inputs and outputs row-major, op defaults elsewhere, copies
   (`layout` ops) where a consumer needs another layout than its producer gives.
2. Fusion (`fusion`): XLA's priority fusion over the analytical model.
3. Tiles (`tiling`): per kernel, the argmin of the analytical model over the tiles that
   fit VMEM.
4. Flags (`flags`): double buffering on, no unrolling, and the MXUs split over output
   columns when a tile has enough of them (else over rows).

`compile_with(graph, config)` runs the same passes but takes every choice the (possibly
partial) configuration makes, and the default for the rest. Both run on a `Simulator`'s
caches (`sim=`; a fresh one without); `Simulator.compile` is the same call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, Value
from superopt.ir.types import DType
from superopt.tpu_sim import layout_pass
from superopt.tpu_sim.config import Config, InvalidConfig
from superopt.tpu_sim.hardware import Hardware, get_hardware
from superopt.tpu_sim.kernels import is_source
from superopt.tpu_sim.layout import Layout, is_layout, row_major
from superopt.tpu_sim.layout_pass import LaidOut
from superopt.tpu_sim.layout_rules import LAYOUT_RULES
from superopt.tpu_sim.op_costs import is_mxu_op
from superopt.tpu_sim.pipeline import Caches, Compiled
from superopt.tpu_sim.simulator import Simulator

S = TypeVar("S", bound=Caches)


def simulator_for(hw: Hardware | str | None, sim: S | None) -> S | Simulator:
    """`sim` (checked against `hw` when both are given), else a fresh `Simulator(hw)`.
    (Any cache owner passes: `Compiled.simulator` is typed by the `pipeline.Caches` it
    needs, so that the pipeline does not import the driver.)"""
    if sim is None:
        return Simulator(hw)
    if hw is not None and get_hardware(hw) != sim.hw:
        raise ValueError(f"hardware {get_hardware(hw).name} given with a simulator for "
                         f"{sim.hw.name}")
    return sim


def lay_out(graph: Graph, layouts: Mapping[Value, Layout] | None = None,
            dtypes: Mapping[Value, DType] | None = None, sim: Simulator | None = None
            ) -> LaidOut:
    """The layout pass's `LaidOut` (`layout_pass.lay_out`), through `sim`'s cache if given."""
    if sim is not None:
        return sim.lay_out(graph, layouts, dtypes)
    return layout_pass.lay_out(graph, layouts, dtypes)


def compile_with(graph: Graph, config: Config | None = None,
                 hw: Hardware | str | None = None, fusion_default: str = "priority",
                 sim: Simulator | None = None) -> Compiled:
    """Compile `graph` under `config`, filling every missing choice with the default.

    Missing fusion decisions come from priority fusion (`fusion_default="priority"`) when
    the configuration leaves any node out, or are "materialise" with `"none"`. `sim`
    supplies the caches (and the hardware when `hw` is None); a fresh one without.
    """
    return simulator_for(hw, sim).compile(graph, config, fusion_default)


def compile_default(graph: Graph, hw: Hardware | str | None = None,
                    sim: Simulator | None = None) -> Compiled:
    """The baseline: XLA-like layouts, priority fusion, argmin tiles and default flags."""
    return compile_with(graph, Config(), hw, sim=sim)


# ---- validation ------------------------------------------------------------------------------------

def problems(compiled: Compiled, lint: bool = True, sim: Caches | None = None
             ) -> list[str]:
    """Everything wrong with a compiled configuration (empty when it is valid): layouts
    that are not permutations or violate an operand requirement, kernels that read values
    no earlier kernel materialises (a cycle), more than one MXU op per kernel, overridden
    fusion decisions, missing or ill-shaped tiles, tiles that do not fit VMEM, bad flags.
    Kernel costs come from `sim`, else the simulator that compiled it, else a fresh one."""
    out: list[str] = []
    src, g = compiled.source, compiled.graph
    per = compiled.layouts.per_node
    cfg = compiled.config
    for n in src.nodes:
        for v in n.outputs:
            layout = cfg.layouts.get(v)
            if layout is None or not is_layout(layout, src.type_of(v).rank):
                out.append(f"source value {v} ({n.op}) has no valid layout: {layout!r}")
    if lint:
        try:
            g.lint()
        except IRError as e:
            out.append(str(e))
    if len(per) != len(g.nodes):
        out.append(f"layouts cover {len(per)} nodes, the laid-out graph has {len(g.nodes)}")
        return out
    for n in g.nodes:
        outs = per[n.id]
        if len(outs) != len(n.types) or not all(
                is_layout(lay, t.rank) for lay, t in zip(outs, n.types, strict=True)):
            out.append(f"%{n.id} ({n.op}) has no valid layout: {outs!r}")
            continue
        if n.op == "input" and outs[0] != row_major(n.type.rank):
            out.append(f"input %{n.id} is not row-major")
        if n.op == "layout" and outs[0] != tuple(n.attr("minor_to_major")):
            out.append(f"layout op %{n.id} does not produce its attribute's layout")
        if is_source(n.op):
            continue
        prods = tuple(per[v.node][v.index] for v in n.inputs)
        req = LAYOUT_RULES.get(n.op).operands(n, tuple(g.type_of(v) for v in n.inputs), outs,
                                              prods)
        for i, want in enumerate(req):
            if want is not None and want != prods[i]:
                out.append(f"%{n.id} ({n.op}) needs operand {i} in layout {want}, its "
                           f"producer gives {prods[i]}")
    for v in g.outputs:
        if per[v.node][v.index] != row_major(g.type_of(v).rank):
            out.append(f"graph output {v} is not row-major")
    part = compiled.partition
    for node_id, why in part.repaired:
        out.append(f"fusion decision of %{node_id} was overridden: {why}")
    seen: set[int] = set()
    written = {v: k.root for k in compiled.kernels for v in k.outputs}
    for k in compiled.kernels:
        members = set(k.nodes)
        if k.nodes[-1] != k.root or list(k.nodes) != sorted(k.nodes):
            out.append(f"kernel %{k.root}: members are not in topological order ending at "
                       "the root")
        heroes = [m for m in k.nodes if is_mxu_op(g.nodes[m].op)]
        if len(heroes) > 1:
            out.append(f"kernel %{k.root} has {len(heroes)} MXU ops")
        listed = set(k.inputs)
        for m in k.nodes:
            seen.add(m)
            for v in g.nodes[m].inputs:
                r = part.resolve(v)
                if r.node in members:
                    continue
                if r not in listed:
                    out.append(f"kernel %{k.root} reads {r} without listing it as an input")
                if not is_source(g.nodes[r.node].op) and written.get(r, k.root) >= k.root:
                    out.append(f"kernel %{k.root} reads {r}, which is not the root of an "
                               "earlier kernel (cycle or unmaterialised value)")
    model = simulator_for(compiled.hw, sim or compiled.simulator).kernels
    for k, sig in zip(compiled.kernels, compiled.signatures, strict=True):
        tile, flags = cfg.tiles.get(k.root), cfg.flags.get(k.root)
        if tile is None or flags is None:
            out.append(f"kernel %{k.root} has no tile or no flags")
            continue
        why = model.problem(sig, tile) or flags.problem()
        if why:
            out.append(f"kernel %{k.root}: {why}")
            continue
        cost = model.cost(sig, tile, flags)
        if not cost.valid:
            out.append(f"kernel %{k.root}: {cost.problem}")
    for n in g.nodes:
        if not is_source(n.op) and n.id not in part.bitcasts and n.id not in seen:
            out.append(f"%{n.id} ({n.op}) is computed by no kernel")
    if len(cfg.fusion) < len(g.nodes):
        missing = next(n.id for n in g.nodes if n.id not in cfg.fusion)
        out.append(f"{len(g.nodes) - len(cfg.fusion)} nodes have no fusion decision "
                   f"(first %{missing})")
    return out


def validate(compiled: Compiled, lint: bool = True, sim: Caches | None = None) -> None:
    """Raise `InvalidConfig` naming every problem of a compiled configuration."""
    found = problems(compiled, lint=lint, sim=sim)
    if found:
        shown = "; ".join(found[:10]) + (f"; ... {len(found) - 10} more" if len(found) > 10
                                         else "")
        raise InvalidConfig(f"{compiled.source.name}: invalid configuration: {shown}")


__all__ = ["Compiled", "InvalidConfig", "LaidOut", "compile_default", "compile_with", "lay_out",
           "problems", "simulator_for", "validate"]
