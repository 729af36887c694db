"""The default compiler: the XLA-like baseline every tuner must beat, and `validate`.

`compile_default(graph)` runs four passes and returns a complete, valid configuration:

1. Layouts (`assign_layouts`): inputs and outputs row-major; every other value takes its op's
   default from `layout_rules` (convs keep features in lanes unless that pads more, matmuls
   produce row-major results, element-wise ops follow their largest operand, transposes
   become bitcasts); weights take the layout their first consumer wants. The layout pass
   (`apply_layouts`) then inserts a `layout` op wherever a consumer needs another layout
   than its producer gives (copies on conflict).
2. Fusion (`priority_fusion`): XLA's priority fusion over the analytical model. A producer
   fuses into all of its consumers or none; candidates are taken in order of priority =
   time unfused - time fused; matmul and conv producers are never duplicated and a kernel
   holds at most one; only small, cheap producers are duplicated; a kernel has at most 96
   operands and outputs; a transposing producer is not fused into a reduction.
3. Tiles: per kernel, the argmin of the analytical model over the tiles that fit VMEM.
4. Flags: double buffering on, no unrolling, and the MXUs split over output columns when a
   tile has enough of them (else over rows).

`compile_with(graph, config)` runs the same passes but takes every choice the (possibly
partial) configuration makes, and the default for the rest.
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, Node, Value
from superopt.ir.passes import Origin, identity_origin
from superopt.ir.types import DType, TensorType
from superopt.tpu_sim import cost as cost_module
from superopt.tpu_sim.bounds import Bounds, plan
from superopt.tpu_sim.config import DEFAULT_FLAGS, Compiled, Config, Flags
from superopt.tpu_sim.cost import (
    OP_COSTS,
    CostModel,
    NodeTypes,
    OpView,
    Signature,
    analytical,
    cost_model,
    kernel_signature,
)
from superopt.tpu_sim.hardware import Hardware, get_hardware
from superopt.tpu_sim.kernels import (
    MAX_DUPLICATES,
    Kernel,
    effective_consumers,
    find_bitcasts,
    form_kernels,
    is_source,
    resolve_bitcasts,
)
from superopt.tpu_sim.layout import (
    Layout,
    NodeLayouts,
    is_layout,
    padded_bytes,
    paused_gc,
    row_major,
)
from superopt.tpu_sim.layout_rules import LAYOUT_RULES
from superopt.tpu_sim.op_costs import is_mxu_op, op_rule

MAX_OPERANDS = 96  # operands + outputs of one fusion (XLA's limit)
MAX_DUPLICATED_OPS = 4  # a producer group duplicated into several kernels stays this small


class InvalidConfig(IRError):
    """A configuration that cannot be compiled or does not pass `validate`."""


# ---- layouts ------------------------------------------------------------------------------

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


# ---- fusion -----------------------------------------------------------------------------------

Key = tuple[int, int]  # a value as (node, output index): hashes in C, unlike Value


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
                resolved: Mapping[int, Value], op_costs: dict,
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
    ext = {v: b for v, b in c.ext.items() if v[0] != p_root}
    for v, b in p.ext.items():
        ext[v] = max(ext.get(v, 0.0), b)
    return _Group(c.members, ext, c.out_bytes, c.mxu_s + p.mxu_s, c.vec_s + p.vec_s,
                  c.hero or p.hero, c.reduction or p.reduction, c.transposing or p.transposing,
                  c.cheap and p.cheap, c.outputs)._finish(hw)


def priority_fusion(graph: Graph, layouts: NodeLayouts, hw: Hardware,
                    bitcasts: frozenset[int] | None = None,
                    stored: tuple[tuple[TensorType, ...], ...] | None = None
                    ) -> dict[int, bool]:
    """XLA-like priority fusion (see the module docstring); returns "fuse" per node.
    `stored` gives each node's types as stored, when storage dtypes are overridden."""
    if bitcasts is None:
        bitcasts = find_bitcasts(graph, layouts, stored)
    nodes = graph.nodes
    eff, needed = effective_consumers(graph, bitcasts)
    resolved = resolve_bitcasts(graph, bitcasts)
    units = [n.id for n in nodes if not is_source(n.op) and n.id not in bitcasts]
    per = layouts.per_node
    op_costs = OP_COSTS.setdefault(hw, {})
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


