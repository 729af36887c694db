"""Scaled dot-product attention as one primitive op.

Primitive rather than decomposed into matmul-softmax-matmul because both consumers need it
whole: the simulator prices it as one fused (flash-style) kernel that never writes the
Lq x Lk score matrix to HBM, and rules about it (folding the 1/sqrt(d) scale into the
query projection, merging grouped-query K/V projections) match one node. Importers
emit it for `scaled_dot_product_attention` without an explicit mask; an explicit additive
or boolean mask is decomposed into matmul, scale, mask and softmax instead.
"""

from __future__ import annotations

import math

import numpy as np

from superopt.ir.errors import ShapeError
from superopt.ir.opdef import NONLINEAR, REDUCTION, Attrs, AttrSpec, AttrValue, OpDef, register_op
from superopt.ir.ops._common import broadcast, expect_float, expect_min_rank, expect_same_dtype
from superopt.ir.types import TensorType


def _canon(ts: tuple[TensorType, ...], attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
    # 0 stands for torch's default 1/sqrt(head dim); stored resolved so that two nodes
    # computing the same thing hash alike.
    if attrs["scale"] == 0.0:
        attrs["scale"] = 1.0 / math.sqrt(ts[0].shape[-1])
    return attrs


def _shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    q, k, v = ts
    for i, t in enumerate(ts):
        expect_min_rank("attention", i, t, 3)
        expect_float("attention", i, t)
    dtype = expect_same_dtype("attention", ts)
    if k.shape[-1] != q.shape[-1]:
        raise ShapeError("attention", 1, f"head dim {q.shape[-1]} (the query's)", str(k))
    if v.shape[-2] != k.shape[-2] or v.shape[-3] != k.shape[-3]:
        raise ShapeError("attention", 2, f"heads {k.shape[-3]} and length {k.shape[-2]} "
                         "(the key's)", str(v))
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if heads % kv_heads:
        raise ShapeError("attention", 1, f"a number of heads dividing {heads} (grouped-query)",
                         str(k))
    batch = broadcast("attention", q.shape[:-3], k.shape[:-3])
    if tuple(batch) != q.shape[:-3]:
        raise ShapeError("attention", 1, f"batch dims {list(q.shape[:-3])}", str(k))
    if tuple(broadcast("attention", q.shape[:-3], v.shape[:-3])) != q.shape[:-3]:
        raise ShapeError("attention", 2, f"batch dims {list(q.shape[:-3])}", str(v))
    return (TensorType((*batch, heads, q.shape[-2], v.shape[-1]), dtype),)


def attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                  causal: bool) -> np.ndarray:
    group = q.shape[-3] // k.shape[-3]
    if group > 1:  # each K/V head serves `group` consecutive query heads (torch's GQA)
        k = np.repeat(k, group, axis=-3)
        v = np.repeat(v, group, axis=-3)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if causal:
        keep = np.tril(np.ones(s.shape[-2:], dtype=bool))
        s = np.where(keep, s, -np.inf)
    s = s - np.max(s, axis=-1, keepdims=True)
    e = np.exp(s)
    return np.matmul(e / np.sum(e, axis=-1, keepdims=True), v)


ATTENTION = register_op(OpDef(
    name="attention", num_inputs=3, shape=_shape,
    reference=lambda xs, a: (attention_ref(*xs, a["scale"], a["causal"]),),
    attrs=(AttrSpec("scale", "float", 0.0, doc="score scale; 0 means 1/sqrt(head dim)"),
           AttrSpec("causal", "bool", False, doc="mask keys after the query (top-left "
                    "aligned, as torch's is_causal)")),
    traits=frozenset({NONLINEAR, REDUCTION}), canonicalize=_canon, input_names=("q", "k", "v"),
    doc="softmax(q k^T * scale [+ causal mask]) v over (..., heads, length, head_dim); "
        "k and v may have fewer heads than q (grouped-query attention)."))
