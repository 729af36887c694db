"""The published transformation families (PET, TASO), as seed mutants of a subprogram.

Each family rewrites one core op (or a group of independent ops) of a subprogram and
keeps the rest; whether the result is fully or partially equivalent is *not* assumed
here, the box test decides. Families:

- stack_width / stack_height: stack the two spatial halves of a conv input into the
  batch and unstack the output (wrong next to the seam); unstack_*: the reverse;
- channel_to_height / channel_to_width: move half the channels into the spatial dim and
  use a stride-2 conv with the kernel folded the same way (fully equivalent);
- dilated_to_regular: a dilated conv as a regular conv over de-interleaved rows and
  columns stacked spatially (PET's CSRNet case; wrong at the block seams);
  dilated_to_batch: the same with the sub-images in the batch (exact space-to-batch);
- tile: spatial tiling of a large image into batched tiles (wrong near tile seams);
- pad_conv_slice: zero-pad the input to a rounder size, conv, slice;
- conv1x1_as_matmul: a 1x1 conv as one matmul over positions;
- merge_shared_conv / merge_shared_matmul: ops reading one input become one op with
  concatenated weights (kernels enlarged to a common size), then split;
- merge_grouped_conv / merge_batched_matmul: independent ops of the same shape become
  one grouped conv or one batched matmul, then split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Node, Value
from superopt.ir.kernels import resolve_pads
from superopt.mutants.rebuild import Lookup, fold, rebuild


@dataclass(frozen=True)
class Mutant:
    graph: Graph
    family: str
    detail: str = ""


NodeFamily = Callable[[GraphBuilder, Node, Value, Value], Value | None]


def _conv_attrs(n: Node, x: tuple[int, ...], w: tuple[int, ...]) -> dict:
    a = n.a
    a["padding"] = resolve_pads(a["padding"], x[2:], w[2:], a["stride"], a["dilation"])
    return a


def _plain(n: Node) -> bool:
    return n.op == "conv2d" and n.attr("activation") == "none"


# ---- single-conv families: (b, node, x, w) -> replacement value or None ----------------

def stack_spatial(axis: int, parts: int = 2) -> NodeFamily:
    """Halves (or `parts` chunks) of spatial dim `axis` into the batch."""
    def fam(b: GraphBuilder, n: Node, x: Value, w: Value) -> Value | None:
        xs, ws = b.shape(x), b.shape(w)
        a = _conv_attrs(n, xs, ws)
        if xs[axis] % parts or n.type.shape[axis] % parts:
            return None
        xv = fold(b, x, axis, parts, True, 0, True)
        y = b.conv2d(xv, w, **a)
        if b.shape(y)[axis] * parts != n.type.shape[axis]:
            return None
        return fold(b, y, 0, parts, True, axis, True)  # type: ignore[arg-type]
    return fam


def unstack_spatial(axis: int) -> NodeFamily:
    """Pairs of images of the batch side by side in spatial dim `axis`."""
    def fam(b: GraphBuilder, n: Node, x: Value, w: Value) -> Value | None:
        xs, ws = b.shape(x), b.shape(w)
        if xs[0] % 2:
            return None
        a = _conv_attrs(n, xs, ws)
        y = b.conv2d(fold(b, x, 0, 2, True, axis, True), w, **a)
        if b.shape(y)[axis] != 2 * n.type.shape[axis]:
            return None
        return fold(b, y, axis, 2, True, 0, True)  # type: ignore[arg-type]
    return fam


def channel_to_spatial(axis: int) -> NodeFamily:
    """Half the input channels interleaved into spatial dim `axis`, kernel folded the same
    way, stride doubled along `axis`: the conv reads the same products."""
    def fam(b: GraphBuilder, n: Node, x: Value, w: Value) -> Value | None:
        xs, ws = b.shape(x), b.shape(w)
        a = _conv_attrs(n, xs, ws)
        d = axis - 2
        if xs[1] % 2 or a["groups"] != 1 or a["dilation"][d] != 1:
            return None
        xv = fold(b, x, 1, 2, True, axis, False)
        wv = fold(b, w, 1, 2, True, axis, False)
        stride = list(a["stride"])
        stride[d] *= 2
        pads = list(a["padding"])
        pads[2 * d] *= 2
        pads[2 * d + 1] *= 2
        a.update(stride=tuple(stride), padding=tuple(pads))
        return b.conv2d(xv, wv, **a)  # type: ignore[return-value]
    return fam


def dilated(to_batch: bool) -> NodeFamily:
    """A dilated conv as a regular one over the dilation's sub-images."""
    def fam(b: GraphBuilder, n: Node, x: Value, w: Value) -> Value | None:
        xs, ws = b.shape(x), b.shape(w)
        a = _conv_attrs(n, xs, ws)
        dil, pads, stride = a["dilation"], list(a["padding"]), a["stride"]
        dims = [d for d in (0, 1) if dil[d] > 1]
        if not dims or stride != (1, 1):
            return None
        for d in dims:
            k = dil[d]
            if xs[2 + d] % k or n.type.shape[2 + d] % k or pads[2 * d] % k or pads[2 * d + 1] % k:
                return None
        xv = x
        for d in dims:
            xv = (fold(b, xv, 2 + d, dil[d], False, 0, True) if to_batch
                  else fold(b, xv, 2 + d, dil[d], False, 2 + d, True))
            pads[2 * d] //= dil[d]
            pads[2 * d + 1] //= dil[d]
        a.update(dilation=(1, 1), padding=tuple(pads))
        y = b.conv2d(xv, w, **a)
        for d in reversed(dims):
            y = (fold(b, y, 0, dil[d], True, 2 + d, False) if to_batch
                 else fold(b, y, 2 + d, dil[d], True, 2 + d, False))
        return y if b.shape(y) == n.type.shape else None  # type: ignore[return-value]
    return fam


