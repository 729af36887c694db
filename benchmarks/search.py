"""Benchmark: search strategies that need fewer measurements (issue 19).

Sections (tables on stdout; figures to one JSON file and PNG curves):

1. strategies: on each held-out graph and seed, random search runs `--cap` measurements
   (2,000) and its best measured time is the target; anneal, evolution, mbo and autotvm
   then run (same seed, same noise) until their best measured time reaches the target
   or `--cap` measurements, and the measurements they needed are reported (median, min,
   max and the interquartile range over the seeds; a run that never reaches it counts
   as "> cap"). The tuned passes are fusion, tiling and flags together (`custom`
   schedule), rounds of 8 as `superopt tune` measures them. `guided` is the local-
   advantage guided search with the shipped model (trained on resnet18, bert_small and
   two synthetic graphs, none of the graphs here); `guided-none` the same search with
   the sites in random order (no model). `--only guided,guided-none` runs just those
   columns (and random again, which must reproduce the cached target) and merges them
   into `--out`'s earlier runs; their curves go to `search_<graph>_<columns>.png`.
   `--train-advantage` first collects the training flips (cached under
   out/advantage_cache, resumable), fits the model, saves it (the shipped file unless
   `--advantage-model`) and checks it on flips of the held-out graphs. Budgets count measurements
   (deterministic per seed), so the figures do not depend on the machine's load; the
   wall time per run is reported beside them with the load average.
   `--graphs synthetic:100000 --columns guided --skip scheduler --out
   benchmarks/results/search_100k.json`: the issue's unseen 100k-node synthetic graph
   (the generator's seed 0; the model's synthetic training graphs have 300 and 600 nodes);
   the guided search ranks its ~59k fusion sites incrementally (`guided.Scores`).
   `--passes fusion` tunes fusion alone (search_fusion.json); `--equal-budget B` also
   runs every column for B measurements with no target and reports the best speedups
   (search_budget.json: are the fewer measurements an equally good result?).
2. scheduler: the tiles and flags of a 4-model workload's kernels tuned as tasks
   (`superopt.xtat.scheduler`) by Ansor's gradient scheduler and by round-robin, rounds
   of 4 measurements, `--sched-budget` measurements, `--seeds` seeds: the objective
   (sum over models of end-to-end simulated time / default) after each measurement, each
   model's time at equal budgets, and the measurements needed to reach 95% of the final
   gain (each scheduler's own, and the larger of the two). `--skip strategies` with an
   existing `--out` replaces that file's scheduler section only.

Run: `.venv/bin/python benchmarks/search.py [--quick] [--graphs a,b] [--seeds N]`;
the guided columns alone: `... --train-advantage --only guided,guided-none`, then `... --graphs nasnet_a --out benchmarks/results/search_nasnet.json
--only guided,guided-none`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

RESULTS = Path(__file__).parent / "results"
PASSES = ("fusion", "tiling", "flags")
STRATEGIES = ("anneal", "evolution", "mbo", "autotvm", "guided", "guided-none")
# Columns that run a strategy with options: the guided search without its model (the
# sites in random order), to show what the advantage model adds; and (on request only,
# --columns/--only) the guided search rescoring every site for each new best, as it did
# before it ranked incrementally (the same measurements, to compare the wall time), and
# the guided search whose kernel moves draw any option (local=0), as it did before they
# stepped to near ones.
COLUMNS: dict[str, tuple[str, dict[str, Any]]] = {
    "guided-none": ("guided", {"model": "none"}),
    "guided-full": ("guided", {"incremental": 0}),
    # (on request) the guided search with uniform kernel moves, as before near moves
    "guided-plain": ("guided", {"local": 0.0})}
ALL_COLUMNS = (*STRATEGIES, "guided-full", "guided-plain")
ADVANTAGE_CACHE = Path(__file__).parent.parent / "out" / "advantage_cache"
HELD_OUT = ("resnet50", "inception_v3", "bert_base", "nasnet_a")
GRAPHS = ("resnet50", "inception_v3", "bert_base")
WORKLOAD = ("resnet50", "inception_v3", "bert_base", "squeezenet")


class Reached(Exception):
    """Raised from the tuner's progress hook once the target is reached."""


