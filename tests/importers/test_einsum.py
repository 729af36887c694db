"""Einsum as transposes, reshapes, sums and batched matmuls, against numpy's einsum."""

from __future__ import annotations

import numpy as np
import pytest

from superopt.importers.composite import Prim
from superopt.importers.einsum import einsum, parse


def _reduce(op: str, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    assert op == "reduce_sum"
    return x.sum(axis=axes, keepdims=keep)


NUMPY = Prim[np.ndarray](
    unary=lambda op, x: x, add=np.add, mul=np.multiply, minimum=np.minimum, reduce=_reduce,
    shape=lambda x: x.shape, reshape=lambda x, s: x.reshape(s),
    transpose=lambda x, p: np.transpose(x, p), expand=np.broadcast_to, matmul=np.matmul)

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # attention scores
    ("ibnd,jbnd->bnij", [(4, 2, 3, 5), (6, 2, 3, 5)]),  # XLNet's
    ("ij->ji", [(3, 4)]),
    ("ijk->j", [(2, 3, 4)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("b...d,d->b...", [(2, 3, 4, 5), (5,)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output: ik
    ("abc,cd,ae->bde", [(2, 3, 4), (4, 5), (2, 6)]),  # a summed across the pairs
]


@pytest.mark.parametrize("equation,shapes", CASES)
def test_einsum_matches_numpy(equation: str, shapes: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(len(equation))
    xs = [rng.standard_normal(s) for s in shapes]
    got = einsum(equation, xs, shapes, NUMPY)
    np.testing.assert_allclose(got, np.einsum(equation, *xs), rtol=1e-12, atol=1e-12)


def test_einsum_refusals_say_why() -> None:
    with pytest.raises(ValueError, match="diagonal"):
        parse("ii->i", [2])
    with pytest.raises(ValueError, match="2 operands, given 1"):
        parse("ij,jk->ik", [2])
    with pytest.raises(ValueError, match="broadcasting"):
        einsum("ij,jk->ik", [np.ones((2, 3)), np.ones((1, 4))], [(2, 3), (1, 4)], NUMPY)
    with pytest.raises(ValueError, match="output"):
        parse("ij->ik", [2])
