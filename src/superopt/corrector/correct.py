"""Correct a partially equivalent mutant: recompute its wrong boxes from the original.

For every output, the wrong boxes of the box test are covered by correction regions;
each region is recomputed by the original program restricted to it (reading only the
input slice that feeds it), and the output is reassembled from slices of the mutant's
output and of the corrections. Correction kernels that run the same conv (or matmul)
with the same weights on same-shaped input slices are fused: their (explicitly padded)
input slices are concatenated along the batch (rows for matmul), one op runs over them,
and a split hands each region its part; the mutant's own main kernel joins the fusion
when its input slices have the same shape. The corrected program is checked with the
box test against the original and must be fully equivalent.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from superopt.corrector.regions import RegionBuilder, copy_sources, correction_regions
from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Value
from superopt.ir.kernels import resolve_pads
from superopt.ir.passes import copy_node
from superopt.mutants.boxes import Region, is_kernel, slice_region
from superopt.mutants.boxtest import BoxReport, box_test


class CorrectionError(IRError):
    """A corrected program that is not exactly equivalent (a bug, never expected)."""


@dataclass(frozen=True)
class Correction:
    output: int
    region: Region
    fused: bool  # runs inside a fused kernel with other corrections (or the main kernel)


@dataclass(frozen=True)
class CorrectedMutant:
    original: Graph
    mutant: Graph
    corrected: Graph
    report: BoxReport  # the mutant's box test
    check: BoxReport  # box test of the corrected program: fully equivalent
    corrections: tuple[Correction, ...] = ()
    fused_kernels: int = 0  # fused ops that replace two or more kernels
    main_fused: bool = False  # the mutant's main kernel is part of a fused op
    fallbacks: int = 0  # correction ops computed in full and sliced
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def fully_equivalent_mutant(self) -> bool:
        return self.report.fully_equivalent


# ---- fusion -----------------------------------------------------------------------------

def _kernel_key(b: GraphBuilder, v: Value) -> tuple[Any, ...] | None:
    """What must agree for two kernels to run as one op over concatenated inputs."""
    node = b.nodes[v.node]
    if node.op == "conv2d" and v.index == 0:
        x, w = node.inputs
        xs, ws = b.shape(x), b.shape(w)
        a = node.a
        pads = resolve_pads(a["padding"], xs[2:], ws[2:], a["stride"], a["dilation"])
        return ("conv2d", w, a["stride"], a["dilation"], a["groups"], a["activation"],
                xs[1], xs[2] + pads[0] + pads[1], xs[3] + pads[2] + pads[3])
    if node.op == "matmul" and v.index == 0:
        x, w = node.inputs
        xs = b.shape(x)
        if len(b.shape(w)) != 2:
            return None  # batched right operands would need stacking, not row concat
        return ("matmul", w, node.attr("activation"), xs[:-2], xs[-1])
    return None


def _fused(b: GraphBuilder, members: list[Value]) -> list[Value]:
    """One op over the members' concatenated inputs, split back per member."""
    nodes = [b.nodes[v.node] for v in members]
    if nodes[0].op == "conv2d":
        xs = []
        for n in nodes:
            x, w = n.inputs
            a = n.a
            t, bt, lft, r = resolve_pads(a["padding"], b.shape(x)[2:], b.shape(w)[2:],
                                         a["stride"], a["dilation"])
            xs.append(b.pad(x, pads=(0, 0, t, lft, 0, 0, bt, r)) if (t, bt, lft, r) != (0,) * 4
                      else x)
        a = nodes[0].a
        a["padding"] = (0, 0, 0, 0)
        y = b.conv2d(b.concat(*xs, axis=0), nodes[0].inputs[1], **a)
        parts = b.split(y, axis=0, sizes=tuple(b.shape(v)[0] for v in members))
    else:
        rows = [b.shape(n.inputs[0])[-2] for n in nodes]
        axis = len(b.shape(nodes[0].inputs[0])) - 2
        y = b.matmul(b.concat(*[n.inputs[0] for n in nodes], axis=axis), nodes[0].inputs[1],
                     activation=nodes[0].attr("activation"))
        parts = b.split(y, axis=axis, sizes=tuple(rows))
    return list(parts) if isinstance(parts, tuple) else [parts]


def _cone(b: GraphBuilder, v: Value) -> list[Value]:
    """Conv and matmul outputs that value v is computed from (v included)."""
    out: list[Value] = []
    seen: set[int] = set()
    stack = [v]
    while stack:
        u = stack.pop()
        if u.node in seen:
            continue
        seen.add(u.node)
        node = b.nodes[u.node]
        if is_kernel(node.op):
            out.append(u)
        stack.extend(node.inputs)
    return out


