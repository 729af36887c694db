"""2-D pooling over NCHW tensors."""

from __future__ import annotations

import numpy as np

from superopt.ir import kernels
from superopt.ir.errors import ShapeError
from superopt.ir.opdef import NONLINEAR, Attrs, AttrSpec, OpDef, register_op
from superopt.ir.ops._common import activation_attr, expect_rank, padding_attr, pair_attr
from superopt.ir.ops.linear import apply_activation
from superopt.ir.types import TensorType


def pool_geometry(x: tuple[int, ...], attrs: Attrs) -> tuple[kernels.Pads, int, int]:
    k, s = attrs["kernel"], attrs["stride"]
    pads = kernels.resolve_pads(attrs["padding"], (x[2], x[3]), k, s, (1, 1))
    oh = kernels.out_size(x[2], k[0], s[0], 1, pads[0], pads[1])
    ow = kernels.out_size(x[3], k[1], s[1], 1, pads[2], pads[3])
    return pads, oh, ow


def _pool_shape(op: str):
    def rule(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
        (x,) = ts
        expect_rank(op, 0, x, 4)
        _, oh, ow = pool_geometry(x.shape, attrs)
        if oh < 1 or ow < 1:
            raise ShapeError(op, 0, f"spatial size >= kernel {attrs['kernel']}", str(x))
        return (x.with_shape((x.shape[0], x.shape[1], oh, ow)),)
    return rule


def avg_divisor(shape: tuple[int, ...], attrs: Attrs) -> np.ndarray:
    """Per-output-position element count: constant with count_include_pad, else valid cells."""
    pads, oh, ow = pool_geometry(shape, attrs)
    k = attrs["kernel"]
    if attrs["count_include_pad"]:
        return np.full((oh, ow), k[0] * k[1], dtype=np.int64)
    ones = np.ones((1, 1, shape[2], shape[3]), dtype=np.int64)
    return kernels.windows(ones, k, attrs["stride"], (1, 1), pads).sum(axis=(-1, -2))[0, 0]


def _avg_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    pads, _, _ = pool_geometry(x.shape, attrs)
    total = kernels.windows(x, attrs["kernel"], attrs["stride"], (1, 1), pads).sum(axis=(-1, -2))
    return (apply_activation(total / avg_divisor(x.shape, attrs), attrs["activation"]),)


def _max_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    pads, _, _ = pool_geometry(x.shape, attrs)
    win = kernels.windows(x, attrs["kernel"], attrs["stride"], (1, 1), pads, fill=-np.inf)
    return (apply_activation(win.max(axis=(-1, -2)), attrs["activation"]),)


_POOL_ATTRS = (pair_attr("kernel", (2, 2)), pair_attr("stride"), padding_attr("valid"),
               activation_attr())

POOL2D_AVG = register_op(OpDef(
    name="pool2d_avg", num_inputs=1, shape=_pool_shape("pool2d_avg"), reference=_avg_ref,
    attrs=(*_POOL_ATTRS, AttrSpec("count_include_pad", "bool", True,
                                  doc="divide by the full window (TASO, linear) or by valid cells")),
    linear_in=(0,), doc="Average pooling; with count_include_pad it is a depthwise conv."))

POOL2D_MAX = register_op(OpDef(
    name="pool2d_max", num_inputs=1, shape=_pool_shape("pool2d_max"), reference=_max_ref,
    attrs=_POOL_ATTRS, traits=frozenset({NONLINEAR}),
    doc="Max pooling; padded cells never win."))
