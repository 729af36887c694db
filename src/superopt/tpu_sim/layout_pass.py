"""The default compiler's layout pass: a layout per value, then copies where they conflict.

`assign_layouts(graph, overrides)`: inputs and outputs row-major; every other value takes
the override where one is given, else its op's default from `layout_rules` (convs keep
features in lanes unless that pads more, matmuls produce row-major results, element-wise
ops follow their largest operand, transposes become bitcasts); weights take the layout
their first consumer wants. `apply_layouts(graph, layouts)` then inserts a `layout` op
wherever a consumer needs another layout than its producer gives (copies on conflict).
`stored_types` carries storage dtypes (`Config.dtypes`) to the laid-out graph.
`lay_out` runs all three and returns a `LaidOut` (`Simulator.lay_out` caches it).
(Moved out of `compiler`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from superopt.ir.graph import Graph, Node, Value
from superopt.ir.passes import Origin, identity_origin
from superopt.ir.types import DType, TensorType
from superopt.tpu_sim.config import InvalidConfig
from superopt.tpu_sim.kernels import Kernel, Kernels, effective_consumers, find_bitcasts, is_source
from superopt.tpu_sim.layout import Layout, NodeLayouts, is_layout, row_major
from superopt.tpu_sim.layout_rules import LAYOUT_RULES
from superopt.tpu_sim.signature import Signature, kernel_signature

if TYPE_CHECKING:
    from superopt.tpu_sim.kernel_costs import KernelCosts

Override = dict[int, dict[int, Layout]]


def _per_node_overrides(graph: Graph, overrides: Mapping[Value, Layout] | None
                        ) -> tuple[tuple[Layout, ...], ...] | Override:
    """Overrides as per-node tuples (a complete NodeLayouts of this graph) or a sparse dict,
    each checked: an existing value, a permutation of its dims, inputs row-major."""
    nodes = graph.nodes
    if not overrides:
        return {}
    if isinstance(overrides, NodeLayouts) and len(overrides.per_node) == len(nodes):
        per = overrides.per_node
        for n, outs in zip(nodes, per, strict=True):
            if len(outs) != len(n.types) or not all(
                    is_layout(lay, t.rank) for lay, t in zip(outs, n.types, strict=True)):
                raise InvalidConfig(f"layouts {outs!r} for %{n.id} ({n.op}: "
                                    f"{', '.join(str(t) for t in n.types)}) are not "
                                    "permutations of its dims")
            if n.op == "input" and outs[0] != row_major(n.type.rank):
                raise InvalidConfig(f"input {n.attr('name')!r} (%{n.id}) arrives row-major; "
                                    f"layout {outs[0]} cannot be chosen for it")
        return per
    sparse: Override = {}
    for v, layout in overrides.items():
        if (not isinstance(v, Value) or not 0 <= v.node < len(nodes)
                or not 0 <= v.index < len(nodes[v.node].types)):
            raise InvalidConfig(f"layout given for {v}, which is not a value of graph "
                                f"{graph.name!r}")
        t = nodes[v.node].types[v.index]
        if not is_layout(layout, t.rank):
            raise InvalidConfig(f"layout {layout!r} for {v} ({t}) is not a permutation of "
                                "its dims")
        if nodes[v.node].op == "input" and layout != row_major(t.rank):
            raise InvalidConfig(f"input {nodes[v.node].attr('name')!r} ({v}) arrives "
                                f"row-major; layout {layout} cannot be chosen for it")
        sparse.setdefault(v.node, {})[v.index] = layout
    return sparse


def assign_layouts(graph: Graph, overrides: Mapping[Value, Layout] | None = None
                   ) -> NodeLayouts:
    """A layout for every value: the overrides where given, the op defaults elsewhere.

    Defaults propagate from the layouts actually chosen, so overriding one value moves its
    element-wise followers with it instead of creating a copy after every op. Weights take
    the layout their first consumer asks for; a `layout` op's result always has its
    attribute's layout.
    """
    nodes = graph.nodes
    ov = _per_node_overrides(graph, overrides)
    complete = isinstance(ov, tuple)
    per: list[tuple[Layout, ...] | None] = [None] * len(nodes)
    for node in nodes:
        nid = node.id
        given = ov[nid] if complete else ov.get(nid)  # type: ignore[union-attr]
        if node.op == "input":
            per[nid] = (row_major(node.type.rank),)
            continue
        if is_source(node.op):
            if given:
                per[nid] = (given[0],)
            continue  # else placed by its first consumer
        ins = tuple(per[v.node][v.index] if per[v.node] is not None else None  # type: ignore[index]
                    for v in node.inputs)
        rule = LAYOUT_RULES.get(node.op)
        in_types = None
        if complete and node.op != "layout":
            outs = given
        else:
            in_types = tuple(nodes[v.node].types[v.index] for v in node.inputs)
            defaults = rule.default(node, in_types, ins)
            if node.op == "layout" or not given:
                outs = defaults
            else:
                outs = tuple(given.get(i, d) for i, d in enumerate(defaults))
        per[nid] = outs
        if None in ins:
            if in_types is None:
                in_types = tuple(nodes[v.node].types[v.index] for v in node.inputs)
            req = rule.operands(node, in_types, outs, ins)
            for i, v in enumerate(node.inputs):
                if per[v.node] is None:
                    want = req[i] if i < len(req) else None
                    per[v.node] = (want if want is not None else row_major(in_types[i].rank),)
    return NodeLayouts(p if p is not None else tuple(row_major(t.rank) for t in n.types)
                       for p, n in zip(per, nodes, strict=True))


def apply_layouts(graph: Graph, layouts: NodeLayouts) -> tuple[Graph, Origin, NodeLayouts]:
    """The layout pass: insert a `layout` op wherever a consumer (or a graph output, which
    is row-major) needs another layout than its producer's.

    Returns `(laid, origin, laid_layouts)`: the laid-out graph, its origin (laid-out node ->
    source node ids, as `passes.transform` reports it) and the layouts of every value of the
    laid-out graph (the source's layouts, plus each inserted op's). `Simulator.lay_out`
    wraps this tuple, with what later passes derive from it, in a `LaidOut`.

    Nodes are copied verbatim (they are already valid and hash-consed), so this builds the
    new graph directly rather than through `passes.transform` and a GraphBuilder (which
    would re-infer every shape); the origin bookkeeping is the same as `transform`'s. A
    graph that needs no layout op is returned as it is, with the identity origin.
    """
    nodes = graph.nodes
    per = layouts.per_node
    wanted: dict[int, list[tuple[int, Layout]]] = {}  # consumer -> [(operand, layout)]
    for node in nodes:
        if not node.inputs or is_source(node.op):
            continue
        prods = tuple(per[v.node][v.index] for v in node.inputs)
        in_types = tuple(nodes[v.node].types[v.index] for v in node.inputs)
        req = LAYOUT_RULES.get(node.op).operands(node, in_types, per[node.id], prods)
        for i, want in enumerate(req):
            if want is not None and want != prods[i]:
                wanted.setdefault(node.id, []).append((i, want))
    out_wrong = [v for v in graph.outputs
                 if per[v.node][v.index] != row_major(graph.type_of(v).rank)]
    if not wanted and not out_wrong:
        return graph, identity_origin(graph), layouts

    new_nodes: list[Node] = []
    new_per: list[tuple[Layout, ...]] = []
    mapped: list[int] = [0] * len(nodes)  # old node -> new node (outputs keep their index)
    origin: dict[int, set[int]] = {}
    made: dict[tuple[int, int, Layout], int] = {}  # hash-consing of layout ops

    def relayout(v: Value, want: Layout, old: int) -> Value:
        key = (v.node, v.index, want)
        nid = made.get(key)
        if nid is None:
            nid = made[key] = len(new_nodes)
            new_nodes.append(Node(nid, "layout", (v,), (("minor_to_major", want),),
                                  (new_nodes[v.node].types[v.index],)))
            new_per.append((want,))
        origin.setdefault(nid, set()).add(old)
        return Value(nid)

    for node in nodes:
        inputs = [Value(mapped[v.node], v.index) for v in node.inputs]
        for i, want in wanted.get(node.id, ()):
            inputs[i] = relayout(inputs[i], want, node.id)
        if node.op == "layout":
            key = (inputs[0].node, inputs[0].index, tuple(node.attr("minor_to_major")))
            if key in made:  # an inserted layout op already computes it
                mapped[node.id] = made[key]
                origin.setdefault(made[key], set()).add(node.id)
                continue
            made[key] = len(new_nodes)
        nid = len(new_nodes)
        new_nodes.append(Node(nid, node.op, tuple(inputs), node.attrs, node.types))
        new_per.append(per[node.id])
        mapped[node.id] = nid
        origin.setdefault(nid, set()).add(node.id)
    outputs = []
    for v in graph.outputs:
        nv = Value(mapped[v.node], v.index)
        want = row_major(graph.type_of(v).rank)
        if per[v.node][v.index] != want:
            nv = relayout(nv, want, v.node)
        outputs.append(nv)
    laid = Graph(tuple(new_nodes), tuple(outputs), graph.weights, graph.name)
    return (laid, MappingProxyType({k: tuple(sorted(v)) for k, v in origin.items()}),
            NodeLayouts(new_per))


def stored_types(source: Graph, laid: Graph, origin: Origin, dtypes: Mapping[Value, DType]
                 ) -> tuple[tuple[TensorType, ...], ...]:
    """Per laid-out node, its values' types as stored: a source value's storage dtype where
    `dtypes` gives one; a layout op inserted by the layout pass stores what it copies."""
    for v, dt in dtypes.items():
        if (not isinstance(v, Value) or not 0 <= v.node < len(source.nodes)
                or not 0 <= v.index < len(source.nodes[v.node].types)):
            raise InvalidConfig(f"storage dtype given for {v}, which is not a value of graph "
                                f"{source.name!r}")
        if not isinstance(dt, DType):
            raise InvalidConfig(f"storage dtype of {v} must be a DType, found {dt!r}")
    out: list[tuple[TensorType, ...]] = []
    for n in laid.nodes:
        srcs = origin.get(n.id, ())
        if n.op == "layout" and (len(srcs) != 1 or source.nodes[srcs[0]].op != "layout"):
            v = n.inputs[0]
            out.append((out[v.node][v.index],))
            continue
        src = srcs[0] if len(srcs) == 1 and source.nodes[srcs[0]].op == n.op else None
        out.append(tuple(TensorType(t.shape, dtypes.get(Value(src, i), t.dtype))
                         if src is not None else t for i, t in enumerate(n.types)))
    return tuple(out)


@dataclass(frozen=True, eq=False)
class LaidOut:
    """The layout pass's result and what the later passes derive from it alone."""

    layouts: NodeLayouts  # of the source graph, as assigned
    graph: Graph  # laid out
    origin: Origin
    laid_layouts: NodeLayouts
    bitcasts: frozenset[int]
    consumers: tuple[list[tuple[int, ...]], list[bool]]  # effective consumers, needed
    dtypes: Mapping[Value, DType] | None = None  # the storage overrides it was made with
    stored: tuple[tuple[TensorType, ...], ...] | None = None  # per laid-out node, as stored
    # (members, inputs, outputs) -> signature: on this graph and these layouts that is all a
    # kernel's signature depends on, so candidates that keep most kernels reuse them. Not
    # the members alone: under other fusion decisions elsewhere the same members write
    # other values (squeezenet b1 tuned by the `ranked` strategy, which builds many
    # candidates on one layout: a fire module's kernel took another candidate's signature
    # and the pick was mispriced by 1% against a fresh compile).
    signatures: dict[tuple, Signature] = field(default_factory=dict)
    # (hardware, tile heuristic) -> the default compiler's fusion decisions on this graph
    # and layouts, with their partition when no fused kernel had to be split back: what a
    # compile without fusion choices would otherwise derive twice (`Simulator.default_fusion`).
    default_fusions: dict[tuple, tuple[Mapping[int, bool], Kernels | None]] = field(
        default_factory=dict)

    def signature(self, kernel: Kernel, resolved: Mapping[int, Value],
                  kernels_model: KernelCosts) -> Signature:
        """The kernel's signature, interned in `kernels_model` (cached per kernel)."""
        key = (kernel.nodes, kernel.inputs, kernel.outputs)
        sig = self.signatures.get(key)
        if sig is None:
            if len(self.signatures) > 4 * len(self.graph.nodes) + 1024:
                self.signatures.clear()
            sig = self.signatures[key] = kernels_model.intern(
                kernel_signature(self.graph, self.laid_layouts, kernel, resolved, self.stored))
        return sig


def lay_out(graph: Graph, layouts: Mapping[Value, Layout] | None = None,
            dtypes: Mapping[Value, DType] | None = None) -> LaidOut:
    """Assign layouts (with `layouts` as overrides) and run the layout pass; `dtypes` are
    storage types of source values (`Config.dtypes`), carried to the laid-out graph.
    Uncached: `Simulator.lay_out` remembers results by content."""
    assigned = assign_layouts(graph, layouts)
    laid, origin, laid_layouts = apply_layouts(graph, assigned)
    stored = stored_types(graph, laid, origin, dtypes) if dtypes else None
    bitcasts = find_bitcasts(laid, laid_layouts, stored)
    return LaidOut(assigned, laid, origin, laid_layouts, bitcasts,
                   effective_consumers(laid, bitcasts), dtypes or None, stored)
