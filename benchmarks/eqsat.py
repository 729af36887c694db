"""Benchmark: equality saturation (Tensat) against TASO's backtracking search, same rules.

Per zoo model: the input's and each search's result's simulated time (TPU v4 simulator,
default compiler, weight-only computations folded) and FLOPs, and each search's wall time:
backtracking (`superopt.rewrite.optimize`, sim cost, budget 40, 300 s limit, as
`benchmarks/optimize.py` ran it), eqsat with greedy extraction and with ILP extraction
(`superopt.rewrite.eqsat`, defaults: 50,000 e-nodes, 60 s saturation, 6 iterations,
backoff scheduling, 20 s of simulator-priced local moves after extraction, the four
proxies' ILP solves and the moves' climbs side by side on the cores it may use).
Both searches use the verified starter library and the sim cost. The eqsat graphs' values
are checked against the input with the reference interpreter. Each eqsat row also keeps
its anytime curve (`progress`: when its best graph improved, and to what cost) and when it
first held a graph at least as fast as backtracking's (`reached_backtracking_s`).

Tensat's anchor (Yang et al., MLSys 2021): up to 16% better graphs than TASO's search and
48x faster search on average. The goal here: eqsat's graph at least as fast as
backtracking's on every model, in at most 0.1x its search time on the largest models.

Run: `.venv/bin/python benchmarks/eqsat.py [--models a,b] [--budget 40] [--time-limit 300]
[--out benchmarks/results/eqsat.json]`. The two searches can run as two phases (the
backtracking search does not depend on the eqsat code): `--phase backtracking --out BT.json`
writes the backtracking rows, `--phase eqsat --backtracking-from BT.json` adds the eqsat
columns to them; the JSON is rewritten after every model, so a cut-off run keeps its rows.

`--hf FAMILIES` (or `--hf published`) runs the same rows on users' files instead of the
zoo: each `transformers` family at its published size (`superopt.importers.hf.PUBLISHED`)
as torch's ONNX exporter writes it (made once in `--workdir`), imported as `superopt
optimize FILE.onnx` does. Rows are named `hf:FAMILY`; the default output is
`results/eqsat_hf.json`.

`--hf-small FAMILIES` (or `--hf-small all`) runs them on every `transformers` family the
importer knows (`superopt.importers.hf.FAMILIES`: decoders such as Llama, Mistral, Qwen2,
Phi and Gemma, encoders, vision and audio models) at the small configs `superopt optimize
hf:FAMILY` builds, captured from torch as that command does. Rows are named
`hf-small:FAMILY`; the default output is `results/eqsat_hf_small.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _measure(graph, sim) -> tuple[float, float]:
    """(simulated time, FLOPs) of a graph as it runs: weight-only parts folded."""
    from superopt.rewrite.fold import fold_weights

    folded = fold_weights(graph, evaluate=False).graph
    flops, _ = sim.simulator.graph_totals(folded)
    return sim.cost(graph), float(flops)


def bench_model(name: str, args: argparse.Namespace, bt_row: dict | None = None) -> dict:
    """One model's row; `bt_row`: its backtracking columns measured by an earlier phase."""
    from superopt.interrupts import finished
    from superopt.ir.memory import MemoryLimitError
    from superopt.rewrite import Matcher, load_rules, optimize
    from superopt.rewrite.check import check_values
    from superopt.rewrite.cost import SimCost
    from superopt.rewrite.eqsat import EqsatOptions, eqsat_optimize

    g = _load(name, args)
    rules, _ = load_rules(None)
    matcher = Matcher(rules)
    sim = SimCost()
    t_in, f_in = _measure(g, sim)
    row: dict = {"model": name, "nodes": len(g), "sim_input_s": t_in, "flops_input": f_in}
    if bt_row is not None:
        if abs(bt_row["sim_input_s"] - t_in) > 1e-12 * max(t_in, 1.0):
            raise SystemExit(f"{name}: the input's simulated time changed since the "
                             "backtracking phase; re-run it")
        row["backtracking"] = bt_row["backtracking"]
    else:
        # On Ctrl-C the search hands back its best graph: not a finished search's row.
        bt = finished(optimize(g, matcher, SimCost(), budget=args.budget,
                               time_limit=args.time_limit))
        t, f = _measure(bt.graph, sim)
        row["backtracking"] = {"sim_s": t, "flops": f, "search_s": bt.seconds,
                               "expanded": bt.expanded, "stopped": bt.stopped,
                               "applied": dict(bt.applied)}
    if args.phase == "backtracking":
        return row
    for ext in ("greedy", "ilp"):
        # Ctrl-C in its local moves hands back their best so far: not a finished row.
        r = finished(eqsat_optimize(g, matcher, SimCost(), EqsatOptions(extraction=ext)))
        t, f = _measure(r.graph, sim)
        try:
            check = check_values(g, r.graph)
            ok, err, said = check.ok, check.max_rel_err, check.summary()
        except MemoryLimitError as e:
            # Not a pass: the row says the values went unchecked, and why.
            ok, err, said = None, math.nan, f"not checked: {e}"
        row[f"eqsat_{ext}"] = {
            "sim_s": t, "flops": f, "search_s": r.seconds, "saturate_s": r.saturate_s,
            "extract_s": r.extract_s, "enodes": r.enodes, "eclasses": r.eclasses,
            "iterations": r.iterations, "stopped": r.stopped, "ilp_status": r.ilp_status,
            "extraction_cost": r.extraction_cost, "kept_input": r.kept_input,
            "refine_moves": r.refine_moves, "refine_ends": list(r.refine_ends),
            "workers": r.workers, "used": dict(r.used),
            "values_ok": ok, "max_rel_err": err, "values": said,
            "progress": [list(p) for p in r.progress],
            "reached_backtracking_s": _reached(r.progress, row["backtracking"]["sim_s"])}
    return row