# ---- putting it together ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class LaidOut:
    """The layout pass's result and what the later passes derive from it alone."""

    layouts: NodeLayouts  # of the source graph, as assigned
    graph: Graph  # laid out
    origin: Origin
    laid_layouts: NodeLayouts
    bitcasts: frozenset[int]
    consumers: tuple[list[tuple[int, ...]], list[bool]]  # effective consumers, needed
    defaults: bool  # computed without overrides
    dtypes: Mapping[Value, DType] | None = None  # the storage overrides it was made with
    stored: tuple[tuple[TensorType, ...], ...] | None = None  # per laid-out node, as stored
    # Kernel members -> signature: on this graph and these layouts a kernel's signature is
    # a function of its members, so candidates that keep most kernels reuse them.
    signatures: dict[tuple[int, ...], Signature] = field(default_factory=dict)

    def signature(self, kernel: Kernel, resolved: Mapping[int, Value], model: CostModel
                  ) -> Signature:
        sig = self.signatures.get(kernel.nodes)
        if sig is None:
            if len(self.signatures) > 4 * len(self.graph.nodes) + 1024:
                self.signatures.clear()
            sig = self.signatures[kernel.nodes] = model.intern(
                kernel_signature(self.graph, self.laid_layouts, kernel, resolved, self.stored))
        return sig


_LAID: weakref.WeakKeyDictionary[Graph, LaidOut] = weakref.WeakKeyDictionary()


def clear_caches() -> None:
    """Forget remembered layout passes and every cost-model cache (for cold-start timing)."""
    _LAID.clear()
    cost_module.clear_caches()


def lay_out(graph: Graph, layouts: Mapping[Value, Layout] | None,
            dtypes: Mapping[Value, DType] | None = None) -> LaidOut:
    """Assign layouts (with `layouts` as overrides) and run the layout pass; `dtypes` are
    storage types of source values (`Config.dtypes`), carried to the laid-out graph.

    The last result per graph is remembered: passing back the `layouts` of a compiled
    configuration (the same object), or no layouts again, skips the pass, as a tuner that
    changes only fusion, tiles or flags does on every evaluation.
    """
    memo = _LAID.get(graph)
    same_dtypes = memo is not None and (dtypes is memo.dtypes or (not dtypes and not memo.dtypes))
    if memo is not None and same_dtypes and (layouts is memo.layouts
                                             or (not layouts and memo.defaults)):
        return memo
    assigned = assign_layouts(graph, layouts)
    laid, origin, laid_layouts = apply_layouts(graph, assigned)
    stored = stored_types(graph, laid, origin, dtypes) if dtypes else None
    bitcasts = find_bitcasts(laid, laid_layouts, stored)
    result = LaidOut(assigned, laid, origin, laid_layouts, bitcasts,
                     effective_consumers(laid, bitcasts), not layouts, dtypes or None, stored)
    _LAID[graph] = result
    return result


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


def default_flags(gemm_columns: int | None, tile: tuple[int, ...], hw: Hardware,
                  tile_columns: int | None = None) -> Flags:
    """Double buffering, no unrolling, MXUs split over columns when the tile has a block of
    128 columns per MXU, else over rows. `tile_columns` gives the columns of a `Bounds`
    tile's block (which `tile` does not spell out)."""
    if gemm_columns is None:
        return DEFAULT_FLAGS
    cols = tile_columns if tile_columns is not None else tile[1]
    split = "n" if cols // hw.mxu_dim >= hw.mxus else "m"
    return Flags(double_buffer=True, unroll=1, mxu_split=split)


