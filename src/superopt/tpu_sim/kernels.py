"""Grouping a laid-out graph into kernels from per-node fusion decisions.

Semantics (XLA's producer-consumer fusion, as TpuGraphs encodes it): a node whose decision
is "fuse" is computed inside the kernel of every consumer, so a producer fused into
consumers that sit in different kernels is duplicated, work and operand reads included.
A node that is not fused is the root of its own kernel, which writes the root's outputs to
HBM. Sources (inputs, weights, constants) live in HBM and are never kernels; bitcasts
(views that move no bytes, see `layout_rules`) are never kernels either: kernels read
through them.

Kernels cannot form cycles: every value a kernel reads from outside is the output of a
root that is a strict ancestor of the kernel's root, so the kernel graph inherits the
topological order of the roots. Decisions that cannot be honoured are repaired
deterministically, walking nodes in reverse topological order, and reported in
`Kernels.repaired`:

- a node whose value is a graph output (directly or through bitcasts), or that has no
  consumer, is materialised;
- an MXU op (matmul, conv2d) is not duplicated and is not fused into a kernel that already
  has one: a kernel has at most one "hero";
- a producer is duplicated into at most `MAX_DUPLICATES` kernels (this also keeps the total
  kernel size linear in the graph size).

A decision may also name the root of a later kernel (an int): the node is computed in that
kernel, which writes its value as an extra output (XLA's multi-output fusion, e.g. a
convolution's epilogue writing both an activation and a pooling mask). Its consumers outside
that kernel must belong to kernels whose roots come later, which read the written value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from superopt.ir.graph import Graph, Node, Value
from superopt.ir.opdef import SOURCE, get_op
from superopt.ir.types import TensorType
from superopt.tpu_sim.layout import NodeLayouts
from superopt.tpu_sim.layout_rules import LAYOUT_RULES
from superopt.tpu_sim.op_costs import is_mxu_op

MAX_DUPLICATES = 8


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel: its root, its member nodes (topological order, root last), the values it
    reads from HBM (resolved through bitcasts) and the values it writes."""

    root: int
    nodes: tuple[int, ...]
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    hero: int | None

    def __len__(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class Kernels:
    """The partition of a laid-out graph into kernels."""

    kernels: tuple[Kernel, ...]  # in topological order of their roots
    kernel_of: tuple[tuple[int, ...], ...]  # node id -> roots of the kernels computing it
    bitcasts: frozenset[int]  # nodes that are views
    resolved: Mapping[int, Value]  # bitcast node -> the materialised value it views
    repaired: tuple[tuple[int, str], ...]  # (node, why its "fuse" decision was overridden)

    def resolve(self, v: Value) -> Value:
        return self.resolved.get(v.node, v)


@cache
def is_source(op: str) -> bool:
    return get_op(op).has(SOURCE)


def find_bitcasts(graph: Graph, layouts: NodeLayouts,
                  stored: Sequence[tuple[TensorType, ...]] | None = None) -> frozenset[int]:
    """Nodes that are views under these layouts (`stored`: per node, its types as stored;
    a node that stores another element type than its operand is never a view)."""
    per = layouts.per_node
    nodes = graph.nodes
    out: list[int] = []
    for n in nodes:
        if len(n.inputs) != 1 or is_source(n.op):
            continue
        v = n.inputs[0]
        rule = LAYOUT_RULES.get(n.op)
        if stored is None:
            if rule.bitcast(n, (nodes[v.node].types[v.index],), (per[v.node][v.index],),
                            per[n.id]):
                out.append(n.id)
            continue
        t_in, t_out = stored[v.node][v.index], stored[n.id]
        if t_in.dtype != t_out[0].dtype:
            continue
        view = Node(n.id, n.op, n.inputs, n.attrs, t_out)
        if rule.bitcast(view, (t_in,), (per[v.node][v.index],), per[n.id]):
            out.append(n.id)
    return frozenset(out)


def resolve_bitcasts(graph: Graph, bitcasts: frozenset[int]) -> dict[int, Value]:
    """Bitcast node -> the materialised value it views (through chains of bitcasts)."""
    resolved: dict[int, Value] = {}
    for b in sorted(bitcasts):  # topological: a bitcast's input is already resolved
        v = graph.nodes[b].inputs[0]
        resolved[b] = resolved.get(v.node, v) if v.node in bitcasts else v
    return resolved


def effective_consumers(graph: Graph, bitcasts: frozenset[int]
                        ) -> tuple[list[tuple[int, ...]], list[bool]]:
    """Per node: the non-bitcast consumers reached through bitcast chains, and whether a
    graph output views the node's value (so it must be materialised)."""
    n_nodes = len(graph.nodes)
    consumers = graph.consumers
    out_nodes = {v.node for v in graph.outputs}
    eff: list[tuple[int, ...]] = [()] * n_nodes
    needed: list[bool] = [False] * n_nodes
    for i in range(n_nodes - 1, -1, -1):
        direct = consumers[i]
        if not any(c in bitcasts for c in direct):
            eff[i] = direct
            needed[i] = i in out_nodes
            continue
        seen: dict[int, None] = {}
        need = i in out_nodes
        for c in direct:
            if c in bitcasts:
                for d in eff[c]:
                    seen[d] = None
                need = need or needed[c]
            else:
                seen[c] = None
        eff[i] = tuple(seen)
        needed[i] = need
    return eff, needed


def form_kernels(graph: Graph, layouts: NodeLayouts, fusion: Mapping[int, bool | int],
                 bitcasts: frozenset[int] | None = None,
                 consumers: tuple[list[tuple[int, ...]], list[bool]] | None = None) -> Kernels:
    """Group `graph` into kernels following `fusion` (see the module docstring).

    `bitcasts` and `consumers` (from `effective_consumers`) may be passed when known."""
    if bitcasts is None:
        bitcasts = find_bitcasts(graph, layouts)
    nodes = graph.nodes
    n_nodes = len(nodes)
    source = [is_source(n.op) for n in nodes]
    eff, needed = consumers if consumers is not None else effective_consumers(graph, bitcasts)

    resolved = resolve_bitcasts(graph, bitcasts)

    kernel_of: list[tuple[int, ...]] = [()] * n_nodes
    members: dict[int, list[int]] = {}
    hero_of: dict[int, int] = {}
    repaired: list[tuple[int, str]] = []
    extra: dict[int, list[int]] = {}  # root -> members written as extra outputs
    for i in range(n_nodes - 1, -1, -1):
        if source[i] or i in bitcasts:
            continue
        node = nodes[i]
        hero = is_mxu_op(node.op)
        reason = None
        decision = fusion.get(i, False)
        if not isinstance(decision, bool) and isinstance(decision, int):
            reason = _multi_output(i, decision, eff[i], kernel_of, hero, hero_of, n_nodes)
            if reason is None:
                kernel_of[i] = (decision,)
                members[decision].append(i)
                extra.setdefault(decision, []).append(i)
                if hero:
                    hero_of[decision] = i
                continue
            repaired.append((i, reason))
        elif decision:
            ks, reason = fuse_into(node.op, hero, eff[i], needed[i], kernel_of, hero_of.get)
            if ks is not None:
                kernel_of[i] = ks
                for k in ks:
                    members[k].append(i)
                    if hero:
                        hero_of[k] = i
                continue
            repaired.append((i, reason))
        kernel_of[i] = (i,)
        members[i] = [i]
        if hero:
            hero_of[i] = i

    kernels: list[Kernel] = []
    for root in sorted(members):
        mem = members[root]
        mem.reverse()
        ext: dict[Value, None] = {}
        for m in mem:
            for v in nodes[m].inputs:
                r = resolved.get(v.node, v) if v.node in bitcasts else v
                if source[r.node] or root not in kernel_of[r.node]:
                    ext[r] = None
        outs = nodes[root].outputs
        live = outs if len(outs) == 1 else tuple(v for v in outs if _has_use(graph, v))
        for m in sorted(extra.get(root, ())):
            more = nodes[m].outputs
            live = (*live, *(more if len(more) == 1 else
                             (v for v in more if _has_use(graph, v))))
        kernels.append(Kernel(root, tuple(mem), tuple(sorted(ext)), tuple(live),
                              hero_of.get(root)))
    return Kernels(tuple(kernels), tuple(kernel_of), bitcasts, MappingProxyType(resolved),
                   tuple(sorted(repaired)))


def fuse_into(op: str, hero: bool, consumers: tuple[int, ...], needed: bool,
              kernel_of: Sequence[tuple[int, ...]], holder: Callable[[int], int | None]
              ) -> tuple[tuple[int, ...] | None, str | None]:
    """Where a node decided "fuse" goes: the kernels of its consumers, or None and why the
    decision cannot be honoured. `holder(k)` is the MXU op kernel k already holds (among
    the nodes decided before this one), if any."""
    if needed:
        return None, "its value is a graph output"
    if not consumers:
        return None, "it has no consumer"
    ks = sorted({k for c in consumers for k in kernel_of[c]})
    if len(ks) > MAX_DUPLICATES:
        return None, f"it would be duplicated into {len(ks)} > {MAX_DUPLICATES} kernels"
    if hero and len(ks) > 1:
        return None, f"{op} is not duplicated ({len(ks)} consumer kernels)"
    if hero:
        h = holder(ks[0])
        if h is not None:
            return None, f"kernel %{ks[0]} already has an MXU op (%{h})"
    return tuple(ks), None


def _multi_output(i: int, root: int, consumers: tuple[int, ...],
                  kernel_of: list[tuple[int, ...]], hero: bool, hero_of: dict[int, int],
                  n_nodes: int) -> str | None:
    """Why node i cannot be an extra output of the kernel rooted at `root` (None: it can)."""
    if not i < root < n_nodes or kernel_of[root] != (root,):
        return f"%{root} is not the root of a later kernel"
    for c in consumers:
        for k in kernel_of[c]:
            if k != root and k < root:
                return f"its consumer's kernel %{k} runs before kernel %{root} writes it"
    if hero and root in hero_of:
        return f"kernel %{root} already has an MXU op (%{hero_of[root]})"
    return None


def _has_use(graph: Graph, v: Value) -> bool:
    return v in graph.outputs or any(v in graph.nodes[c].inputs for c in graph.consumers[v.node])
