"""Training data for the local-advantage model: Gibbs-style sampling of fusion flips on
small training graphs, measured on the TPU simulator through the tuner's pipeline and
runner (as a tuning run measures), cached on disk per chain.

A *chain* starts from a random fusion configuration (the default compiler's decisions
with a share of the sites, 0%, 5% or 20% by chain, set to a random other option; tiles
and flags at their defaults) and takes `steps` steps. Each step picks a fusion site,
flips it to a random other option, measures the program before and after (the runner's
noisy measurement, seeded per chain) and records the flip's features in the state before
it (`advantage.FlipFeatures`) and its change a = time before - time after. The flip is
then kept with the Gibbs probability 1 / (1 + exp(-a / T)), T the chain's running median
|a|: the chain drifts to faster configurations without freezing, so the data covers
the neighbourhoods a search visits, not only the default's.

Prioritised sampling: most flips change the time by a little and a few ops' flips by a
lot, so sites are drawn with weight 0.2 + the running mean |a| of flips of their op
(relative to the mean over all ops), and a flip that changed nothing (a decision the
kernel former cannot honour) is recorded only one time in four.

Everything random comes from a generator seeded by (seed, chain, graph name), and each
chain is saved atomically as one `.npz` under the cache folder as soon as it is done, so
a killed collection resumes where it stopped and gives the same data.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from superopt.xtat.advantage import (
    FEATURES,
    SCHEMA,
    AdvantageModel,
    FlipFeatures,
    graph_sigma,
    label,
)
from superopt.xtat.space import PassConfig, digest
from superopt.xtat.store import ConfigStore

# Small graphs to train on; `synthetic:N@S` is `tpu_sim.synthetic_graph(N, seed=S)`.
TRAIN_GRAPHS = ("resnet18", "bert_small", "synthetic:300@1", "synthetic:600@2")
START_NOISE = (0.0, 0.05, 0.2)  # share of sites randomised at a chain's start, by chain
KEEP_ZERO = 0.25  # the share of no-change flips that are recorded


# The default compiler's tile heuristic the flips are measured over. The shipped model
# (`advantage_gbt.json`) was trained on flips over the legacy default's tiles; collecting
# over the XLA-strength default changes every label, so the shipped model and any model
# compared with it keep to the legacy one until the model is retrained.
TRAINING_TILING = "legacy"


def open_graph(name: str) -> object:
    """A tuning session on a zoo model (batch 1) or on `synthetic:N@S`, over the default
    compiler's tiles by `TRAINING_TILING`."""
    from superopt.xtat.session import open_session

    if name.startswith("synthetic:"):
        from superopt.tpu_sim.synthetic import synthetic_graph

        size, _, seed = name.removeprefix("synthetic:").partition("@")
        return open_session({"model": f"synthetic:{size}", "default_tiling": TRAINING_TILING},
                            synthetic_graph(int(size), seed=int(seed or 0)))
    return open_session({"model": name, "batch": 1, "default_tiling": TRAINING_TILING})


@dataclass(frozen=True)
class Flips:
    """Measured flips of one graph: features, change a (s), time before the flip (s)."""

    graph: str
    X: np.ndarray
    a: np.ndarray
    before: np.ndarray

    def __len__(self) -> int:
        return len(self.a)


