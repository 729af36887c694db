"""Resampling (ONNX Resize, torch's upsample ops) written with the IR's gather, multiply
and add.

Every resampling mode the importers take (nearest, linear, cubic, with any coordinate
transformation, with or without antialiasing) is separable and linear: along each resized
axis, output i is a fixed weighted sum of a few inputs. The importers get that map as a
matrix (out x in) by running the runtime's own operator on an identity (`read_maps`, which
checks the maps against the operator on a random input), so its rounding and boundary
rules are the runtime's, not a transcription of them. `taps` turns the
matrix into at most K (index, weight) pairs per output, K the most non-zeros in a row (1
for nearest, 2 for linear, 4 for cubic); `resample` applies them as K gathers along the
axis, each times its weights, summed: the arithmetic of a direct implementation, where a
dense matmul would cost the whole input row per output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

T = TypeVar("T")


@dataclass(frozen=True)
class Tap:
    """One term of every output along an axis: input `index[i]` times `weight[i]` (None:
    every weight is 1, nearest)."""

    index: np.ndarray
    weight: np.ndarray | None


def taps(matrix: np.ndarray) -> list[Tap] | None:
    """The map of one axis (out x in) as taps; None for the identity (nothing to do)."""
    m = np.asarray(matrix, dtype=np.float64)
    if m.shape[0] == m.shape[1] and np.array_equal(m, np.eye(m.shape[0])):
        return None
    nonzero = m != 0
    k = max(int(nonzero.sum(axis=1).max()), 1)
    index = np.zeros((m.shape[0], k), dtype=np.int64)
    weight = np.zeros((m.shape[0], k), dtype=np.float64)
    for i in range(m.shape[0]):
        cols = np.flatnonzero(nonzero[i])
        index[i, :cols.size] = cols
        weight[i, :cols.size] = m[i, cols]
    if k == 1 and np.all(weight == 1.0):
        return [Tap(index[:, 0], None)]
    return [Tap(index[:, t], weight[:, t]) for t in range(k)]


def resample(x: T, rank: int, maps: Sequence[tuple[int, np.ndarray]],
             gather: Callable[[T, int, np.ndarray], T],
             scale: Callable[[T, np.ndarray], T], add: Callable[[T, T], T]) -> T:
    """x resampled along each (axis, matrix) of `maps` in turn. `scale(y, w)` multiplies y
    by w, already shaped to broadcast along the axis (out, 1, ..., 1)."""
    for axis, matrix in maps:
        found = taps(matrix)
        if found is None:
            continue
        trailing = (1,) * (rank - 1 - axis)
        total: T | None = None
        for tap in found:
            term = gather(x, axis, tap.index)
            if tap.weight is not None:
                term = scale(term, tap.weight.reshape(tap.weight.shape + trailing))
            total = term if total is None else add(total, term)
        assert total is not None
        x = total
    return x


def identity_probe(length: int, axis: int, spatial: int, width: int = 1) -> np.ndarray:
    """An input that reads back one axis's map: (1, length, width, ..., length, ...,
    width), channel j holding the unit vector e_j along spatial axis `axis` (0-based among
    `spatial` axes), the same at every position of the other spatial axes. Resampled with
    the other axes left as they are, channel j of the output is column j of the map."""
    shape = [1, length] + [1] * spatial
    shape[2 + axis] = length
    unit = np.eye(length).reshape(shape)
    full = [1, length] + [width] * spatial
    full[2 + axis] = length
    return np.array(np.broadcast_to(unit, full))


def read_map(output: np.ndarray, axis: int) -> np.ndarray:
    """The map (out x in) from the resampled `identity_probe` of `axis`."""
    out = np.asarray(output, dtype=np.float64)[0]
    at = tuple(slice(None) if d in (0, 1 + axis) else 0 for d in range(out.ndim))
    return out[at].T


def read_maps(spatial: Sequence[int], run_axis: Callable[[np.ndarray, int], np.ndarray],
              run_all: Callable[[np.ndarray], np.ndarray]) -> list[np.ndarray]:
    """Each spatial axis's map, read with `run_axis(probe, k)` (the op with only axis k
    resized) and checked: the maps applied in turn to a random input must give what
    `run_all` (the op itself) gives. A runtime can mishandle the probes' length-1 axes
    (torch 2.13's antialiased bilinear on an (N, C, H, 1) input returns one row H times),
    so a failed check reads again with the other axes of length 2; ValueError when that
    fails too."""
    x = np.random.default_rng(0).standard_normal((1, 1, *spatial))
    want = np.asarray(run_all(x), dtype=np.float64)[0, 0]
    for width in (1, 2):
        maps = [read_map(run_axis(identity_probe(n, k, len(spatial), width), k), k)
                for k, n in enumerate(spatial)]
        got = x[0, 0]
        for k, m in enumerate(maps):
            got = np.moveaxis(np.tensordot(m, got, axes=([1], [k])), 0, k)
        scale = max(float(np.abs(want).max()), 1e-30) if want.size else 1.0
        if got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6 * scale):
            return maps
    raise ValueError("the interpolation is not the product of its per-axis maps as read "
                     "from the runtime")


__all__ = ["Tap", "identity_probe", "read_map", "read_maps", "resample", "taps"]
