"""Mutant enumeration: depth-first search over small programs, seeded by the families.

The search builds programs over the original's sources from multi-linear ops (conv2d with
strides, dilations and groups, matmul, ewadd, sub, ewmul, smul, and the original's one-input
multi-linear ops: pooling, reductions, negation) and movement ops (a composite reshape/transpose "fold" that moves a factor of
one dim into another, dim swaps, pad, slice, concat, split), up to `depth` ops, where a
run of reshape/transpose counts as one op. Programs are built in a canonical order:
movement chains on each source in turn ("pre" stage), then compute ops each consuming
the previous result, with movement after them ("post" stage); this enumerates every
program of that shape once. A mutant has the same sources and the same number and
shapes of outputs as the original.

Pruning that cannot lose a mutant of the enumerated space:
- degree sets: every monomial of every intermediate must divide a monomial of the
  original's outputs (otherwise no later op can remove it), and an output must contain
  all of the original's monomials; ops still needed to bring in missing sources count
  against the depth left;
- the last ops must be able to produce an output shape (folds are filtered by shape
  arithmetic before anything is built);
- states already visited (hash-consed values make permutations coincide) are skipped.

Restrictions of the space (choices, like PET's own operator list), so that a few
thousand states reach the useful programs:
- weights move only factors of their channel dims (conv) and biases never move;
- at most two movement ops in a chain, and data moved k times before the kernels is
  moved at most max(1, k) times after them;
- no sum of two values whose monomials are nested (it could only assemble zero-padded
  pieces, which concat does directly);
- mutants that run exactly the original's kernels, only moving data around them, are
  dropped as useless.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from superopt.corrector.regions import copy_sources
from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Value
from superopt.ir.kernels import resolve_pads
from superopt.ir.opdef import MOVEMENT, NONLINEAR, get_op
from superopt.mutants.boxes import TABLE as BOX_RULES
from superopt.mutants.boxes import is_kernel, relabels
from superopt.mutants.degrees import Degrees, Monomial, check_multilinear, op_degrees
from superopt.mutants.families import Mutant
from superopt.mutants.rebuild import fold


@dataclass(frozen=True)
class Entry:
    value: Value
    deg: Degrees
    weight_only: bool


@dataclass
class SearchStats:
    states: int = 0  # partial programs visited
    programs: int = 0  # complete programs with the original's output shapes and degrees
    mutants: int = 0  # distinct new programs kept
    seconds: float = 0.0
    truncated: bool = False  # stopped by the state or time budget
    reasons: Counter[str] = field(default_factory=Counter)


def _sub_multisets(m: Monomial) -> set[Monomial]:
    out: set[Monomial] = set()
    for r in range(1, len(m) + 1):
        out |= {tuple(sorted(c)) for c in itertools.combinations(m, r)}
    return out


class _Search:
    def __init__(self, original: Graph, depth: int, max_states: int, time_budget: float) -> None:
        self.original = original
        self.depth = depth
        self.max_states = max_states
        self.deadline = time.perf_counter() + time_budget
        self.b = GraphBuilder(f"{original.name}.mut")
        self.sources = copy_sources(self.b, original)
        self.targets = [(original.type_of(v).shape, d) for v, d in
                        zip(original.outputs, check_multilinear(original), strict=True)]
        self.allowed: set[Monomial] = set()
        for _, d in self.targets:
            for m in d:
                self.allowed |= _sub_multisets(m)
        self.ops = {n.op for n in original.nodes}
        self.convs = [n for n in original.nodes if n.op == "conv2d"]
        # The original's one-input multi-linear compute ops (pooling, reductions, negation:
        # by their traits and box rules, so a new such op is reused without an edit here).
        self.unary = [n for n in original.nodes if _unary_compute(n.op, n.a)]
        ks = {2}
        for n in self.convs:
            ks |= {d for d in n.attr("dilation") if d > 1}
        self.ks = sorted(ks)
        self.weights = {n.attr("name") for n in original.nodes if n.op == "weight"}
        self.signature = compute_signature(original)
        self.seen_states: set[frozenset[Value]] = set()
        self.post_moves = 1
        self.seen_graphs = {original.structural_hash}
        self.found: list[Mutant] = []
        self.stats = SearchStats()
        # Each binary op joins two sources: an output over k sources needs k - 1 of them.
        need = [len({x for m in d for x in m}) - 1 for _, d in self.targets]
        self.min_compute = max(1, max(need, default=1))
        # Which weights get movement chains: kernels of convs and matmuls (moving a factor
        # of their channel dims), never biases.
        self.movable: dict[str, tuple[int, ...] | None] = {}
        for n in original.nodes:
            if is_kernel(n.op):
                w = original.node(n.inputs[1].node)
                if w.op == "weight":
                    self.movable[w.attr("name")] = (0, 1) if n.op == "conv2d" else None

    # ---- bookkeeping --------------------------------------------------------------

    def out_of_budget(self) -> bool:
        if self.stats.states >= self.max_states or time.perf_counter() > self.deadline:
            self.stats.truncated = True
            return True
        return False

    def ok_degree(self, deg: Degrees) -> bool:
        return all(m in self.allowed for m in deg)

    def entry(self, v: Value, deg: Degrees, weight_only: bool) -> Entry | None:
        if not self.ok_degree(deg):
            self.stats.reasons["degree"] += 1
            return None
        return Entry(v, deg, weight_only)

    def is_goal(self, e: Entry, k: int) -> bool:
        shape, deg = self.targets[k]
        return self.b.shape(e.value) == shape and deg <= e.deg

    def emit(self, outs: list[Value]) -> None:
        self.stats.programs += 1
        try:
            g = self.b.build(outs, name=f"{self.original.name}.dfs{len(self.found)}")
        except IRError:
            return
        if compute_signature(g) == self.signature:
            self.stats.reasons["same kernels"] += 1  # only moves data around the same ops
            return
        used = {n.attr("name") for n in g.nodes if n.op == "weight"}
        if used != self.weights:
            self.stats.reasons["unused weight"] += 1
            return
        if g.structural_hash in self.seen_graphs:
            self.stats.reasons["duplicate"] += 1
            return
        self.seen_graphs.add(g.structural_hash)
        self.found.append(Mutant(g, "dfs", describe(g)))

    # ---- moves -------------------------------------------------------------------------

    def fold_moves(self, e: Entry, want: tuple[int, ...] | None = None,
                   srcs: tuple[int, ...] | None = None
                   ) -> Iterator[tuple[int, int, bool, int, bool]]:
        shape = self.b.shape(e.value)
        r = len(shape)
        for k in self.ks:
            for src, so, dst, do in itertools.product(range(r), (True, False), range(r),
                                                      (True, False)):
                if srcs is not None and src not in srcs:
                    continue
                if shape[src] % k or (shape[src] == k and src == dst) or (src == dst and so == do):
                    continue
                if want is not None:
                    new = list(shape)
                    if src != dst:
                        new[src] //= k
                        new[dst] *= k
                    if tuple(new) != want:
                        continue
                yield k, src, so, dst, do

    def movements(self, e: Entry, want: tuple[int, ...] | None,
                  srcs: tuple[int, ...] | None = None) -> Iterator[Value]:
        """Movement ops on an entry; with `want`, only those producing that shape; with
        `srcs`, only folds out of those dims."""
        b = self.b
        shape = b.shape(e.value)
        for k, src, so, dst, do in self.fold_moves(e, want, srcs):
            try:
                yield fold(b, e.value, src, k, so, dst, do)
            except (IRError, ValueError):
                continue
        for i, j in itertools.combinations(range(len(shape)), 2):
            if shape[i] == 1 or shape[j] == 1:
                continue  # moving a size-1 dim is a reshape: it changes nothing
            perm = list(range(len(shape)))
            perm[i], perm[j] = j, i
            new = tuple(shape[p] for p in perm)
            if want is None or new == want:
                yield b.transpose(e.value, perm=tuple(perm))  # type: ignore[misc]
        if want is not None and len(want) == len(shape) and shape != want \
                and all(a >= w for a, w in zip(shape, want, strict=True)):
            yield b.slice(e.value, starts=(0,) * len(shape), ends=want)  # type: ignore[misc]
        if len(shape) == 4 and not e.weight_only and want is None:
            extra = [s % 2 for s in shape[2:]]
            if any(extra):
                yield b.pad(e.value, pads=(0, 0, 0, 0, 0, 0, *extra))  # type: ignore[misc]
            for n in self.convs:
                pads = resolve_pads(n.attr("padding"), shape[2:], self.original.type_of(
                    n.inputs[1]).shape[2:], n.attr("stride"), n.attr("dilation"))
                if any(pads):
                    yield b.pad(e.value, pads=(0, 0, pads[0], pads[2], 0, 0, pads[1],
                                               pads[3]))  # type: ignore[misc]

    def conv_variants(self) -> Iterator[dict]:
        seen: set[tuple] = set()
        for n in self.convs:
            a = n.a
            x = self.original.type_of(n.inputs[0]).shape
            w = self.original.type_of(n.inputs[1]).shape
            pads = resolve_pads(a["padding"], x[2:], w[2:], a["stride"], a["dilation"])
            (sh, sw), (dh, dw) = a["stride"], a["dilation"]
            variants = [
                (a["stride"], a["dilation"], pads),
                ((1, 1), a["dilation"], pads),
                (a["stride"], a["dilation"], (0, 0, 0, 0)),
                ((2 * sh, sw), a["dilation"], (2 * pads[0], 2 * pads[1], pads[2], pads[3])),
                ((sh, 2 * sw), a["dilation"], (pads[0], pads[1], 2 * pads[2], 2 * pads[3])),
            ]
            if dh > 1 or dw > 1:
                variants.append((a["stride"], (1, 1), (pads[0] // dh, pads[1] // dh,
                                                       pads[2] // dw, pads[3] // dw)))
            for s, d, p in variants:
                if (s, d, p) not in seen:
                    seen.add((s, d, p))
                    yield {"stride": s, "dilation": d, "padding": p}

    def computes(self, pool: list[Entry], last: Entry | None) -> Iterator[Entry]:
        b = self.b
        pairs = [(a, c) for a in pool for c in pool
                 if (last is None or last in (a, c)) and not (a.weight_only and c.weight_only)]
        for a, c in pairs:
            sa, sc = b.shape(a.value), b.shape(c.value)
            if "conv2d" in self.ops and len(sa) == 4 and len(sc) == 4 and c.weight_only:
                if sc[1] and sa[1] % sc[1] == 0 and sc[0] % (sa[1] // sc[1]) == 0:
                    g = sa[1] // sc[1]
                    for attrs in self.conv_variants():
                        yield from self._try("conv2d", (a, c), {**attrs, "groups": g})
            if "matmul" in self.ops and len(sa) >= 2 and len(sc) >= 2 and sa[-1] == sc[-2]:
                yield from self._try("matmul", (a, c), {})
            # A sum with terms one operand already has only doubles them: never equal.
            fresh = not (a.deg <= c.deg or c.deg <= a.deg)
            for op in ("ewadd", "ewmul"):
                if op in self.ops and sa == sc and (op == "ewmul" or a.value <= c.value) \
                        and (op == "ewmul" or fresh):
                    yield from self._try(op, (a, c), {})
            if "ewadd" in self.ops and sa != sc and len(sc) <= len(sa) and c.weight_only \
                    and fresh:
                yield from self._try("ewadd", (a, c), {})  # bias broadcast
            if "smul" in self.ops and len(sc) == 0:
                yield from self._try("smul", (a, c), {})
            if "sub" in self.ops and sa == sc and fresh:  # both orders: not commutative
                yield from self._try("sub", (a, c), {})
        for a, c in itertools.combinations(pool, 2):
            if last is not None and last not in (a, c):
                continue
            sa, sc = b.shape(a.value), b.shape(c.value)
            if a.weight_only != c.weight_only or len(sa) != len(sc) or not sa:
                continue
            for axis in ((0, len(sa) - 1) if a.weight_only else (0, 1)):
                if axis < len(sa) and all(sa[d] == sc[d] for d in range(len(sa)) if d != axis):
                    yield from self._try("concat", (a, c), {"axis": axis})
        for n in self.unary:
            for a in pool:
                if last is None or a is last:
                    yield from self._try(n.op, (a,), n.a)

    def _try(self, op: str, ins: tuple[Entry, ...], attrs: dict) -> Iterator[Entry]:
        try:
            deg = op_degrees(op, attrs, [e.deg for e in ins])
            v = self.b.add(op, tuple(e.value for e in ins), attrs)[0]
        except (IRError, ValueError):
            return
        e = self.entry(v, deg, all(x.weight_only for x in ins))
        if e is not None:
            yield e

    # ---- the search --------------------------------------------------------------------

    def run(self) -> None:
        heads = []
        # Weights first: the last source's moves vary fastest, and moves of the data input
        # (stacking, exchange, de-interleaving) are the ones worth trying first.
        order = sorted((n for n in self.original.nodes if n.is_named_source),
                       key=lambda n: n.op == "input")
        for n in order:
            if n.is_named_source:
                heads.append(Entry(self.sources[n.attr("name")],
                                   frozenset({(n.attr("name"),)}), n.op == "weight"))
        self.pre(heads, 0, 0, 0)

    def pre(self, heads: list[Entry], i: int, used: int, chain: int) -> None:
        if self.out_of_budget():
            return
        if i == len(heads):
            # Data moved k times before the kernels needs at most k moves back after them.
            self.post_moves = max(1, sum(self.moves_after(e) for e in heads
                                         if not e.weight_only))
            self.post(list(heads), None, used)
            return
        self.pre(heads, i + 1, used, 0)  # leave source i as it is (or as moved so far)
        if chain >= 2 or used + 1 > self.depth - self.min_compute:
            return
        e = heads[i]
        name = next(iter(next(iter(e.deg))))
        srcs: tuple[int, ...] | None = None
        if e.weight_only:
            if name not in self.movable:
                return
            srcs = self.movable[name]
        for v in self.movements(e, None, srcs):
            if e.weight_only and self.b.nodes[v.node].op in ("transpose",) \
                    and srcs is not None:
                continue
            new = [*heads[:i], Entry(v, e.deg, e.weight_only), *heads[i + 1:]]
            self.pre(new, i, used + 1, chain + 1)
            if self.out_of_budget():
                return

    def post(self, pool: list[Entry], last: Entry | None, used: int) -> None:
        key = frozenset(e.value for e in pool)
        if key in self.seen_states:
            return
        self.seen_states.add(key)
        self.stats.states += 1
        if self.out_of_budget():
            return
        if last is not None:
            self.check_goal(last)
        if used >= self.depth:
            return
        final = used + 1 == self.depth
        for e in self.computes(pool, last):
            if (final and not self.could_finish(e)) or not self.reachable(e, self.depth - used - 1):
                continue
            self.post([*pool, e], e, used + 1)
            if self.stats.truncated:
                return
        if last is not None and self.moves_after(last) < self.post_moves:
            wants = [t[0] for t in self.targets] if final else [None]
            for want in wants:
                for v in self.movements(last, want):
                    e = Entry(v, last.deg, last.weight_only)
                    if not self.reachable(e, self.depth - used - 1):
                        continue
                    self.post([*pool, e], e, used + 1)
                    if self.stats.truncated:
                        return
            self.split_goal(last)

    def moves_after(self, e: Entry) -> int:
        """Movement ops between e and the compute op that produced its data."""
        count = 0
        node = self.b.nodes[e.value.node]
        while node.op in ("reshape", "transpose", "slice", "pad") and node.inputs:
            if node.op != "reshape" or self.b.nodes[node.inputs[0].node].op not in (
                    "reshape", "transpose"):
                count += node.op != "reshape" or count == 0
            node = self.b.nodes[node.inputs[0].node]
        return count

    def missing(self, e: Entry) -> int:
        """Binary ops still needed to bring in the sources e lacks (fewest over outputs)."""
        have = {x for m in e.deg for x in m}
        return min(len({x for m in d for x in m} - have) for _, d in self.targets)

    def reachable(self, e: Entry, remaining: int) -> bool:
        """Can `remaining` more ops turn e into an output (shape arithmetic only)? Ops
        still needed to bring in missing sources do not move data."""
        remaining -= self.missing(e)
        if remaining < 0:
            return False
        if remaining >= 2:
            return True
        shape = self.b.shape(e.value)
        for want, _ in self.targets:
            if shape == want:
                return True
            if remaining == 1:
                if any(True for _ in self.fold_moves(e, want)):
                    return True
                if len(shape) == len(want) and (
                        sorted(shape) == sorted(want)
                        or all(a >= w for a, w in zip(shape, want, strict=True))):
                    return True
        return self._split_sizes(e) is not None

    def could_finish(self, e: Entry) -> bool:
        return any(self.is_goal(e, k) for k in range(len(self.targets))) or \
            self._split_sizes(e) is not None

    def check_goal(self, e: Entry) -> None:
        if len(self.targets) == 1 and self.is_goal(e, 0):
            self.emit([e.value])

    def _split_sizes(self, e: Entry) -> tuple[int, tuple[int, ...]] | None:
        """An axis along which `e` is the concatenation of the output shapes."""
        if len(self.targets) < 2:
            return None
        shape = self.b.shape(e.value)
        shapes = [t[0] for t in self.targets]
        for axis in range(len(shape)):
            if all(len(s) == len(shape) and all(s[d] == shape[d] for d in range(len(shape))
                                                if d != axis) for s in shapes) \
                    and sum(s[axis] for s in shapes) == shape[axis]:
                return axis, tuple(s[axis] for s in shapes)
        return None

    def split_goal(self, e: Entry) -> None:
        found = self._split_sizes(e)
        if found is None:
            return
        axis, sizes = found
        parts = self.b.split(e.value, axis=axis, sizes=sizes)
        outs = list(parts) if isinstance(parts, tuple) else [parts]
        if all(t[1] <= e.deg for t in self.targets):
            self.emit(outs)


def dfs_mutants(original: Graph, depth: int = 4, max_states: int = 5000,
                time_budget: float = 5.0) -> tuple[list[Mutant], SearchStats]:
    """Programs of up to `depth` ops with the original's sources, output shapes and
    degree sets (candidates for the box test), and the search statistics."""
    t0 = time.perf_counter()
    found: list[Mutant] = []
    stats = SearchStats()
    seen: set[str] = set()
    # Iterative deepening: shallow programs first, each depth with an equal share of budget
    # left over from the shallower ones.
    for d in range(1, depth + 1):
        left = depth - d + 1
        states = (max_states - stats.states) // left
        budget = (time_budget - (time.perf_counter() - t0)) / left
        if states <= 0 or budget <= 0:
            stats.truncated = True
            break
        s = _Search(original, d, states, budget)
        s.seen_graphs |= seen
        s.run()
        seen |= s.seen_graphs
        found.extend(s.found)
        stats.states += s.stats.states
        stats.programs += s.stats.programs
        stats.truncated |= s.stats.truncated
        stats.reasons.update(s.stats.reasons)
    stats.mutants = len(found)
    stats.seconds = time.perf_counter() - t0
    return found, stats


def _unary_compute(op: str, attrs: dict) -> bool:
    d = get_op(op)
    return (d.num_inputs == 1 and not d.has(MOVEMENT) and not d.has(NONLINEAR)
            and d.is_multilinear(attrs) and BOX_RULES.supports(op))


COMPUTE_OPS = ("conv2d", "matmul", "pool2d_avg", "reduce_sum", "reduce_mean", "ewmul", "smul")


def compute_signature(graph: Graph) -> tuple:
    """The multiset of compute kernels (op, attributes, operand shapes)."""
    return tuple(sorted(((n.op, n.attrs, tuple(graph.type_of(v).shape for v in n.inputs))
                         for n in graph.nodes if n.op in COMPUTE_OPS), key=repr))


def describe(graph: Graph) -> str:
    """The ops of a program in order, a reshape/transpose run shown once as "rt"."""
    parts: list[str] = []
    for n in graph.nodes:
        if n.is_named_source:
            continue
        name = "rt" if relabels(n.op) else n.op
        if name == "rt" and parts and parts[-1] == "rt":
            continue
        parts.append(name)
    return ">".join(parts)