def bounds_columns(model: CostModel, sig: Signature, tile: object) -> int | None:
    """Output columns of a `Bounds` tile's block on the MXU (None for other tiles)."""
    if not isinstance(tile, Bounds) or model.stats(sig).gemm is None:
        return None
    space = model.space(sig)
    if space.cols is None or model.problem(sig, tile):
        return None
    return plan(space, tile).ext[space.cols]


def compile_with(graph: Graph, config: Config | None = None,
                 hw: Hardware | str | None = None, fusion_default: str = "priority"
                 ) -> Compiled:
    """Compile `graph` under `config`, filling every missing choice with the default.

    Missing fusion decisions come from priority fusion (`fusion_default="priority"`) when
    the configuration leaves any node out, or are "materialise" with `"none"`.
    """
    with paused_gc():
        return _compile_with(graph, config, get_hardware(hw), fusion_default)


def _compile_with(graph: Graph, config: Config | None, hw: Hardware, fusion_default: str
                  ) -> Compiled:
    config = config or Config()
    if fusion_default not in ("priority", "none"):
        raise InvalidConfig(f"fusion_default must be 'priority' or 'none', found "
                            f"{fusion_default!r}")
    lo = lay_out(graph, config.layouts, config.dtypes)
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
    if len(given) >= n_laid:
        fusion = dict(given)
    elif fusion_default == "priority":
        fusion = priority_fusion(laid, laid_layouts, hw, bitcasts, lo.stored)
        fusion.update(given)
    else:
        fusion = {i: bool(given.get(i, False)) for i in range(n_laid)}
    partition = form_kernels(laid, laid_layouts, fusion, bitcasts, lo.consumers)
    model = cost_model(hw)
    sigs = tuple(lo.signature(k, partition.resolved, model) for k in partition.kernels)
    tiles: dict[int, tuple[int, ...]] = {}
    flags: dict[int, Flags] = {}
    for k, sig in zip(partition.kernels, sigs, strict=True):
        f = config.flags.get(k.root)
        tile = config.tiles.get(k.root)
        if tile is None:
            tile = model.default_tile(sig, f or DEFAULT_FLAGS)
        if f is None:
            g = model.stats(sig).gemm
            f = default_flags(g.n if g is not None else None, tile, hw,
                              bounds_columns(model, sig, tile))
        tiles[k.root] = tile
        flags[k.root] = f
    full = Config(layouts, MappingProxyType(fusion), MappingProxyType(tiles),
                  MappingProxyType(flags))
    return Compiled(graph, laid, origin, laid_layouts, full, partition, sigs, hw)


def compile_default(graph: Graph, hw: Hardware | str | None = None) -> Compiled:
    """The baseline: XLA-like layouts, priority fusion, argmin tiles and default flags."""
    return compile_with(graph, Config(), hw)


# ---- validation ------------------------------------------------------------------------------------

def problems(compiled: Compiled, lint: bool = True) -> list[str]:
    """Everything wrong with a compiled configuration (empty when it is valid): layouts
    that are not permutations or violate an operand requirement, kernels that read values
    no earlier kernel materialises (a cycle), more than one MXU op per kernel, overridden
    fusion decisions, missing or ill-shaped tiles, tiles that do not fit VMEM, bad flags."""
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
    model = cost_model(compiled.hw)
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


def validate(compiled: Compiled, lint: bool = True) -> None:
    """Raise `InvalidConfig` naming every problem of a compiled configuration."""
    found = problems(compiled, lint=lint)
    if found:
        shown = "; ".join(found[:10]) + (f"; ... {len(found) - 10} more" if len(found) > 10
                                         else "")
        raise InvalidConfig(f"{compiled.source.name}: invalid configuration: {shown}")


__all__ = ["InvalidConfig", "LaidOut", "apply_layouts", "assign_layouts", "clear_caches",
           "compile_default", "compile_with", "default_flags", "lay_out", "priority_fusion",
           "problems", "validate"]
