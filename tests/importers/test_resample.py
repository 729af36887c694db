"""Resampling as gathers and weights: taps from a map, maps read back from an operator."""

from __future__ import annotations

import numpy as np
import pytest

from superopt.importers.resample import identity_probe, read_map, read_maps, resample, taps


def test_taps_of_identity_nearest_and_linear() -> None:
    assert taps(np.eye(4)) is None
    near = taps(np.eye(3)[[0, 0, 1, 1, 2, 2]])
    assert near is not None and len(near) == 1 and near[0].weight is None
    assert near[0].index.tolist() == [0, 0, 1, 1, 2, 2]
    lin = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0, 1.0, 0], [0, 0.25, 0.75]])
    got = taps(lin)
    assert got is not None and len(got) == 2
    rebuilt = np.zeros_like(lin)
    for t in got:
        assert t.weight is not None
        np.add.at(rebuilt, (np.arange(4), t.index), t.weight)
    np.testing.assert_array_equal(rebuilt, lin)


def test_resample_applies_each_axis_map() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 5))
    mh, mw = rng.random((6, 4)) * (rng.random((6, 4)) < 0.5), np.eye(5)[[4, 0, 2]]
    y = resample(x, 4, [(2, mh), (3, mw)],
                 gather=lambda v, a, idx: np.take(v, idx, axis=a),
                 scale=lambda v, w: v * w, add=lambda a, b: a + b)
    np.testing.assert_allclose(y, np.einsum("ih,nchw,jw->ncij", mh, x, mw), atol=1e-12)


def _resize_2x(t: np.ndarray, k: int | None) -> np.ndarray:
    """Nearest doubling of both spatial axes (k: only that one)."""
    for axis in (2, 3):
        if k is None or axis == 2 + k:
            t = np.repeat(t, 2, axis=axis)
    return t


def test_read_maps_reads_and_checks() -> None:
    maps = read_maps((3, 2), _resize_2x, lambda t: _resize_2x(t, None))
    np.testing.assert_array_equal(maps[0], np.eye(3)[[0, 0, 1, 1, 2, 2]])
    assert read_map(_resize_2x(identity_probe(2, 1, 2), 1), 1).shape == (4, 2)
    # An operator that is not the product of its per-axis maps (a transpose of the
    # doubled grid) is refused rather than imported wrong.
    with pytest.raises(ValueError, match="not the product of its per-axis maps"):
        read_maps((3, 3), _resize_2x, lambda t: np.swapaxes(_resize_2x(t, None), 2, 3))
