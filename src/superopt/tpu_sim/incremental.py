"""Re-forming kernels after a few fusion decisions change, without walking the graph.

`form_kernels` decides node by node in reverse topological order: a node's kernels depend
only on its (effective) consumers' kernels, on which later MXU op already claimed a
kernel, and on its own decision. So when the decisions of a few nodes change, only those
nodes and, transitively, producers whose consumers' kernels changed need deciding again.
`reform_kernels` does exactly that with a max-heap of node ids (the same reverse
topological order), then rebuilds only the kernels whose membership changed; the result
equals `form_kernels` on the new decisions (tests compare them on random flips).

Multi-output decisions (an int naming a later root) depend on more state than a node's
consumers; when either decision set contains one, this falls back to `form_kernels`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from superopt.ir.graph import Graph, Value
from superopt.tpu_sim.kernels import (
    Kernel,
    Kernels,
    _has_use,
    form_kernels,
    fuse_into,
    is_source,
)
from superopt.tpu_sim.layout import NodeLayouts
from superopt.tpu_sim.op_costs import is_mxu_op


def _producers(graph: Graph, i: int, bitcasts: frozenset[int]) -> Iterable[int]:
    """Non-source, non-bitcast nodes whose values node i reads (through bitcast chains)."""
    stack = [v.node for v in graph.nodes[i].inputs]
    while stack:
        p = stack.pop()
        if p in bitcasts:
            stack.extend(v.node for v in graph.nodes[p].inputs)
        elif not is_source(graph.nodes[p].op):
            yield p


def reform_kernels(graph: Graph, prev: Kernels, prev_fusion: Mapping[int, bool | int],
                   fusion: Mapping[int, bool | int], changed: Iterable[int],
                   bitcasts: frozenset[int], consumers: tuple[list[tuple[int, ...]], list[bool]],
                   layouts: NodeLayouts | None = None, bool_only: bool = False) -> Kernels:
    """`form_kernels(graph, layouts, fusion, ...)`, reusing `prev` (formed from
    `prev_fusion`) where the decisions in `changed` cannot reach. `bool_only` promises
    that both decision sets hold no multi-output (int) decision (else they are scanned).
    Kernels that did not change are the same objects as in `prev`."""
    nodes = graph.nodes
    changed = sorted(i for i in set(changed)
                     if i not in bitcasts and not is_source(nodes[i].op))
    if not changed:
        return prev
    if not bool_only and (any(not isinstance(d, bool) for d in fusion.values()) or any(
            not isinstance(d, bool) for d in prev_fusion.values())):
        return form_kernels(graph, layouts, fusion, bitcasts, consumers)  # type: ignore[arg-type]
    eff, needed = consumers
    kernel_of = list(prev.kernel_of)
    # Which MXU op each kernel holds; only roots that may change are consulted.
    hero_of = {k.root: k.hero for k in prev.kernels if k.hero is not None}
    repaired = dict(prev.repaired)
    touched_roots: set[int] = set()
    heap = [-i for i in changed]
    heapq.heapify(heap)
    queued = set(changed)
    while heap:
        i = -heapq.heappop(heap)
        queued.discard(i)
        node = nodes[i]
        hero = is_mxu_op(node.op)
        old = kernel_of[i]
        reason = None
        new: tuple[int, ...] | None = None
        if fusion.get(i, False):
            # A kernel's MXU op counts when a later node (decided earlier) holds it.
            ks, reason = fuse_into(node.op, hero, eff[i], needed[i], kernel_of,
                                   lambda k, i=i: h if (h := hero_of.get(k)) is not None
                                   and h > i else None)
            new = ks
        if new is None:
            new = (i,)
        if reason is None:
            repaired.pop(i, None)
        else:
            repaired[i] = reason
        if hero:
            for k in old:
                if hero_of.get(k) == i:
                    del hero_of[k]
                if k not in new:  # MXU ops this one kept out of k may now join it
                    blocked = f"kernel %{k} already has an MXU op (%{i})"
                    for r, why in repaired.items():
                        if why == blocked and r not in queued:
                            queued.add(r)
                            heapq.heappush(heap, -r)
            for k in new:
                holder = hero_of.get(k)
                if holder is not None and holder != i and holder < i:
                    # A lower MXU op held the kernel; now it must be decided again.
                    if holder not in queued:
                        queued.add(holder)
                        heapq.heappush(heap, -holder)
                hero_of[k] = i
        if new != old:
            kernel_of[i] = new
            touched_roots.update(old)
            touched_roots.update(new)
            for p in _producers(graph, i, bitcasts):
                if p not in queued:
                    queued.add(p)
                    heapq.heappush(heap, -p)
    if not touched_roots:
        return Kernels(prev.kernels, tuple(kernel_of), prev.bitcasts, prev.resolved,
                       tuple(sorted(repaired.items())))
    resolved = prev.resolved
    rebuilt: dict[int, Kernel | None] = {}
    for root in touched_roots:
        if kernel_of[root] != (root,):
            rebuilt[root] = None  # no longer a kernel
            continue
        members = {root}
        stack = [root]
        while stack:
            m = stack.pop()
            for p in _producers(graph, m, bitcasts):
                if p not in members and root in kernel_of[p]:
                    members.add(p)
                    stack.append(p)
        mem = sorted(members)
        ext: dict[Value, None] = {}
        for m in mem:
            for v in nodes[m].inputs:
                r = resolved.get(v.node, v) if v.node in bitcasts else v
                if is_source(nodes[r.node].op) or root not in kernel_of[r.node]:
                    ext[r] = None
        outs = nodes[root].outputs
        live = outs if len(outs) == 1 else tuple(v for v in outs if _has_use(graph, v))
        hero = next((m for m in reversed(mem) if is_mxu_op(nodes[m].op)), None)
        rebuilt[root] = Kernel(root, tuple(mem), tuple(sorted(ext)), tuple(live), hero)
    kernels = [k for k in prev.kernels if k.root not in rebuilt]
    kernels.extend(k for k in rebuilt.values() if k is not None)
    kernels.sort(key=lambda k: k.root)
    return Kernels(tuple(kernels), tuple(kernel_of), prev.bitcasts, resolved,
                   tuple(sorted(repaired.items())))


__all__ = ["reform_kernels"]
