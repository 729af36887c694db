"""Every enumerated term under one numbering (`TermStore`), the workers' table of lower
levels, and the pairing of one fingerprint bucket's members into candidate rules.

The generator (`generator`) drives the stages; the bucket stage (`buckets`) runs them on
workers, out of core. Both build on this module, so neither imports the other to reach
it. (Moved out of `generator`.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from superopt.substitutions.enumerate import TermTable, config_digest, plan_shards
from superopt.substitutions.fingerprint import evaluate, hash_rows, random_inputs, resolve
from superopt.substitutions.presets import GeneratorConfig
from superopt.substitutions.prune import SideInfo, common_subgraph, common_supergraph
from superopt.substitutions.symshape import SHAPE_ATTRS, Side, SNode

NodeKey = tuple[int, int, int]
LIST_TERMS = 2_000_000  # last-level terms that TermStore keeps as Python lists
CONFIRM_SEED = 0xC0FFEE


class TermStore:
    """Terms of the table (sizes < N), of the last level, and the collapse terms, under one
    numbering; structure, values on fresh inputs and expression trees on demand."""

    def __init__(self, table: TermTable, last: dict[str, np.ndarray], level: int) -> None:
        self.table = table
        self.cfg = table.cfg
        self.templates = table.templates
        self.level = level
        self.n_in = table.n_inputs
        self.n_table = len(table)
        self.m = len(last["tmpl"])
        # Lists index faster than arrays, but cost ~36 bytes a term: at 4 ops (30M terms)
        # 3.6 GB. Past LIST_TERMS the (memory-mapped) arrays stay as they are.
        big = self.m > LIST_TERMS
        self.last = {k: last[k] if big else last[k].tolist() for k in ("tmpl", "a0", "a1", "out")}
        self.last_h1 = last["h1"]
        self.last_h2 = last["h2"]
        coll = list(table.collapses) + [
            (int(a), int(b), int(c), int(d), int(e)) for a, b, c, d, e in zip(
                last["c_tmpl"], last["c_a0"], last["c_a1"], last["c_out"], last["c_inp"],
                strict=True)]
        self.coll = coll
        self.cbase = self.n_table + self.m
        self._nodes: dict[int, frozenset[NodeKey]] = {}
        self._cons: dict[int, frozenset[int]] = {}
        self._expr: dict[int, tuple[Any, ...]] = {}
        self.fresh_inputs = random_inputs([s.shape for s in self.cfg.inputs],
                                          self.cfg.seed + CONFIRM_SEED,
                                          bound=self.cfg.input_bound)
        self._leaves: dict[int, frozenset[NodeKey]] = {}
        self._pre: dict[int, tuple[int, int, int, int]] = {}
        self._arity = [tp.arity for tp in self.templates]

    def __len__(self) -> int:
        return self.cbase + len(self.coll)

    def struct(self, t: int) -> tuple[int, int, int, int]:
        if t < self.n_table:
            tb = self.table
            return tb.tmpl[t], tb.a0[t], tb.a1[t], tb.out[t]
        if t < self.cbase:
            got = self._pre.get(t)
            if got is not None:
                return got
            i = t - self.n_table
            lt = self.last
            return int(lt["tmpl"][i]), int(lt["a0"][i]), int(lt["a1"][i]), int(lt["out"][i])
        c = self.coll[t - self.cbase]
        return c[0], c[1], c[2], c[3]

    def preload(self, terms: Sequence[int]) -> None:
        """Read the structure of these last-level terms in one vectorised gather: single
        elements of the (memory-mapped) arrays cost ~2 us each, and pairing reads each
        bucket member's several times."""
        ids = np.asarray([t for t in terms if self.n_table <= t < self.cbase], dtype=np.int64)
        rows = ids - self.n_table
        cols = [np.asarray(self.last[k])[rows].tolist() for k in ("tmpl", "a0", "a1", "out")]
        self._pre.update(zip(ids.tolist(), zip(*cols, strict=True), strict=True))

    def args(self, t: int) -> tuple[int, ...]:
        tmpl, a0, a1, _ = self.struct(t)
        if a0 < 0:  # an input or a constant
            return ()
        # the operands present, at most the template's arity (the hottest call of pairing)
        return ((a0,) if a1 < 0 else (a0, a1))[:self._arity[tmpl]]

    def key(self, t: int) -> NodeKey:
        tmpl, a0, a1, _ = self.struct(t)
        return (tmpl, a0, a1)

    def is_input(self, t: int) -> bool:
        return t < self.n_in

    def vmask(self, t: int) -> int:
        """Bit k set when input k occurs in t."""
        if t < self.n_table:
            return self.table.vmask[t]
        m = 0
        for a in self.args(t):
            m |= self.table.vmask[a]
        return m

    def nodes(self, t: int) -> frozenset[NodeKey]:
        got = self._nodes.get(t)
        if got is None:
            if self.is_input(t):
                got = frozenset()
            else:
                acc = {self.key(t)}
                for a in self.args(t):
                    acc |= self.nodes(a)
                got = frozenset(acc)
            self._nodes[t] = got
        return got

    def consumed(self, t: int) -> frozenset[int]:
        got = self._cons.get(t)
        if got is None:
            acc: set[int] = set()
            if not self.is_input(t):
                for a in self.args(t):
                    acc.add(a)
                    acc |= self.consumed(a)
            got = frozenset(acc)
            self._cons[t] = got
        return got

    def size(self, t: int) -> int:
        return len(self.nodes(t))

    def expr(self, t: int) -> tuple[Any, ...]:
        got = self._expr.get(t)
        if got is None:
            if self.is_input(t):
                got = ("in", t)
            else:
                tmpl, _, _, out = self.struct(t)
                got = (tmpl, out, tuple(self.expr(a) for a in self.args(t)))
            self._expr[t] = got
        return got

    def leaves(self, t: int) -> frozenset[NodeKey]:
        got = self._leaves.get(t)
        if got is None:
            got = frozenset(k for k in self.nodes(t) if all(a < self.n_in for a in k[1:] if a >= 0))
            self._leaves[t] = got
        return got

    def root(self, t: int) -> tuple[int, tuple[Any, ...]] | None:
        if self.is_input(t):
            return None
        tmpl = self.struct(t)[0]
        return tmpl, tuple(("in", a) if self.is_input(a) else ("op", a) for a in self.args(t))

    def same_operand(self, x: tuple[str, int], y: tuple[str, int]) -> bool:
        """Do two root operands (("in" | "op", term)) hold equal tensors? Operands of a
        root have fewer ops than the run's size, so both are table terms with hashes."""
        h1, h2 = self.table.h1, self.table.h2
        return x[1] == y[1] or (h1[x[1]] == h1[y[1]] and h2[x[1]] == h2[y[1]])

    def supergraph(self, a: SideInfo, b: SideInfo) -> bool:
        """TASO's common-supergraph test, exact when the config asks for it."""
        same = self.same_operand if self.cfg.exact_supergraph else None
        return common_supergraph(a, b, same)

    def info(self, outs: Sequence[int]) -> SideInfo:
        leaves: frozenset[NodeKey] = frozenset()
        for t in outs:
            leaves |= self.leaves(t)
        return SideInfo(leaves, tuple(self.root(t) for t in outs))

    # ---- values on fresh inputs ---------------------------------------------------

    def shape_and_attrs(self, t: int) -> tuple[dict[str, Any], tuple[tuple[int, ...], ...]]:
        """Full IR attributes of t's node and its output shapes."""
        tmpl_i = self.struct(t)[0]
        tmpl = self.templates[tmpl_i]
        args = self.args(t)
        shapes = [self.shape(a) for a in args]
        mid = None
        if tmpl.kind == "split":
            mid = self.table.split[args[0]][tmpl.axis][-1]
        res = resolve(tmpl, shapes, mid)
        assert res is not None, f"term {t} does not type-check"
        return res

    def shape(self, t: int) -> tuple[int, ...]:
        if t < self.n_table:
            return self.table.shapes[self.table.group[t]]
        return self.shape_and_attrs(t)[1][self.struct(t)[3]]

    def fresh_cache(self) -> dict[int, np.ndarray]:
        """The fresh values of table terms computed so far (inputs included)."""
        got = getattr(self, "_fvals", None)
        if got is None:
            got = {k: self.fresh_inputs[k] for k in range(self.n_in)}
            self._fvals = got
        return got

    def share_fresh(self, cache: dict[int, np.ndarray]) -> None:
        """Use (and extend) another store's fresh values of the same table."""
        self._fvals = cache

    def _fresh_table(self, terms: Sequence[int]) -> dict[int, np.ndarray]:
        """Fresh values of the table terms that `terms` are built from, computed level by
        level in batches, only those not computed before: a partition of the last level
        needs those under its bucket members, not the whole table."""
        vals = self.fresh_cache()
        need: set[int] = set()
        stack = [a for t in terms for a in (self.args(t) if t >= self.n_table else (t,))]
        while stack:
            a = stack.pop()
            if a in vals or a in need:
                continue
            need.add(a)
            stack.extend(self.args(a))
        by_level: dict[int, list[int]] = defaultdict(list)
        for t in need:
            by_level[self.table.size[t]].append(t)
        for lv in sorted(by_level):
            self._fresh_batch(sorted(by_level[lv]), vals)
        return vals

    def _fresh_batch(self, terms: Sequence[int], vals: dict[int, np.ndarray]
                     ) -> dict[int, np.ndarray]:
        """Fresh values of `terms` whose operands are table terms already in `vals`; table
        terms are stored into `vals`, all are returned."""
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for t in terms:
            tmpl_i = self.struct(t)[0]
            args = self.args(t)
            mid = None
            if self.templates[tmpl_i].kind == "split":
                mid = self.table.split[args[0]][self.templates[tmpl_i].axis][-1]
            key = (tmpl_i, tuple(self.table.group[a] for a in args), mid)
            groups[key].append(t)
        out: dict[int, np.ndarray] = {}
        for (tmpl_i, gs, mid), ts in groups.items():
            tmpl = self.templates[tmpl_i]
            res = resolve(tmpl, [self.table.shapes[g] for g in gs], mid)
            assert res is not None
            attrs = res[0]
            step = max(1, (1 << 20) // max(1, int(np.prod(res[1][0]))))
            for s0 in range(0, len(ts), step):
                chunk = ts[s0:s0 + step]
                args = [np.stack([vals[self.args(t)[i]] for t in chunk]) for i in range(len(gs))]
                outs = evaluate(tmpl, attrs, args)
                for r, t in enumerate(chunk):
                    o = self.struct(t)[3]
                    v = outs[o][r if outs[o].shape[0] > 1 else 0]
                    out[t] = v
                    if t < self.n_table:
                        vals[t] = v
        return out

    def fresh_hashes(self, terms: Sequence[int]) -> dict[int, tuple[int, int]]:
        """Fingerprints of terms on the fresh inputs (an evaluation independent of the
        enumeration's), batched by template and operand shapes."""
        vals = self._fresh_table(terms)
        got: dict[int, np.ndarray] = {}
        rest = []
        for t in terms:
            if t < self.n_table:
                got[t] = vals[t]
            else:
                rest.append(t)
        got.update(self._fresh_batch(rest, vals))
        by_shape: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for t, v in got.items():
            by_shape[v.shape].append(t)
        out: dict[int, tuple[int, int]] = {}
        for ts in by_shape.values():
            h1, h2 = hash_rows(np.stack([got[t] for t in ts]))
            for t, a, b in zip(ts, h1.tolist(), h2.tolist(), strict=True):
                out[t] = (a, b)
        return out

    def dag_fps(self, t: int) -> dict[int, tuple[int, int]]:
        """Enumeration fingerprints of every operator output in t's DAG, by term id."""
        if t < self.n_table:
            tb = self.table
            return {d: (tb.h1[d], tb.h2[d]) for d in tb.dag[t]}
        out: dict[int, tuple[int, int]] = {}
        for a in self.args(t):
            out.update(self.dag_fps(a))
        if t < self.cbase:
            i = t - self.n_table
            out[t] = (int(self.last_h1[i]), int(self.last_h2[i]))
            for u in self._siblings(t):
                j = u - self.n_table
                out[u] = (int(self.last_h1[j]), int(self.last_h2[j]))
        return out

    def _siblings(self, t: int) -> list[int]:
        """Last-level outputs of t's node when it has several (t included), found in an
        index of the multi-output nodes' keys sorted once (a dict of the last level's
        split nodes would not fit at 4 ops)."""
        tmpl, a0, a1, _ = self.struct(t)
        if self.templates[tmpl].kind != "split":
            return []
        got = getattr(self, "_sib", None)
        if got is None:
            lt = self.last
            tm = np.asarray(lt["tmpl"], dtype=np.int64)
            multi = [i for i, tp in enumerate(self.templates) if tp.kind == "split"]
            rows = np.flatnonzero(np.isin(tm, multi))
            keys = self._sib_key(tm[rows], np.asarray(lt["a0"])[rows].astype(np.int64),
                                 np.asarray(lt["a1"])[rows].astype(np.int64))
            order = np.argsort(keys, kind="stable")
            got = (keys[order], rows[order])
            self._sib = got
        keys, rows = got
        k = int(self._sib_key(np.int64(tmpl), np.int64(a0), np.int64(a1)))
        lo, hi = np.searchsorted(keys, [k, k + 1])
        return [self.n_table + int(r) for r in rows[lo:hi]]

    @staticmethod
    def _sib_key(tmpl: Any, a0: Any, a1: Any) -> Any:
        # operands are table terms (< 2**26 at any size that fits in memory), -1 when absent
        return (tmpl << 54) | ((a0 + 1) << 27) | (a1 + 1)

    # ---- side graphs for rules ----------------------------------------------------

    def side(self, outs: Sequence[int], var_index: dict[int, int]) -> Side:
        nodes: list[SNode] = []
        index: dict[NodeKey, int] = {}

        def ref(t: int) -> tuple[str, int, int]:
            if self.is_input(t):
                return ("var", var_index[t], 0)
            key = self.key(t)
            if key not in index:
                kids = tuple(ref(a) for a in self.args(t))
                tmpl = self.templates[key[0]]
                attrs, _ = self.shape_and_attrs(t)
                infer = tuple(a for a in SHAPE_ATTRS.get(tmpl.op, ()) if a in attrs)
                index[key] = len(nodes)
                nodes.append(SNode(tmpl.op, tuple(sorted(attrs.items())), kids, infer))
            return ("node", index[key], self.struct(t)[3])

        outputs = tuple(ref(t) for t in outs)
        return Side(tuple(nodes), outputs)


# ---- the workers' table of lower levels -------------------------------------------

_WORKER: dict[str, Any] = {}


def _worker_init(cfg: GeneratorConfig) -> None:
    if _WORKER.get("digest") != config_digest(cfg):
        table = TermTable(cfg, cfg.max_ops - 1)
        units, shards = plan_shards(table, cfg.max_ops)
        _WORKER.update(digest=config_digest(cfg), table=table, units=units, shards=shards)


def _forked_worker_init(cfg: GeneratorConfig, parent: int) -> None:
    from superopt.interrupts import guard_worker

    guard_worker(parent)  # Ctrl-C is the parent's (no traceback here); its death ends us
    _worker_init(cfg)


# ---- pairing one bucket's members ---------------------------------------------------

Candidate = tuple[tuple[int, ...], tuple[int, ...], int]  # source terms, target terms, bucket


def _orient(src_mask: int, tgt_mask: int) -> bool | None:
    """True: src => tgt is a rule (tgt's variables are among src's); False: only the
    reverse is; None: neither."""
    if tgt_mask & ~src_mask == 0:
        return True
    if src_mask & ~tgt_mask == 0:
        return False
    return None


def _single_output_candidates(store: TermStore, classes: list[list[int]]
                              ) -> tuple[list[Candidate], int]:
    """Each bucket member (smallest first) against the earliest smaller member that passes
    pruning; returns the candidates and how many members passed common-subgraph pruning."""
    candidates: list[Candidate] = []
    after_sub = 0
    for ci, members in enumerate(classes):
        infos = [store.info([m]) for m in members]
        masks = [store.vmask(m) for m in members]
        for gi in range(1, len(members)):
            passed_sub = False
            for hi in range(gi):
                oriented = _orient(masks[gi], masks[hi])
                if oriented is None:
                    continue  # neither side binds all the other's variables
                if common_subgraph(infos[hi], infos[gi]):
                    continue
                passed_sub = True
                if store.supergraph(infos[hi], infos[gi]):
                    continue
                g, h = (members[gi],), (members[hi],)
                candidates.append((g, h, ci) if oriented else (h, g, ci))
                break
            after_sub += passed_sub
    return candidates, after_sub


__all__ = ["CONFIRM_SEED", "LIST_TERMS", "Candidate", "NodeKey", "TermStore"]
