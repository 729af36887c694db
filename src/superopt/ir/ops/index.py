"""Index-driven and broadcasting movement (gather, expand) and the index constants that
transformer models build masks and positions from (iota, triangular masks).

`gather` is ONNX's Gather (numpy `take`): torch's `index_select` and single-tensor
`x[idx]` are gathers with 1-D or N-D indices. `expand` is a broadcast to a larger shape,
a movement op: it copies elements and is linear in its input.
"""

from __future__ import annotations

import numpy as np

from superopt.ir.errors import ShapeError
from superopt.ir.opdef import (
    CONSTANT,
    LINEAR,
    MOVEMENT,
    SOURCE,
    Attrs,
    AttrSpec,
    AttrValue,
    OpDef,
    register_op,
)
from superopt.ir.ops._common import norm_axis
from superopt.ir.types import DType, TensorType

# ---- gather -------------------------------------------------------------------------


def _axis_canon(ts: tuple[TensorType, ...], attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
    attrs["axis"] = norm_axis("gather", attrs["axis"], ts[0].rank)
    return attrs


def _gather_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    x, idx = ts
    if idx.dtype.is_float or idx.dtype == DType.BOOL:
        raise ShapeError("gather", 1, "an integer tensor of indices", str(idx))
    if x.rank == 0:
        raise ShapeError("gather", 0, "rank >= 1", str(x))
    ax = attrs["axis"]
    return (TensorType((*x.shape[:ax], *idx.shape, *x.shape[ax + 1:]), x.dtype),)


def gather_ref(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    idx = np.asarray(idx, dtype=np.int64)
    n = x.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError(f"gather: index out of range [-{n}, {n}) on axis {axis}")
    return np.take(x, np.where(idx < 0, idx + n, idx), axis=axis)


GATHER = register_op(OpDef(
    name="gather", num_inputs=2, shape=_gather_shape,
    reference=lambda xs, a: (gather_ref(xs[0], xs[1], a["axis"]),),
    attrs=(AttrSpec("axis", "int", 0),), linear_in=(0,), canonicalize=_axis_canon,
    input_names=("x", "indices"),
    doc="Take slices of x along axis at integer indices (ONNX Gather, torch index_select): "
        "out shape x.shape[:axis] + indices.shape + x.shape[axis+1:]."))


# ---- expand ---------------------------------------------------------------------------

def _expand_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (x,) = ts
    shape = tuple(attrs["shape"])
    if len(shape) < x.rank:
        raise ShapeError("expand", 0, f"rank <= {len(shape)} for shape {list(shape)}", str(x))
    for i in range(1, x.rank + 1):
        if x.shape[-i] not in (1, shape[-i]):
            raise ShapeError("expand", 0, f"dim -{i} of size 1 or {shape[-i]}", str(x))
    return (x.with_shape(shape),)


EXPAND = register_op(OpDef(
    name="expand", num_inputs=1, shape=_expand_shape,
    reference=lambda xs, a: (np.broadcast_to(xs[0], a["shape"]).copy(),),
    attrs=(AttrSpec("shape", "ints", doc="the target shape (numpy broadcasting)"),),
    traits=frozenset({MOVEMENT, LINEAR}),
    doc="Broadcast to a larger shape (torch expand, ONNX Expand)."))


# ---- index constants ------------------------------------------------------------------

def _dims_check(v: tuple[int, ...]) -> str | None:
    return None if all(d >= 1 for d in v) else f"dimensions must be >= 1, found {v!r}"


def _iota_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    shape = tuple(attrs["shape"])
    if not -len(shape) <= attrs["axis"] < len(shape):
        raise ShapeError("iota", None, f"axis in [-{len(shape)}, {len(shape)})",
                         f"axis {attrs['axis']}")
    return (TensorType(shape, DType.parse(attrs["dtype"])),)


def iota_value(attrs: Attrs) -> np.ndarray:
    shape = tuple(attrs["shape"])
    axis = attrs["axis"] % len(shape)
    ramp = np.arange(shape[axis]).reshape([-1 if i == axis else 1 for i in range(len(shape))])
    out = np.broadcast_to(ramp, shape).copy()
    return out.astype(np.float64 if DType.parse(attrs["dtype"]).is_float else np.int64)


IOTA = register_op(OpDef(
    name="iota", num_inputs=0, shape=_iota_shape, reference=lambda xs, a: (iota_value(a),),
    attrs=(AttrSpec("shape", "ints", check=_dims_check), AttrSpec("axis", "int", 0),
           AttrSpec("dtype", "str", "i64", choices=("i64", "i32", "f32"))),
    traits=frozenset({CONSTANT, SOURCE}),
    doc="0, 1, 2, ... along axis, broadcast over the other dims (torch.arange, XLA iota)."))


def tri_mask_value(attrs: Attrs) -> np.ndarray:
    rows, cols, k = attrs["rows"], attrs["cols"], attrs["diagonal"]
    tri = np.tril if attrs["lower"] else np.triu
    return tri(np.ones((rows, cols), dtype=np.int64), k)


TRI_MASK = register_op(OpDef(
    name="tri_mask", num_inputs=0,
    shape=lambda ts, a: (TensorType((a["rows"], a["cols"]), DType.BOOL),),
    reference=lambda xs, a: (tri_mask_value(a),),
    attrs=(AttrSpec("rows", "int", check=lambda v: None if v >= 1 else "must be >= 1"),
           AttrSpec("cols", "int", check=lambda v: None if v >= 1 else "must be >= 1"),
           AttrSpec("diagonal", "int", 0, doc="0 keeps the main diagonal, 1 one above, ..."),
           AttrSpec("lower", "bool", True, doc="True: tril (causal mask); False: triu")),
    traits=frozenset({CONSTANT, SOURCE}),
    doc="Boolean triangular mask (torch.tril/triu of ones): the causal mask of decoders."))
