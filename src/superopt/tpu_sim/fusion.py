"""The default compiler's fusion pass: XLA-like priority fusion over the analytical model.

A producer fuses into all of its consumers or none; candidates are taken in order of
priority = time unfused - time fused; MXU producers (`op_costs.is_mxu_op`) are never
duplicated and a kernel holds at most one; only small, cheap producers
(`op_costs.is_cheap_op`) are duplicated; a kernel has at most 96 operands and outputs; a
transposing producer is not fused into a reduction. (Moved out of `compiler`.) The
default compiler then splits back any fused kernel whose default tile fits no VMEM
(`simulator.Simulator.fusion_default`): the analytical model here does not see tiles.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

from superopt.ir.graph import Graph, Node, Value
from superopt.ir.types import TensorType
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.kernel_time import analytical
from superopt.tpu_sim.kernels import (
    MAX_DUPLICATES,
    effective_consumers,
    find_bitcasts,
    is_source,
    resolve_bitcasts,
)
from superopt.tpu_sim.layout import Layout, NodeLayouts, padded_bytes
from superopt.tpu_sim.op_costs import OpView, op_rule
from superopt.tpu_sim.signature import NodeTypes

MAX_OPERANDS = 96  # operands + outputs of one fusion (XLA's limit)
MAX_DUPLICATED_OPS = 4  # a producer group duplicated into several kernels stays this small

Key = tuple[int, int]  # a value as (node, output index): hashes in C, unlike Value
# Per-op costs of single nodes: (op, attrs, types, in types, in layouts, layouts) ->
# (MXU seconds, vector seconds, transposing, partial reads).
OpCosts = dict[tuple, tuple[float, float, bool, tuple]]


@dataclass
class _Group:
    members: list[int]
    ext: dict[Key, float]  # values read from HBM -> bytes
    out_bytes: float
    mxu_s: float
    vec_s: float
    hero: bool
    reduction: bool
    transposing: bool
    cheap: bool  # may be duplicated
    outputs: int
    time: float = 0.0  # analytical time, set by _finish

    def _finish(self, hw: Hardware) -> _Group:
        self.time = analytical(self.mxu_s + self.vec_s,
                               (sum(self.ext.values()) + self.out_bytes) / hw.hbm_bytes_per_s,
                               hw)
        return self


def _node_group(graph: Graph, per: tuple[tuple[Layout, ...], ...], nid: int, hw: Hardware,
                resolved: Mapping[int, Value], op_costs: OpCosts,
                stored: tuple[tuple[TensorType, ...], ...] | None = None) -> _Group:
    node = graph.nodes[nid]
    rule = op_rule(node.op)
    types_of = stored if stored is not None else NodeTypes(graph)
    in_types = tuple(types_of[v.node][v.index] for v in node.inputs)
    in_layouts = tuple(per[v.node][v.index] for v in node.inputs)
    key = (node.op, node.attrs, types_of[nid], in_types, in_layouts, per[nid])
    got = op_costs.get(key)  # repeated layers share their per-op costs
    if got is None:
        view_node = node if stored is None else Node(nid, node.op, node.inputs, node.attrs,
                                                     types_of[nid])
        c = rule.cost(OpView(view_node, in_types, in_layouts, per[nid], hw))
        got = (c.gemm.padded_flops / hw.peak_flops if c.gemm is not None else 0.0,
               c.vector_cycles / hw.clock_hz, c.transposing, c.reads)
        if len(op_costs) > 1 << 18:
            op_costs.clear()
        op_costs[key] = got
    mxu_s, vec_s, transposing, reads = got
    ext: dict[Key, float] = {}
    for i, v in enumerate(node.inputs):
        r = resolved.get(v.node, v)
        full = float(padded_bytes(types_of[r.node][r.index], per[r.node][r.index]))
        part = reads[i] if i < len(reads) else None
        k = (r.node, r.index)
        ext[k] = max(ext.get(k, 0.0), full if part is None else min(full, part))
    out_bytes = float(sum(padded_bytes(t, lay) for t, lay in zip(types_of[nid], per[nid],
                                                                   strict=True)))
    return _Group(
        members=[nid], ext=ext, out_bytes=out_bytes, mxu_s=mxu_s, vec_s=vec_s,
        hero=rule.mxu, reduction=rule.reduction, transposing=transposing, cheap=rule.cheap,
        outputs=len(node.types))._finish(hw)


def _merged(c: _Group, p: _Group, p_root: int, hw: Hardware) -> _Group:
    """c with p fused in; `members` is filled in only when the fusion is committed."""
    ext = dict(c.ext)
    # c reads p's values as (p_root, output) keys (bitcasts resolved), in c's own order.
    for k in range(p.outputs):
        ext.pop((p_root, k), None)
    for v, b in p.ext.items():
        ext[v] = max(ext.get(v, 0.0), b)
    return _Group(c.members, ext, c.out_bytes, c.mxu_s + p.mxu_s, c.vec_s + p.vec_s,
                  c.hero or p.hero, c.reduction or p.reduction, c.transposing or p.transposing,
                  c.cheap and p.cheap, c.outputs)._finish(hw)


def priority_fusion(graph: Graph, layouts: NodeLayouts, hw: Hardware,
                    bitcasts: frozenset[int] | None = None,
                    stored: tuple[tuple[TensorType, ...], ...] | None = None,
                    op_costs: OpCosts | None = None,
                    consumers: tuple[list[tuple[int, ...]], list[bool]] | None = None
                    ) -> dict[int, bool]:
    """XLA-like priority fusion (see the module docstring).

    Returns the fusion decision of every node of `graph`, by node id: True = fuse into all
    consumers, False = materialise (the `Config.fusion` encoding). `stored` gives each
    node's types as stored, when storage dtypes are overridden. `op_costs` caches per-op
    costs keyed by op, attributes, types and layouts (a `Simulator` passes its own, so
    repeated layers and repeated compiles share them); a fresh one when None. `consumers`:
    `effective_consumers(graph, bitcasts)`, where the caller has it already."""
    if bitcasts is None:
        bitcasts = find_bitcasts(graph, layouts, stored)
    nodes = graph.nodes
    eff, needed = consumers if consumers is not None else effective_consumers(graph, bitcasts)
    resolved = resolve_bitcasts(graph, bitcasts)
    units = [n.id for n in nodes if not is_source(n.op) and n.id not in bitcasts]
    per = layouts.per_node
    if op_costs is None:
        op_costs = {}
    groups = {i: _node_group(graph, per, i, hw, resolved, op_costs, stored) for i in units}
    kernel_of: dict[int, tuple[int, ...]] = {i: (i,) for i in units}
    version: dict[int, int] = dict.fromkeys(units, 0)
    fused: set[int] = set()

    def plan(p: int) -> tuple[float, tuple[int, ...], list[_Group]] | None:
        if needed[p] or not eff[p] or kernel_of.get(p) != (p,):
            return None
        pg = groups[p]
        cons = tuple(sorted({k for c in eff[p] for k in kernel_of[c]}))
        if p in cons:
            return None
        if len(cons) > 1 and (pg.hero or pg.reduction or not pg.cheap
                              or len(pg.members) > MAX_DUPLICATED_OPS
                              or len(cons) > MAX_DUPLICATES
                              or any(len(kernel_of[m]) != 1 for m in pg.members)):
            return None
        merged = []
        for c in cons:
            cg = groups[c]
            if (pg.hero and cg.hero) or (pg.transposing and cg.reduction):
                return None
            mg = _merged(cg, pg, p, hw)
            if len(mg.ext) + mg.outputs > MAX_OPERANDS:
                return None
            merged.append(mg)
        before = pg.time + sum(groups[c].time for c in cons)
        after = sum(mg.time for mg in merged)
        return before - after, cons, merged

    # Every change to a group re-plans the groups it reads from and itself (`touched`
    # below), so a heap entry whose version is current still holds a valid plan.
    heap: list[tuple[float, int, int]] = []
    plans: dict[int, tuple[float, tuple[int, ...], list[_Group]]] = {}

    def push(p: int) -> None:
        version[p] += 1
        got = plan(p)
        if got is not None and got[0] > 0:
            plans[p] = got
            heapq.heappush(heap, (-got[0], p, version[p]))
        else:
            plans.pop(p, None)

    for p in units:
        push(p)
    while heap:
        _, p, ver = heapq.heappop(heap)
        if ver != version[p] or p not in plans or kernel_of.get(p) != (p,):
            continue
        _, cons, merged = plans.pop(p)
        pg = groups.pop(p)
        fused.add(p)
        for m in pg.members:
            kernel_of[m] = tuple(sorted((set(kernel_of[m]) - {p}) | set(cons)))
        touched: set[int] = set()
        for c, mg in zip(cons, merged, strict=True):
            mg.members = mg.members + pg.members
            groups[c] = mg
            touched.add(c)
            touched.update(v[0] for v in mg.ext if v[0] in groups)
        for r in sorted(touched):
            if r in groups:
                push(r)
    return {n.id: n.id in fused for n in nodes}