def _load(name: str, args: argparse.Namespace) -> Any:
    """A zoo model, or for `hf:FAMILY` the family's published-size model as torch's ONNX
    exporter writes it (made once in the work folder), imported from that file."""
    from superopt import api, zoo

    if name.startswith("hf-small:"):
        return api.load(f"hf:{name.split(':', 1)[1]}")
    if not name.startswith("hf:"):
        return zoo.build(name)
    from superopt.importers.hf import published_onnx

    return api.load(str(published_onnx(name[3:], args.workdir)))


def _reached(progress: tuple[tuple[float, float], ...], target: float) -> float | None:
    """When the search's best graph first cost at most `target` (backtracking's result;
    the same sim cost, 1e-9 relative for the pricing's folded build), or None."""
    return next((at for at, cost in progress if cost <= target * (1 + 1e-9)), None)


def _table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="eqsat vs backtracking (starter rules, sim cost; speedup = input sim "
                    "time / result's)")
    cols = ["model", "nodes", "bt x", "greedy x", "ilp x", "ilp/bt", "GFLOP in/bt/ilp",
            "bt s", "greedy s", "ilp s", "ilp s / bt s", "ilp at bt's", "e-nodes", "stop",
            "values"]
    for c in cols:
        t.add_column(c, justify="left" if c == "model" else "right")
    for r in rows:
        bt, gr, il = r["backtracking"], r["eqsat_greedy"], r["eqsat_ilp"]
        t.add_row(r["model"], str(r["nodes"]), f"{r['sim_input_s'] / bt['sim_s']:.3f}",
                  f"{r['sim_input_s'] / gr['sim_s']:.3f}", f"{r['sim_input_s'] / il['sim_s']:.3f}",
                  f"{bt['sim_s'] / il['sim_s']:.3f}",
                  f"{r['flops_input'] / 1e9:.2f}/{bt['flops'] / 1e9:.2f}/{il['flops'] / 1e9:.2f}",
                  f"{bt['search_s']:.1f}", f"{gr['search_s']:.1f}", f"{il['search_s']:.1f}",
                  f"{il['search_s'] / bt['search_s']:.3f}",
                  "-" if il.get("reached_backtracking_s") is None
                  else f"{il['reached_backtracking_s']:.1f} s", str(il["enodes"]), il["stopped"],
                  "ok" if gr["values_ok"] and il["values_ok"] else "DIFFER")
    Console(width=200).print(t)


def _summary(rows: list[dict]) -> dict:
    ilp_vs_bt = [r["backtracking"]["sim_s"] / r["eqsat_ilp"]["sim_s"] for r in rows]
    largest = sorted(rows, key=lambda r: -r["nodes"])[:3]
    return {
        "models": len(rows),
        "ilp_at_least_backtracking": sum(x >= 1 - 1e-9 for x in ilp_vs_bt),
        "ilp_behind": {r["model"]: x for r, x in zip(rows, ilp_vs_bt, strict=True)
                       if x < 1 - 1e-9},
        "ilp_vs_backtracking_min": min(ilp_vs_bt), "ilp_vs_backtracking_max": max(ilp_vs_bt),
        "largest_models": [r["model"] for r in largest],
        "largest_search_time_ratios": {
            r["model"]: r["eqsat_ilp"]["search_s"] / r["backtracking"]["search_s"]
            for r in largest},
        # Not the goal's figure (the search runs on to its own end), but when it first
        # held a graph at least as fast as backtracking's: the rest is its local moves'
        # fixed time budget (`refine_limit`) spent improving on that.
        "largest_reached_backtracking_ratios": {
            r["model"]: (None if r["eqsat_ilp"].get("reached_backtracking_s") is None else
                         r["eqsat_ilp"]["reached_backtracking_s"]
                         / r["backtracking"]["search_s"])
            for r in largest},
        "total_backtracking_s": sum(r["backtracking"]["search_s"] for r in rows),
        "total_ilp_s": sum(r["eqsat_ilp"]["search_s"] for r in rows),
        "total_greedy_s": sum(r["eqsat_greedy"]["search_s"] for r in rows),
    }