def search(model: str, column: str, seed: int, cap: int, target: float | None,
           opts: dict[str, Any] | None = None, passes: tuple[str, ...] = PASSES
           ) -> dict[str, Any]:
    """One tuning run of a column (a strategy, or one in `COLUMNS`); stops at `target`
    (best measured <= target) or `cap`. `opts` add to the column's strategy options."""
    from superopt.xtat.session import open_session
    from superopt.xtat.tuner import Tuner, make_schedule

    strategy, base = COLUMNS.get(column, (column, {}))
    # A synthetic graph ("synthetic:N") has no batch dimension to set.
    s = open_session({"model": model, "batch": None if model.startswith("synthetic:") else 1})
    tuner = Tuner(s.pipeline, s.runner, s.default, seed=seed,
                  strategy_opts=base | (opts or {}))

    def progress(t: Tuner, phase: str) -> None:
        if target is not None and t.ctx.best_time <= target:
            raise Reached

    tuner.progress = progress
    exact = exact_best_curve(tuner)
    start = time.perf_counter()
    try:
        tuner.run(make_schedule("custom", passes, strategy), cap)
    except Reached:
        pass
    wall = time.perf_counter() - start
    best = [p.best for p in tuner.history]
    hit = None if target is None else next(
        (i + 1 for i, b in enumerate(best) if b <= target), None)
    # Speedups from exact times: the best measured candidate's noise-free time over the
    # default's. A best of many noisy measurements over one noisy measurement of the
    # default is biased upward (the minimum of noise), so the measured `best`/`default`
    # only decide when a target is reached, as the search itself sees them.
    return {"model": model, "strategy": column, "seed": seed, "measurements": len(best),
            "reached_at": hit, "best": best[-1], "default": best[0],
            "first_best_at": next(i + 1 for i, b in enumerate(best) if b <= best[-1]),
            "best_exact": exact[-1], "default_exact": exact[0],
            "curve": [exact[0] / b for b in exact], "wall_s": wall}


def exact_best_curve(tuner: Any) -> list[float]:
    """Filled as `tuner` measures: after each measurement, the exact (noise-free) time of
    the candidate with the best measured time so far."""
    ctx, out = tuner.ctx, []
    observe = ctx.observe

    def record(candidate: Any, measured: float) -> None:
        observe(candidate, measured)
        out.append(tuner.runner.time(ctx.best))

    ctx.observe = record  # the instance attribute shadows the method for this run only
    return out


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1],
            "q1": q[0], "q3": q[2]}


def section_strategies(graphs: list[str], seeds: int, cap: int, runs: list[dict[str, Any]],
                       columns: tuple[str, ...] = STRATEGIES,
                       opts: dict[str, dict[str, Any]] | None = None,
                       cached: dict[tuple[str, int], float] | None = None,
                       passes: tuple[str, ...] = PASSES,
                       saved: Callable[[], None] | None = None) -> None:
    """Append each graph's and seed's runs to `runs` (`saved` is called after each
    seed: the caller saves as they come).
    `cached`: random's best per (graph, seed) from an earlier run; random is run again
    (its curve is drawn) and must find the same best, since a run is fixed by its seed."""
    for g in graphs:
        for seed in range(seeds):
            r = search(g, "random", seed, cap, None, passes=passes)
            target = r["best"]
            old = (cached or {}).get((g, seed))
            if old is not None and old != target:
                raise SystemExit(f"{g} seed {seed}: random search's best {target!r} differs "
                                 f"from the cached run's {old!r}: rerun every column")
            r["reached_at"] = r["first_best_at"]
            runs.append(r)
            line = [f"  {g:13s} seed {seed}: random best "
                    f"{r['default_exact'] / r['best_exact']:.4f}x "
                    f"(first at {r['reached_at']})"]
            for st in columns:
                x = search(g, st, seed, cap, target, (opts or {}).get(st), passes)
                runs.append(x)
                line.append(f"{st} {x['reached_at'] or f'>{cap}'} ({x['wall_s']:.0f} s)")
            print("; ".join(line), flush=True)
            if saved is not None:
                saved()


