"""Benchmark: the rewrite engine and TASO's optimizer on zoo models, and matching at scale.

Per model (ResNet-50, ResNeXt-50, Inception-v3, SqueezeNet, NASNet-A, BERT-base): sites of
the starter library in the input (per rule), rules applied by the search, the search cost
before and after, the TPU simulator's default-compiled time before and after, the torch CPU
time before and after from one interleaved side-by-side run (the ratio is the median of
per-round ratios, with a bootstrap 95% confidence interval; the input graph is timed a
second time in the same loop as an A/A control, whose ratio shows the noise floor), the
value check against the reference
interpreter, and the search time. Then the time to match the whole starter library on
synthetic graphs of up to 100,000 nodes (`superopt.tpu_sim.synthetic`).

Run: `.venv/bin/python benchmarks/optimize.py [--models a,b] [--cost torch|sim|flops]
[--budget N] [--repeats N] [--threads N] [--cost-db FILE] [--nodes 10000,100000]
[--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

MODELS = ("resnet50", "resnext50", "inception_v3", "squeezenet", "nasnet_a", "bert-base")


def bench_model(name: str, args: argparse.Namespace, matcher, cost) -> dict:
    from superopt.importers import load_model
    from superopt.interrupts import finished
    from superopt.rewrite import fold_weights, optimize
    from superopt.rewrite.check import check_values, time_side_by_side
    from superopt.rewrite.cost import SimCost
    from superopt.rewrite.fold import runtime_ops

    g = load_model(name)
    t0 = time.perf_counter()
    sites = matcher.match(g)
    match_s = time.perf_counter() - t0
    r = finished(optimize(g, matcher, cost, alpha=args.alpha, budget=args.budget,
                          time_limit=args.time_limit))
    final = fold_weights(r.graph).graph
    sim = SimCost()
    sim_before, sim_after = sim.cost(g), sim.cost(final)
    check = check_values(g, final)
    # The input graph twice (an A/A control): what "faster" looks like when nothing
    # changed, i.e. the noise floor of this run on this machine.
    timing = time_side_by_side([g, final, g], repeats=args.repeats, warmup=args.warmup,
                               threads=args.threads or None)
    ratios = timing.ratios(0, 1)
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return {
        "model": name, "nodes": len(g), "runtime_ops_before": runtime_ops(g),
        "runtime_ops_after": runtime_ops(final), "nodes_after": len(final),
        "sites": {k: v for k, v in sites.per_rule.items() if v}, "sites_total": len(sites),
        "match_s": match_s, "applied": dict(r.applied), "applied_total": sum(r.applied.values()),
        "steps": len(r.steps), "cost": r.cost_name, "cost_before": r.cost_before,
        "cost_after": r.cost_after, "sim_before_s": sim_before, "sim_after_s": sim_after,
        "torch_before_s": timing.medians[0], "torch_after_s": timing.medians[1],
        "torch_ratio": timing.ratio(), "torch_ratio_iqr": [q1, q3],
        "torch_ratio_ci95": list(timing.ratio_ci(0, 1)),
        "aa_ratio": timing.ratio(0, 2), "aa_ratio_ci95": list(timing.ratio_ci(0, 2)),
        "torch_threads": timing.threads, "torch_repeats": args.repeats,
        "values_ok": check.ok, "max_rel_err": check.max_rel_err,
        "search_s": r.seconds, "expanded": r.expanded, "evaluated": r.evaluated,
        "stopped": r.stopped,
    }


def bench_matching(sizes: list[int], matcher) -> list[dict]:
    from superopt.tpu_sim.synthetic import synthetic_graph

    out = []
    for n in sizes:
        t0 = time.perf_counter()
        g = synthetic_graph(n, seed=0)
        build_s = time.perf_counter() - t0
        m = matcher.match(g)
        out.append({"nodes": len(g), "build_s": build_s, "match_s": m.seconds,
                    "sites": len(m), "per_rule": {k: v for k, v in m.per_rule.items() if v},
                    "us_per_node": 1e6 * m.seconds / len(g)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--cost", default="torch", choices=("torch", "sim", "flops"))
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads for the torch cost and the timing (0: torch's "
                         "default, all cores; 1 is steadier on a shared machine)")
    ap.add_argument("--cost-db", default=None, metavar="FILE.jsonl",
                    help="with --cost torch: reuse and keep measured op costs (a rerun makes "
                         "the same choices)")
    ap.add_argument("--nodes", default="10000,50000,100000",
                    help="synthetic graph sizes for the matching benchmark ('' to skip)")
    ap.add_argument("--out", default="benchmarks/results/optimize.json")
    args = ap.parse_args()

    import torch

    from superopt.rewrite import Matcher, create_cost, starter_rules

    matcher = Matcher(starter_rules())
    if args.cost_db is not None and args.cost != "torch":
        ap.error("--cost-db needs --cost torch")
    torch_options = {"threads": args.threads or None, "database": args.cost_db}
    cost = create_cost(args.cost, **(torch_options if args.cost == "torch" else {}))
    rows = []
    for name in [m for m in args.models.split(",") if m]:
        try:
            row = bench_model(name, args, matcher, cost)
        except KeyboardInterrupt:
            # The JSON is written once, at the end: nothing of this run is kept, and
            # --out is left as it was.
            print(f"interrupted in {name}: nothing written", file=sys.stderr)
            raise SystemExit(130) from None
        rows.append(row)
        print(f"{name}: {row['applied_total']} sites applied, cost {row['cost_before']:.4g} -> "
              f"{row['cost_after']:.4g}, torch {row['torch_before_s'] * 1e3:.1f} -> "
              f"{row['torch_after_s'] * 1e3:.1f} ms ({row['torch_ratio']:.3f}x), "
              f"search {row['search_s']:.1f} s", flush=True)
    scale = bench_matching([int(n) for n in args.nodes.split(",") if n], matcher)

    head = (f"{'model':13} {'nodes':>6} {'sites':>6} {'applied':>7} {'cost ' + args.cost:>19} "
            f"{'sim us':>17} {'torch cpu ms':>19} {'ratio [95% CI]':>20} {'A/A [95% CI]':>20} "
            f"{'rel err':>8} "
            f"{'search s':>8}")
    print()
    print(head)
    print("-" * len(head))
    for r in rows:
        cost_txt = f"{r['cost_before'] * 1e3:.2f}->{r['cost_after'] * 1e3:.2f}"
        sim_txt = f"{r['sim_before_s'] * 1e6:.0f}->{r['sim_after_s'] * 1e6:.0f}"
        torch_txt = f"{r['torch_before_s'] * 1e3:.1f}->{r['torch_after_s'] * 1e3:.1f}"
        ci, aa = r["torch_ratio_ci95"], r["aa_ratio_ci95"]
        print(f"{r['model']:13} {r['nodes']:>6} {r['sites_total']:>6} {r['applied_total']:>7} "
              f"{cost_txt:>19} {sim_txt:>17} {torch_txt:>19} "
              f"{r['torch_ratio']:>6.3f} [{ci[0]:.3f},{ci[1]:.3f}] "
              f"{r['aa_ratio']:>6.3f} [{aa[0]:.3f},{aa[1]:.3f}] "
              f"{r['max_rel_err']:>8.1e} {r['search_s']:>8.1f}")
    print()
    for r in rows:
        applied = ", ".join(f"{k} {v}" for k, v in sorted(r["applied"].items(), key=lambda kv: -kv[1]))
        print(f"{r['model']}: sites {r['sites']}; applied: {applied or 'none'}")
    if scale:
        print()
        print(f"{'synthetic nodes':>15} {'sites':>7} {'match s':>8} {'us/node':>8}")
        for s in scale:
            print(f"{s['nodes']:>15} {s['sites']:>7} {s['match_s']:>8.2f} {s['us_per_node']:>8.1f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "cpus": os.cpu_count()},
        "settings": {k: v for k, v in vars(args).items()}, "models": rows, "matching": scale,
    }, indent=1) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
