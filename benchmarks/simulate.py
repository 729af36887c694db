"""Benchmark: the TPU simulator's default-compiled time per zoo model, and its throughput.

Per zoo model: simulated time under the default compiler, kernels, the roofline bound and
ratio, achieved fraction of peak, and the wall time of compiling and simulating. Then the
simulator's throughput in candidate evaluations per second for ResNet-50, BERT-base and a
synthetic graph of 100,000 nodes, three ways:

- simulate: `simulate(compiled)` of an already compiled candidate (kernel costs cached);
- evaluate: a tuner's step: mutate the default configuration (flip the fusion decisions of
  a few random nodes, give a few kernels other flags), `compile_with` it and simulate;
- cold: `compile_default` + `simulate` with empty caches (the first evaluation of a graph).

Run: `.venv/bin/python benchmarks/simulate.py [--models a,b] [--nodes N] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path


def _mutants(compiled, count: int, flips: int, seed: int) -> list:
    from superopt.tpu_sim import Config, Flags

    rng = random.Random(seed)
    cfg = compiled.config
    nodes = list(cfg.fusion)
    roots = [k.root for k in compiled.kernels]
    out = []
    for _ in range(count):
        fusion = dict(cfg.fusion)
        for n in rng.sample(nodes, min(flips, len(nodes))):
            fusion[n] = not fusion[n]
        flags = dict(cfg.flags)
        for r in rng.sample(roots, min(flips, len(roots))):
            flags[r] = Flags(rng.random() < 0.5, rng.choice((1, 2, 4, 8)), flags[r].mxu_split)
        # Tiles are left to the default for kernels the new fusion creates.
        out.append(Config(cfg.layouts).with_(fusion=fusion, flags=flags, tiles=cfg.tiles))
    return out


def throughput(graph, repeats: int, seed: int = 0) -> dict:
    from superopt.tpu_sim import Simulator

    simulator = Simulator()  # cold: no remembered layout pass, empty kernel caches
    t0 = time.perf_counter()
    compiled = simulator.compile(graph)
    sim = simulator.simulate(compiled)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(repeats):
        simulator.simulate(compiled)
    warm = (time.perf_counter() - t0) / repeats
    configs = _mutants(compiled, repeats, flips=5, seed=seed)
    t0 = time.perf_counter()
    times = [simulator.simulate(simulator.compile(graph, c)).time for c in configs]
    evaluate = (time.perf_counter() - t0) / repeats
    return {"nodes": len(graph), "kernels": len(sim.kernels), "time_ms": sim.time * 1e3,
            "cold_s": cold, "simulate_s": warm, "evaluate_s": evaluate,
            "simulate_per_s": 1 / warm, "evaluate_per_s": 1 / evaluate, "cold_per_s": 1 / cold,
            "mutant_time_ms_min": min(times) * 1e3, "mutant_time_ms_max": max(times) * 1e3}


def main() -> None:
    from rich.console import Console
    from rich.table import Table

    from superopt import zoo
    from superopt.tpu_sim import Simulator, compile_default, get_hardware, simulate, validate
    from superopt.tpu_sim.synthetic import synthetic_graph

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.names()))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--hardware", default="v4")
    parser.add_argument("--nodes", type=int, default=100_000, help="synthetic graph size")
    parser.add_argument("--repeats", type=int, default=20, help="evaluations per throughput row")
    parser.add_argument("--out", default="benchmarks/results/simulate.json")
    args = parser.parse_args()
    hw = get_hardware(args.hardware)
    console = Console(highlight=False, width=140)

    rows = []
    simulator = Simulator(hw)  # one set of caches across models, as a tuning session has
    for name in args.models.split(","):
        graph = zoo.build(name, batch=args.batch)
        t0 = time.perf_counter()
        compiled = compile_default(graph, hw, sim=simulator)
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        sim = simulate(compiled)
        simulate_s = time.perf_counter() - t0
        validate(compiled)
        rows.append({"model": name, "batch": args.batch, "nodes": len(graph),
                     "kernels": len(sim.kernels), "time_ms": sim.time * 1e3,
                     "roofline_ms": sim.roofline * 1e3, "roofline_ratio": sim.roofline_ratio,
                     "flops_fraction": sim.flops_fraction,
                     "bandwidth_fraction": sim.bandwidth_fraction,
                     "compile_s": compile_s, "simulate_s": simulate_s})
    table = Table(title=f"zoo models, batch {args.batch}, default compiler on TPU {hw.name}")
    for col in ("model", "nodes", "kernels", "time ms", "roofline ms", "ratio", "% peak",
                "% HBM BW", "compile s", "simulate ms"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        table.add_row(r["model"], str(r["nodes"]), str(r["kernels"]), f"{r['time_ms']:.3f}",
                      f"{r['roofline_ms']:.3f}", f"{r['roofline_ratio']:.2f}",
                      f"{100 * r['flops_fraction']:.1f}", f"{100 * r['bandwidth_fraction']:.1f}",
                      f"{r['compile_s']:.3f}", f"{r['simulate_s'] * 1e3:.2f}")
    console.print(table)

    graphs = [("resnet50", lambda: zoo.build("resnet50", batch=args.batch)),
              ("bert_base", lambda: zoo.build("bert_base", batch=args.batch)),
              (f"synthetic{args.nodes}", lambda: synthetic_graph(args.nodes))]
    tput = []
    for name, build in graphs:
        t0 = time.perf_counter()
        graph = build()
        build_s = time.perf_counter() - t0
        repeats = args.repeats if len(graph) < 10_000 else max(2, args.repeats // 10)
        tput.append({"graph": name, "build_s": build_s, "repeats": repeats}
                    | throughput(graph, repeats))
    table = Table(title="simulator throughput (candidate evaluations per second)")
    for col in ("graph", "nodes", "kernels", "cold s", "simulate/s", "evaluate/s",
                "simulate ms", "evaluate ms"):
        table.add_column(col, justify="left" if col == "graph" else "right")
    for r in tput:
        table.add_row(r["graph"], str(r["nodes"]), str(r["kernels"]), f"{r['cold_s']:.3f}",
                      f"{r['simulate_per_s']:.1f}", f"{r['evaluate_per_s']:.2f}",
                      f"{r['simulate_s'] * 1e3:.1f}", f"{r['evaluate_s'] * 1e3:.1f}")
    console.print(table)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"hardware": hw.name, "python": platform.python_version(),
                               "machine": platform.machine(), "models": rows,
                               "throughput": tput}, indent=1))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
