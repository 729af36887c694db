"""PET's region test: which boxes of a mutant's outputs equal the original's, exactly.

Theorem 1 (PET): two multi-linear programs that agree at a box's corner v0 and at v0 plus
each unit vector agree on the whole box. Theorem 2: at a position where they differ as
polynomials of degree n, inputs drawn uniformly from a field of size p agree with
probability at most n/p. So for each box of the intersected grids we evaluate both
programs at v0 and v0 + e_i (for every dim the box is wider than one) on `draws`
independent random inputs mod p = 2**31 - 1: a wrong box passes with probability at
most (n/p)**draws per tested position. The cost is boxes x (m+1) x draws point
evaluations per program, independent of the number of output positions.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from superopt.ir.graph import Graph
from superopt.ir.interpret import interpret
from superopt.ir.kernels import P
from superopt.mutants.boxes import (
    BoxError,
    Grid,
    Region,
    intervals,
    merge_grids,
    output_grids,
)
from superopt.mutants.degrees import check_multilinear, max_degree
from superopt.mutants.points import evaluate_points, full_feeds


@dataclass(frozen=True, eq=False)
class OutputBoxes:
    """The boxes of one output and which of them are equal (`equal` has one entry per
    cell, indexed by the cell's interval number in each dim)."""

    shape: tuple[int, ...]
    grid: Grid
    equal: np.ndarray = field(repr=False)

    @property
    def boxes(self) -> int:
        return int(self.equal.size)

    @property
    def wrong_boxes(self) -> int:
        return int(self.equal.size - self.equal.sum())

    @property
    def positions(self) -> int:
        return math.prod(self.shape)

    def _extents(self) -> np.ndarray:
        ext = np.ones(self.equal.shape, dtype=np.int64)
        for d, size in enumerate(self.shape):
            lens = np.array([hi - lo for lo, hi in intervals(self.grid[d], size)], dtype=np.int64)
            shape = [1] * len(self.shape)
            shape[d] = len(lens)
            ext = ext * lens.reshape(shape)
        return ext

    @property
    def equal_positions(self) -> int:
        return int((self._extents() * self.equal).sum())

    @property
    def equal_fraction(self) -> float:
        return self.equal_positions / self.positions if self.positions else 1.0

    def regions(self, equal: bool) -> list[Region]:
        """The equal (or wrong) boxes as regions, in row-major cell order."""
        spans = [intervals(self.grid[d], s) for d, s in enumerate(self.shape)]
        idx = np.argwhere(self.equal == equal)
        return [tuple(spans[d][i] for d, i in enumerate(row)) for row in idx]

    def wrong_mask(self) -> np.ndarray:
        """A boolean tensor of the output's shape: True at positions of wrong boxes."""
        mask = np.zeros(self.shape, dtype=bool)
        for region in self.regions(False):
            mask[tuple(slice(lo, hi) for lo, hi in region)] = True
        return mask


@dataclass(frozen=True)
class BoxReport:
    outputs: tuple[OutputBoxes, ...]
    draws: int
    tested_positions: int  # positions evaluated per program and draw (sum over boxes)
    seconds: float
    degree: int  # the largest monomial degree n of either program

    @property
    def evaluations(self) -> int:
        """Point evaluations of output elements: positions x draws x two programs."""
        return 2 * self.draws * self.tested_positions

    @property
    def boxes(self) -> int:
        return sum(o.boxes for o in self.outputs)

    @property
    def wrong_boxes(self) -> int:
        return sum(o.wrong_boxes for o in self.outputs)

    @property
    def positions(self) -> int:
        return sum(o.positions for o in self.outputs)

    @property
    def equal_fraction(self) -> float:
        total = self.positions
        return sum(o.equal_positions for o in self.outputs) / total if total else 1.0

    @property
    def fully_equivalent(self) -> bool:
        return self.wrong_boxes == 0

    @property
    def error_bound(self) -> float:
        """Union bound on wrongly accepting any tested position: count * (n/p)**draws."""
        return self.tested_positions * (self.degree / P) ** self.draws


def check_compatible(original: Graph, mutant: Graph) -> None:
    """Same input names, shapes and dtypes, and the same number and shapes of outputs."""
    def sources(g: Graph) -> dict[str, tuple[tuple[int, ...], str]]:
        return {n.attr("name"): (n.type.shape, n.type.dtype.value) for n in g.nodes
                if n.is_named_source}

    a, b = sources(original), sources(mutant)
    if a != b:
        diff = sorted(set(a.items()) ^ set(b.items()))
        raise BoxError(f"mutant {mutant.name!r} does not have the inputs of {original.name!r}: "
                       f"first difference {diff[0]}")
    sa = [original.type_of(v).shape for v in original.outputs]
    sb = [mutant.type_of(v).shape for v in mutant.outputs]
    if sa != sb:
        raise BoxError(f"mutant {mutant.name!r} has outputs {sb}, the original has {sa}")


def probe_positions(grid: Grid, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(flat positions, the cell each belongs to): v0 and v0 + e_i of every cell."""
    spans = [intervals(grid[d], s) for d, s in enumerate(shape)]
    cells = math.prod(len(s) for s in spans)
    if not shape:
        return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    if 0 in shape:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lows = np.meshgrid(*[np.array([lo for lo, _ in s], dtype=np.int64) for s in spans],
                       indexing="ij")
    exts = np.meshgrid(*[np.array([hi - lo for lo, hi in s], dtype=np.int64) for s in spans],
                       indexing="ij")
    corner = np.stack([a.ravel() for a in lows], axis=1)  # (cells, rank)
    ext = np.stack([a.ravel() for a in exts], axis=1)
    pos = [corner]
    owner = [np.arange(cells)]
    for d in range(len(shape)):
        wide = ext[:, d] > 1
        step = corner[wide].copy()
        step[:, d] += 1
        pos.append(step)
        owner.append(np.nonzero(wide)[0])
    allpos = np.concatenate(pos)
    flat = np.ravel_multi_index(tuple(allpos.T), shape)
    return flat.astype(np.int64), np.concatenate(owner)


def box_test(original: Graph, mutant: Graph, draws: int = 2) -> BoxReport:
    """Test every box of the intersected grids of `original` and `mutant` (Theorem 1)."""
    if draws < 1:
        raise BoxError("the box test needs at least one random draw")
    t0 = time.perf_counter()
    check_compatible(original, mutant)
    degree = max_degree(check_multilinear(original) + check_multilinear(mutant))
    ga, gb = output_grids(original), output_grids(mutant)
    shapes = [original.type_of(v).shape for v in original.outputs]
    grids = [merge_grids(s, a, b) for s, a, b in zip(shapes, ga, gb, strict=True)]
    plans = [probe_positions(g, s) for g, s in zip(grids, shapes, strict=True)]
    uniq = [np.unique(flat) for flat, _ in plans]
    same = [np.ones(len(u), dtype=bool) for u in uniq]
    for d in range(draws):
        va = evaluate_points(original, uniq, draw=d)
        vb = evaluate_points(mutant, uniq, draw=d)
        for k in range(len(uniq)):
            same[k] &= va[k] == vb[k]  # type: ignore[operator]
    outputs = []
    for k, (flat, owner) in enumerate(plans):
        cells = math.prod(len(c) + 1 for c in grids[k])
        ok = same[k][np.searchsorted(uniq[k], flat)]
        equal = np.ones(cells, dtype=bool)
        np.logical_and.at(equal, owner, ok)
        outputs.append(OutputBoxes(shapes[k], grids[k],
                                   equal.reshape(tuple(len(c) + 1 for c in grids[k]))))
    return BoxReport(tuple(outputs), draws, sum(len(u) for u in uniq),
                     time.perf_counter() - t0, degree)


def exhaustive_equal(original: Graph, mutant: Graph, draws: int = 2) -> tuple[np.ndarray, ...]:
    """Per output, a boolean tensor: True where the two programs agree on every draw,
    computing every position with the mod-p interpreter (the cross-check of the box test)."""
    check_compatible(original, mutant)
    out: list[np.ndarray] | None = None
    for d in range(draws):
        feeds = full_feeds(original, d)
        a = interpret(original, feeds, "modp")
        b = interpret(mutant, feeds, "modp")
        eq = [np.asarray(x) == np.asarray(y) for x, y in zip(a, b, strict=True)]
        out = eq if out is None else [o & e for o, e in zip(out, eq, strict=True)]
    assert out is not None
    return tuple(out)


def screen(original: Graph, mutant: Graph, probes: int = 16, seed: int = 0) -> float:
    """The fraction of `probes` random output positions (one draw) where the programs agree:
    a cheap first look that discards mutants equal almost nowhere before the box test."""
    check_compatible(original, mutant)
    rng = np.random.default_rng(seed)
    pos = [np.unique(rng.integers(0, max(original.type_of(v).size, 1), size=probes))
           for v in original.outputs]
    va = evaluate_points(original, pos, draw=97)
    vb = evaluate_points(mutant, pos, draw=97)
    same = sum(int((a == b).sum()) for a, b in zip(va, vb, strict=True))  # type: ignore[union-attr]
    return same / sum(len(p) for p in pos)