def main() -> None:
    from superopt import zoo
    from superopt.rewrite.eqsat import _cores

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(zoo.names()))
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--phase", choices=("all", "backtracking", "eqsat"), default="all",
                    help="backtracking: only the backtracking rows; eqsat: needs "
                         "--backtracking-from")
    ap.add_argument("--backtracking-from", default=None,
                    help="a --phase backtracking JSON whose rows to reuse")
    ap.add_argument("--note", default="", help="how the run was measured (load, phases)")
    ap.add_argument("--hf", default=None, metavar="FAMILIES",
                    help="users' files instead of the zoo: these transformers families at "
                         "their published sizes, as torch's ONNX exporter writes them "
                         "('published': every family with one)")
    ap.add_argument("--hf-small", default=None, metavar="FAMILIES",
                    help="every transformers family the importer knows ('all') or these, "
                         "at the small configs `optimize hf:FAMILY` builds")
    ap.add_argument("--workdir", default="/tmp/superopt_eqsat_hf",
                    help="where --hf writes the files (made once, then reused)")
    ap.add_argument("--out", default=None,
                    help="default: results/eqsat.json, with --hf results/eqsat_hf.json")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows --out already has and run only the other models")
    args = ap.parse_args()
    if args.hf is not None:
        from superopt.importers.hf import published_families

        try:
            args.models = ",".join(f"hf:{f}" for f in published_families(args.hf))
        except ValueError as e:
            ap.error(f"--hf: {e}")
    if args.hf_small is not None:
        from superopt.importers.hf import FAMILIES

        if args.hf is not None:
            ap.error("--hf and --hf-small: choose one")
        names = list(FAMILIES) if args.hf_small == "all" else \
            [n for n in args.hf_small.split(",") if n]
        unknown = [n for n in names if n not in FAMILIES]
        if unknown or not names:
            ap.error(f"--hf-small: unknown families {', '.join(map(repr, unknown))}; known: "
                     f"{', '.join(FAMILIES)}")
        args.models = ",".join(f"hf-small:{n}" for n in names)
    if args.out is None:
        args.out = ("benchmarks/results/eqsat_hf.json" if args.hf is not None
                    else "benchmarks/results/eqsat_hf_small.json" if args.hf_small is not None
                    else "benchmarks/results/eqsat.json")
    bt_rows: dict[str, dict] = {}
    if args.backtracking_from:
        prior = json.loads(Path(args.backtracking_from).read_text())
        bt_rows = {r["model"]: r for r in prior["models"]}
    elif args.phase == "eqsat":
        ap.error("--phase eqsat needs --backtracking-from")
    rows: list[dict] = []
    t0 = time.perf_counter()
    if args.resume and Path(args.out).exists():
        rows = [r for r in json.loads(Path(args.out).read_text())["models"]
                if r["model"] in args.models.split(",")]
    for name in args.models.split(","):
        if any(r["model"] == name for r in rows):
            continue
        if args.backtracking_from and name not in bt_rows:
            print(f"{name}: no backtracking row in {args.backtracking_from}; skipped")
            continue
        try:
            rows.append(bench_model(name, args, bt_rows.get(name)))
        except KeyboardInterrupt:
            print(f"interrupted in {name}: {len(rows)} rows kept in {args.out}; --resume "
                  "goes on from there", file=sys.stderr)
            raise SystemExit(130) from None
        r = rows[-1]
        line = (f"{name}: bt {r['backtracking']['sim_s'] * 1e6:.1f} us in "
                f"{r['backtracking']['search_s']:.1f} s")
        if "eqsat_ilp" in r:
            line += (f", ilp {r['eqsat_ilp']['sim_s'] * 1e6:.1f} us in "
                     f"{r['eqsat_ilp']['search_s']:.1f} s")
        print(line, flush=True)
        doc = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                           "cores": _cores()},
               "settings": vars(args), "note": args.note,
               "wall_s": time.perf_counter() - t0,
               "summary": _summary(rows) if args.phase != "backtracking" else {},
               "models": rows}
        if args.backtracking_from:
            doc["backtracking_phase"] = {k: prior.get(k) for k in ("settings", "note", "wall_s")}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    if args.phase != "backtracking" and rows:
        _table(rows)
        print(json.dumps(_summary(rows), indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
