"""TASO's pruning of candidate rules, and duplicate detection under variable renaming.

- Common subgraph: the two sides contain the same operator applied to the same graph
  inputs (constants included); the rule is then a smaller rule in a context.
- Common supergraph: paired outputs are produced by the same operator whose operands are
  the same graph inputs in all but at most one position; the rule is then a smaller rule
  under a common consumer.
- Renaming: interchangeable inputs (same shape and role) may be permuted; two rules equal
  after a permutation (commutative operands sorted, outputs and sides unordered) are one.

A side is described by its expression trees: ("in", k) for input k, or
(template, output, children) for an operator.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Expr = tuple[Any, ...]


@dataclass(frozen=True)
class SideInfo:
    """What pruning needs of one side: its leaf operators and the roots of its outputs."""

    leaves: frozenset[Any]  # operator nodes whose operands are all graph inputs
    roots: tuple[tuple[int, tuple[Any, ...]] | None, ...]  # per output: (template, operands)


def common_subgraph(a: SideInfo, b: SideInfo) -> bool:
    return not a.leaves.isdisjoint(b.leaves)


def common_supergraph(a: SideInfo, b: SideInfo,
                      same: Callable[[Any, Any], bool] | None = None) -> bool:
    """Do the two sides apply one op to operands that differ in at most one place (TASO:
    f(X, z) = f(Y, z) then follows from X = Y)? With `same`, the differing operands must
    also be equal tensors: for an op that is not injective (a square, cos, a reduction)
    f(X) = f(Y) holds without X = Y (pow(-x, 2) = pow(x, 2)), and is a rule of its own."""
    for ra, rb in zip(a.roots, b.roots, strict=True):
        if ra is None or rb is None or ra[0] != rb[0]:
            continue
        differ = [(x, y) for x, y in zip(ra[1], rb[1], strict=True)
                  if not (x == y and isinstance(x, tuple) and x[0] == "in")]
        if len(differ) <= 1 and (same is None or all(same(x, y) for x, y in differ)):
            return True
    return False


def expr_vars(e: Expr, out: dict[int, None] | None = None) -> dict[int, None]:
    out = {} if out is None else out
    if e[0] == "in":
        out.setdefault(e[1], None)
    else:
        for c in e[2]:
            expr_vars(c, out)
    return out


def render(e: Expr, names: dict[int, str], tkey: Callable[[int], str],
           commutative: Callable[[int], bool]) -> str:
    if e[0] == "in":
        return names[e[1]]
    kids = [render(c, names, tkey, commutative) for c in e[2]]
    if commutative(e[0]):
        kids.sort()
    return f"{tkey(e[0])}.{e[1]}(" + ",".join(kids) + ")"


def canonical(src: Sequence[Expr], tgt: Sequence[Expr], groups: Sequence[int],
              tkey: Callable[[int], str], commutative: Callable[[int], bool],
              limit: int = 5040) -> tuple[str, dict[int, int]]:
    """The least key of a rule over permutations of interchangeable inputs, and the
    renaming (used input -> input of the same group, by rank) that attains it.

    `groups[k]` is the interchangeability class of input k; within a class, the inputs used
    are renamed to the first members of the class in every order.
    """
    used: dict[int, None] = {}
    for e in (*src, *tgt):
        expr_vars(e, used)
    by_group: dict[int, list[int]] = {}
    for k in used:
        by_group.setdefault(groups[k], []).append(k)
    members: dict[int, list[int]] = {}
    for k, g in enumerate(groups):
        members.setdefault(g, []).append(k)
    glist = sorted(by_group)
    perms = [list(itertools.permutations(by_group[g])) for g in glist]
    best: tuple[str, dict[int, int]] | None = None
    for n, choice in enumerate(itertools.product(*perms)):
        if n >= limit:
            break
        mapping: dict[int, int] = {}
        for g, order in zip(glist, choice, strict=True):
            for rank, k in enumerate(order):
                mapping[k] = members[g][rank]
        names = {k: f"v{mapping[k]}" for k in used}
        pairs = sorted(render(s, names, tkey, commutative) + "|" + render(t, names, tkey, commutative)
                       for s, t in zip(src, tgt, strict=True))
        back = sorted(render(t, names, tkey, commutative) + "|" + render(s, names, tkey, commutative)
                      for s, t in zip(src, tgt, strict=True))
        key = min(";".join(pairs), ";".join(back))
        if best is None or key < best[0]:
            best = (key, mapping)
    assert best is not None
    return best
