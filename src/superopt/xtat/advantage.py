"""Local advantage functions for fusion (Wu et al., "Learning Local Advantage Functions"):
a per-node model of how much the program's time changes when one node's fusion decision
is flipped, given the decisions around it.

- `FlipFeatures` encodes one (fusion site, alternative option) of a candidate as a row of
  hand features (`FEATURES`, in order): the node's op (one-hot over the closed op set and
  its traits, so a test graph's ops that training never saw still share trait columns),
  its output's size, its fan-in and fan-out, its current, target and default decision,
  the ops and the current decisions of its producers and consumers, and the kernels around
  it (how many nodes, whether an MXU op leads them, their share of the program's time by
  the default compiler's analytical estimate).
  Nothing here is a measurement of the flip itself.
- `label(a, sigma)`: the training target of a measured change `a` (time before minus time
  after, so positive is faster): sign(a) * log(1 + |a| / sigma), with `sigma` a per-graph
  scale (`graph_sigma`), so graphs whose kernels take microseconds and graphs whose kernels
  take milliseconds teach the model on one scale and a few huge flips do not dominate it.
- `AdvantageModel`: gradient-boosted trees (xgboost, squared error on the labels, one
  thread) with fit/predict/save/load; a saved model records the feature schema and is
  refused under another.

Data collection (Gibbs-style sampling on the training graphs) is in
`superopt.xtat.advantage_data`; the guided search that uses the model is the `guided`
strategy (`superopt.xtat.strategies.guided`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from superopt.ir.errors import IRError
from superopt.ir.opdef import get_op
from superopt.tpu_sim import Signature, Simulator, is_source
from superopt.tpu_sim.kernel_time import analytical, analytical_compute
from superopt.tpu_sim.op_costs import is_mxu_op
from superopt.xtat.passes.fusion import MULTI
from superopt.xtat.space import Choice, Site, digest
from superopt.xtat.stage import Candidate

# The shipped model: trained offline by `benchmarks/search.py --train-advantage` on
# resnet18, bert_small and two synthetic graphs (never on the graphs it is tested on).
SHIPPED = Path(__file__).with_name("advantage_gbt.json")


class AdvantageError(IRError):
    """A missing or incompatible advantage model."""


# The feature vocabulary is fixed with the shipped model: one-hot columns over the op
# registry would change (and void the model) whenever an op is added.
VOCAB = Path(__file__).with_name("advantage_vocab.json")


@cache
def _vocab() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ops and traits with a one-hot column: those the shipped model was trained with
    (`advantage_vocab.json`); an op outside it is seen through its traits alone."""
    doc = json.loads(VOCAB.read_text())
    return tuple(doc["ops"]), tuple(doc["traits"])


def _decision_code(choice: Choice) -> int:
    """0: materialise, 1: fuse into all consumers, 2: multi-output."""
    if choice == MULTI or (isinstance(choice, int) and not isinstance(choice, bool)):
        return 2
    return 1 if choice else 0


def _feature_names() -> tuple[str, ...]:
    ops, traits = _vocab()
    names = [f"op={o}" for o in ops] + [f"trait={t}" for t in traits] + ["mxu"]
    names += ["log_elems", "log_bytes", "rank", "log_in_over_out", "producers", "weights",
              "consumers"]
    names += [f"current={d}" for d in ("mat", "fuse", "multi")]
    names += [f"target={d}" for d in ("mat", "fuse", "multi")]
    names += ["default_fuse", "at_default"]
    for side in ("prod", "cons"):
        names += [f"{side}_trait={t}" for t in traits] + [f"{side}_mxu"]
        names += [f"{side}_dec={d}" for d in ("mat", "fuse", "multi", "none")]
    names += ["kernels", "kernel_nodes", "kernel_hero", "is_root", "kernel_share",
              "cons_kernels", "cons_kernel_nodes", "cons_kernel_share"]
    return tuple(names)


FEATURES = _feature_names()
SCHEMA = digest("\n".join(FEATURES))


