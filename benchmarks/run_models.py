"""Benchmark: every zoo model on the reference interpreter and on the torch backend.

Prints a table (build time, reference time, torch float32 CPU time as the median of
repeats after warm-up, and the largest float32 error against the reference) and writes
JSON. Run: `.venv/bin/python benchmarks/run_models.py [--models a,b] [--out FILE]`.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import argparse
import json
import platform
import statistics
import time
from pathlib import Path


def main() -> None:
    from rich.console import Console
    from rich.table import Table

    from superopt import zoo
    from superopt.backends import torch as tb
    from superopt.ir import interpret, random_feeds

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.names()))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default="benchmarks/results/run_models.json")
    args = parser.parse_args()

    rows = []
    for name in args.models.split(","):
        t0 = time.perf_counter()
        graph = zoo.build(name, batch=args.batch)
        build_s = time.perf_counter() - t0
        feeds = random_feeds(graph)
        t0 = time.perf_counter()
        want = interpret(graph, feeds)
        ref_s = time.perf_counter() - t0
        got = tb.run(graph, feeds, dtype="float32")
        rel = max(tb.compare_arrays(i, g, w, 1e-4, 0.0).rel_err
                  for i, (g, w) in enumerate(zip(got, want, strict=True)))
        timing = tb.benchmark(graph, feeds, warmup=3, repeats=args.repeats)
        rows.append({"model": name, "batch": args.batch, "nodes": len(graph),
                     "build_ms": build_s * 1e3, "reference_ms": ref_s * 1e3,
                     "torch_median_ms": timing.median * 1e3, "torch_min_ms": timing.min * 1e3,
                     "torch_stdev_ms": statistics.pstdev(timing.times) * 1e3,
                     "float32_rel_err": rel, "threads": timing.threads})
    table = Table(title=f"zoo models, batch {args.batch}: reference (numpy float64) vs torch "
                        "(float32 CPU)")
    for col in ("model", "nodes", "build ms", "reference ms", "torch median ms", "torch min ms",
                "f32 rel err"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        table.add_row(r["model"], str(r["nodes"]), f"{r['build_ms']:.1f}",
                      f"{r['reference_ms']:.0f}", f"{r['torch_median_ms']:.1f}",
                      f"{r['torch_min_ms']:.1f}", f"{r['float32_rel_err']:.1e}")
    Console(width=140).print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.machine(), "cpus": os.cpu_count(),
                               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                               "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
