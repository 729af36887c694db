"""Batched exact mod-p evaluation of operator templates, and fingerprints of the results.

Every kernel takes arrays with a leading batch axis (size n, or 1 to broadcast one operand
over the batch) and computes, for each batch row, exactly what `superopt.ir.modp` computes
for one graph node: the same prime, the same centred relu, the same 1/9 average-pool
divisor, the same constants. Shapes and attributes come from the IR's own shape rules
(`OpDef.shape`), so a template applies exactly where the IR would accept the node. A test
checks value-for-value agreement with `interpret(graph, feeds, "modp")`.

A fingerprint is two 64-bit multilinear hashes of a tensor's residues (keys drawn once from
a fixed seed) mixed with its shape: equal tensors always collide, distinct ones with
probability about 2**-60 per pair (and every collision is re-checked on fresh inputs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from superopt.ir import kernels, modp
from superopt.ir.errors import IRError
from superopt.ir.kernels import P
from superopt.ir.opdef import get_op
from superopt.ir.ops.pool import avg_divisor, pool_geometry
from superopt.ir.types import TensorType
from superopt.substitutions.presets import Template

Shape = tuple[int, ...]


# ---- typing -------------------------------------------------------------------------

def full_attrs(t: Template, shapes: Sequence[Shape], split_mid: int | None = None
               ) -> dict[str, Any] | None:
    """The IR attributes of the node `t` makes from operands of these shapes, or None when
    the template does not apply (TASO's kernel, rank and channel filters)."""
    a = t.attr_dict
    if t.kind == "conv":
        x, w = shapes
        if len(x) != 4 or len(w) != 4 or (w[2], w[3]) not in t.kernels:
            return None
        if w[1] == 0 or x[1] % w[1]:
            return None
        groups = x[1] // w[1]
        if w[0] % groups:
            return None
        a["groups"] = groups
    elif t.kind == "split":
        if split_mid is None:
            return None
        dim = shapes[0][t.axis]
        if not 0 < split_mid < dim:
            return None
        a["sizes"] = (split_mid, dim - split_mid)
    elif t.kind in ("concat", "transpose") and t.rank and any(len(s) != t.rank for s in shapes):
        return None
    elif t.kind == "ew" and shapes[0] != shapes[1]:
        return None  # TASO's element-wise ops take equal shapes (no broadcasting)
    elif t.kind == "matmul":
        x, w = shapes
        if len(x) != 2 or len(w) != 2 or w[0] == 2:
            return None  # TASO: 2-D only, and the right operand never has batch-size rows
    elif t.kind == "enlarge":
        (w,) = shapes
        if len(w) != 4 or (w[2], w[3]) == (a["kh"], a["kw"]):
            return None
    elif t.kind == "pool" and len(shapes[0]) != 4:
        return None
    elif t.kind == "op" and t.rank and len(shapes[0]) != t.rank:
        return None
    return a


def resolve(t: Template, shapes: Sequence[Shape], split_mid: int | None = None
            ) -> tuple[dict[str, Any], tuple[Shape, ...]] | None:
    """The node's complete IR attributes (defaults filled in) and output shapes by the IR's
    own shape rule, or None where the template or the IR rejects the operands."""
    attrs = full_attrs(t, shapes, split_mid)
    if attrs is None:
        return None
    op = get_op(t.op)
    try:
        types = tuple(TensorType(tuple(s)) for s in shapes)
        checked = op.check_attrs(attrs)
        if op.canonicalize is not None:
            checked = op.canonicalize(types, checked)
        outs = op.shape(types, checked)
    except IRError:
        return None
    result = tuple(o.shape for o in outs)
    if any(0 in s for s in result):
        return None
    return checked, result


# ---- kernels ------------------------------------------------------------------------

def _conv(x: np.ndarray, w: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    """x (n|1, B, C, H, W), w (n|1, O, C/g, kh, kw) -> (n, B, O, OH, OW)."""
    n = max(x.shape[0], w.shape[0])
    _, bsz, c, h, wd = x.shape
    _, o, cg, kh, kw = w.shape
    g = a["groups"]
    stride, dil = a.get("stride", (1, 1)), a.get("dilation", (1, 1))
    pads = kernels.resolve_pads(a["padding"], (h, wd), (kh, kw), stride, dil)
    win = kernels.windows(x.reshape(-1, c, h, wd), (kh, kw), stride, dil, pads)
    oh, ow = win.shape[2], win.shape[3]
    cols = win.reshape(x.shape[0], bsz, g, cg, oh, ow, kh, kw).transpose(0, 1, 2, 4, 5, 3, 6, 7)
    cols = cols.reshape(x.shape[0], bsz, g, oh * ow, cg * kh * kw)
    wm = w.reshape(w.shape[0], 1, g, o // g, cg * kh * kw).transpose(0, 1, 2, 4, 3)
    y = kernels.modp_matmul(cols, wm)  # (n, B, g, OH*OW, O/g)
    y = y.transpose(0, 1, 2, 4, 3).reshape(n, bsz, o, oh, ow)
    return modp.activation(y, a.get("activation", "none"))


def _pool(x: np.ndarray, a: dict[str, Any], op: str) -> np.ndarray:
    n, bsz, c, h, w = x.shape
    shape4 = (bsz, c, h, w)
    pads, oh, ow = pool_geometry(shape4, a)
    flat = x.reshape(-1, c, h, w)
    if op == "pool2d_avg":
        total = kernels.windows(flat, a["kernel"], a["stride"], (1, 1), pads).sum(
            axis=(-1, -2)) % P
        div = avg_divisor(shape4, a)
        inv = np.vectorize(kernels.modp_inv, otypes=[np.int64])(div)
        y = total * inv % P
    else:
        win = kernels.windows(kernels.centred(flat), a["kernel"], a["stride"], (1, 1), pads,
                              fill=-P)
        y = win.max(axis=(-1, -2)) % P
    y = y.reshape(n, bsz, c, oh, ow)
    return modp.activation(y, a.get("activation", "none"))


def _table_rule(op: str, args: Sequence[np.ndarray], attrs: dict[str, Any]
                ) -> tuple[np.ndarray, ...]:
    """An element-wise op's mod-p rule applied to batched operands of equal rank (the batch
    axis broadcasts like any other)."""
    return tuple(np.asarray(v, dtype=np.int64)
                 for v in modp.TABLE.get(op)(tuple(args), attrs, None))


def _batched_op(op: str, args: Sequence[np.ndarray], attrs: dict[str, Any]
                ) -> tuple[np.ndarray, ...]:
    """Any op's mod-p rule on operands with a leading batch axis: non-negative axis
    attributes move past the batch axis, and lower-rank operands get unit axes after it so
    that their trailing axes still line up (rms_norm's weight)."""
    rank = max(a.ndim for a in args)
    aligned = [a.reshape(a.shape[0], *(1,) * (rank - a.ndim), *a.shape[1:]) for a in args]
    shifted: dict[str, Any] = dict(attrs)
    for name in ("axis", "axes"):
        v = shifted.get(name)
        if isinstance(v, int) and not isinstance(v, bool):
            shifted[name] = v + 1 if v >= 0 else v
        elif isinstance(v, tuple):
            shifted[name] = tuple(x + 1 if x >= 0 else x for x in v)
    return _table_rule(op, aligned, shifted)


def constant_value(t: Template) -> np.ndarray:
    """A constant template's value mod p, from the IR's own mod-p rule."""
    return np.asarray(modp.TABLE.get(t.op)((), get_op(t.op).check_attrs(t.attr_dict), None)[0],
                      dtype=np.int64)


def evaluate(t: Template, attrs: dict[str, Any], args: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Apply a template to batched operands (leading axis n, or 1 to broadcast)."""
    kind = t.kind
    if kind == "const":
        return (constant_value(t)[None],)
    if kind == "matmul":
        y = kernels.modp_matmul(args[0], args[1])
        return (modp.activation(y, attrs.get("activation", "none")),)
    if kind == "conv":
        return (_conv(args[0], args[1], attrs),)
    if kind == "ew":
        a, b = args
        if t.op == "ewadd":
            return ((a + b) % P,)
        if t.op == "ewmul":
            return (a * b % P,)
        return _table_rule(t.op, args, attrs)
    if kind == "smul":
        x, s = args
        return (x * s.reshape((s.shape[0],) + (1,) * (x.ndim - 1)) % P,)
    if kind == "unary":  # any element-wise op: the IR's own mod-p rule, row by row alike
        return _table_rule(t.op, args, attrs)
    if kind == "op":
        return _batched_op(t.op, args, attrs)
    if kind == "pool":
        return (_pool(args[0], attrs, t.op),)
    if kind == "transpose":
        perm = attrs["perm"]
        return (np.ascontiguousarray(np.transpose(args[0], (0, *[p + 1 for p in perm]))),)
    if kind == "concat":
        a, b = args
        n = max(a.shape[0], b.shape[0])
        a = np.broadcast_to(a, (n, *a.shape[1:]))
        b = np.broadcast_to(b, (n, *b.shape[1:]))
        return (np.concatenate([a, b], axis=t.axis + 1),)
    if kind == "split":
        x = args[0]
        s0 = attrs["sizes"][0]
        idx0 = [slice(None)] * x.ndim
        idx1 = [slice(None)] * x.ndim
        idx0[t.axis + 1] = slice(0, s0)
        idx1[t.axis + 1] = slice(s0, None)
        return (np.ascontiguousarray(x[tuple(idx0)]), np.ascontiguousarray(x[tuple(idx1)]))
    if kind == "enlarge":
        w = args[0]
        dh, dw = (attrs["kh"] - w.shape[3]) // 2, (attrs["kw"] - w.shape[4]) // 2
        return (np.pad(w, ((0, 0), (0, 0), (0, 0), (dh, dh), (dw, dw))),)
    raise ValueError(f"template kind {kind!r} has no batched kernel")


# ---- fingerprints -------------------------------------------------------------------

_KEY_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}
_MIX = np.uint64(0x9E3779B97F4A7C15)


def _keys(size: int) -> tuple[np.ndarray, np.ndarray]:
    keys = _KEY_CACHE.get(size)
    if keys is None:
        rng = np.random.default_rng(0x5EED + size)
        k1 = rng.integers(0, 2**63, size=size, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)
        k2 = rng.integers(0, 2**63, size=size, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)
        keys = (k1, k2)
        _KEY_CACHE[size] = keys
    return keys


def _shape_salt(shape: Shape) -> tuple[np.uint64, np.uint64]:
    h1, h2 = 0x243F6A8885A308D3, 0x13198A2E03707344
    for d in (len(shape), *shape):
        h1 = (h1 * 0x100000001B3 + d + 1) % 2**64
        h2 = (h2 * 0xC2B2AE3D27D4EB4F + d + 7) % 2**64
    return np.uint64(h1), np.uint64(h2)


def _avalanche(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def hash_rows(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two uint64 fingerprints per batch row of `v` (n, *shape)."""
    n = v.shape[0]
    shape = tuple(v.shape[1:])
    flat = v.reshape(n, -1).astype(np.uint64, copy=False)
    k1, k2 = _keys(flat.shape[1])
    s1, s2 = _shape_salt(shape)
    with np.errstate(over="ignore"):
        h1 = (flat * k1).sum(axis=1, dtype=np.uint64) + s1
        h2 = (flat * k2).sum(axis=1, dtype=np.uint64) + s2 * _MIX
    return _avalanche(h1), _avalanche(h2 ^ np.uint64(0x5851F42D4C957F2D))


def random_inputs(shapes: Sequence[Shape], seed: int, samples: int | None = None,
                  bound: int = 0) -> list[np.ndarray]:
    """Uniform residues mod p for each input shape (deterministic in `seed`).

    With `samples`, each input gets that many independent draws stacked on a leading axis,
    and its first element is negative (as a centred residue) in draw 0 and positive in
    draw 1: no input is then fixed by relu or any other sign-dependent op, which matters for
    tiny tensors such as the scalar, where a single draw is positive half of the time.

    With `bound` > 0 the values are integers in [-bound, bound] (as residues; the signed
    first elements nonzero), so that sums of a few never wrap around p.
    """
    rng = np.random.default_rng([seed, 0x7A50])
    if bound:
        return _bounded_inputs(rng, shapes, samples, bound)
    if samples is None:
        return [rng.integers(0, P, size=s, dtype=np.int64) for s in shapes]
    out = []
    half = P // 2
    for s in shapes:
        v = rng.integers(0, P, size=(samples, *s), dtype=np.int64)
        flat = v.reshape(samples, -1)
        if flat.shape[1]:
            flat[0, 0] = rng.integers(half + 1, P)
            if samples > 1:
                flat[1, 0] = rng.integers(1, half + 1)
        out.append(v)
    return out


def _bounded_inputs(rng: np.random.Generator, shapes: Sequence[Shape], samples: int | None,
                    bound: int) -> list[np.ndarray]:
    out = []
    for s in shapes:
        v = rng.integers(-bound, bound + 1, size=(samples or 1, *s), dtype=np.int64)
        flat = v.reshape(samples or 1, -1)
        if flat.shape[1] and samples:
            flat[0, 0] = -rng.integers(1, bound + 1)
            if samples > 1:
                flat[1, 0] = rng.integers(1, bound + 1)
        v = v % P
        out.append(v if samples else v[0])
    return out
