"""Helpers shared by op definitions: shape checks that produce precise `ShapeError`s."""

from __future__ import annotations

import numpy as np

from superopt.ir.errors import ShapeError
from superopt.ir.opdef import AttrSpec
from superopt.ir.types import DType, TensorType


def expect_rank(op: str, index: int, t: TensorType, rank: int | tuple[int, ...]) -> None:
    ranks = (rank,) if isinstance(rank, int) else rank
    if t.rank not in ranks:
        want = " or ".join(f"rank {r}" for r in ranks)
        raise ShapeError(op, index, want, f"rank {t.rank} {t}")


def expect_min_rank(op: str, index: int, t: TensorType, rank: int) -> None:
    if t.rank < rank:
        raise ShapeError(op, index, f"rank >= {rank}", f"rank {t.rank} {t}")


def expect_same_dtype(op: str, types: tuple[TensorType, ...]) -> DType:
    first = types[0].dtype
    for i, t in enumerate(types[1:], start=1):
        if t.dtype != first:
            raise ShapeError(op, i, f"dtype {first.value} (as input 0)", f"dtype {t.dtype.value}")
    return first


def expect_float(op: str, index: int, t: TensorType) -> None:
    if not t.dtype.is_float:
        raise ShapeError(op, index, "a floating-point tensor", str(t))


def broadcast(op: str, a: tuple[int, ...], b: tuple[int, ...], index: int = 1) -> tuple[int, ...]:
    """Numpy broadcasting of two shapes, with the mismatching dimension in the error."""
    out: list[int] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            raise ShapeError(op, index, f"a shape broadcastable with {list(a)} "
                             f"(dim -{i} of size {x} or 1)", f"{list(b)}")
        out.append(max(x, y))
    return tuple(reversed(out))


def norm_axis(op: str, axis: int, rank: int, index: int = 0) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(op, index, f"axis in [{-rank}, {rank})", f"axis {axis}")
    return axis % rank if rank else 0


def positive_pair(v: tuple[int, ...]) -> str | None:
    if len(v) != 2 or any(x < 1 for x in v):
        return f"expected two positive ints, found {v!r}"
    return None


def padding_check(v: object) -> str | None:
    if v in ("same", "valid"):
        return None
    if isinstance(v, tuple) and len(v) == 4 and all(isinstance(x, int) and x >= 0 for x in v):
        return None
    return f"expected 'same', 'valid' or (top, bottom, left, right) >= 0, found {v!r}"


ACTIVATIONS = ("none", "relu", "sigmoid", "tanh")


def activation_attr() -> AttrSpec:
    return AttrSpec("activation", "str", "none", choices=ACTIVATIONS,
                    doc="fused activation applied to the output (TASO's AC_MODE)")


def pair_attr(name: str, default: tuple[int, int] = (1, 1), doc: str = "") -> AttrSpec:
    return AttrSpec(name, "ints", default, check=positive_pair, doc=doc)


def padding_attr(default: str | tuple[int, int, int, int] = "valid") -> AttrSpec:
    return AttrSpec("padding", "any", default, check=padding_check,
                    doc="'same' (TF/XLA SAME), 'valid', or explicit (top, bottom, left, right)")


def pair(v: int | tuple[int, ...]) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    return (int(v[0]), int(v[1]))


def logistic(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x). Below about -709 e^-x overflows to inf and the quotient is the
    exact limit 0; numpy's overflow warning about it is silenced, since a model with large
    activations (efficientnet_b0 on drawn weights) would print it on every check."""
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))
