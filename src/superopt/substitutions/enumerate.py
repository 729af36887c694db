"""Bottom-up enumeration of every tensor term of up to N operators, evaluated exactly mod p.

A *term* is one tensor computed by a DAG of operator nodes over the generator's inputs; its
size is the number of distinct operator nodes (shared sub-terms count once, constants
count). Terms of size k are built from terms of smaller size whose node sets unite to k-1
nodes, so each DAG is made exactly once (operands are hash-consed by construction). Each
template is applied to all shape-valid operand tuples of a level at once, in batched numpy
over exact residues (`fingerprint.py`); a k-op term reuses the stored values of its operands
(incremental evaluation).

TASO's in-graph pruning is kept: a DAG holding two equal tensors (or an operator output
equal to a graph input) is neither recorded nor extended. Outputs equal to one of their own
inputs are kept aside as "collapse" terms: they become rules with a bare variable as target
(`(transpose (transpose ?x)) => ?x`).

Terms with fewer than N ops are kept in a `TermTable` with their values; the last level,
by far the largest, is only fingerprinted. It is cut into shards by root operator template
(`Unit`s grouped per template), which a process pool runs in parallel and which are written
to a work directory so that an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from superopt.substitutions.fingerprint import (
    Shape,
    evaluate,
    full_attrs,
    hash_rows,
    random_inputs,
    resolve,
)
from superopt.substitutions.presets import GeneratorConfig, Template

SplitInfo = tuple[tuple[int, ...], ...]  # per axis: concat boundaries, the last is the top one

# Residues mod P (< 2**31) are stored in 32 bits, half of what the evaluation's int64 takes:
# the table's values are most of the 4-op run's peak memory.
VALUE_DTYPE = np.int32
CHUNK_ELEMS = 1 << 21  # operand elements per evaluated chunk (bounds peak memory)
SHARD_COST = 6e7  # output elements per shard before a template's work is cut in parts


@dataclass(frozen=True)
class Unit:
    """Work of one level: templates applied to operands from fixed shape groups and sizes."""

    templates: tuple[int, ...]
    sizes: tuple[int, ...]  # operand sizes (number of ops), one per operand
    groups: tuple[int, ...]  # operand shape groups
    cost: float


@dataclass
class LevelResult:
    """Columns of the terms one level produced (clean ones and collapse ones)."""

    tmpl: list[np.ndarray] = field(default_factory=list)
    a0: list[np.ndarray] = field(default_factory=list)
    a1: list[np.ndarray] = field(default_factory=list)
    out: list[np.ndarray] = field(default_factory=list)
    h1: list[np.ndarray] = field(default_factory=list)
    h2: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray | None] = field(default_factory=list)
    c_tmpl: list[np.ndarray] = field(default_factory=list)
    c_a0: list[np.ndarray] = field(default_factory=list)
    c_a1: list[np.ndarray] = field(default_factory=list)
    c_out: list[np.ndarray] = field(default_factory=list)
    c_inp: list[np.ndarray] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def arrays(self) -> dict[str, np.ndarray]:
        def cat(xs: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(xs).astype(dtype) if xs else np.zeros(0, dtype)

        return {
            "tmpl": cat(self.tmpl, np.int16), "a0": cat(self.a0, np.int32),
            "a1": cat(self.a1, np.int32), "out": cat(self.out, np.int8),
            "h1": cat(self.h1, np.uint64), "h2": cat(self.h2, np.uint64),
            "c_tmpl": cat(self.c_tmpl, np.int16), "c_a0": cat(self.c_a0, np.int32),
            "c_a1": cat(self.c_a1, np.int32), "c_out": cat(self.c_out, np.int8),
            "c_inp": cat(self.c_inp, np.int16),
            "counts": np.array([self.counts[k] for k in COUNT_KEYS], dtype=np.int64),
        }


COUNT_KEYS = ("evaluated", "pruned_duplicate", "collapse", "clean_terms")


def split_info_of(t: Template, attrs: dict[str, Any], infos: Sequence[SplitInfo],
                  shapes: Sequence[Shape], out: int) -> SplitInfo:
    """Concat boundaries of an output, propagated as TASO's generator does (split undoes the
    last concat on its axis; pooling keeps channel boundaries, which TASO drops)."""
    kind = t.kind
    if kind == "const":
        return tuple(() for _ in t.const_shape)
    if kind == "matmul":
        return (infos[0][0], infos[1][1])
    if kind == "conv":
        x, w = infos
        return (x[0], w[0], x[2], x[3])
    if kind in ("unary", "smul", "pool"):
        return infos[0]
    if kind == "ew":
        a, b = infos
        return tuple(p if p == q else () for p, q in zip(a, b, strict=True))
    if kind == "transpose":
        return tuple(infos[0][p] for p in attrs["perm"])
    if kind == "enlarge":
        w = infos[0]
        return (w[0], w[1], (), ())
    if kind == "concat":
        a, b = infos
        ax = t.axis
        off = shapes[0][ax]
        res = []
        for d, (p, q) in enumerate(zip(a, b, strict=True)):
            if d == ax:
                res.append((*p, *(off + x for x in q), off))
            else:
                res.append(p if p == q else ())
        return tuple(res)
    if kind == "op":
        # boundaries survive on the axes an op keeps whole (a reduction's batch rows, an
        # attention's heads); an operand's other axes are mixed or gone
        (x, *_) = infos
        return tuple(x[d] if d < len(x) and d < len(shapes[0]) and shapes[0][d] == n else ()
                     for d, n in enumerate(_out_shape(t, attrs, shapes)))
    if kind == "split":
        (x,) = infos
        ax = t.axis
        mid = x[ax][-1]
        left = tuple(p for p in x[ax] if p < mid)
        right = tuple(p - mid for p in x[ax][:-1] if p > mid)
        return tuple((left if out == 0 else right) if d == ax else p for d, p in enumerate(x))
    raise ValueError(f"no split-info rule for template kind {kind!r}")


def _out_shape(t: Template, attrs: dict[str, Any], shapes: Sequence[Shape]) -> Shape:
    ap = resolve(t, shapes)
    assert ap is not None
    return ap[1][0]


class TermTable:
    """The clean terms of sizes 0..upto (inputs are size 0) with values and DAG metadata."""

    def __init__(self, cfg: GeneratorConfig, upto: int) -> None:
        self.cfg = cfg
        self.templates = cfg.templates
        self.upto = upto
        self.width = max(2 * (cfg.max_ops - 1), 1)  # max DAG tensors of an operand term
        self.n_inputs = len(cfg.inputs)
        self.samples = cfg.samples
        self.shapes: list[Shape] = []  # group -> shape
        self.group_of: dict[Shape, int] = {}
        self.group_values: list[list[np.ndarray]] = []
        self.values: list[np.ndarray] = []  # group -> stacked values (after each level)
        # per-term columns
        self.tmpl: list[int] = []
        self.a0: list[int] = []
        self.a1: list[int] = []
        self.out: list[int] = []
        self.size: list[int] = []
        self.group: list[int] = []
        self.row: list[int] = []
        self.split: list[SplitInfo] = []
        self.vmask: list[int] = []
        self.opset: list[tuple[int, ...]] = []
        self.dag: list[tuple[int, ...]] = []
        self.node: list[int] = []
        self.h1: list[int] = []
        self.h2: list[int] = []
        self.by_size_group: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.collapses: list[tuple[int, int, int, int, int]] = []  # tmpl, a0, a1, out, input
        self.level_counts: dict[int, Counter[str]] = {}
        inputs = random_inputs([s.shape for s in cfg.inputs], cfg.seed, self.samples,
                               cfg.input_bound)
        self.input_values = inputs
        for k, (spec, v) in enumerate(zip(cfg.inputs, inputs, strict=True)):
            g = self._group(spec.shape)
            h1, h2 = hash_rows(v[None])
            self._append(-1, -1, -1, 0, 0, g, v, tuple(() for _ in spec.shape), 1 << k, (), (),
                         int(h1[0]), int(h2[0]))
        self._finish_level()
        self.input_hashes: dict[Shape, list[tuple[int, int, int]]] = defaultdict(list)
        for k, spec in enumerate(cfg.inputs):
            self.input_hashes[spec.shape].append((k, self.h1[k], self.h2[k]))
        self.template_apply: dict[tuple[int, tuple[int, ...], int | None], Any] = {}
        for level in range(1, upto + 1):
            res = LevelResult()
            for unit in self.plan(level):
                self.run_unit(unit, level, res, store=True)
            self._store_level(level, res)
            self.level_counts[level] = res.counts

    # ---- storage ------------------------------------------------------------------

    def _group(self, shape: Shape) -> int:
        g = self.group_of.get(shape)
        if g is None:
            g = len(self.shapes)
            self.group_of[shape] = g
            self.shapes.append(shape)
            self.group_values.append([])
            self.values.append(np.zeros((0, self.samples, *shape), dtype=VALUE_DTYPE))
        return g

    def _append(self, tmpl: int, a0: int, a1: int, out: int, size: int, g: int, value: np.ndarray,
                split: SplitInfo, vmask: int, opset: tuple[int, ...], dag: tuple[int, ...],
                h1: int, h2: int, node: int | None = None) -> int:
        tid = len(self.tmpl)
        self.tmpl.append(tmpl)
        self.a0.append(a0)
        self.a1.append(a1)
        self.out.append(out)
        self.size.append(size)
        self.group.append(g)
        self.row.append(len(self.values[g]) + len(self.group_values[g]))
        self.group_values[g].append(value)
        self.split.append(split)
        self.vmask.append(vmask)
        self.opset.append(opset)
        self.dag.append(dag)
        self.node.append(tid if node is None else node)
        self.h1.append(h1)
        self.h2.append(h2)
        self.by_size_group[(size, g)].append(tid)
        return tid

    def _finish_level(self) -> None:
        for g, pending in enumerate(self.group_values):
            if pending:
                # Stacked straight into the grown array: a stack then a concatenation would
                # hold the level's values three times over at the peak.
                old = self.values[g]
                grown = np.empty((len(old) + len(pending), *old.shape[1:]), dtype=VALUE_DTYPE)
                grown[:len(old)] = old
                np.stack(pending, out=grown[len(old):], casting="same_kind")
                self.values[g] = grown
                self.group_values[g] = []
        n = len(self.tmpl)
        w = self.width
        self.dag_ids = np.full((n, w), -1, dtype=np.int64)
        self.dag_h1 = np.zeros((n, w), dtype=np.uint64)
        self.dag_h2 = np.zeros((n, w), dtype=np.uint64)
        h1 = np.array(self.h1, dtype=np.uint64)
        h2 = np.array(self.h2, dtype=np.uint64)
        for t, d in enumerate(self.dag):
            if d:
                self.dag_ids[t, :len(d)] = d
                self.dag_h1[t, :len(d)] = h1[list(d)]
                self.dag_h2[t, :len(d)] = h2[list(d)]
        self.vmask_arr = np.array(self.vmask, dtype=np.int64)
        self.row_arr = np.array(self.row, dtype=np.int64)
        self.group_arr = np.array(self.group, dtype=np.int64)
        ow = max(self.cfg.max_ops - 1, 1)
        self.opset_mat = np.full((n, ow), -1, dtype=np.int64)
        for t, o in enumerate(self.opset):
            if o:
                self.opset_mat[t, :len(o)] = o
        self.split_mid = np.full((n, 2), -1, dtype=np.int64)
        for t, s in enumerate(self.split):
            for ax in (0, 1):
                if ax < len(s) and s[ax]:
                    self.split_mid[t, ax] = s[ax][-1]

    def _store_level(self, level: int, res: LevelResult) -> None:
        arr = res.arrays()
        vals = [v for v in res.values if v is not None]
        flat_vals = [row for block in vals for row in block]
        assert len(flat_vals) == len(arr["tmpl"])
        # the outputs of one node are stored as separate terms; a node's id is the id of its
        # first output, and every output of a node is a tensor of the graph of each
        base = len(self.tmpl)
        outputs_of: dict[tuple[int, int, int], list[int]] = defaultdict(list)
        for r in range(len(arr["tmpl"])):
            outputs_of[(int(arr["tmpl"][r]), int(arr["a0"][r]), int(arr["a1"][r]))].append(base + r)
        for r in range(len(arr["tmpl"])):
            t = int(arr["tmpl"][r])
            a0, a1, out = int(arr["a0"][r]), int(arr["a1"][r]), int(arr["out"][r])
            tmpl = self.templates[t]
            args = [a for a in (a0, a1) if a >= 0][:tmpl.arity]
            shapes = [self.shapes[self.group[a]] for a in args]
            mid = None
            if tmpl.kind == "split":
                mid = self.split[args[0]][tmpl.axis][-1]
            attrs = full_attrs(tmpl, shapes, mid)
            assert attrs is not None
            split = split_info_of(tmpl, attrs, [self.split[a] for a in args], shapes, out)
            vmask = 0
            ops: set[int] = set()
            dag: set[int] = set()
            for a in args:
                vmask |= self.vmask[a]
                ops.update(self.opset[a])
                dag.update(self.dag[a])
            value = flat_vals[r]
            g = self._group(tuple(value.shape[1:]))
            siblings = outputs_of[(t, a0, a1)]
            node = min(siblings)
            ops.add(node)
            dag.update(siblings)
            self._append(t, a0, a1, out, level, g, value, split, vmask, tuple(sorted(ops)),
                         tuple(sorted(dag)), int(arr["h1"][r]), int(arr["h2"][r]), node)
        for r in range(len(arr["c_tmpl"])):
            self.collapses.append((int(arr["c_tmpl"][r]), int(arr["c_a0"][r]),
                                   int(arr["c_a1"][r]), int(arr["c_out"][r]),
                                   int(arr["c_inp"][r])))
        self._finish_level()

    def __len__(self) -> int:
        return len(self.tmpl)

    def release_values(self) -> None:
        """Drop the terms' values (most of the table's memory at 4 ops) once no level is
        left to enumerate from them; structure, hashes and split info stay."""
        # a fresh empty array: a slice v[:0] would keep all of v's buffer alive
        self.values = [np.zeros((0, *v.shape[1:]), dtype=v.dtype) for v in self.values]
        self.group_values = [[] for _ in self.group_values]
        _trim_heap()

    # ---- planning -----------------------------------------------------------------

    def _applies(self, t: int, groups: tuple[int, ...], mid: int | None = None
                 ) -> tuple[dict[str, Any], tuple[Shape, ...]] | None:
        key = (t, groups, mid)
        if key not in self.template_apply:
            self.template_apply[key] = resolve(self.templates[t],
                                               [self.shapes[g] for g in groups], mid)
        return self.template_apply[key]

    def _terms(self, size: int, g: int) -> list[int]:
        return self.by_size_group.get((size, g), [])

    def plan(self, level: int) -> list[Unit]:
        """The units of one level, in a fixed order (resumable runs depend on it)."""
        units: list[Unit] = []
        n_groups = len(self.shapes)
        by_arity: dict[int, list[int]] = defaultdict(list)
        for i, t in enumerate(self.templates):
            by_arity[t.arity].append(i)
        if level == 1 and by_arity[0]:
            for t in by_arity[0]:
                units.append(Unit((t,), (), (), float(np.prod(self.templates[t].const_shape))))
        for g in range(n_groups):
            terms = self._terms(level - 1, g)
            if not terms:
                continue
            for t in by_arity[1]:
                tmpl = self.templates[t]
                if tmpl.kind == "enlarge" and level != 1:
                    continue
                if tmpl.kind == "split":
                    if len(self.shapes[g]) <= tmpl.axis:
                        continue
                    cost = float(len(terms) * np.prod(self.shapes[g]))
                else:
                    ap = self._applies(t, (g,))
                    if ap is None:
                        continue
                    cost = float(len(terms) * np.prod(ap[1][0]))
                units.append(Unit((t,), (level - 1,), (g,), cost))
        combos = [(i, j) for i in range(level) for j in range(level)
                  if (i == 0 and j == level - 1) or (j == 0 and i == level - 1)
                  or (i >= 1 and j >= 1 and i + j >= level - 1)]
        for i, j in combos:
            for ga in range(n_groups):
                na = len(self._terms(i, ga))
                if not na:
                    continue
                for gb in range(n_groups):
                    nb = len(self._terms(j, gb))
                    if not nb:
                        continue
                    ts = tuple(t for t in by_arity[2] if self._applies(t, (ga, gb)) is not None)
                    if not ts:
                        continue
                    out_elems = max(float(np.prod(self._applies(t, (ga, gb))[1][0])) for t in ts)
                    units.append(Unit(ts, (i, j), (ga, gb), na * nb * out_elems * len(ts)))
        return units

    # ---- operand tuples -----------------------------------------------------------

    def _pairs(self, i: int, j: int, level: int, a_ids: np.ndarray, b_ids: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        if i == 0 or j == 0:
            return np.repeat(a_ids, len(b_ids)), np.tile(b_ids, len(a_ids))
        shared_needed = i + j - (level - 1)
        if shared_needed == i == j:  # same node set: group by it
            index: dict[tuple[int, ...], list[int]] = defaultdict(list)
            for b in b_ids.tolist():
                index[self.opset[b]].append(b)
            ia: list[int] = []
            ib: list[int] = []
            for a in a_ids.tolist():
                for b in index.get(self.opset[a], ()):
                    ia.append(a)
                    ib.append(b)
            return np.array(ia, dtype=np.int64), np.array(ib, dtype=np.int64)
        swap = len(a_ids) > len(b_ids)
        outer, inner = (b_ids, a_ids) if swap else (a_ids, b_ids)
        om = self.opset_mat[inner]
        out_o: list[np.ndarray] = []
        out_i: list[np.ndarray] = []
        for x in outer.tolist():
            shared = np.zeros(len(inner), dtype=np.int64)
            for nd in self.opset[x]:
                shared += (om == nd).any(axis=1)
            sel = inner[shared == shared_needed]
            if len(sel):
                out_o.append(np.full(len(sel), x, dtype=np.int64))
                out_i.append(sel)
        if not out_o:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        o, n = np.concatenate(out_o), np.concatenate(out_i)
        return (n, o) if swap else (o, n)

    def _cross_clean(self, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
        """False where the two operands' DAGs hold equal tensors that are not shared."""
        keep = np.ones(len(ia), dtype=bool)
        if not ((self.dag_ids[ia] >= 0).any() and (self.dag_ids[ib] >= 0).any()):
            return keep
        step = 1 << 17
        for s in range(0, len(ia), step):
            xa, xb = ia[s:s + step], ib[s:s + step]
            da, db = self.dag_ids[xa], self.dag_ids[xb]
            eq = ((self.dag_h1[xa][:, :, None] == self.dag_h1[xb][:, None, :])
                  & (self.dag_h2[xa][:, :, None] == self.dag_h2[xb][:, None, :])
                  & (da[:, :, None] != db[:, None, :]) & (da[:, :, None] >= 0)
                  & (db[:, None, :] >= 0))
            keep[s:s + step] = ~eq.any(axis=(1, 2))
        return keep

    def _filter(self, t: int, ia: np.ndarray, ib: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray | None]:
        tmpl = self.templates[t]
        keep = np.ones(len(ia), dtype=bool)
        if ib is not None:
            if tmpl.commutative:
                keep &= ia < ib
            elif tmpl.kind != "conv":
                keep &= ia != ib
        if tmpl.kind == "conv":
            roles = np.array([i.role == "weight" for i in self.cfg.inputs] + [False])
            idx = np.where(ia < self.n_inputs, ia, self.n_inputs)
            keep &= ~roles[idx]  # TASO: a conv's data operand is never a weight variable
        if tmpl.kind == "enlarge":
            keep &= ia < self.n_inputs
        if keep.all():
            return ia, ib
        return ia[keep], (ib[keep] if ib is not None else None)

    # ---- evaluation ---------------------------------------------------------------

    def _gather(self, ids: np.ndarray) -> np.ndarray:
        """Operand values with the draws folded into the batch: (n * samples, *shape)."""
        g = self.group_arr[ids[0]]
        v = self.values[g][self.row_arr[ids]].astype(np.int64)
        return v.reshape(-1, *v.shape[2:])

    def run_unit(self, unit: Unit, level: int, res: LevelResult, store: bool) -> None:
        if not unit.sizes:  # constants
            for t in unit.templates:
                ap = self._applies(t, ())
                if ap is not None:
                    self._eval(t, ap[0], None, None, ap[1], level, res, store)
            return
        if len(unit.sizes) == 1:
            (t,) = unit.templates
            tmpl = self.templates[t]
            ids = np.array(self._terms(unit.sizes[0], unit.groups[0]), dtype=np.int64)
            ids, _ = self._filter(t, ids, None)
            if tmpl.kind == "split":
                mids = self.split_mid[ids, tmpl.axis]
                for mid in sorted(set(mids.tolist()) - {-1}):
                    ap = self._applies(t, unit.groups, mid)
                    if ap is not None:
                        self._eval(t, ap[0], ids[mids == mid], None, ap[1], level, res, store)
                return
            ap = self._applies(t, unit.groups)
            if ap is not None and len(ids):
                self._eval(t, ap[0], ids, None, ap[1], level, res, store)
            return
        i, j = unit.sizes
        ga, gb = unit.groups
        a_ids = np.array(self._terms(i, ga), dtype=np.int64)
        b_ids = np.array(self._terms(j, gb), dtype=np.int64)
        ia, ib = self._pairs(i, j, level, a_ids, b_ids)
        if not len(ia):
            return
        clean = self._cross_clean(ia, ib)
        res.counts["pruned_duplicate"] += int((~clean).sum())
        ia, ib = ia[clean], ib[clean]
        for t in unit.templates:
            fa, fb = self._filter(t, ia, ib)
            ap = self._applies(t, unit.groups)
            if ap is not None and len(fa):
                self._eval(t, ap[0], fa, fb, ap[1], level, res, store)

    def _eval(self, t: int, attrs: dict[str, Any], ia: np.ndarray | None, ib: np.ndarray | None,
              outs: tuple[Shape, ...], level: int, res: LevelResult, store: bool) -> None:
        tmpl = self.templates[t]
        if ia is None:
            n_total = 1
        else:
            n_total = len(ia)
        per_row = self.samples * (sum(int(np.prod(self.shapes[self.group_arr[x[0]]]))
                                      for x in (ia, ib) if x is not None)
                                  + sum(int(np.prod(s)) for s in outs))
        step = max(1, CHUNK_ELEMS // max(per_row, 1))
        for s in range(0, n_total, step):
            ca = ia[s:s + step] if ia is not None else None
            cb = ib[s:s + step] if ib is not None else None
            args = [self._gather(x) for x in (ca, cb) if x is not None]
            flat = evaluate(tmpl, attrs, args)
            rows = 1 if ca is None else len(ca)
            values = tuple(np.broadcast_to(v.reshape(-1, *v.shape[1:]) if ca is not None else v,
                                           (rows * self.samples, *v.shape[1:]))
                           .reshape(rows, self.samples, *v.shape[1:]) for v in flat)
            self._judge(t, ca, cb, values, outs, res, store)

    def _judge(self, t: int, ia: np.ndarray | None, ib: np.ndarray | None,
               values: tuple[np.ndarray, ...], outs: tuple[Shape, ...], res: LevelResult,
               store: bool) -> None:
        n = values[0].shape[0]
        res.counts["evaluated"] += n
        hashes = [hash_rows(v) for v in values]
        dup = np.zeros(n, dtype=bool)
        coll = np.full((len(values), n), -1, dtype=np.int64)
        vmask = np.zeros(n, dtype=np.int64)
        dag_ids: list[np.ndarray] = []
        for x in (ia, ib):
            if x is not None:
                vmask |= self.vmask_arr[x]
                dag_ids.append(x)
        for o, (h1, h2) in enumerate(hashes):
            for x in dag_ids:
                dup |= ((self.dag_h1[x] == h1[:, None]) & (self.dag_h2[x] == h2[:, None])
                        & (self.dag_ids[x] >= 0)).any(axis=1)
            for k, k1, k2 in self.input_hashes.get(outs[o], ()):
                hit = (h1 == np.uint64(k1)) & (h2 == np.uint64(k2))
                if hit.any():
                    uses = (vmask >> k) & 1 == 1
                    coll[o, hit & uses] = k
                    dup |= hit & ~uses
        if len(values) == 2:
            dup |= (hashes[0][0] == hashes[1][0]) & (hashes[0][1] == hashes[1][1])
        collapsed = (coll >= 0).any(axis=0) & ~dup
        clean = ~dup & ~collapsed
        res.counts["pruned_duplicate"] += int(dup.sum())
        res.counts["collapse"] += int((coll[:, collapsed] >= 0).sum())
        res.counts["clean_terms"] += int(clean.sum()) * len(values)
        a0 = ia if ia is not None else np.full(n, -1, dtype=np.int64)
        a1 = ib if ib is not None else np.full(n, -1, dtype=np.int64)
        for o, (h1, h2) in enumerate(hashes):
            if clean.any():
                res.tmpl.append(np.full(int(clean.sum()), t))
                res.a0.append(a0[clean])
                res.a1.append(a1[clean])
                res.out.append(np.full(int(clean.sum()), o))
                res.h1.append(h1[clean])
                res.h2.append(h2[clean])
                res.values.append(_stored(values[o][clean]) if store else None)
            cm = collapsed & (coll[o] >= 0)
            if cm.any():
                res.c_tmpl.append(np.full(int(cm.sum()), t))
                res.c_a0.append(a0[cm])
                res.c_a1.append(a1[cm])
                res.c_out.append(np.full(int(cm.sum()), o))
                res.c_inp.append(coll[o][cm])



def _stored(v: np.ndarray) -> np.ndarray:
    """`v` (exact residues, int64) in the table's 32-bit storage, checked to fit."""
    if v.size and (v.min() < np.iinfo(VALUE_DTYPE).min or v.max() > np.iinfo(VALUE_DTYPE).max):
        raise ValueError("a residue does not fit the table's 32-bit storage")
    return v.astype(VALUE_DTYPE)


# ---- the last level, sharded ---------------------------------------------------------

@dataclass(frozen=True)
class Shard:
    name: str
    units: tuple[int, ...]  # indexes into the level's unit list
    cost: float


def plan_shards(table: TermTable, level: int) -> tuple[list[Unit], list[Shard]]:
    """Units of the last level grouped by root template (the "first" op of bottom-up
    enumeration); heavy templates are cut into parts of similar cost."""
    units = table.plan(level)
    by_root: dict[str, list[int]] = defaultdict(list)
    for k, u in enumerate(units):
        by_root["+".join(table.templates[t].key for t in u.templates)].append(k)
    shards: list[Shard] = []
    for root in sorted(by_root):
        part: list[int] = []
        cost = 0.0
        n = 0
        for k in by_root[root]:
            part.append(k)
            cost += units[k].cost
            if cost >= SHARD_COST:
                shards.append(Shard(f"{root}.{n}", tuple(part), cost))
                part, cost, n = [], 0.0, n + 1
        if part:
            shards.append(Shard(f"{root}.{n}", tuple(part), cost))
    return units, shards


def run_shard(table: TermTable, units: list[Unit], shard: Shard, level: int) -> dict[str, np.ndarray]:
    res = LevelResult()
    for k in shard.units:
        table.run_unit(units[k], level, res, store=False)
    return res.arrays()


def config_digest(cfg: GeneratorConfig) -> str:
    return hashlib.blake2b(json.dumps(cfg.key(), sort_keys=True).encode(),
                           digest_size=8).hexdigest()


def shard_path(workdir: Path, shard: Shard) -> Path:
    safe = shard.name.replace("/", "_")
    return workdir / f"shard-{safe}.npz"


def save_shard(path: Path, arrays: dict[str, np.ndarray]) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)  # a shard file exists only once it is complete


def load_shard(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def merge_arrays(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not parts:
        return LevelResult().arrays()
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "counts"}
    out["counts"] = np.sum([p["counts"] for p in parts], axis=0)
    return out


def iter_counts(arr: np.ndarray) -> Iterator[tuple[str, int]]:
    return zip(COUNT_KEYS, (int(x) for x in arr), strict=True)


def _trim_heap() -> None:
    """Hand freed heap memory back to the system. The table's values were built from one
    small array per term, and glibc keeps the freed pieces: at 4 ops the process stayed at
    2.5 GB after dropping them (3 ops: 59 MB, 14 MB once trimmed); forked workers would
    start from that."""
    import ctypes

    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # the process's own libc
    except OSError:
        trim = None
    if trim is not None:  # glibc; elsewhere there is nothing to trim
        trim(0)
