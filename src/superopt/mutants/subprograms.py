"""Multi-linear subprograms of a model: where PET looks for mutants.

1. Split the model at every op the box theorem does not cover (non-linear ops, fused
   activations, constants, embeddings): the connected pieces of the remaining ops are
   multi-linear programs over their inputs (activations and weights).
2. A piece of at most `max_ops` ops (consecutive reshape/transpose count as one) whose
   outputs are multi-linear is a subprogram; larger or non-multi-linear pieces (attention
   joins Q and K of one input) give their maximal convex subsets of up to `max_ops` ops
   (with a conv, matmul or pooling op, at most two outputs, and no output that merely
   rearranges the subset's inputs), plus each of their compute ops alone.
3. Independent ops that can be batched or grouped are merged into one multi-output
   subprogram: conv or matmul ops that read the same input (merge along output
   channels), and independent ops with identical shapes (grouped conv, batched matmul).

Equal subprograms (same structure and shapes) are searched once; each keeps the list of
places ("sites") where it occurs in the model.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Node, Value
from superopt.ir.opdef import CONSTANT, SOURCE, get_op
from superopt.mutants.boxes import TABLE, is_kernel, relabels
from superopt.mutants.degrees import BoxError, check_multilinear

COMPUTE = ("conv2d", "matmul", "pool2d_avg")
MAX_SUBSETS_PER_PIECE = 2000


@dataclass(frozen=True)
class Site:
    """One occurrence of a subprogram: model node ids, and the model values bound to the
    subprogram's sources and outputs (in the subprogram's order)."""

    nodes: tuple[int, ...]
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]


@dataclass(frozen=True)
class Subprogram:
    graph: Graph
    kind: str  # piece | subset | merged
    sites: tuple[Site, ...] = field(default=())

    @property
    def ops(self) -> int:
        return count_ops(self.graph.nodes)

    @property
    def signature(self) -> str:
        return self.graph.structural_hash


def eligible(node: Node) -> bool:
    op = get_op(node.op)
    return (not op.has(SOURCE) and not op.has(CONSTANT) and TABLE.supports(node.op)
            and op.is_multilinear(node.a) and all(t.dtype.is_float for t in node.types))


def _rt(node: Node) -> bool:
    return relabels(node.op)


def count_ops(nodes: Iterable[Node]) -> int:
    """Ops, with each run of consecutive reshape/transpose counted once."""
    nodes = list(nodes)
    ids = {n.id: n for n in nodes}
    count = 0
    for n in nodes:
        if get_op(n.op).has(SOURCE):
            continue
        if _rt(n) and any(v.node in ids and _rt(ids[v.node]) for v in n.inputs):
            continue
        count += 1
    return count


def make_subprogram(model: Graph, ids: Iterable[int], name: str = "sub") -> tuple[Graph, Site]:
    """The ops `ids` of the model as a graph over their inputs (x0.. activations, w0..
    weights, named in order of first use) and outputs (values used outside, by id)."""
    keep = sorted(set(ids))
    inside = set(keep)
    b = GraphBuilder(name)
    m: dict[Value, Value] = {}
    bound: list[Value] = []
    counts = {"x": 0, "w": 0}
    for nid in keep:
        n = model.node(nid)
        for v in n.inputs:
            if v.node in inside or v in m:
                continue
            src = model.node(v.node)
            t = model.type_of(v)
            if src.op == "weight":
                name_ = f"w{counts['w']}"
                counts["w"] += 1
                m[v] = b.weight(name_, t.shape, t.dtype, data=model.weights.get(src.attr("name")),
                                init=src.attr("init"))
            else:
                name_ = f"x{counts['x']}"
                counts["x"] += 1
                m[v] = b.input(name_, t.shape, t.dtype)
            bound.append(v)
        for i, nv in enumerate(b.add(n.op, tuple(m[u] for u in n.inputs), n.a)):
            m[Value(nid, i)] = nv
    used_outside: list[Value] = []
    model_outs = set(model.outputs)
    for nid in keep:
        n = model.node(nid)
        for i in range(len(n.types)):
            v = Value(nid, i)
            if v in model_outs or any(v in model.node(c).inputs for c in model.consumers[nid]
                                      if c not in inside):
                used_outside.append(v)
    graph = b.build([m[v] for v in used_outside], name=name)
    return graph, Site(tuple(keep), tuple(bound), tuple(used_outside))


def pieces(model: Graph) -> list[list[int]]:
    """Connected components of the eligible ops (ids in topological order)."""
    parent = {n.id: n.id for n in model.nodes if eligible(n)}

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for n in model.nodes:
        if n.id not in parent:
            continue
        for v in n.inputs:
            if v.node in parent:
                parent[find(v.node)] = find(n.id)
    comps: dict[int, list[int]] = {}
    for nid in parent:
        comps.setdefault(find(nid), []).append(nid)
    return [sorted(c) for c in comps.values()]


def _convex(model: Graph, s: set[int], universe: set[int]) -> bool:
    """No path leaves the set and comes back (within the piece)."""
    below: set[int] = set()  # nodes of the piece reachable from s, outside s
    for nid in sorted(universe):
        if nid in s:
            continue
        n = model.node(nid)
        if any(v.node in s or v.node in below for v in n.inputs):
            below.add(nid)
    return not any(v.node in below for nid in s for v in model.node(nid).inputs)


def _has_compute(model: Graph, ids: Iterable[int]) -> bool:
    return any(model.node(i).op in COMPUTE for i in ids)


def _multilinear(model: Graph, ids: Iterable[int]) -> bool:
    try:
        g, _ = make_subprogram(model, ids)
        check_multilinear(g)
    except (BoxError, IRError):
        return False
    return True


def _useful(model: Graph, s: set[int]) -> bool:
    """At most two outputs, none of them a pure rearrangement of the subset's inputs (a
    mutant would have to reproduce it unchanged)."""
    _, site = make_subprogram(model, s)
    if len(site.outputs) > 2:
        return False
    for v in site.outputs:
        n = model.node(v.node)
        if get_op(n.op).has("movement") and all(u.node not in s for u in n.inputs):
            return False
    return True


def subsets(model: Graph, piece: list[int], max_ops: int) -> list[list[int]]:
    """Maximal connected convex multi-linear subsets of up to `max_ops` ops (with at least
    one conv/matmul/pool), plus every single compute op."""
    universe = set(piece)
    nbrs: dict[int, set[int]] = {i: set() for i in piece}
    for i in piece:
        for v in model.node(i).inputs:
            if v.node in universe:
                nbrs[i].add(v.node)
                nbrs[v.node].add(i)
    found: set[frozenset[int]] = set()
    frontier = [frozenset({i}) for i in piece]
    seen: set[frozenset[int]] = set(frontier)
    while frontier and len(seen) < MAX_SUBSETS_PER_PIECE:
        nxt = []
        for s in frontier:
            ops = count_ops(model.node(i) for i in s)
            if ops > max_ops:
                continue
            found.add(s)
            for i in s:
                for j in nbrs[i] - s:
                    t = s | {j}
                    if t not in seen:
                        seen.add(t)
                        nxt.append(t)
        frontier = nxt
    good = [s for s in found if _has_compute(model, s) and _convex(model, set(s), universe)
            and _multilinear(model, s) and _useful(model, set(s))]
    maximal = [s for s in good if not any(s < t for t in good)]
    singles = [frozenset({i}) for i in piece if model.node(i).op in COMPUTE
               and _multilinear(model, [i])]
    out = {s for s in maximal} | set(singles)
    return [sorted(s) for s in sorted(out, key=lambda s: (min(s), len(s)))]


def _reach(model: Graph) -> dict[int, set[int]]:
    reach: dict[int, set[int]] = {}
    for n in model.nodes:
        r: set[int] = set()
        for v in n.inputs:
            r |= reach[v.node] | {v.node}
        reach[n.id] = r
    return reach


def merge_groups(model: Graph, max_ops: int) -> list[list[int]]:
    """Groups of independent compute ops that can run as one: ops reading the same input,
    and pairs of independent ops with identical shapes and attributes."""
    compute = [n for n in model.nodes if eligible(n) and is_kernel(n.op)]
    reach = _reach(model)
    groups: list[list[int]] = []
    by_input: dict[tuple[str, Value], list[int]] = {}
    for n in compute:
        by_input.setdefault((n.op, n.inputs[0]), []).append(n.id)
    for ids in by_input.values():
        ids = [i for i in ids if not any(j in reach[i] for j in ids)][:max_ops]
        if len(ids) >= 2:
            groups.append(ids)
    by_sig: dict[tuple, list[int]] = {}
    for n in compute:
        sig = (n.op, n.attrs, tuple(model.type_of(v).shape for v in n.inputs))
        by_sig.setdefault(sig, []).append(n.id)
    for ids in by_sig.values():
        for a, c in itertools.combinations(ids, 2):
            na, nc = model.node(a), model.node(c)
            if (a not in reach[c] and c not in reach[a] and na.inputs[0] != nc.inputs[0]
                    and model.node(na.inputs[1].node).op == "weight"):
                groups.append([a, c])
                break
    return groups


def extract(model: Graph, max_ops: int = 4, merge: bool = True) -> list[Subprogram]:
    """The distinct multi-linear subprograms of a model, each with its sites."""
    chosen: list[tuple[str, list[int]]] = []
    for piece in pieces(model):
        if not _has_compute(model, piece):
            continue
        if count_ops(model.node(i) for i in piece) <= max_ops and _multilinear(model, piece):
            chosen.append(("piece", piece))
        else:
            chosen.extend(("subset", s) for s in subsets(model, piece, max_ops))
    if merge:
        chosen.extend(("merged", g) for g in merge_groups(model, max_ops))
    by_sig: dict[str, tuple[Graph, str, list[Site]]] = {}
    for kind, ids in chosen:
        try:
            g, site = make_subprogram(model, ids, name=f"{model.name}.{kind}")
            check_multilinear(g)
        except (BoxError, IRError):
            continue
        h = g.structural_hash
        if h not in by_sig:
            by_sig[h] = (g, kind, [])
        if all(set(site.nodes) != set(s.nodes) for s in by_sig[h][2]):
            by_sig[h][2].append(site)
    return [Subprogram(_renamed(g, f"{model.name}.sub{i}"), kind, tuple(sites))
            for i, (g, kind, sites) in enumerate(by_sig.values())]


def _renamed(g: Graph, name: str) -> Graph:
    return Graph(g.nodes, g.outputs, g.weights, name)
