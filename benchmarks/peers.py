"""Do our rewrites still pay off on top of the optimizers a CPU user already has?

For each model: optimize it with the starter library (TASO's search, FLOPs cost, weights
folded), export both graphs, and time original against optimized under three runtimes:

- onnxruntime with graph optimizations ALL (its own fusions and constant folding);
- `torch.compile` (inductor) of the exported fx GraphModule;
- torch eager (the same GraphModule uncompiled).

Which rules pay off (`--per-rule`): each rule the search applied is also applied alone
(the same search with a one-rule library) and that graph timed against the original
under onnxruntime and torch eager, with its own A/A control.

Each runtime's pair is timed in paired interleaved rounds with a third slot, a second
instance of the original, as an A/A control (`superopt.rewrite.check.interleave`, the
loop `superopt optimize` times with): a ratio is "measured" only where its bootstrap 95%
CI excludes 1 and the A/A CI contains it. Results go to benchmarks/results/peers.json.

    .venv/bin/python benchmarks/peers.py                       # the four models
    .venv/bin/python benchmarks/peers.py --models resnet50 --repeats 20 --no-compile
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

import superopt
from superopt.exporters.onnx import to_onnx
from superopt.exporters.torch import to_module
from superopt.interrupts import finished
from superopt.ir import Graph, random_feeds
from superopt.rewrite.check import SideBySide, check_values, interleave

MODELS = ("bert_base", "nasnet_a", "inception_v3", "resnet50")
RESULTS = Path(__file__).parent / "results" / "peers.json"


def _ort_run(graph: Graph, feeds: dict[str, np.ndarray], threads: int) -> Callable[[], Any]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(to_onnx(graph).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    mine = {k: v for k, v in feeds.items() if k in names}
    return lambda: sess.run(None, mine)


def _torch_run(graph: Graph, feeds: dict[str, np.ndarray], compiled: bool
               ) -> Callable[[], Any]:
    module = to_module(graph)
    if compiled:
        module = torch.compile(module)  # inductor, the default backend
    args = [torch.from_numpy(feeds[n.attr("name")]) for n in graph.inputs]

    def call() -> Any:
        with torch.inference_mode():
            return module(*args)
    return call


def _figures(t: SideBySide) -> dict[str, Any]:
    """Slots: 0 original, 1 optimized, 2 original again (A/A)."""
    lo, hi = t.ratio_ci(0, 1)
    aa_lo, aa_hi = t.ratio_ci(0, 2)
    return {"original_ms": t.medians[0] * 1e3, "optimized_ms": t.medians[1] * 1e3,
            "speedup": t.ratio(0, 1), "ci95": [lo, hi],
            "aa": t.ratio(0, 2), "aa_ci95": [aa_lo, aa_hi],
            "measured": (lo > 1 or hi < 1) and aa_lo <= 1 <= aa_hi}


def _time(runtimes: dict[str, list[Callable[[], Any]]], repeats: int, threads: int,
          label: str) -> dict[str, Any]:
    out = {}
    for runtime, runs in runtimes.items():
        t0 = time.perf_counter()
        timing = interleave(runs, repeats, warmup=2, threads=threads)
        out[runtime] = f = {**_figures(timing), "wall_s": time.perf_counter() - t0}
        print(f"{label:28s} {runtime:16s} {f['original_ms']:8.2f} ms -> "
              f"{f['optimized_ms']:8.2f} ms  {f['speedup']:.3f}x "
              f"[{f['ci95'][0]:.3f}, {f['ci95'][1]:.3f}]  A/A {f['aa']:.3f} "
              f"[{f['aa_ci95'][0]:.3f}, {f['aa_ci95'][1]:.3f}]", flush=True)
    return out


def per_rule(graph: Graph, applied: dict[str, int], feeds: dict[str, np.ndarray],
             repeats: int, threads: int, budget: int) -> dict[str, Any]:
    """Each applied rule alone: its graph against the original (onnxruntime, eager)."""
    from superopt.api import _rules

    library = _rules("starter")
    out: dict[str, Any] = {}
    for rule in applied:
        one = finished(superopt.optimize(graph, rules=[r for r in library if r.name == rule],
                                          cost="flops", budget=budget))
        check = check_values(graph, one.graph)
        out[rule] = {"applied": dict(one.applied), "values_equal": check.ok}
        if check.ok:
            out[rule] |= _time({
                "onnxruntime_all": [_ort_run(g, feeds, threads)
                                    for g in (graph, one.graph, graph)],
                "torch_eager": [_torch_run(g, feeds, False) for g in (graph, one.graph, graph)],
            }, repeats, threads, f"{graph.name} {rule}")
    return out


def measure(name: str, repeats: int, threads: int, compile_: bool, budget: int,
            rules: bool = False) -> dict[str, Any]:
    graph = superopt.load(name)
    t0 = time.perf_counter()
    result = finished(superopt.optimize(graph, rules="starter", cost="flops", budget=budget))
    optimize_s = time.perf_counter() - t0
    opt = result.graph
    check = check_values(graph, opt)
    feeds = {k: np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f" else
             np.asarray(v, np.int64) for k, v in random_feeds(graph, seed=0).items()}
    row: dict[str, Any] = {"model": name, "nodes": [len(graph), len(opt)],
                           "applied": dict(result.applied), "optimize_s": optimize_s,
                           "values_equal": check.ok, "max_rel_err": check.max_rel_err}
    torch.set_num_threads(threads)
    runtimes: dict[str, list[Callable[[], Any]]] = {
        "onnxruntime_all": [_ort_run(g, feeds, threads) for g in (graph, opt, graph)],
        "torch_eager": [_torch_run(g, feeds, False) for g in (graph, opt, graph)],
    }
    if compile_:
        runtimes["torch_compile"] = [_torch_run(g, feeds, True) for g in (graph, opt, graph)]
    row |= _time(runtimes, repeats, threads, name)
    if rules:
        row["per_rule"] = per_rule(graph, dict(result.applied), feeds, repeats, threads,
                                   budget)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--repeats", type=int, default=20, help="paired rounds per runtime")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads of every runtime")
    ap.add_argument("--budget", type=int, default=50, help="optimize search budget")
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile")
    ap.add_argument("--per-rule", action="store_true",
                    help="also time each applied rule alone (onnxruntime, eager)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    rows = []
    for name in args.models:
        try:
            rows.append(measure(name, args.repeats, args.threads, not args.no_compile,
                                args.budget, args.per_rule))
        except KeyboardInterrupt:
            print(f"interrupted in {name}: the {len(rows)} rows before it are in {args.out}",
                  file=sys.stderr)
            raise SystemExit(130) from None
        doc = {"benchmark": "peers", "machine": platform.processor() or platform.machine(),
               "cpus": os.cpu_count(), "threads": args.threads, "repeats": args.repeats,
               "versions": {"onnxruntime": ort.__version__, "torch": torch.__version__},
               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "rows": rows}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")  # after every model
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
