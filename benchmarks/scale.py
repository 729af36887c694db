"""Benchmark: graph scale. A 32-layer LLM decoder (the zoo's `llama2_7b`: Llama 2 7B
shapes, 6.7G parameters as shapes only, 1393 nodes at batch 1) goes through every step a
user runs: build, save and load as a graph file (the `superopt` JSON format, weights
without data), lint and statistics, the default compile and simulation, and `superopt.tune`
(all six passes, the joint schedule) for a fixed number of measurements.

Per step: wall seconds, CPU seconds, the Python heap's peak during the step (tracemalloc,
only for the steps before tuning: tracing slows tuning several-fold) and the process's peak
resident memory after it (resource.getrusage ru_maxrss, cumulative over the run). Prints a
table and writes JSON (`results/scale.json`).

Tuning records every measurement in a records database (`--db`, the `tune --db` format),
so a run stopped early still shows how far it got and at what pace:
`sqlite3 DB "select count(*), max(at) - min(at) from measurements"`.

Run: `.venv/bin/python benchmarks/scale.py [--models llama2_7b] [--batch 1] [--budget 300]
[--db FILE]`
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step(name: str, fn: Callable[[], Any], traced: bool, steps: list[dict]) -> Any:
    if traced:
        tracemalloc.start()
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    row = {"step": name, "wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0}
    if traced:
        row["heap_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    row["rss_peak_mib"] = rss_mib()
    steps.append(row)
    heap = f"{row['heap_peak_mib']:9.1f}" if traced else f"{'-':>9s}"
    print(f"  {name:22s} {row['wall_s']:9.2f} {row['cpu_s']:9.2f} {heap} "
          f"{row['rss_peak_mib']:9.1f}", flush=True)
    return out


def measure(model: str, batch: int, budget: int, seed: int, db: str | None) -> dict:
    from superopt import zoo
    from superopt.ir.analysis import stats
    from superopt.ir.serialize import load, save
    from superopt.tpu_sim import compile_default, simulate
    from superopt.xtat import tune

    steps: list[dict] = []
    print(f"{model} batch {batch}\n  {'step':22s} {'wall s':>9s} {'cpu s':>9s} "
          f"{'heap MiB':>9s} {'RSS MiB':>9s}", flush=True)
    graph = step("build", lambda: zoo.build(model, batch=batch), True, steps)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{model}.json"
        step("save graph file", lambda: save(graph, path), True, steps)
        size = path.stat().st_size
        loaded = step("load graph file", lambda: load(path), True, steps)
    if loaded.structural_hash != graph.structural_hash:
        raise SystemExit(f"{model}: the loaded graph differs from the built one")
    st = step("lint + stats", lambda: (graph.lint(), stats(graph))[1], True, steps)
    sim = step("compile + simulate", lambda: simulate(compile_default(graph)), True, steps)
    # superopt.tune's path (all six passes, joint schedule), with a records database
    result = step(f"tune ({budget} meas.)",
                  lambda: tune(model, budget=budget, seed=seed, batch=batch, graph=graph,
                               db=db and f"{db}.{model}_b{batch}.sqlite"), False, steps)
    return {"model": model, "batch": batch, "nodes": len(graph), "params": st.params,
            "param_bytes": st.param_bytes, "macs": st.macs, "graph_file_bytes": size,
            "default_sim_s": sim.time, "tuned_sim_s": result.best_time,
            "speedup": result.speedup, "evaluations": result.evaluations,
            "phases": [list(p) for p in result.phases], "stopped": result.stopped,
            "tune_wall_s": result.wall_s,
            "s_per_measurement": result.wall_s / max(result.evaluations, 1),
            "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="llama2_7b", help="comma-separated zoo models")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "scale.json"))
    ap.add_argument("--db", default=None, metavar="PREFIX",
                    help="record the measurements in PREFIX.<model>_b<batch>.sqlite")
    args = ap.parse_args()
    from superopt import zoo

    try:
        models = [zoo.get(m).name for m in args.models.split(",")]
    except zoo.ZooError as e:
        raise SystemExit(f"--models: {e}") from None
    if args.batch < 1 or args.budget < 1:
        raise SystemExit("--batch and --budget must be >= 1")
    rows = [measure(m, args.batch, args.budget, args.seed, args.db) for m in models]
    for r in rows:
        print(f"{r['model']}: {r['nodes']} nodes, {r['params'] / 1e9:.2f}G parameters, "
              f"tuned {r['evaluations']} measurements in {r['tune_wall_s']:.1f} s "
              f"({r['s_per_measurement']:.2f} s each), simulated {r['default_sim_s'] * 1e3:.2f}"
              f" -> {r['tuned_sim_s'] * 1e3:.2f} ms ({r['speedup']:.3f}x); peak RSS "
              f"{max(s['rss_peak_mib'] for s in r['steps']):.0f} MiB")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"budget": args.budget, "seed": args.seed, "hardware": "v4",
                               "python": sys.version.split()[0], "cpus": os.cpu_count(),
                               "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