def _lg(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def kernel_estimate(sim: Simulator, sig: Signature) -> float:
    """The default compiler's analytical estimate of a kernel (tile-free: its HBM bytes at
    full bandwidth, overlapped with its compute). Features use it, never the simulated
    time, so the model learns the time model from measured flips only."""
    s = sim.kernels.stats(sig)
    hw = sim.hw
    memory = (s.lhs_bytes + s.rhs_bytes + s.stream_bytes + s.out_bytes) / hw.hbm_bytes_per_s
    return analytical(analytical_compute(s, hw), memory, hw)


class FlipFeatures:
    """Feature rows of the fusion flips of one candidate (module docstring). Built once
    per candidate: the per-candidate tables (decisions, kernels and their time shares)
    are shared by every row."""

    def __init__(self, cand: Candidate, fusion_index: int, sim: Simulator,
                 estimates: dict[str, float] | None = None) -> None:
        stage = cand.stages[fusion_index]
        after = cand.stages[fusion_index + 1]
        self.laid = stage.laid
        self.graph = self.laid.graph
        self.eff = self.laid.consumers[0]
        self.decided = after.fusion or {}
        part = after.partition
        self.kernel_of = part.kernel_of
        est = {} if estimates is None else estimates
        for key, sig in zip(after.sig_keys, after.signatures, strict=True):
            if key not in est:
                est[key] = kernel_estimate(sim, sig)
        # The program's estimated time: the kernel shares' denominator.
        self.total = sum(est[k] for k in after.sig_keys) or 1.0
        # Per kernel root: (nodes, has an MXU hero, its estimated time).
        self.kernels = {k.root: (len(k.nodes), k.hero is not None, est[key])
                        for k, key in zip(part.kernels, after.sig_keys, strict=True)}
        self.ops, self.traits = _vocab()
        self.op_col = {o: i for i, o in enumerate(self.ops)}

    def _op_part(self, op: str) -> list[float]:
        row = [0.0] * len(self.ops)
        if op in self.op_col:
            row[self.op_col[op]] = 1.0
        return row + self._traits(op)

    def _traits(self, op: str) -> list[float]:
        d = get_op(op)
        return [1.0 if d.has(t) else 0.0 for t in self.traits] + [float(is_mxu_op(op))]

    def _side(self, nodes: Sequence[int]) -> list[float]:
        tr = [0.0] * (len(self.traits) + 1)
        dec = [0.0] * 4
        for m in nodes:
            for i, v in enumerate(self._traits(self.graph.node(m).op)):
                tr[i] += v
            got = self.decided.get(m)
            dec[3 if got is None else _decision_code(got)] += 1.0
        return tr + dec

    def _kernel_part(self, roots: Sequence[int]) -> tuple[float, float, tuple[float, ...]]:
        """(most nodes, any MXU hero, the estimated times) of the kernels `roots`."""
        ks = [self.kernels[r] for r in roots if r in self.kernels]
        if not ks:
            return 0.0, 0.0, ()
        return (float(max(k[0] for k in ks)), float(any(k[1] for k in ks)),
                tuple(k[2] for k in ks))

    def around(self, node: int) -> tuple[tuple[int, ...], list[int]]:
        """The roots of the kernels computing `node`, and those of its consumers' other
        kernels."""
        roots = self.kernel_of[node]
        croots = sorted({r for c in self.eff[node] for r in self.kernel_of[c]} - set(roots))
        return roots, croots

    def estimates(self, node: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The estimated times behind `node`'s two share features (`share_feature`):
        its own kernels' and its consumers' other kernels'."""
        roots, croots = self.around(node)
        return self._kernel_part(roots)[2], self._kernel_part(croots)[2]

    def row(self, node: int, site: Site, current: Choice, target: Choice) -> list[float]:
        n = self.graph.node(node)
        t = n.types[0]
        elems = math.prod(t.shape)
        in_elems = [math.prod(self.graph.type_of(v).shape) for v in n.inputs]
        producers = [v.node for v in n.inputs if not is_source(self.graph.node(v.node).op)]
        consumers = list(self.eff[node])
        row = self._op_part(n.op)
        row += [_lg(elems), _lg(elems * t.dtype.itemsize),
                float(len(t.shape)), math.log2((1 + max(in_elems, default=0)) / (1 + elems)),
                float(len(producers)), float(len(n.inputs) - len(producers)),
                float(len(consumers))]
        cur, tgt = _decision_code(current), _decision_code(target)
        row += [float(cur == d) for d in range(3)] + [float(tgt == d) for d in range(3)]
        row += [float(bool(site.default)), float(current == site.default)]
        row += self._side(producers) + self._side(consumers)
        roots, croots = self.around(node)
        size, hero, ests = self._kernel_part(roots)
        csize, _, cests = self._kernel_part(croots)
        row += [float(len(roots)), _lg(size), hero, float(node in roots),
                share_feature(ests, self.total), float(len(croots)), _lg(csize),
                share_feature(cests, self.total)]
        return row


def share_feature(estimates: Sequence[float], total: float) -> float:
    """The `kernel_share` / `cons_kernel_share` feature of kernels with these estimated
    times in a program estimated at `total`: the log of their share (in 1e-4 units). The
    only features that depend on the whole program (through `total`); the guided search
    recomputes them alone for the nodes whose neighbourhood did not change."""
    share = 0.0
    for e in estimates:  # in order, one rounding per term (as sum() on Python 3.11)
        share += e / total
    return _lg(1e4 * share)


def label(a: np.ndarray | float, sigma: float) -> np.ndarray:
    """sign(a) * log(1 + |a| / sigma): `a` is time before minus time after a flip."""
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, found {sigma!r}")
    a = np.asarray(a, dtype=np.float64)
    return np.sign(a) * np.log1p(np.abs(a) / sigma)


def graph_sigma(a: np.ndarray) -> float:
    """A graph's scale of change: the median |a| of its flips that changed the time (1.0
    when none did, where every label is 0 anyway)."""
    nz = np.abs(np.asarray(a, dtype=np.float64))
    nz = nz[nz > 0]
    return float(np.median(nz)) if len(nz) else 1.0


class AdvantageModel:
    """Gradient-boosted trees on `FEATURES` -> label (module docstring)."""

    # 100 trees of depth 4: as good on held-out graphs' flips as 200 of depth 6 (rank
    # correlation 0.80-0.87 on inception_v3, bert_base, resnet50) at a fifth of the size.
    def __init__(self, rounds: int = 100, depth: int = 4, eta: float = 0.1, seed: int = 0,
                 threads: int = 1) -> None:
        self.params = {"objective": "reg:squarederror", "max_depth": depth, "eta": eta,
                       "subsample": 0.8, "colsample_bytree": 0.8, "min_child_weight": 2.0,
                       "nthread": threads, "seed": seed, "verbosity": 0}
        self.rounds = rounds
        self.booster: Any = None
        self.meta: dict[str, Any] = {}
        self._splits: dict[int, np.ndarray] = {}

    def fit(self, X: np.ndarray, y: np.ndarray, meta: dict[str, Any] | None = None
            ) -> AdvantageModel:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import xgboost as xgb

        if X.shape[1] != len(FEATURES):
            raise AdvantageError(f"expected {len(FEATURES)} feature columns, found {X.shape[1]}")
        self.booster = xgb.train(self.params, xgb.DMatrix(X, label=y), self.rounds)
        self._splits = {}
        self.meta = dict(meta or {})
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        if self.booster is None:
            raise AdvantageError("the advantage model is not fitted")
        if len(X) == 0:
            return np.zeros(0)
        return np.asarray(self.booster.predict(xgb.DMatrix(np.asarray(X, dtype=np.float32))))

    def split_points(self, column: int) -> np.ndarray:
        """Every threshold the trees compare feature `column` with (sorted float32),
        each with its float32 neighbours (a threshold read back from the model's JSON
        may be one rounding off the one the booster compares with). Two values with as
        many of these points at or below them (`np.searchsorted(..., side="right")`)
        take the same branch at every split on `column` (xgboost goes left when
        value < threshold)."""
        got = self._splits.get(column)
        if got is None:
            if self.booster is None:
                raise AdvantageError("the advantage model is not fitted")
            doc = json.loads(self.booster.save_raw("json").decode())
            pts = []
            for tree in doc["learner"]["gradient_booster"]["model"]["trees"]:
                for left, idx, cond in zip(tree["left_children"], tree["split_indices"],
                                           tree["split_conditions"], strict=True):
                    if left != -1 and idx == column:  # an inner node splitting on it
                        pts.append(cond)
            t = np.asarray(pts, dtype=np.float32)
            inf = np.float32(np.inf)
            got = np.unique(np.concatenate([t, np.nextafter(t, -inf), np.nextafter(t, inf)]))
            self._splits[column] = got
        return got

    def save(self, path: str | Path) -> None:
        raw = self.booster.save_raw("json").decode()
        doc = {"schema": SCHEMA, "features": len(FEATURES), "meta": self.meta,
               "booster": json.loads(raw)}
        tmp = Path(f"{path}.tmp")
        tmp.write_text(json.dumps(doc, separators=(",", ":")))
        tmp.replace(path)

    @staticmethod
    def load(path: str | Path, threads: int = 1) -> AdvantageModel:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import xgboost as xgb

        p = Path(path)
        if not p.is_file():
            raise AdvantageError(f"advantage model {str(p)!r} not found (train one with "
                                 "benchmarks/search.py --train-advantage)")
        try:
            doc = json.loads(p.read_text())
            schema = doc["schema"]
        except (ValueError, KeyError, TypeError) as e:
            raise AdvantageError(f"{p}: not an advantage model ({e})") from None
        if schema != SCHEMA:
            raise AdvantageError(f"{p}: made for another feature schema ({schema}, this "
                                 f"version's is {SCHEMA}): retrain it")
        m = AdvantageModel(threads=threads)
        m.booster = xgb.Booster(params={"nthread": threads})
        m.booster.load_model(bytearray(json.dumps(doc["booster"]).encode()))
        m.meta = doc.get("meta", {})
        return m


__all__ = ["FEATURES", "SCHEMA", "SHIPPED", "AdvantageError", "AdvantageModel",
           "FlipFeatures", "graph_sigma", "kernel_estimate", "label", "share_feature"]