def summarise(runs: list[dict[str, Any]], cap: int) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for st in ("random", *ALL_COLUMNS):
        per = [r for r in runs if r["strategy"] == st]
        if not per:
            continue
        # A run that never reached the target counts as cap + 1 (a lower bound).
        needed = [r["reached_at"] or cap + 1 for r in per]
        # Per graph and seed, the measurements needed over random's own (the first
        # measurement at which random found its best after `cap`).
        own = {(r["model"], r["seed"]): r["reached_at"] for r in runs
               if r["strategy"] == "random"}
        paired = [(r["reached_at"] or cap + 1) / own[(r["model"], r["seed"])] for r in per
                  if own.get((r["model"], r["seed"]))]
        table[st] = {"measurements": _stats(needed),
                     "ratio_to_random": _stats([n / cap for n in needed]),
                     "ratio_to_randoms_own": _stats(paired) if paired else None,
                     "not_reached": sum(1 for r in per if r["reached_at"] is None),
                     "runs": len(per),
                     "wall_s_per_run": statistics.median(r["wall_s"] for r in per)}
    return table


def section_scheduler(models: list[str], seeds: int, budget: int) -> dict[str, Any]:
    from superopt.xtat.scheduler import create, tune_tasks, workload

    w = workload(models)
    f0 = w.objective({t.key: t.default for t in w.tasks})
    out: dict[str, Any] = {"models": models, "tasks": len(w.tasks), "budget": budget,
                           "per_round": 4, "seeds": seeds, "default_objective": f0,
                           "options": {"alpha": 0.2, "beta": 2.0, "window": 3,
                                       "epsilon": 0.05, "similar": "same unit and fused ops"},
                           "kinds": {}}
    marks = [m for m in (500, 1000, 2000, 4000, budget) if m <= budget]
    curves: dict[str, list[list[float]]] = {}
    for kind in ("round-robin", "gradient"):
        curves[kind] = []
        rows = []
        for seed in range(seeds):
            sched = create(kind, seed=seed) if kind == "gradient" else create(kind)
            steps, states = tune_tasks(w, sched, budget, seed=seed)
            curve = [s.objective for s in steps]
            curves[kind].append(curve)
            configs = {s.task.key: (s.best[0], s.best[1]) if s.best else s.task.default
                       for s in states}
            rows.append({"seed": seed, "final": curve[-1],
                         "at": {str(m): curve[m - 1] for m in marks},
                         "model_times": w.model_times(configs)})
        out["kinds"][kind] = {"runs": rows}
    # Budget to reach 95% of the final gain: each scheduler's own final gain, and the
    # larger of the two (a common target), per seed.
    for kind in curves:
        own, common = [], []
        for seed in range(seeds):
            c = curves[kind][seed]
            best_final = min(curves[k][seed][-1] for k in curves)
            own.append(_reach(c, f0, f0 - c[-1]))
            common.append(_reach(c, f0, f0 - best_final))
        out["kinds"][kind]["to_95pct_own_gain"] = _stats(own)
        out["kinds"][kind]["to_95pct_common_gain"] = _stats(
            [x if x is not None else budget + 1 for x in common])
        out["kinds"][kind]["final_gain"] = _stats([f0 - c[-1] for c in curves[kind]])
        for m in marks:
            out["kinds"][kind][f"gain_at_{m}"] = _stats([f0 - c[m - 1] for c in curves[kind]])
    out["default_model_times"] = w.default_times
    out["curves_median"] = {k: [statistics.median(c[i] for c in v) for i in range(budget)]
                            for k, v in curves.items()}
    out["curves_every"] = 10
    return out


def _reach(curve: list[float], f0: float, gain: float) -> int | None:
    if gain <= 0:
        return 0
    return next((i + 1 for i, f in enumerate(curve) if f0 - f >= 0.95 * gain), None)


def plot_strategies(res: dict[str, Any], out: Path, suffix: str = "",
                    graphs: list[str] | None = None) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for g in graphs or res["graphs"]:
        fig, ax = plt.subplots(figsize=(7, 4))
        for k, st in enumerate(("random", *ALL_COLUMNS)):
            for r in (r for r in res["runs"] if r["model"] == g and r["strategy"] == st
                      and "curve" in r):  # runs read back from the JSON have no curve
                ax.plot(range(1, len(r["curve"]) + 1), r["curve"], color=f"C{k}",
                        alpha=0.6, lw=1, label=st if r["seed"] == 0 else None)
        ax.set_xscale("log")
        ax.set_xlabel("measurements")
        ax.set_ylabel("speedup of the best measured candidate (exact times)")
        ax.set_title(f"{g} ({'+'.join(res['passes'])}): until random's best after "
                     f"{res['cap']} (each seed)")
        ax.legend()
        fig.tight_layout()
        p = out / f"search_{g.replace(':', '')}{suffix}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(str(p))
    return paths


