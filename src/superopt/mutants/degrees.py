"""Which inputs each value is a polynomial in: degree sets of multi-linear programs.

A value's degree set is the set of monomials it contains, each monomial the sorted tuple
of the source names it multiplies (`conv(x, w) + b` has {(w, x), (b,)}). A program is
multi-linear when no monomial repeats a source: the class PET's box theorem covers (a
sum of multi-linear terms, such as a biased conv, splits into homogeneous parts that are
each multi-linear). The mutant generator uses degree sets to prune: an intermediate
whose monomials do not divide the original's can never become part of an equal result.
"""

from __future__ import annotations

from collections.abc import Iterable

from superopt.ir.graph import Graph, Value
from superopt.ir.opdef import LINEAR, NONLINEAR, SOURCE, get_op
from superopt.mutants.boxes import BoxError

Monomial = tuple[str, ...]
Degrees = frozenset[Monomial]

MAX_MONOMIALS = 4096  # beyond this a program is far from PET's small subprograms


def product(a: Degrees, b: Degrees) -> Degrees:
    out = frozenset(tuple(sorted(x + y)) for x in a for y in b)
    if len(out) > MAX_MONOMIALS:
        raise BoxError(f"degree set of more than {MAX_MONOMIALS} monomials")
    return out


def union(sets: Iterable[Degrees]) -> Degrees:
    out: frozenset[Monomial] = frozenset().union(*sets)
    if len(out) > MAX_MONOMIALS:
        raise BoxError(f"degree set of more than {MAX_MONOMIALS} monomials")
    return out


def op_degrees(op: str, attrs: dict, ins: list[Degrees]) -> Degrees:
    """The degree set of an op's outputs from its inputs' degree sets."""
    d = get_op(op)
    if d.has(SOURCE):
        raise BoxError(f"{op}: sources have no inputs")
    if not d.is_multilinear(attrs) or d.has(NONLINEAR):
        raise BoxError(f"{op}: not multi-linear (non-linear op or fused activation)")
    if d.has(LINEAR):
        return union(ins)
    others = [i for i in range(len(ins)) if i not in d.linear_in]
    if others:
        # Linear in some inputs only (an embedding in its table, a gather in x): the others
        # (ids, indices) are not free inputs of a multi-linear program.
        raise BoxError(f"{op}: not multi-linear in its input(s) {others} (linear only in "
                       f"{list(d.linear_in)})")
    if len(d.linear_in) == 2:
        return product(ins[0], ins[1])
    if d.linear_in == (0,):
        return union(ins)
    raise BoxError(f"{op}: no degree rule (linear in inputs {d.linear_in})")


def degree_sets(graph: Graph) -> dict[Value, Degrees]:
    out: dict[Value, Degrees] = {}
    for n in graph.nodes:
        if n.is_named_source:
            out[Value(n.id)] = frozenset({(n.attr("name"),)})
            continue
        # TASO's constants and the index constants are sources with no free input.
        if n.is_source:
            raise BoxError(f"{n.op} %{n.id}: not a multi-linear op over free inputs")
        deg = op_degrees(n.op, n.a, [out[v] for v in n.inputs])
        for i in range(len(n.types)):
            out[Value(n.id, i)] = deg
    return out


def is_multilinear_monomials(deg: Degrees) -> bool:
    return all(len(set(m)) == len(m) for m in deg)


def output_degrees(graph: Graph) -> tuple[Degrees, ...]:
    d = degree_sets(graph)
    return tuple(d[v] for v in graph.outputs)


def check_multilinear(graph: Graph) -> tuple[Degrees, ...]:
    """The outputs' degree sets; raises BoxError unless every output is multi-linear."""
    degs = output_degrees(graph)
    for k, deg in enumerate(degs):
        if not is_multilinear_monomials(deg):
            bad = next(m for m in deg if len(set(m)) != len(m))
            raise BoxError(f"graph {graph.name!r} output {k} is not multi-linear: it contains "
                           f"the monomial {'*'.join(bad)}")
    return degs


def max_degree(degs: Iterable[Degrees]) -> int:
    return max((len(m) for d in degs for m in d), default=1)
