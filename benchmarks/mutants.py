"""Benchmark: PET mutants over ResNet-18, CSRNet, Inception-v3, ResNeXt-50 and BERT-base at
batch sizes 1 and 16.

Per model and batch: distinct multi-linear subprograms and their sites, candidates
generated (families + depth-first search), candidates box-tested, mutants kept (fully /
partially equivalent, every one corrected and checked exact), search time, the cost of
the box tests (point evaluations against the output positions they cover), and gains:
per subprogram the best corrected mutant on the TPU simulator (and on the torch backend,
CPU float32, for subprograms up to --torch-max-gflop), and the simulated time of all
subprogram sites with the best mutant applied where it is faster.

For reference (PET, OSDI'21, on a V100): 1.04-2.5x over the best of TensorFlow,
TensorRT and TASO (CSRNet 2.2-2.5x, Inception-v3 1.24-1.44x, BERT 1.19-1.4x), with
search times of about 90 s per model.

Run: `.venv/bin/python benchmarks/mutants.py [--models a,b] [--batches 1,16] [--torch]
[--dfs-seconds S] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

MODELS = ("resnet18", "csrnet", "inception_v3", "resnext50", "bert-base")


def model_row(report) -> dict:  # type: ignore[no-untyped-def]
    from superopt.mutants.report import totals

    t = totals(report)
    orig = best = 0.0
    gains, torch_gains = [], []
    for s in report.subprograms:
        sites = len(s.sub.sites)
        b = s.best
        if b is None or b.sim_original is None:
            continue
        orig += sites * b.sim_original
        best += sites * min(b.sim_original, b.sim_corrected or math.inf)
        gains.append(b.sim_gain or 0.0)
        if b.torch_gain is not None:
            torch_gains.append(b.torch_gain)
    t.update({
        "model": report.model, "batch": report.batch,
        "sites": sum(len(s.sub.sites) for s in report.subprograms),
        "sim_subprograms_s": orig, "sim_with_best_mutants_s": best,
        "sim_speedup_on_subprograms": orig / best if best else None,
        "best_sim_gain": max(gains, default=None),
        "best_torch_gain": max(torch_gains, default=None),
        "torch_measured": len(torch_gains),
        "torch_faster": sum(g > 1.0 for g in torch_gains),
    })
    return t


def fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--dfs-states", type=int, default=3000)
    ap.add_argument("--dfs-seconds", type=float, default=2.0)
    ap.add_argument("--limit", type=int, default=None, help="at most N subprograms per model")
    ap.add_argument("--torch", action="store_true", help="time the best mutants on torch (CPU)")
    ap.add_argument("--torch-max-gflop", type=float, default=10.0)
    ap.add_argument("--out", default="benchmarks/results/mutants.json")
    args = ap.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    from superopt.importers import load_model
    from superopt.mutants.report import rows
    from superopt.mutants.search import Settings, search_model

    settings = Settings(dfs_states=args.dfs_states, dfs_seconds=args.dfs_seconds,
                        measure_top=1 if args.torch else 0, torch_max_gflop=args.torch_max_gflop)
    results = []
    details = []
    for model in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            graph = load_model(model, batch)
            t0 = time.perf_counter()
            report = search_model(graph, settings, batch=batch, use_sim=True,
                                  use_torch=args.torch, limit=args.limit)
            row = model_row(report)
            row["wall_s"] = round(time.perf_counter() - t0, 2)
            results.append(row)
            details.append({**report.summary(), "rows": rows(report)})
            print(f"{model:13s} b{batch:<3d} subprograms {row['subprograms']:3d} "
                  f"mutants {row['mutants']:4d} ({row['fully_equivalent']} full, "
                  f"{row['partially_equivalent']} partial)  {row['wall_s']:.0f}s", flush=True)
            write(Path(args.out), args, results, details)  # partial results survive a stop

    head = ("model", "batch", "subprog", "sites", "cand", "tested", "full", "partial",
            "search s", "box evals", "positions", "sim faster", "best sim", "sim subprog",
            "torch best")
    print()
    print(" | ".join(head))
    for r in results:
        print(" | ".join([
            r["model"], str(r["batch"]), str(r["subprograms"]), str(r["sites"]),
            str(r["candidates"]), str(r["box_tested"]), str(r["fully_equivalent"]),
            str(r["partially_equivalent"]), f"{r['seconds']:.0f}",
            f"{r['box_test_evaluations']:,}", f"{r['output_positions_covered']:,}",
            f"{r['subprograms_faster_on_sim']}/{r['subprograms']}",
            fmt(r["best_sim_gain"], ".2f", "x"), fmt(r["sim_speedup_on_subprograms"], ".3f", "x"),
            fmt(r["best_torch_gain"], ".2f", "x")]))
    print("\nbox evals: point evaluations of all kept mutants' box tests (2 programs x 2 draws x "
          "tested positions); positions: the output positions those tests cover.")
    print("sim subprog: simulated time of every subprogram site, original / with the best "
          "corrected mutant where it is faster.")
    print(f"wrote {write(Path(args.out), args, results, details)}")


def write(out: Path, args: argparse.Namespace, results: list, details: list) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "mutants", "machine": platform.platform(), "cpus": os.cpu_count(),
        "settings": vars(args), "results": results, "details": details,
    }, indent=1, default=str) + "\n")
    return out


if __name__ == "__main__":
    main()
