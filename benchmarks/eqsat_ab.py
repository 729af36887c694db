"""Benchmark: two versions of the eqsat search side by side (an A/B of a code change).

Each variant is a source tree (`--variant NAME=SRC_DIR`, e.g. a `git worktree` of the
commit before the change, and `src`). Per zoo model, each variant runs `eqsat_optimize`
(ILP extraction, default options, `--workers` processes) in a fresh interpreter with its
tree first on the path; the order of the variants alternates from model to model, so that
a drift in the machine's load falls on both. Recorded per model and variant: the result's
simulated time (TPU v4 default compiler, weights folded), search time, the rules its graph
uses, and q = the backtracking search's simulated time / this one's (>= 1: at least as
fast), from `--backtracking-from` (a `benchmarks/eqsat.py --phase backtracking` JSON of
the same machine).

The local moves stop at a wall-clock limit, so one model's outcome depends on how many
moves fit; judge a change across every model, not one.

`--ilp-only` compares the extraction ILP alone: per model, each variant saturates the
e-graph (default options) and solves each proxy's extraction (`_ilp_solve`, one process,
HiGHS on one thread), recording each solve's time, status and optimum (the extracted
classes' summed proxy cost), and whether the variants reach the same optima.

Run: `.venv/bin/python benchmarks/eqsat_ab.py --variant before=/tmp/wt/src
--variant after=src [--models a,b] [--workers 1] --out benchmarks/results/X.json`. The JSON
is rewritten after every model; `--resume` keeps its models and runs the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_CHILD = """
import json, sys
from superopt import zoo
from superopt.rewrite import Matcher, load_rules
from superopt.rewrite.cost import SimCost
from superopt.rewrite.eqsat import EqsatOptions, eqsat_optimize

g = zoo.build(sys.argv[1])
rules, _ = load_rules(None)
sim = SimCost()
r = eqsat_optimize(g, Matcher(rules), sim, EqsatOptions(workers=int(sys.argv[2])))
if getattr(r, "interrupted", False):  # Ctrl-C in its local moves: not a finished search
    sys.exit(130)
print(json.dumps({"sim_s": sim.cost(r.graph), "search_s": r.seconds,
                  "saturate_s": r.saturate_s, "refine_moves": r.refine_moves,
                  "status": r.ilp_status, "used": dict(r.used)}))
"""


_ILP_CHILD = """
import json, math, sys, time
from superopt import zoo
from superopt.rewrite import Matcher, load_rules
from superopt.rewrite import eqsat as E
from superopt.rewrite.cost import SimCost
from superopt.substitutions.egraph import EGraph

g = zoo.build(sys.argv[1])
rules, _ = load_rules(None)
opts = E.EqsatOptions()
eg = EGraph(max_nodes=opts.node_limit)
ld = E._load(g, eg)
eg.deadline = time.perf_counter() + opts.time_limit
E._saturate(eg, E._directions(Matcher(rules)), opts, {})
roots = [eg.find(r) for r in ld.roots]
out, first = {}, {}
for ext in E._extraction_costs(SimCost()):
    sp = E._space(ld, g, ext, E.TIE_S, like=first.get(ext.fold))
    first.setdefault(ext.fold, sp)
    t = time.perf_counter()
    pick, status = E._ilp_solve(sp, roots, opts.ilp_time_limit)
    s = time.perf_counter() - t
    obj = math.fsum(sp.cost[pick[c]] for c in E._reached(sp, roots, pick)) if pick else None
    out[ext.name] = {"ilp_s": s, "status": status, "optimum_s": obj}
print(json.dumps({"enodes": len(eg), "proxies": out,
                  "ilp_s": sum(v["ilp_s"] for v in out.values())}))
