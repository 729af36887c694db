"""Numpy kernels shared by the float reference and the exact mod-p semantics.

Convolution and pooling are written once over a pluggable matmul / reduction so that the
same index arithmetic serves both number systems.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

P = 2**31 - 1  # the prime of the exact semantics

Pads = tuple[int, int, int, int]  # top, bottom, left, right


def same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow/XLA SAME padding: output = ceil(size / stride); extra pad goes at the end."""
    eff = (kernel - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2


def resolve_pads(padding: str | tuple[int, ...], hw: tuple[int, int], kernel: tuple[int, int],
                 stride: tuple[int, int], dilation: tuple[int, int]) -> Pads:
    if padding == "valid":
        return (0, 0, 0, 0)
    if padding == "same":
        t, b = same_pads(hw[0], kernel[0], stride[0], dilation[0])
        left, r = same_pads(hw[1], kernel[1], stride[1], dilation[1])
        return (t, b, left, r)
    assert isinstance(padding, tuple) and len(padding) == 4
    return padding  # type: ignore[return-value]


def out_size(size: int, kernel: int, stride: int, dilation: int, lo: int, hi: int) -> int:
    return (size + lo + hi - ((kernel - 1) * dilation + 1)) // stride + 1


def windows(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
            dilation: tuple[int, int], pads: Pads, fill: float | int = 0) -> np.ndarray:
    """(N, C, H, W) -> (N, C, OH, OW, kh, kw) view of every receptive field."""
    t, b, left, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)), constant_values=fill)
    eh = (kernel[0] - 1) * dilation[0] + 1
    ew = (kernel[1] - 1) * dilation[1] + 1
    win = sliding_window_view(xp, (eh, ew), axis=(2, 3))
    return win[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]


MatmulFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def conv2d(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pads: Pads,
           dilation: tuple[int, int], groups: int, matmul: MatmulFn = np.matmul) -> np.ndarray:
    """NCHW x OIHW grouped convolution as im2col + batched matmul."""
    n, _c, _, _ = x.shape
    o, cg, kh, kw = w.shape
    win = windows(x, (kh, kw), stride, dilation, pads)
    oh, ow = win.shape[2], win.shape[3]
    # (N, g, C/g, OH, OW, kh, kw) -> (N, g, OH*OW, C/g*kh*kw)
    cols = win.reshape(n, groups, cg, oh, ow, kh, kw).transpose(0, 1, 3, 4, 2, 5, 6)
    cols = cols.reshape(n, groups, oh * ow, cg * kh * kw)
    wm = w.reshape(groups, o // groups, cg * kh * kw).transpose(0, 2, 1)
    out = matmul(cols, wm[None])  # (N, g, OH*OW, O/g)
    return out.transpose(0, 1, 3, 2).reshape(n, o, oh, ow)


def modp_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact matmul of residues mod P without int64 overflow.

    a is split into 16-bit halves: every partial product is < 2**47, so sums of up to
    2**16 terms stay below 2**63; longer contractions are chunked.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    k = a.shape[-1]
    chunk = 1 << 15
    total: np.ndarray | None = None
    for s in range(0, max(k, 1), chunk):
        a_c, b_c = a[..., s:s + chunk], b[..., s:s + chunk, :]
        hi, lo = a_c >> 16, a_c & 0xFFFF
        part = ((np.matmul(hi, b_c) % P) * 65536 + np.matmul(lo, b_c)) % P
        total = part if total is None else (total + part) % P
    assert total is not None
    return total


def modp_inv(x: int) -> int:
    return pow(int(x) % P, P - 2, P)


def centred(x: np.ndarray) -> np.ndarray:
    """Residues in [0, P) mapped to the symmetric range (-P/2, P/2)."""
    x = np.asarray(x, dtype=np.int64)
    return np.where(x > P // 2, x - P, x)


def mix(x: np.ndarray, salt: int) -> np.ndarray:
    """A fixed pseudo-random function Z_P -> Z_P (splitmix64 finaliser).

    Used as the exact-mode meaning of transcendental ops: it behaves like an
    uninterpreted function, so it satisfies no algebraic identity by accident.
    """
    z = (np.asarray(x, dtype=np.int64).astype(np.uint64) + np.uint64(salt * 0x9E3779B97F4A7C15 % 2**64))
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(P)).astype(np.int64)


def odd_mix(x: np.ndarray, salt: int) -> np.ndarray:
    """An odd pseudo-random function: f(-x) = -f(x) over centred residues."""
    c = centred(x)
    mag = mix(np.abs(c), salt)
    return np.where(c < 0, (P - mag) % P, np.where(c == 0, 0, mag)).astype(np.int64)