def _replay(b: GraphBuilder, v: Value, replaced: dict[Value, Value],
            memo: dict[Value, Value]) -> Value:
    """v rebuilt with the values in `replaced` swapped in (v itself if none is upstream)."""
    if v in replaced:
        return replaced[v]
    if v in memo:
        return memo[v]
    node = b.nodes[v.node]
    ins = tuple(_replay(b, u, replaced, memo) for u in node.inputs)
    out = v if ins == node.inputs else b.add(node.op, ins, node.a)[v.index]
    memo[v] = out
    return out


def _main_kernels(mutant: Graph) -> list[int]:
    return [n.id for n in mutant.nodes if is_kernel(n.op)]


def _copy_graph(b: GraphBuilder, graph: Graph, sources: dict[str, Value],
                override: dict[int, Value] | None = None) -> dict[Value, Value]:
    m: dict[Value, Value] = {}
    for n in graph.nodes:
        if n.is_named_source:
            m[Value(n.id)] = sources[n.attr("name")]
            continue
        if override and n.id in override:
            m[Value(n.id)] = override[n.id]
            continue
        outs = b.add(n.op, tuple(m[v] for v in n.inputs), n.a)
        for i, v in enumerate(outs):
            m[Value(n.id, i)] = v
    return m


# ---- assembly --------------------------------------------------------------------------------

def _contains(outer: Region, inner: Region) -> bool:
    return all(a <= c and d <= b for (a, b), (c, d) in zip(outer, inner, strict=True))


def _intersects(r: Region, s: Region) -> bool:
    return all(max(a, c) < min(b, d) for (a, b), (c, d) in zip(r, s, strict=True))


def assemble(b: GraphBuilder, base: Value, pieces: list[tuple[Region, Value]]) -> Value:
    """`base` with each piece's region replaced by the piece's value (first piece wins
    where pieces overlap), built from slices and concats."""
    shape = b.shape(base)

    def rec(box: Region) -> Value:
        for region, v in pieces:
            if _contains(region, box):
                local = tuple((lo - r0, hi - r0) for (lo, hi), (r0, _) in zip(box, region,
                                                                            strict=True))
                return slice_region(b, v, local)
        hits = [r for r, _ in pieces if _intersects(r, box)]
        if not hits:
            return slice_region(b, base, box)
        for d in range(len(shape)):
            cuts = sorted({x for r in hits for x in r[d] if box[d][0] < x < box[d][1]})
            if cuts:
                bounds = [box[d][0], *cuts, box[d][1]]
                parts = []
                for lo, hi in itertools.pairwise(bounds):
                    sub = list(box)
                    sub[d] = (lo, hi)
                    parts.append(rec(tuple(sub)))
                return b.concat(*parts, axis=d)  # type: ignore[return-value]
        raise AssertionError("a piece intersects the box but has no boundary inside it")

    return rec(tuple((0, s) for s in shape))


# ---- the corrector ---------------------------------------------------------------------------

def correct(original: Graph, mutant: Graph, report: BoxReport | None = None, fuse: bool = True,
            draws: int = 2) -> CorrectedMutant:
    """Mutant + correction kernels, exactly equivalent to `original` (checked)."""
    if report is None:
        report = box_test(original, mutant, draws)
    b = GraphBuilder(f"{mutant.name}+corr")
    sources = copy_sources(b, original)
    rb = RegionBuilder(b, original, sources)
    wanted: list[tuple[int, Region, Value]] = []
    for k, out in enumerate(report.outputs):
        for region in correction_regions(out):
            wanted.append((k, region, rb.region(original.outputs[k], region)))
    mapping = _copy_graph(b, mutant, sources)
    fused_flags = [False] * len(wanted)
    fused_kernels = 0
    main_fused = False
    if fuse and wanted:
        # Kernels anywhere in a correction's program (a biased conv ends in an add) and
        # the mutant's own kernels, grouped by what must agree to run them as one op.
        groups: dict[tuple[Any, ...], list[tuple[str, int, Value]]] = {}
        cones = [_cone(b, v) for _, _, v in wanted]
        for kv in dict.fromkeys(k for cone in cones for k in cone):
            key = _kernel_key(b, kv)
            if key is not None:
                groups.setdefault(key, []).append(("corr", -1, kv))
        for nid in _main_kernels(mutant):
            key = _kernel_key(b, mapping[Value(nid)])
            if key is not None and key in groups:
                groups[key].append(("main", nid, mapping[Value(nid)]))
        replaced: dict[Value, Value] = {}
        override: dict[int, Value] = {}
        for members in groups.values():
            if len(members) < 2:
                continue
            parts = _fused(b, [v for _, _, v in members])
            fused_kernels += 1
            for (kind, nid, v), part in zip(members, parts, strict=True):
                if kind == "corr":
                    replaced[v] = part
                else:
                    override[nid] = part
                    main_fused = True
        if replaced:
            memo: dict[Value, Value] = {}
            wanted = [(k, r, _replay(b, v, replaced, memo)) for k, r, v in wanted]
            fused_flags = [any(kv in replaced for kv in cone) for cone in cones]
        if override:
            mapping = _copy_graph(b, mutant, sources, override)
    outs = []
    for k, v in enumerate(mutant.outputs):
        pieces = [(r, val) for kk, r, val in wanted if kk == k]
        outs.append(assemble(b, mapping[v], pieces) if pieces else mapping[v])
    corrected = b.build(outs, name=f"{mutant.name}+corr")
    check = box_test(original, corrected, draws)
    if not check.fully_equivalent:
        raise CorrectionError(f"corrected {mutant.name!r} still differs from {original.name!r} "
                              f"in {check.wrong_boxes} of {check.boxes} boxes")
    return CorrectedMutant(original, mutant, corrected, report, check,
                           tuple(Correction(k, r, f) for (k, r, _), f in zip(wanted, fused_flags,
                                                                              strict=True)),
                           fused_kernels, main_fused, rb.fallbacks)


