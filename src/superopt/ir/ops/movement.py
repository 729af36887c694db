"""Movement ops: they move, copy or zero-fill elements and are linear in their inputs."""

from __future__ import annotations

import math

import numpy as np

from superopt.ir.errors import ShapeError
from superopt.ir.opdef import (
    LINEAR,
    MOVEMENT,
    VARIADIC,
    Attrs,
    AttrSpec,
    AttrValue,
    OpDef,
    register_op,
)
from superopt.ir.ops._common import expect_rank, expect_same_dtype, norm_axis
from superopt.ir.types import TensorType

_TRAITS = frozenset({MOVEMENT, LINEAR})


# ---- transpose ----------------------------------------------------------------------

def _transpose_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (x,) = ts
    perm = attrs["perm"]
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError("transpose", 0, f"a tensor of rank {len(perm)} for perm {list(perm)}",
                         str(x))
    return (x.with_shape(tuple(x.shape[p] for p in perm)),)


def _transpose_canon(ts: tuple[TensorType, ...], attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
    if attrs["perm"] == ():  # empty perm means "reverse all dims", as numpy and ONNX do
        attrs["perm"] = tuple(reversed(range(ts[0].rank)))
    return attrs


TRANSPOSE = register_op(OpDef(
    name="transpose", num_inputs=1, shape=_transpose_shape,
    reference=lambda xs, a: (np.transpose(xs[0], a["perm"]),),
    attrs=(AttrSpec("perm", "ints", (), doc="output dim i is input dim perm[i]; () reverses"),),
    traits=_TRAITS, canonicalize=_transpose_canon))


# ---- reshape ------------------------------------------------------------------------

def _reshape_canon(ts: tuple[TensorType, ...], attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
    shape = list(attrs["shape"])
    if shape.count(-1) > 1:
        raise ShapeError("reshape", None, "at most one -1 in shape", str(tuple(shape)))
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or ts[0].size % known:
            raise ShapeError("reshape", 0, f"a size divisible by {known} for shape {shape}",
                             str(ts[0]))
        shape[shape.index(-1)] = ts[0].size // known
    attrs["shape"] = tuple(shape)
    return attrs


def _reshape_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (x,) = ts
    shape = attrs["shape"]
    if any(d < 0 for d in shape) or math.prod(shape) != x.size:
        raise ShapeError("reshape", 0, f"{math.prod(shape)} elements for shape {list(shape)}",
                         f"{x} with {x.size} elements")
    return (x.with_shape(shape),)


RESHAPE = register_op(OpDef(
    name="reshape", num_inputs=1, shape=_reshape_shape,
    reference=lambda xs, a: (np.reshape(xs[0], a["shape"]),),
    attrs=(AttrSpec("shape", "ints", doc="target shape (row-major); one -1 is inferred"),),
    traits=_TRAITS, canonicalize=_reshape_canon))


# ---- concat / split -----------------------------------------------------------------

def _axis_canon(ts: tuple[TensorType, ...], attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
    attrs["axis"] = norm_axis("axis", attrs["axis"], ts[0].rank)
    return attrs


def _concat_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    axis = attrs["axis"]
    first = ts[0]
    dtype = expect_same_dtype("concat", ts)
    if not 0 <= axis < first.rank:
        raise ShapeError("concat", 0, f"rank > {axis} for axis {axis}", str(first))
    total = 0
    for i, t in enumerate(ts):
        if t.rank != first.rank or any(
                d != e for k, (d, e) in enumerate(zip(t.shape, first.shape, strict=True)) if k != axis):
            raise ShapeError("concat", i, f"shape {list(first.shape)} except on axis {axis}",
                             str(t))
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return (TensorType(tuple(shape), dtype),)


CONCAT = register_op(OpDef(
    name="concat", num_inputs=VARIADIC, min_inputs=1, shape=_concat_shape,
    reference=lambda xs, a: (np.concatenate(xs, axis=a["axis"]),),
    attrs=(AttrSpec("axis", "int"),), traits=_TRAITS, canonicalize=_axis_canon))


def _split_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (x,) = ts
    axis, sizes = attrs["axis"], attrs["sizes"]
    if sum(sizes) != x.shape[axis]:
        raise ShapeError("split", 0, f"dim {axis} of size sum{list(sizes)} = {sum(sizes)}", str(x))
    out = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        out.append(x.with_shape(tuple(shape)))
    return tuple(out)


def _split_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    bounds = np.cumsum(attrs["sizes"])[:-1]
    return tuple(np.split(xs[0], bounds, axis=attrs["axis"]))


SPLIT = register_op(OpDef(
    name="split", num_inputs=1, shape=_split_shape, reference=_split_ref,
    attrs=(AttrSpec("axis", "int"),
           AttrSpec("sizes", "ints", check=lambda s: None if len(s) >= 1 and min(s) >= 0
                    else "expected one or more sizes >= 0")),
    num_outputs=lambda a: len(a["sizes"]), traits=_TRAITS, canonicalize=_axis_canon,
    doc="Split along an axis into len(sizes) outputs (TASO's split has two)."))


# ---- slice / pad / enlarge ----------------------------------------------------------

def _slice_canon(ts: tuple[TensorType, ...], attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
    shape = ts[0].shape
    rank = len(shape)
    starts, ends, steps = list(attrs["starts"]), list(attrs["ends"]), list(attrs["steps"])
    if not steps:
        steps = [1] * rank
    for name, vals in (("starts", starts), ("ends", ends), ("steps", steps)):
        if len(vals) != rank:
            raise ShapeError("slice", 0, f"rank {len(vals)} (length of {name})", str(ts[0]))
    for i, d in enumerate(shape):
        if steps[i] < 1:
            raise ShapeError("slice", None, "steps >= 1", str(tuple(steps)))
        start, stop, _ = slice(starts[i], ends[i], steps[i]).indices(d)
        starts[i], ends[i] = start, max(stop, start)
    attrs.update(starts=tuple(starts), ends=tuple(ends), steps=tuple(steps))
    return attrs


def _slice_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (x,) = ts
    shape = []
    for i, d in enumerate(x.shape):
        lo, hi, st = attrs["starts"][i], attrs["ends"][i], attrs["steps"][i]
        if not 0 <= lo <= hi <= d:
            raise ShapeError("slice", 0, f"dim {i} of size >= {hi}", str(x))
        shape.append(len(range(lo, hi, st)))
    return (x.with_shape(tuple(shape)),)


def _slice_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    idx = tuple(slice(lo, hi, st) for lo, hi, st in
                zip(attrs["starts"], attrs["ends"], attrs["steps"], strict=True))
    return (xs[0][idx],)


SLICE = register_op(OpDef(
    name="slice", num_inputs=1, shape=_slice_shape, reference=_slice_ref,
    attrs=(AttrSpec("starts", "ints"), AttrSpec("ends", "ints"), AttrSpec("steps", "ints", ())),
    traits=_TRAITS, canonicalize=_slice_canon,
    doc="Strided slice over every dim (python semantics, normalised to in-range bounds)."))


def _pad_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (x,) = ts
    pads = attrs["pads"]
    if len(pads) != 2 * x.rank or min(pads, default=0) < 0:
        raise ShapeError("pad", 0, f"rank {len(pads) // 2} with pads >= 0 (pads={list(pads)})",
                         str(x))
    r = x.rank
    return (x.with_shape(tuple(d + pads[i] + pads[r + i] for i, d in enumerate(x.shape))),)


def _pad_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    r = xs[0].ndim
    p = attrs["pads"]
    if r == 0:  # np.pad rejects an empty pad list
        return (xs[0].copy(),)
    return (np.pad(xs[0], [(p[i], p[r + i]) for i in range(r)]),)


PAD = register_op(OpDef(
    name="pad", num_inputs=1, shape=_pad_shape, reference=_pad_ref,
    attrs=(AttrSpec("pads", "ints", doc="ONNX order: all begins, then all ends; zero fill"),),
    traits=_TRAITS))


def _enlarge_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (w,) = ts
    expect_rank("enlarge", 0, w, 4)
    kh, kw = attrs["kh"], attrs["kw"]
    if w.shape[2] > kh or w.shape[3] > kw or (kh - w.shape[2]) % 2 or (kw - w.shape[3]) % 2:
        raise ShapeError("enlarge", 0, f"a kernel no larger than {kh}x{kw} with an even "
                         "difference in each dim", str(w))
    return (w.with_shape((w.shape[0], w.shape[1], kh, kw)),)


def _enlarge_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    w = xs[0]
    dh, dw = (attrs["kh"] - w.shape[2]) // 2, (attrs["kw"] - w.shape[3]) // 2
    return (np.pad(w, ((0, 0), (0, 0), (dh, dh), (dw, dw))),)


ENLARGE = register_op(OpDef(
    name="enlarge", num_inputs=1, shape=_enlarge_shape, reference=_enlarge_ref,
    attrs=(AttrSpec("kh", "int"), AttrSpec("kw", "int")), traits=_TRAITS,
    doc="Zero-pad a conv kernel (O, I, h, w) symmetrically to (O, I, kh, kw) (TASO)."))