def plot_scheduler(res: dict[str, Any], out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    f0 = res["default_objective"]
    for k, (kind, c) in enumerate(res["curves_median"].items()):
        ax.plot(range(1, len(c) + 1), [f0 - f for f in c], color=f"C{k}", label=kind)
    ax.set_xlabel("measurements")
    ax.set_ylabel("gain in sum of relative model times")
    ax.set_title(f"{len(res['models'])} models, {res['tasks']} kernel tasks "
                 f"(median of {res['seeds']} seeds)")
    ax.legend()
    fig.tight_layout()
    p = out / "search_scheduler.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return str(p)


def _save(out: dict[str, Any], path: str, start: float | None) -> None:
    """Write `out` (with the wall time and load since `start`; None: an added column's
    figures are kept by the caller, the earlier run's are left as they were)."""
    if start is not None:
        out["wall_s"] = time.perf_counter() - start
        out["load_end"] = os.getloadavg()
    clean = json.loads(json.dumps(out, default=float))
    for r in clean.get("strategies", {}).get("runs", []):
        r.pop("curve", None)  # the curves are in the PNGs; the JSON keeps the figures
    Path(path).write_text(json.dumps(clean, indent=1) + "\n")


def section_equal_budget(graphs: list[str], seeds: int, budget: int,
                         columns: tuple[str, ...], passes: tuple[str, ...],
                         opts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each column (random included) run for `budget` measurements with no target: the
    best measured speedup over the default it ends with (median and spread over seeds),
    per graph. Shows whether the fewer measurements buy an equally good result."""
    rows: list[dict[str, Any]] = []
    table: dict[str, dict[str, Any]] = {}
    for g in graphs:
        table[g] = {}
        for col in ("random", *columns):
            got = []
            for seed in range(seeds):
                r = search(g, col, seed, budget, None, opts.get(col), passes)
                got.append(r["default_exact"] / r["best_exact"])
                rows.append({"model": g, "strategy": col, "seed": seed,
                             "speedup": got[-1], "wall_s": r["wall_s"]})
            table[g][col] = _stats(got)
            print(f"  {g:13s} {col:11s} best speedup after {budget}: median "
                  f"{table[g][col]['median']:.4f} [{table[g][col]['q1']:.4f}-"
                  f"{table[g][col]['q3']:.4f}]", flush=True)
    return {"graphs": graphs, "seeds": seeds, "budget": budget, "passes": list(passes),
            "table": table, "runs": rows}


def section_ranking(graph: str, steps: int, changes: int, seed: int = 0) -> dict[str, Any]:
    """The guided search's ranking of a new best, incremental (`guided.Scores`) against a
    full rescoring of every fusion site (`guided.full_ranking`, the strategy before
    it ranked incrementally): a chain of `steps` candidates, each `changes` random fusion
    changes from the last (as a new best differs from the one before), ranked both ways;
    the rankings must be equal. Wall seconds per ranking (the first, which builds every
    row, apart)."""
    import numpy as np

    from superopt.xtat.context import TuneContext
    from superopt.xtat.session import open_session
    from superopt.xtat.strategies.guided import Scores, full_ranking, load_model

    s = open_session({"model": graph, "batch": None if graph.startswith("synthetic:") else 1})
    ctx = TuneContext(s.pipeline, s.default, np.random.default_rng(seed))
    j = s.pipeline.index("fusion")
    model = load_model("")
    scores = Scores(model, ctx, j, s.default.stages[j], {})
    cand = s.default
    inc, full, rescored = [], [], []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        got = scores.rank(cand)
        inc.append(time.perf_counter() - t0)
        rescored.append(scores.rescored[0])
        t0 = time.perf_counter()
        ref = full_ranking(model, ctx, cand, j, {})
        full.append(time.perf_counter() - t0)
        if [(x.key, o) for x, o in got] != [(scores.sites[i].key, o) for i, o, _ in ref]:
            raise SystemExit(f"{graph}: the incremental ranking differs from a full rescoring")
        cand = ctx.mutate(cand, ["fusion"], changes)
    out = {"graph": graph, "sites": len(scores.sites), "rows": len(scores.X),
           "steps": steps, "changes": changes, "first_s": inc[0],
           "incremental_s": _stats(inc[1:]), "full_s": _stats(full[1:]),
           "sites_rescored": _stats([float(x) for x in rescored[1:]]),
           "load": os.getloadavg()}
    print(f"  ranking {graph} ({out['sites']} sites): incremental median "
          f"{out['incremental_s']['median']:.3f} s (first {inc[0]:.1f} s), full rescoring "
          f"{out['full_s']['median']:.2f} s, sites rescored median "
          f"{out['sites_rescored']['median']:.0f}; equal rankings", flush=True)
    return out


def tabulate(res: dict[str, Any], cap: int) -> None:
    """The table over all graphs and one per graph."""
    runs = res["runs"]
    res["table"] = summarise(runs, cap)
    res["per_graph"] = {g: summarise([r for r in runs if r["model"] == g], cap)
                        for g in res["graphs"]}


def print_table(res: dict[str, Any]) -> None:
    for title, table in [("all graphs", res["table"]), *res["per_graph"].items()]:
        # /cap: measurements over random's budget; /random: over the measurements random
        # itself needed to first reach its best (paired by graph and seed), the medians.
        print(f"  {title}: {'strategy':11s} {'median':>7s} {'IQR':>13s} {'min-max':>11s} "
              f"{'/cap':>6s} {'/random':>8s} {'missed':>6s}")
        for st, v in table.items():
            m = v["measurements"]
            own = v.get("ratio_to_randoms_own") or {"median": math.nan}
            print(f"  {'':{len(title)}s}  {st:11s} {m['median']:7.0f} "
                  f"{m['q1']:6.0f}-{m['q3']:<6.0f} {m['min']:5.0f}-{m['max']:<5.0f} "
                  f"{v['ratio_to_random']['median']:6.3f} {own['median']:8.3f} "
                  f"{v['not_reached']:>3d}/{v['runs']}")


def section_advantage(path: str) -> dict[str, Any]:
    """Train the advantage model on the training graphs (flips cached under
    `ADVANTAGE_CACHE`) and check it on flips of the held-out graphs (collected for the
    check only, with another seed): rank correlation of predicted and true labels, and
    how many of the top 5% predicted flips are faster, against the share of all."""
    import numpy as np
    from scipy.stats import spearmanr

    from superopt.xtat.advantage import SHIPPED, graph_sigma, label
    from superopt.xtat.advantage_data import TRAIN_GRAPHS, collect, train

    load = os.getloadavg()
    t = train(cache=ADVANTAGE_CACHE)
    target = path or str(SHIPPED)
    t.model.save(target)
    held: dict[str, Any] = {}
    for g in HELD_OUT:
        f = collect(g, seed=100, chains=3, steps=200, cache=ADVANTAGE_CACHE / "check")
        p = t.model.predict(f.X)
        top = np.argsort(-p, kind="stable")[:max(1, len(p) // 20)]
        held[g] = {"flips": len(f), "spearman": float(spearmanr(
            p, label(f.a, graph_sigma(f.a))).statistic),
            "faster_share_top5pct": float(np.mean(f.a[top] > 0)),
            "faster_share_all": float(np.mean(f.a > 0))}
        print(f"  advantage model on {g}: {len(f)} flips, rank correlation "
              f"{held[g]['spearman']:.2f}, faster among the top 5% predicted "
              f"{held[g]['faster_share_top5pct']:.2f} (of all {held[g]['faster_share_all']:.2f})",
              flush=True)
    out = {"train_graphs": list(TRAIN_GRAPHS), "rows": t.rows, "per_graph": t.per_graph,
           "sigma": t.sigma, "collect_s": t.collect_s, "fit_s": t.fit_s, "model": target,
           "model_bytes": Path(target).stat().st_size, "load_start": load,
           "load_end": os.getloadavg(), "held_out_check": held}
    print(f"advantage model: {t.rows} flips from {', '.join(TRAIN_GRAPHS)}, collected in "
          f"{t.collect_s:.0f} s, fitted in {t.fit_s:.1f} s -> {target}", flush=True)
    return out


def main_only(a: argparse.Namespace, graphs: list[str], only: tuple[str, ...],
              opts: dict[str, dict[str, Any]], advantage: dict[str, Any] | None,
              passes: tuple[str, ...]) -> int:
    """Run the `only` columns (and random) on `graphs` and merge them into `a.out`."""
    start = time.perf_counter()
    load = os.getloadavg()
    out = json.loads(Path(a.out).read_text())
    res = out["strategies"]
    if res["cap"] != a.cap or tuple(res["passes"]) != passes:
        raise SystemExit(f"{a.out} was run with --cap {res['cap']} --passes "
                         f"{','.join(res['passes'])}, not {a.cap} {','.join(passes)}")
    cached = {(r["model"], r["seed"]): r["best"] for r in res["runs"]
              if r["strategy"] == "random"}
    redo = {"random", *only}
    runs = [r for r in res["runs"] if not (r["model"] in graphs and r["strategy"] in redo
                                           and r["seed"] < a.seeds)]
    res["runs"] = runs
    res["graphs"] = list(dict.fromkeys([*res["graphs"], *graphs]))
    if advantage is not None:
        out["advantage"] = advantage
    print(f"columns {', '.join(only)} on {', '.join(graphs)}, {a.seeds} seeds, target: "
          f"random's best after {a.cap} (checked against {a.out})", flush=True)
    for g in graphs:
        section_strategies([g], a.seeds, a.cap, runs, only, opts, cached, passes)
        tabulate(res, a.cap)
        res.setdefault("added", {}).update({c: {
            "graphs": sorted({r["model"] for r in runs if r["strategy"] == c}),
            "wall_s": time.perf_counter() - start, "load_start": load,
            "load_end": os.getloadavg()} for c in only})
        _save(out, a.out, None)
    print_table(res)
    res["added_png"] = plot_strategies(res, Path(a.out).parent, "_" + "_".join(only), graphs)
    _save(out, a.out, None)
    print(f"merged into {a.out} ({time.perf_counter() - start:.0f} s, load {load[0]:.1f} -> "
          f"{os.getloadavg()[0]:.1f})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphs", default=",".join(GRAPHS))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--cap", type=int, default=2000)
    ap.add_argument("--sched-budget", type=int, default=4000)
    ap.add_argument("--quick", action="store_true", help="1 graph, 2 seeds, cap 300")
    ap.add_argument("--skip", default="", help="sections to skip: strategies,scheduler")
    ap.add_argument("--out", default=str(RESULTS / "search.json"))
    ap.add_argument("--only", default="",
                    help="run only these strategy columns (and random again, which must "
                         "find the cached best) and merge them into --out's runs")
    ap.add_argument("--train-advantage", action="store_true",
                    help="collect flips on the training graphs, fit the advantage model "
                         "and save it to --advantage-model (first)")
    ap.add_argument("--passes", default=",".join(PASSES),
                    help="the tuned passes (fusion alone: the local-advantage paper's setting)")
    ap.add_argument("--columns", default=",".join(STRATEGIES),
                    help="the strategy columns to run besides random")
    ap.add_argument("--equal-budget", type=int, default=0,
                    help="also run every column for this many measurements with no "
                         "target and report the best speedups (0: skip)")
    ap.add_argument("--ranking", type=int, default=0,
                    help="time this many re-rankings of the first graph's fusion sites, "
                         "incremental against full, and check they agree (0: skip); with "
                         "--skip strategies,scheduler and an existing --out, merged into it")
    ap.add_argument("--advantage-model", default="",
                    help="the guided columns' model (default: the shipped one)")
    a = ap.parse_args(argv)
    if a.seeds < 1 or a.cap < 10 or a.sched_budget < 10:
        ap.error("--seeds >= 1, --cap >= 10 and --sched-budget >= 10")
    only = tuple(c for c in a.only.split(",") if c)
    columns = tuple(c for c in a.columns.split(",") if c)
    passes = tuple(p for p in a.passes.split(",") if p)
    bad = [c for c in only + columns if c not in ALL_COLUMNS]
    if bad:
        ap.error(f"unknown column {bad[0]!r}: expected some of {', '.join(ALL_COLUMNS)}")
    if only and not Path(a.out).is_file():
        ap.error(f"--only merges into an earlier run's {a.out}, which does not exist")
    graphs = [g for g in a.graphs.split(",") if g]
    if a.quick:
        graphs, a.seeds, a.cap, a.sched_budget = graphs[:1], 2, 300, 1000
    skip = set(a.skip.split(","))
    out: dict[str, Any] = {"machine": platform.machine(), "cpus": os.cpu_count(),
                           "python": platform.python_version(), "quick": a.quick,
                           "load_start": os.getloadavg()}
    start = time.perf_counter()
    if a.train_advantage:
        out["advantage"] = section_advantage(a.advantage_model)
    opts = {c: {"model": a.advantage_model} for c in ("guided",) if a.advantage_model}
    if only:  # merged into the earlier run's file, which must not be replaced first
        return main_only(a, graphs, only, opts, out.get("advantage"), passes)
    if a.train_advantage:
        _save(out, a.out, start)
    if a.ranking:
        print(f"ranking: {graphs[0]}, {a.ranking} new bests of 2 fusion changes", flush=True)
        ranking = section_ranking(graphs[0], a.ranking, 2)
        if {"strategies", "scheduler"} <= skip and Path(a.out).is_file():
            earlier = json.loads(Path(a.out).read_text())
            earlier["ranking"] = ranking
            Path(a.out).write_text(json.dumps(earlier, indent=1) + "\n")
            print(f"merged into {a.out}")
            return 0
        out["ranking"] = ranking
    if "scheduler" not in skip:
        print(f"scheduler: {', '.join(WORKLOAD)}, {a.sched_budget} measurements", flush=True)
        sched = section_scheduler(list(WORKLOAD), a.seeds, a.sched_budget)
        for kind, v in sched["kinds"].items():
            print(f"  {kind:12s} final gain {v['final_gain']['median']:.4f}  95% of own "
                  f"gain at {v['to_95pct_own_gain']['median']:.0f}, of the larger at "
                  f"{v['to_95pct_common_gain']['median']:.0f} measurements; "
                  + ", ".join(f"{k[8:]}: {s['median']:.4f}" for k, s in v.items()
                              if k.startswith("gain_at_")), flush=True)
        sched["png"] = plot_scheduler(sched, Path(a.out).parent)
        sched["curves_median"] = {k: v[9::10] for k, v in sched["curves_median"].items()}
        out["scheduler"] = sched
        if "strategies" in skip and Path(a.out).is_file():
            # The scheduler alone replaces that section of an earlier run's file.
            earlier = json.loads(Path(a.out).read_text())
            sched["wall_s"] = time.perf_counter() - start
            sched["load"] = [out["load_start"], os.getloadavg()]
            earlier["scheduler"] = json.loads(json.dumps(sched, default=float))
            Path(a.out).write_text(json.dumps(earlier, indent=1) + "\n")
            print(f"merged the scheduler section into {a.out}")
            return 0
    if "strategies" not in skip:
        print(f"strategies on {', '.join(graphs)} ({'+'.join(passes)}), {a.seeds} seeds, "
              f"target: random's best after {a.cap}", flush=True)
        runs: list[dict[str, Any]] = []
        res: dict[str, Any] = {"graphs": graphs, "seeds": a.seeds, "cap": a.cap,
                               "passes": list(passes), "columns": list(columns), "runs": runs}
        out["strategies"] = res
        def saved() -> None:  # a long run killed midway keeps the seeds it finished
            tabulate(res, a.cap)
            res["done"] = sorted({r["model"] for r in runs})
            _save(out, a.out, start)

        for g in graphs:
            section_strategies([g], a.seeds, a.cap, runs, columns, opts, None, passes, saved)
        print_table(res)
        # Another pass set than the default draws beside the default's curves, not over.
        res["png"] = plot_strategies(res, Path(a.out).parent,
                                     "" if passes == PASSES else "_" + "+".join(passes))
    if a.equal_budget:
        print(f"equal budget: {a.equal_budget} measurements, {a.seeds} seeds", flush=True)
        out["equal_budget"] = section_equal_budget(graphs, a.seeds, a.equal_budget,
                                                   columns, passes, opts)
    _save(out, a.out, start)
    print(f"wrote {a.out} ({out['wall_s']:.0f} s, load {out['load_start'][0]:.1f} -> "
          f"{out['load_end'][0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