def _chain(session: object, name: str, seed: int, chain: int, steps: int) -> Flips:
    pipeline, runner = session.pipeline, session.runner  # type: ignore[attr-defined]
    default = session.default  # type: ignore[attr-defined]
    j = pipeline.index("fusion")
    rng = np.random.default_rng([seed, chain, int(digest(name)[:8], 16)])
    noise_seed = seed * 1000 + chain
    sim = session.sim  # type: ignore[attr-defined]
    estimates: dict[str, float] = {}
    store = ConfigStore()  # empty: kernels the flips create get default tiles and flags
    # Fusion sites are those of the laid-out graph, which no fusion decision changes.
    sites = pipeline.passes[j].sites(default.stages[j]).tunable
    ops = [s.label.split(" ", 1)[1] for s in sites]
    start = {}
    frac = START_NOISE[chain % len(START_NOISE)]
    for s in sites:
        if rng.random() < frac:
            others = [o for o in s.options if o != s.default]
            start[s.key] = others[int(rng.integers(len(others)))]
    configs = list(default.configs)
    configs[j] = PassConfig.of(start)
    cand = pipeline.build(default, configs, store)
    t_cur = runner.measure(cand, noise_seed)
    node_of = pipeline.passes[j].node_of(cand.stages[j])
    rel_sum: dict[str, float] = {}
    rel_n: dict[str, int] = {}
    changes: list[float] = []
    rows: list[list[float]] = []
    a_out: list[float] = []
    before: list[float] = []
    for _ in range(steps):
        mean_all = (sum(rel_sum.values()) / max(1, sum(rel_n.values()))) or 1.0
        w = np.asarray([0.2 + min(5.0, rel_sum.get(o, 0.0) / max(1, rel_n.get(o, 0))
                                  / mean_all) if o in rel_n else 1.2 for o in ops])
        site = sites[int(rng.choice(len(sites), p=w / w.sum()))]
        current = cand.configs[j].choices.get(site.key, site.default)
        others = [o for o in site.options if o != current]
        target = others[int(rng.integers(len(others)))]
        feats = FlipFeatures(cand, j, sim, estimates)
        row = feats.row(node_of[site.key], site, current, target)
        nxt = pipeline.with_choice(cand, "fusion", site.key, target, store)
        t_new = runner.measure(nxt, noise_seed)
        if not math.isfinite(t_new) or not math.isfinite(t_cur):
            continue
        a = t_cur - t_new
        op = ops[sites.index(site)]
        rel_sum[op] = rel_sum.get(op, 0.0) + abs(a) / t_cur
        rel_n[op] = rel_n.get(op, 0) + 1
        if a != 0 or rng.random() < KEEP_ZERO:
            rows.append(row)
            a_out.append(a)
            before.append(t_cur)
        if a != 0:
            changes.append(abs(a))
        temp = float(np.median(changes)) if changes else 1.0
        if rng.random() < 1.0 / (1.0 + math.exp(max(-50.0, min(50.0, -a / temp)))):
            cand, t_cur = nxt, t_new
    X = np.asarray(rows, dtype=np.float32).reshape(-1, len(FEATURES))
    return Flips(name, X, np.asarray(a_out), np.asarray(before))


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def collect(name: str, seed: int = 0, chains: int = 6, steps: int = 400,
            cache: str | Path | None = None, session: object | None = None) -> Flips:
    """`chains` chains of `steps` flips on graph `name`, each cached as
    `<cache>/<graph>-<schema>-s<seed>-c<chain>-n<steps>.npz` (module docstring)."""
    folder = Path(cache) if cache is not None else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    parts: list[Flips] = []
    for c in range(chains):
        path = None if folder is None else (
            folder / f"{_slug(name)}-{SCHEMA[:8]}-s{seed}-c{c}-n{steps}.npz")
        if path is not None and path.is_file():
            with np.load(path) as z:
                parts.append(Flips(name, z["X"], z["a"], z["before"]))
            continue
        if session is None:
            session = open_graph(name)
        got = _chain(session, name, seed, c, steps)
        if path is not None:
            tmp = path.with_name(path.name + ".tmp.npz")
            np.savez(tmp, X=got.X, a=got.a, before=got.before)
            os.replace(tmp, path)
        parts.append(got)
    return Flips(name, np.concatenate([p.X for p in parts]),
                 np.concatenate([p.a for p in parts]),
                 np.concatenate([p.before for p in parts]))


@dataclass(frozen=True)
class Trained:
    model: AdvantageModel
    rows: int
    per_graph: dict[str, int]
    sigma: dict[str, float]
    collect_s: float
    fit_s: float


def train(graphs: Sequence[str] = TRAIN_GRAPHS, seed: int = 0, chains: int = 6,
          steps: int = 400, cache: str | Path | None = None, rounds: int = 100,
          depth: int = 4) -> Trained:
    """Collect (or read back) the flips of `graphs` and fit the advantage model on their
    labels, sigma per graph (`advantage.graph_sigma`)."""
    t0 = time.perf_counter()
    data = [collect(g, seed, chains, steps, cache) for g in graphs]
    t1 = time.perf_counter()
    sigma = {d.graph: graph_sigma(d.a) for d in data}
    X = np.concatenate([d.X for d in data])
    y = np.concatenate([label(d.a, sigma[d.graph]) for d in data])
    meta = {"graphs": list(graphs), "seed": seed, "chains": chains, "steps": steps,
            "rows": len(y), "sigma": sigma}
    model = AdvantageModel(rounds=rounds, depth=depth, seed=seed).fit(X, y, meta)
    return Trained(model, len(y), {d.graph: len(d) for d in data}, sigma, t1 - t0,
                   time.perf_counter() - t1)


__all__ = ["KEEP_ZERO", "START_NOISE", "TRAIN_GRAPHS", "Flips", "Trained", "collect",
           "open_graph", "train"]
