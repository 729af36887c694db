"""Activations, normalisers and layout shuffles the IR has no op for, written once with its
ops for both importers (ONNX and torch); `Prim` is each importer's adapter to its own ops
(einsum uses it too).

Each is exact in real arithmetic and written in its numerically safe form: log-softmax
shifted by the maximum; softplus as relu(x) + log(1 + exp(-|x|)), so no exp overflows
(torch returns x itself above its threshold, 20: the two differ there by log(1 + e^-20),
2e-9); ELU and its kin through exp(min(x, 0)). Depth-to-space and space-to-depth (pixel
shuffle) are a reshape, a transpose and a reshape. The index helpers at the end compute,
from known shapes, the constant indices that element gathers, scatters at known places and
reflect/edge pads become.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass(frozen=True)
class Prim(Generic[T]):
    """The importer's own element-wise, reduction and movement ops on its tensors."""

    unary: Callable[[str, T], T]  # relu, neg, exp, log, tanh, sqrt
    add: Callable[[T, T | float], T]
    mul: Callable[[T, T | float], T]
    minimum: Callable[[T, float], T]
    reduce: Callable[[str, T, tuple[int, ...], bool], T]  # reduce_max / reduce_sum
    shape: Callable[[T], tuple[int, ...]]
    reshape: Callable[[T, tuple[int, ...]], T]
    transpose: Callable[[T, tuple[int, ...]], T]
    expand: Callable[[T, tuple[int, ...]], T]
    matmul: Callable[[T, T], T]

    def sub(self, a: T, b: T) -> T:
        return self.add(a, self.unary("neg", b))


def log_softmax(p: Prim[T], x: T, axis: int) -> T:
    shifted = p.sub(x, p.reduce("reduce_max", x, (axis,), True))
    total = p.reduce("reduce_sum", p.unary("exp", shifted), (axis,), True)
    return p.sub(shifted, p.unary("log", total))


def softplus(p: Prim[T], x: T, beta: float = 1.0) -> T:
    """log(1 + exp(beta x)) / beta as relu(bx) + log(1 + exp(-|bx|)), over beta."""
    bx = x if beta == 1.0 else p.mul(x, beta)
    magnitude = p.add(p.unary("relu", bx), p.unary("relu", p.unary("neg", bx)))
    tail = p.unary("log", p.add(p.unary("exp", p.unary("neg", magnitude)), 1.0))
    y = p.add(p.unary("relu", bx), tail)
    return y if beta == 1.0 else p.mul(y, 1.0 / beta)


def elu(p: Prim[T], x: T, alpha: float = 1.0, scale: float = 1.0, inner: float = 1.0) -> T:
    """scale * (relu(x) + alpha * (exp(min(x, 0) / inner) - 1)): ELU (inner 1), SELU (its
    fixed alpha and scale) and CELU (inner = alpha)."""
    neg_part = p.minimum(x, 0.0)
    if inner != 1.0:
        neg_part = p.mul(neg_part, 1.0 / inner)
    y = p.add(p.unary("relu", x), p.mul(p.add(p.unary("exp", neg_part), -1.0), alpha))
    return y if scale == 1.0 else p.mul(y, scale)


SELU_ALPHA = 1.6732632423543772
SELU_SCALE = 1.0507009873554805


def mish(p: Prim[T], x: T) -> T:
    return p.mul(x, p.unary("tanh", softplus(p, x)))


def log_sigmoid(p: Prim[T], x: T) -> T:
    return p.unary("neg", softplus(p, p.unary("neg", x)))


def variance(p: Prim[T], x: T, axes: Sequence[int], correction: float, keep: bool) -> T:
    """The variance over `axes` with `correction` (1: the unbiased estimate)."""
    shape = p.shape(x)
    rank = len(shape)
    axes = tuple(sorted(a % rank for a in axes)) if axes else tuple(range(rank))
    n = math.prod(shape[a] for a in axes)
    mean = p.mul(p.reduce("reduce_sum", x, axes, True), 1.0 / n)
    d = p.sub(x, mean)
    return p.mul(p.reduce("reduce_sum", p.mul(d, d), axes, keep), 1.0 / max(n - correction, 0))


def tile(p: Prim[T], x: T, repeats: Sequence[int]) -> T:
    """ONNX Tile / Tensor.repeat (leading new dims allowed): each dim as (repeats, size),
    broadcast along the repeats, then merged, so out[i] = x[i % size]."""
    shape = p.shape(x)
    if len(repeats) < len(shape) or min(repeats, default=1) < 0:
        raise ValueError(f"repeats {list(repeats)} for a {list(shape)} tensor")
    shape = (1,) * (len(repeats) - len(shape)) + tuple(shape)
    if all(r == 1 for r in repeats):
        return p.reshape(x, shape)
    pairs = tuple(d for n in shape for d in (1, n))
    wide = tuple(d for r, n in zip(repeats, shape, strict=True) for d in (r, n))
    y = p.expand(p.reshape(x, pairs), wide)
    return p.reshape(y, tuple(r * n for r, n in zip(repeats, shape, strict=True)))


