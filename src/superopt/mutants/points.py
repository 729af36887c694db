"""Exact evaluation of a multi-linear program at chosen output positions, mod p.

A box test compares two programs at a few positions per box, so it must not compute
whole tensors: walking the graph backwards, each op's `points` rule (see
`superopt.mutants.boxes`) says which input elements the wanted positions read; walking
forwards, only those elements are computed. The work is proportional to the positions
asked for (times their receptive fields), not to the size of the outputs.

Sources are free variables: draw `d` gives source `name` at flat index `i` the residue
`mix(i)` salted by `(d, name)`, so any subset of a source can be drawn on its own and two
programs over the same inputs see the same values. `full_feeds` materialises whole
tensors of the same draw for exhaustive cross-checks with the mod-p interpreter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

from superopt.ir.graph import Graph, Node, Value
from superopt.ir.kernels import mix
from superopt.mutants.boxes import BoxError, PointPlan, rule_for


def _salt(name: str, draw: int) -> int:
    digest = hashlib.blake2b(f"pet:{draw}:{name}".encode(), digest_size=7).digest()
    return int.from_bytes(digest, "little")


def source_values(name: str, draw: int, flat: np.ndarray) -> np.ndarray:
    """The residues of source `name` at flat indices `flat` in draw `draw`."""
    return mix(np.asarray(flat, dtype=np.int64), _salt(name, draw))


@lru_cache(maxsize=16)
def _dense_source(name: str, size: int, draw: int) -> np.ndarray:
    # Both programs of a box test, every chunk of positions and every probe read the same
    # draw of the same sources: drawing each whole source once is the cheapest.
    arr = source_values(name, draw, np.arange(size, dtype=np.int64))
    arr.setflags(write=False)
    return arr


DENSE_LIMIT = 1 << 24  # larger sources are drawn element by element


def _check_source(node: Node) -> None:
    if not node.type.dtype.is_float:
        raise BoxError(f"source {node.attr('name')!r} is an integer tensor "
                       f"({node.type}): not a free input of a multi-linear program")


def full_feeds(graph: Graph, draw: int) -> dict[str, np.ndarray]:
    """Whole source tensors of draw `draw` (for the mod-p interpreter)."""
    out: dict[str, np.ndarray] = {}
    for n in graph.nodes:
        if n.is_named_source:
            _check_source(n)
            size = n.type.size
            out[n.attr("name")] = source_values(n.attr("name"), draw,
                                                np.arange(size)).reshape(n.type.shape)
    return out


DENSE_VALUE_LIMIT = 1 << 22  # larger intermediates are kept as sorted (index, value) pairs


class _Needs:
    """The elements of one value that some consumer reads."""

    def __init__(self, size: int) -> None:
        self.mask = np.zeros(size, dtype=bool) if size <= DENSE_VALUE_LIMIT else None
        self.parts: list[np.ndarray] = []

    def add(self, flat: np.ndarray) -> None:
        flat = flat[flat >= 0]
        if self.mask is not None:
            self.mask[flat] = True
        else:
            self.parts.append(flat)

    def indices(self) -> np.ndarray:
        if self.mask is not None:
            return np.flatnonzero(self.mask)
        return np.unique(np.concatenate(self.parts)) if self.parts else np.zeros(0, np.int64)


class _Values:
    """Computed elements of one value: a dense buffer with one trailing zero (index -1,
    an implicit zero of pad or concat, reads it without a branch), or sorted pairs."""

    def __init__(self, size: int, idx: np.ndarray, vals: np.ndarray) -> None:
        self.dense = size <= DENSE_VALUE_LIMIT
        if self.dense:
            self.buf = np.zeros(size + 1, dtype=np.int64)
            self.buf[idx] = vals
        else:
            self.idx, self.vals = idx, vals

    def get(self, flat: np.ndarray) -> np.ndarray:
        if self.dense:
            return self.buf[flat]
        if len(self.idx) == 0:
            return np.zeros(np.shape(flat), dtype=np.int64)
        pos = np.clip(np.searchsorted(self.idx, flat), 0, len(self.idx) - 1)
        return np.where(flat >= 0, self.vals[pos], 0)


def _evaluate(graph: Graph, wanted: Mapping[int, np.ndarray], draw: int,
              feeds: Mapping[str, np.ndarray] | None) -> dict[int, np.ndarray]:
    # Backwards: which elements of each value the wanted positions read; forwards: compute
    # only those.
    need: dict[Value, _Needs] = {}

    def mark(v: Value, flat: np.ndarray) -> None:
        if graph.node(v.node).is_named_source:
            return  # sources are drawn at gather time, element by element
        if v not in need:
            need[v] = _Needs(graph.type_of(v).size)
        need[v].add(np.asarray(flat, dtype=np.int64).ravel())

    for k, flat in wanted.items():
        mark(graph.outputs[k], flat)
    plans: dict[Value, tuple[np.ndarray, PointPlan]] = {}
    for node in reversed(graph.nodes):
        if node.is_named_source:
            continue
        for i in range(len(node.types)):
            v = Value(node.id, i)
            if v not in need:
                continue
            idx = need[v].indices()
            if len(idx) == 0:
                continue  # only implicit zeros of a consumer (concat, pad) fall here
            rule = rule_for(node)
            assert rule.points is not None
            ins = tuple(graph.type_of(u) for u in node.inputs)
            plan = rule.points(node, ins, i, idx)
            plans[v] = (idx, plan)
            for slot, u in enumerate(node.inputs):
                mark(u, np.asarray(plan.needs[slot]))
    values: dict[Value, _Values] = {}

    def gather(u: Value, flat: np.ndarray) -> np.ndarray:
        src = graph.node(u.node)
        flat = np.asarray(flat, dtype=np.int64)
        if not src.is_named_source:
            return values[u].get(flat)
        _check_source(src)
        name = src.attr("name")
        if feeds is not None and name in feeds:
            got = np.asarray(feeds[name], dtype=np.int64).reshape(-1)[np.maximum(flat, 0)]
        elif src.type.size <= DENSE_LIMIT:
            got = _dense_source(name, src.type.size, draw)[np.maximum(flat, 0)]
        else:
            got = source_values(name, draw, np.maximum(flat, 0))
        return np.where(flat >= 0, got, 0)

    empty = np.zeros(0, dtype=np.int64)
    for node in graph.nodes:
        if node.is_named_source:
            continue
        for i in range(len(node.types)):
            v = Value(node.id, i)
            if v not in need:
                continue
            size = graph.type_of(v).size
            if v not in plans:
                values[v] = _Values(size, empty, empty)
                continue
            idx, plan = plans[v]
            gathered = tuple(gather(u, plan.needs[slot]) for slot, u in enumerate(node.inputs))
            out = np.broadcast_to(np.asarray(plan.combine(gathered), dtype=np.int64), idx.shape)
            values[v] = _Values(size, idx, out)
    return {k: gather(graph.outputs[k], flat) for k, flat in wanted.items()}


def evaluate_points(graph: Graph, positions: Sequence[np.ndarray | None], draw: int = 0,
                    feeds: Mapping[str, np.ndarray] | None = None, chunk: int = 256
                    ) -> list[np.ndarray | None]:
    """Output k's residues at flat indices `positions[k]` (None: output not wanted).

    `feeds` (whole tensors of residues) override the drawn source values.
    """
    res: list[np.ndarray | None] = []
    for k, pos in enumerate(positions):
        if pos is None:
            res.append(None)
            continue
        pos = np.asarray(pos, dtype=np.int64)
        parts = [_evaluate(graph, {k: pos[s:s + chunk]}, draw, feeds)[k]
                 for s in range(0, len(pos), chunk)]
        res.append(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
    return res
