"""Einsum (ONNX Einsum, torch.einsum) as the IR's transpose, reshape, reduce_sum and matmul,
for both importers.

The operands are contracted left to right, two at a time. In each pair a letter is a batch
letter (in both operands and still needed after the pair), a contracted one (in both, not
needed after), or belongs to one side; a letter of one side that nothing later needs is
summed out first. Each side is then transposed to (batch, own, contracted) / (batch,
contracted, own), flattened to three dims, multiplied as one batched matmul and unflattened:
the contraction a BLAS would do, written with ops every subsystem already knows. One
operand alone is a transpose and sums. Repeated letters within one operand (diagonals) and
letters whose sizes differ between operands (broadcast) are refused.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from typing import TypeVar

from superopt.importers.composite import Prim

T = TypeVar("T")


def parse(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Each operand's letters and the output's, with `...` spelled out as capital letters
    (the same broadcast dims in every operand that has them); ValueError for what the
    equation cannot mean."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"equation {equation!r} has {len(terms)} operands, given {len(ranks)}")
    spare = [c for c in string.ascii_uppercase if c not in eq]
    width = 0
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            width = max(width, rank - len(term.replace("...", "")))
    fill = "".join(spare[:width])
    out_terms = []
    for term, rank in zip(terms, ranks, strict=True):
        named = len(term.replace("...", ""))
        if "..." in term:
            term = term.replace("...", fill[width - (rank - named):])
        if len(term) != rank or not term.isalpha():
            raise ValueError(f"operand {term!r} of equation {equation!r} for a rank-{rank} "
                             "tensor")
        out_terms.append(term)
    if arrow:
        out = rhs.replace("...", fill)
    else:  # implicit: the broadcast dims, then the letters seen once, alphabetically
        counts: dict[str, int] = {}
        for term in out_terms:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = fill + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in fill))
    if not out.isalpha() and out:
        raise ValueError(f"output {rhs!r} of equation {equation!r}")
    for term in out_terms:
        if len(set(term)) != len(term):
            raise ValueError(f"a repeated letter in {term!r} (a diagonal)")
    if len(set(out)) != len(out) or any(c not in "".join(out_terms) for c in out):
        raise ValueError(f"output {out!r} of equation {equation!r}")
    return out_terms, out


def einsum(equation: str, operands: Sequence[T], shapes: Sequence[Sequence[int]],
           ops: Prim[T]) -> T:
    """The einsum of `operands` (of `shapes`) by `ops`; ValueError for what it refuses."""
    terms, out = parse(equation, [len(s) for s in shapes])
    size: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        for c, d in zip(term, shape, strict=True):
            if size.setdefault(c, int(d)) != int(d):
                raise ValueError(f"letter {c!r} is {size[c]} in one operand and {d} in another "
                                 "(broadcasting)")
    cur, cur_term = operands[0], terms[0]
    for k in range(1, len(operands)):
        later = set(out).union(*terms[k + 1:])
        other, other_term = operands[k], terms[k]
        cur, cur_term = _sum_out(cur, cur_term, later | set(other_term), ops)
        other, other_term = _sum_out(other, other_term, later | set(cur_term), ops)
        batch = [c for c in cur_term if c in other_term and c in later]
        contract = [c for c in cur_term if c in other_term and c not in later]
        left = [c for c in cur_term if c not in other_term]
        right = [c for c in other_term if c not in cur_term]

        def prod(cs: list[str]) -> int:
            return math.prod(size[c] for c in cs)
        a = _arrange(cur, cur_term, batch + left + contract, ops)
        b = _arrange(other, other_term, batch + contract + right, ops)
        a = ops.reshape(a, (prod(batch), prod(left), prod(contract)))
        b = ops.reshape(b, (prod(batch), prod(contract), prod(right)))
        cur = ops.reshape(ops.matmul(a, b), tuple(size[c] for c in batch + left + right))
        cur_term = "".join(batch + left + right)
    return _finish(cur, cur_term, out, ops)


def _sum_out(x: T, term: str, keep: set[str], ops: Prim[T]) -> tuple[T, str]:
    drop = tuple(i for i, c in enumerate(term) if c not in keep)
    if not drop:
        return x, term
    return ops.reduce("reduce_sum", x, drop, False), "".join(c for c in term if c in keep)


def _arrange(x: T, term: str, order: list[str], ops: Prim[T]) -> T:
    perm = tuple(term.index(c) for c in order)
    return x if perm == tuple(range(len(perm))) else ops.transpose(x, perm)


def _finish(x: T, term: str, out: str, ops: Prim[T]) -> T:
    x, term = _sum_out(x, term, set(out), ops)
    return _arrange(x, term, list(out), ops)


__all__ = ["einsum", "parse"]