# ---- costs -------------------------------------------------------------------------------------

def weight_only(graph: Graph) -> set[int]:
    """Nodes computed from weights alone (folded at compile time)."""
    out: set[int] = set()
    for n in graph.nodes:
        if n.op == "weight" or (n.inputs and all(v.node in out for v in n.inputs)):
            out.add(n.id)
    return out


def fold_weights(graph: Graph, seed: int = 0) -> Graph:
    """The graph with every weight-only computation replaced by a weight holding its
    value (reference semantics; weights without data take the interpreter's draws, the
    same the unfolded graph would use)."""
    from superopt.ir.interpret import interpret

    wo = weight_only(graph)
    needed = [v for n in graph.nodes if n.id not in wo for v in n.inputs
              if v.node in wo and graph.node(v.node).op != "weight"]
    needed += [v for v in graph.outputs if v.node in wo and graph.node(v.node).op != "weight"]
    frontier = list(dict.fromkeys(needed))
    if not frontier:
        return graph
    sub = GraphBuilder("weights")
    sm: dict[Value, Value] = {}
    for n in graph.nodes:
        if n.id not in wo:
            continue
        if n.op == "weight":
            sm[Value(n.id)] = copy_node(sub, n, (), graph)[0]
        else:
            for i, v in enumerate(sub.add(n.op, tuple(sm[u] for u in n.inputs), n.a)):
                sm[Value(n.id, i)] = v
    values = interpret(sub.build([sm[v] for v in frontier]), seed=seed)
    b = GraphBuilder(graph.name)
    m: dict[Value, Value] = {}
    for v, data in zip(frontier, values, strict=True):
        t = graph.type_of(v)
        m[v] = b.weight(f"folded.{v.node}.{v.index}", t.shape, t.dtype,
                        data=np.asarray(data, np.float32))
    for n in graph.nodes:
        if n.is_named_source:
            if n.op == "input" or any(n.id in (u.node for u in c.inputs)
                                      for c in graph.nodes if c.id not in wo):
                m[Value(n.id)] = copy_node(b, n, (), graph)[0]
            continue
        if n.id in wo:
            continue
        for i, v in enumerate(b.add(n.op, tuple(m[u] for u in n.inputs), n.a)):
            m[Value(n.id, i)] = v
    return b.build([m[v] for v in graph.outputs])


@dataclass(frozen=True)
class Cost:
    flops: int
    bytes: int  # bytes every kernel reads and writes (inputs, weights, outputs, temporaries)
    kernels: int  # conv / matmul ops


def cost(graph: Graph) -> Cost:
    """FLOPs and memory traffic of a graph after folding weight-only work (shapes only)."""
    from superopt.ir.analysis import COUNTS

    wo = weight_only(graph)
    flops = traffic = kernels = 0
    for n in graph.nodes:
        if n.id in wo or n.op == "input":
            continue
        ins = tuple(graph.type_of(v) for v in n.inputs)
        macs, other = COUNTS.get(n.op)(n, ins)
        flops += 2 * macs + other
        if n.op == "reshape":
            continue  # a bitcast of a contiguous tensor
        traffic += sum(t.nbytes for t in ins) + sum(t.nbytes for t in n.types)
        kernels += is_kernel(n.op)
    return Cost(flops, traffic, kernels)