def depth_to_space(p: Prim[T], x: T, block: int, mode: str = "DCR") -> T:
    """(N, C*b*b, H, W) -> (N, C, H*b, W*b): DCR (ONNX's default) takes the block from the
    leading channels, CRD (torch's pixel_shuffle) from the trailing ones."""
    n, c, h, w = p.shape(x)
    if c % (block * block):
        raise ValueError(f"{c} channels for blocks of {block}x{block}")
    k = c // (block * block)
    if mode == "DCR":
        y = p.transpose(p.reshape(x, (n, block, block, k, h, w)), (0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        y = p.transpose(p.reshape(x, (n, k, block, block, h, w)), (0, 1, 4, 2, 5, 3))
    else:
        raise ValueError(f"mode {mode!r}")
    return p.reshape(y, (n, k, h * block, w * block))


def space_to_depth(p: Prim[T], x: T, block: int, mode: str = "DCR") -> T:
    """(N, C, H*b, W*b) -> (N, C*b*b, H, W), the inverse of `depth_to_space` in `mode`
    (ONNX's SpaceToDepth is DCR, torch's pixel_unshuffle CRD)."""
    n, c, hb, wb = p.shape(x)
    if hb % block or wb % block:
        raise ValueError(f"a {hb}x{wb} map for blocks of {block}x{block}")
    h, w = hb // block, wb // block
    y = p.reshape(x, (n, c, h, block, w, block))
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    if mode not in ("DCR", "CRD"):
        raise ValueError(f"mode {mode!r}")
    return p.reshape(p.transpose(y, perm), (n, c * block * block, h, w))


__all__ = ["SELU_ALPHA", "SELU_SCALE", "Prim", "depth_to_space", "elu", "log_sigmoid",
           "log_softmax", "mish", "softplus", "space_to_depth", "tile", "variance"]


# ---- index arithmetic for element gathers, scatters and edge pads (numpy, known shapes) ----


def element_gather_offsets(shape: Sequence[int], ishape: Sequence[int], axis: int
                           ) -> tuple[np.ndarray, int]:
    """torch.gather / ONNX GatherElements as one gather from the flattened data: the flat
    offset of every index position with its `axis` coordinate left out (shape `ishape`),
    and the stride of `axis`. out = flat[offsets + index * stride]."""
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    grid = np.indices(tuple(ishape), dtype=np.int64)
    offsets = sum((grid[d] * strides[d] for d in range(len(shape)) if d != axis),
                  np.zeros(tuple(ishape), np.int64))
    return offsets, strides[axis]


def scatter_rows(rows: int, written: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ONNX ScatterND at known row indices (`written[m]`: the row update m replaces): for
    every row, the update that lands there (the last one, as the spec's loop does) and
    whether one does."""
    src = np.zeros(rows, np.int64)
    hit = np.zeros(rows, np.bool_)
    for m, r in enumerate(written.tolist()):
        src[r], hit[r] = m, True
    return src, hit


def edge_pad_indices(n: int, before: int, after: int, mode: str) -> np.ndarray:
    """Source positions of a pad by `before`/`after` along an axis of length n: "reflect"
    mirrors without repeating the edge (ONNX/torch reflect), "edge" repeats it."""
    i = np.arange(-before, n + after)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    period = 2 * (n - 1)
    i = np.abs(i) % period if period else np.zeros_like(i)
    return np.where(i >= n, period - i, i)


def dft_matrices(rows: int, length: int, out: int, inverse: bool, scale: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The discrete Fourier transform of length `length` along an axis as two real
    matrices (rows x out): C = cos(2 pi k j / length) * scale and S' = -+sin(...) * scale
    (minus forward, e^(-i...); plus inverse), so that (a + ib)(C + iS') =
    (aC - bS') + i(aS' + bC). `rows` < length is a zero-padded input (its missing rows
    multiply zeros); `out` < length keeps the first frequencies (a one-sided transform)."""
    k = np.arange(rows, dtype=np.float64)[:, None]
    j = np.arange(out, dtype=np.float64)[None, :]
    angle = 2 * np.pi * ((k * j) % length) / length  # reduced first: exact for large k*j
    return ((np.cos(angle) * scale).astype(np.float32),
            (np.sin(angle) * (scale if inverse else -scale)).astype(np.float32))