"""


def run_one(src: str, model: str, workers: int, ilp_only: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    child = _ILP_CHILD if ilp_only else _CHILD
    out = subprocess.run([sys.executable, "-c", child, model, str(workers)], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"{model} with {src}: the search failed: {last}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from superopt import zoo

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=SRC_DIR")
    ap.add_argument("--models", default=",".join(zoo.names()))
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--backtracking-from",
                    default="benchmarks/results/eqsat_backtracking.json")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ilp-only", action="store_true",
                    help="time the proxies' extraction ILPs alone (module docstring)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the models --out already has (same variants) and run the rest")
    args = ap.parse_args()
    variants: list[tuple[str, str]] = []
    for v in args.variant:
        name, sep, src = v.partition("=")
        if not sep or not Path(src, "superopt").is_dir():
            ap.error(f"--variant {v!r}: expected NAME=SRC_DIR with a superopt package in it")
        variants.append((name, src))
    if not Path(args.out).parent.is_dir():
        ap.error(f"--out {args.out}: folder {Path(args.out).parent} does not exist")
    bt = {} if args.ilp_only else {
        r["model"]: r["backtracking"]["sim_s"]
        for r in json.loads(Path(args.backtracking_from).read_text())["models"]}
    rows: list[dict] = []
    if args.resume and Path(args.out).exists():
        prior = json.loads(Path(args.out).read_text())
        if prior.get("variants") != dict(variants):
            raise SystemExit(f"{args.out}: its variants {prior.get('variants')} are not "
                             f"{dict(variants)}; nothing resumed")
        rows = [r for r in prior["models"] if r["model"] in args.models.split(",")]
    t0 = time.perf_counter()
    for k, model in enumerate(args.models.split(",")):
        if any(r["model"] == model for r in rows):
            continue
        if not args.ilp_only and model not in bt:
            raise SystemExit(f"{model}: no backtracking row in {args.backtracking_from}")
        row: dict = {"model": model, "order": []}
        if not args.ilp_only:
            row["backtracking_sim_s"] = bt[model]
        for name, src in (variants if k % 2 == 0 else variants[::-1]):
            got = run_one(src, model, args.workers, args.ilp_only)
            if not args.ilp_only:
                got["q"] = bt[model] / got["sim_s"]
            row[name] = got
            row["order"].append(name)
        rows.append(row)
        summary = _ilp_summary(rows, variants) if args.ilp_only else {
            n: {"at_least_backtracking": sum(r[n]["q"] >= 1 for r in rows),
                "behind": {r["model"]: r[n]["q"] for r in rows if r[n]["q"] < 1},
                "search_s": sum(r[n]["search_s"] for r in rows)}
            for n, _ in variants}
        print(f"{model}: " + ", ".join(
            f"{n} {row[n]['ilp_s']:.2f} s of ILP" if args.ilp_only else
            f"{n} q={row[n]['q']:.7f} {row[n]['search_s']:.1f} s" for n, _ in variants),
            flush=True)
        Path(args.out).write_text(json.dumps({
            "what": __doc__.split("\n")[0], "variants": dict(variants),
            "workers": args.workers, "ilp_only": args.ilp_only, "note": args.note,
            "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                        "affinity": sorted(os.sched_getaffinity(0))},
            "wall_s": time.perf_counter() - t0, "summary": summary, "models": rows},
            indent=1) + "\n")


def _ilp_summary(rows: list[dict], variants: list[tuple[str, str]]) -> dict:
    """Per variant, ILP seconds in all; and the (model, proxy) solves whose optima differ
    between the variants by more than 1e-9 of the optimum, or whose status is not
    "optimal" in some variant."""
    names = [n for n, _ in variants]
    differ, not_optimal = [], []
    for r in rows:
        for proxy in r[names[0]]["proxies"]:
            vals = [r[n]["proxies"][proxy]["optimum_s"] for n in names]
            if any(v is None for v in vals) or max(vals) - min(vals) > 1e-9 * max(vals):
                differ.append(f"{r['model']} | {proxy}")
            if any(r[n]["proxies"][proxy]["status"] != "optimal" for n in names):
                not_optimal.append(f"{r['model']} | {proxy}")
    return {"ilp_s": {n: sum(r[n]["ilp_s"] for r in rows) for n in names},
            "solves": sum(len(r[names[0]]["proxies"]) for r in rows),
            "optima_differ": differ, "not_optimal": not_optimal}


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        # The JSON holds every model finished before the interrupt.
        raise SystemExit("interrupted; the models finished so far are in --out "
                         "(--resume runs the rest)") from None
