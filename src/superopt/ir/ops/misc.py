"""Layout ops inserted by layout assignment, and embedding lookup for language models."""

from __future__ import annotations

import numpy as np

from superopt.ir.errors import ShapeError
from superopt.ir.opdef import LAYOUT, LINEAR, MOVEMENT, Attrs, AttrSpec, OpDef, register_op
from superopt.ir.ops._common import expect_float, expect_rank
from superopt.ir.types import TensorType


def _identity_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    return (ts[0],)


def _layout_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    m2m = attrs["minor_to_major"]
    if sorted(m2m) != list(range(ts[0].rank)):
        raise ShapeError("layout", 0, f"rank {len(m2m)} for minor_to_major {list(m2m)}",
                         str(ts[0]))
    return (ts[0],)


COPY = register_op(OpDef(
    name="copy", num_inputs=1, shape=_identity_shape, reference=lambda xs, a: (xs[0].copy(),),
    traits=frozenset({LAYOUT, MOVEMENT, LINEAR}),
    doc="Materialise a value (an explicit HBM copy); the identity on values."))

LAYOUT_OP = register_op(OpDef(
    name="layout", num_inputs=1, shape=_layout_shape, reference=lambda xs, a: (xs[0].copy(),),
    attrs=(AttrSpec("minor_to_major", "ints", doc="physical order, fastest-varying dim first"),),
    traits=frozenset({LAYOUT, MOVEMENT, LINEAR}),
    doc="Change a value's physical layout (XLA minor_to_major); logical values unchanged."))


def _embedding_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    ids, table = ts
    if ids.dtype.is_float:
        raise ShapeError("embedding", 0, "an integer tensor of indices", str(ids))
    expect_rank("embedding", 1, table, 2)
    expect_float("embedding", 1, table)
    return (TensorType((*ids.shape, table.shape[1]), table.dtype),)


def _embedding_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    ids, table = xs
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise IndexError(f"embedding: index out of range [0, {table.shape[0]})")
    return (table[ids],)


EMBEDDING = register_op(OpDef(
    name="embedding", num_inputs=2, shape=_embedding_shape, reference=_embedding_ref,
    linear_in=(1,), input_names=("ids", "table"),
    doc="Row lookup table[ids]: ids (...) int, table (V, D) -> (..., D)."))