def tile(tiles: int) -> NodeFamily:
    """Pad the image to a multiple of `tiles`, cut it into tiles x tiles batched tiles,
    conv each tile with the original padding, reassemble and crop."""
    def fam(b: GraphBuilder, n: Node, x: Value, w: Value) -> Value | None:
        xs, ws = b.shape(x), b.shape(w)
        a = _conv_attrs(n, xs, ws)
        if a["stride"] != (1, 1) or n.type.shape[2:] != xs[2:]:
            return None
        size = [-(-s // tiles) * tiles for s in xs[2:]]
        if min(size) // tiles < max(ws[2:]):
            return None
        xv = x
        if size != list(xs[2:]):
            xv = b.pad(x, pads=(0, 0, 0, 0, 0, 0, size[0] - xs[2], size[1] - xs[3]))
        xv = fold(b, fold(b, xv, 2, tiles, True, 0, True), 3, tiles, True, 0, True)
        y = b.conv2d(xv, w, **a)
        y = fold(b, fold(b, y, 0, tiles, True, 3, True), 0, tiles, True, 2, True)
        if b.shape(y)[2:] != tuple(size):
            return None
        out = n.type.shape
        if b.shape(y) != out:
            y = b.slice(y, starts=(0, 0, 0, 0), ends=out)  # type: ignore[assignment]
        return y
    return fam


def pad_conv_slice(multiple: int = 8) -> NodeFamily:
    """Zero-pad the bottom and right of the input up to a multiple of `multiple`."""
    def fam(b: GraphBuilder, n: Node, x: Value, w: Value) -> Value | None:
        xs, ws = b.shape(x), b.shape(w)
        a = _conv_attrs(n, xs, ws)
        extra = [(-s) % multiple for s in xs[2:]]
        if not any(extra):
            return None
        xv = b.pad(x, pads=(0, 0, 0, 0, 0, 0, *extra))
        y = b.conv2d(xv, w, **a)
        return b.slice(y, starts=(0, 0, 0, 0), ends=n.type.shape)  # type: ignore[return-value]
    return fam


def conv1x1_as_matmul(b: GraphBuilder, n: Node, x: Value, w: Value) -> Value | None:
    xs, ws = b.shape(x), b.shape(w)
    a = _conv_attrs(n, xs, ws)
    if ws[2:] != (1, 1) or a["stride"] != (1, 1) or any(a["padding"]) or a["groups"] != 1:
        return None
    nb, c, h, wd = xs
    xm = b.reshape(b.transpose(x, perm=(0, 2, 3, 1)), shape=(nb * h * wd, c))
    wm = b.transpose(b.reshape(w, shape=(ws[0], c)), perm=(1, 0))
    y = b.matmul(xm, wm)
    return b.transpose(b.reshape(y, shape=(nb, h, wd, ws[0])), perm=(0, 3, 1, 2))  # type: ignore[return-value]


CONV_FAMILIES: dict[str, NodeFamily] = {
    "stack_width": stack_spatial(3),
    "stack_height": stack_spatial(2),
    "unstack_width": unstack_spatial(3),
    "unstack_height": unstack_spatial(2),
    "channel_to_height": channel_to_spatial(2),
    "channel_to_width": channel_to_spatial(3),
    "dilated_to_regular": dilated(False),
    "dilated_to_batch": dilated(True),
    "tile2": tile(2),
    "tile4": tile(4),
    "pad_conv_slice": pad_conv_slice(8),
    "conv1x1_as_matmul": conv1x1_as_matmul,
}


def _replace_one(graph: Graph, node_id: int, fam: NodeFamily) -> Graph | None:
    failed = False

    def replace(b: GraphBuilder, node: Node, get: Lookup) -> tuple[Value, ...] | None:
        nonlocal failed
        if node.id != node_id:
            return None
        x, w = (get(v) for v in node.inputs)
        try:
            y = fam(b, node, x, w)
        except (IRError, ValueError):
            y = None
        if y is None or b.shape(y) != node.type.shape:
            failed = True
            return None
        return (y,)

    g = rebuild(graph, replace, graph.name)
    return None if failed else g


# ---- merges of several ops ---------------------------------------------------------------

def _merge(graph: Graph, members: list[Node],
           build: Callable[[GraphBuilder, list[Node], Lookup], list[Value] | None]) -> Graph | None:
    ids = {m.id for m in members}
    cache: dict[int, Value] = {}
    failed = False

    def replace(b: GraphBuilder, node: Node, get: Lookup) -> tuple[Value, ...] | None:
        nonlocal failed
        if node.id not in ids or failed:
            return None
        if not cache:
            try:
                outs = build(b, members, get)
            except (IRError, ValueError):
                outs = None
            if outs is None:
                failed = True
                return None
            cache.update({m.id: v for m, v in zip(members, outs, strict=True)})
        return (cache[node.id],)

    g = rebuild(graph, replace, graph.name)
    return None if failed else g


def _split_back(b: GraphBuilder, y: Value, axis: int, sizes: list[int]) -> list[Value]:
    parts = b.split(y, axis=axis, sizes=tuple(sizes))
    return list(parts) if isinstance(parts, tuple) else [parts]


def _merge_shared_conv(b: GraphBuilder, ms: list[Node], get: Lookup) -> list[Value] | None:
    x = get(ms[0].inputs[0])
    xs = b.shape(x)
    ws = [get(m.inputs[1]) for m in ms]
    attrs = [_conv_attrs(m, xs, b.shape(w)) for m, w in zip(ms, ws, strict=True)]
    if any(a["groups"] != 1 or a["stride"] != attrs[0]["stride"]
           or a["dilation"] != attrs[0]["dilation"] for a in attrs):
        return None
    kh = max(b.shape(w)[2] for w in ws)
    kw = max(b.shape(w)[3] for w in ws)
    # Enlarging a kernel by (K - k)/2 zeros a side is exact when its padding grows by the
    # same amount; members that disagree make the merge partial (the box test says where).
    pads = []
    for a, w in zip(attrs, ws, strict=True):
        dh, dw = (kh - b.shape(w)[2]) // 2, (kw - b.shape(w)[3]) // 2
        p = a["padding"]
        pads.append((p[0] + dh, p[1] + dh, p[2] + dw, p[3] + dw))
    grown = [w if b.shape(w)[2:] == (kh, kw) else b.enlarge(w, kh=kh, kw=kw) for w in ws]
    y = b.conv2d(x, b.concat(*grown, axis=0), **{**attrs[0], "padding": pads[0]})
    if b.shape(y)[2:] != ms[0].type.shape[2:]:
        return None
    return _split_back(b, y, 1, [m.type.shape[1] for m in ms])


def _merge_grouped_conv(b: GraphBuilder, ms: list[Node], get: Lookup) -> list[Value] | None:
    xs = [get(m.inputs[0]) for m in ms]
    ws = [get(m.inputs[1]) for m in ms]
    a = _conv_attrs(ms[0], b.shape(xs[0]), b.shape(ws[0]))
    g = a["groups"]
    a["groups"] = g * len(ms)
    if len({b.shape(x) for x in xs}) != 1 or len({b.shape(w) for w in ws}) != 1:
        return None
    if g > 1:  # interleave is needed to keep group order; only plain convs merge
        return None
    y = b.conv2d(b.concat(*xs, axis=1), b.concat(*ws, axis=0), **a)
    return _split_back(b, y, 1, [m.type.shape[1] for m in ms])


def _merge_shared_matmul(b: GraphBuilder, ms: list[Node], get: Lookup) -> list[Value] | None:
    x = get(ms[0].inputs[0])
    ws = [get(m.inputs[1]) for m in ms]
    if len({b.shape(w)[:-1] for w in ws}) != 1:
        return None
    y = b.matmul(x, b.concat(*ws, axis=len(b.shape(ws[0])) - 1))
    return _split_back(b, y, len(b.shape(y)) - 1, [m.type.shape[-1] for m in ms])


def _merge_batched_matmul(b: GraphBuilder, ms: list[Node], get: Lookup) -> list[Value] | None:
    a_s = [get(m.inputs[0]) for m in ms]
    b_s = [get(m.inputs[1]) for m in ms]
    if len({b.shape(v) for v in a_s}) != 1 or len({b.shape(v) for v in b_s}) != 1:
        return None

    def stack(vs: list[Value]) -> Value:
        return b.concat(*[b.reshape(v, shape=(1, *b.shape(v))) for v in vs], axis=0)  # type: ignore[misc]

    y = b.matmul(stack(a_s), stack(b_s))
    parts = _split_back(b, y, 0, [1] * len(ms))
    return [b.reshape(p, shape=m.type.shape) for p, m in zip(parts, ms, strict=True)]  # type: ignore[misc]


def _independent(graph: Graph, ids: list[int]) -> bool:
    """No member reaches another member."""
    reach: dict[int, set[int]] = {}
    for n in graph.nodes:
        r: set[int] = set()
        for v in n.inputs:
            r |= reach[v.node] | {v.node}
        reach[n.id] = r
    return not any(a in reach[c] for a in ids for c in ids if a != c)


def merge_mutants(graph: Graph) -> Iterator[Mutant]:
    convs = [n for n in graph.nodes if _plain(n)]
    mms = [n for n in graph.nodes if n.op == "matmul" and n.attr("activation") == "none"]
    for kind, nodes in (("conv", convs), ("matmul", mms)):
        if len(nodes) < 2 or not _independent(graph, [n.id for n in nodes]):
            continue
        shared = len({n.inputs[0] for n in nodes}) == 1
        if kind == "conv":
            fam, build = (("merge_shared_conv", _merge_shared_conv) if shared
                          else ("merge_grouped_conv", _merge_grouped_conv))
        else:
            fam, build = (("merge_shared_matmul", _merge_shared_matmul) if shared
                          else ("merge_batched_matmul", _merge_batched_matmul))
        g = _merge(graph, nodes, build)
        if g is not None:
            yield Mutant(g, fam, f"{len(nodes)} {kind}s")


def family_mutants(graph: Graph, only: set[str] | None = None) -> list[Mutant]:
    """Every applicable family mutant of `graph` (each conv rewritten on its own, plus
    merges of the independent convs or matmuls)."""
    out: list[Mutant] = []
    seen = {graph.structural_hash}
    for n in graph.nodes:
        if not _plain(n):
            continue
        for name, fam in CONV_FAMILIES.items():
            if only is not None and name not in only:
                continue
            g = _replace_one(graph, n.id, fam)
            if g is not None and g.structural_hash not in seen:
                seen.add(g.structural_hash)
                out.append(Mutant(g, name, f"conv %{n.id}"))
    for m in merge_mutants(graph):
        if (only is None or m.family in only) and m.graph.structural_hash not in seen:
            seen.add(m.graph.structural_hash)
            out.append(m)
    return out
