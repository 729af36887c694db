"""Benchmark: how much of onnxruntime's time a graph rewrite could still take away (issue 48).

`tune --target cpu` is measured over onnxruntime with all of its own graph optimizations
on. A rewrite that keeps the arithmetic (every rule here is an equivalence) can only gain
where onnxruntime's kernels run below what its matrix kernels reach, or where time goes
to ops that are not matrix products at all. This profiles each zoo model as onnxruntime
runs it (ORT_ENABLE_ALL, one thread, its per-node profiler, medians over the runs) and
reports per model:

- the share of kernel time in matrix products (Conv, Gemm, MatMul, FusedMatMul and their
  NCHWc forms) and the GFLOP/s those reach (FLOPs from each node's own shapes);
- the same machine's matrix rate on one large product (a 1024 x 1024 x 1024 MatMul in
  onnxruntime): the roof;
- `bound`: the speedup if every non-matrix op took no time and every matrix product ran
  at the roof (or as it runs, where that is faster). A rewrite that keeps the matrix
  FLOPs cannot pass it, and none takes every other op away; rules that remove matrix
  FLOPs (the narrowing ones: only the class token's row read after the last block) are
  outside it, and `matrix_gflop` shows how much there is.

The geomean of `bound` over the rows says how much of the issue's 1.05x geomean is
within reach of FLOP-keeping rewrites on this machine. Prints a table and writes JSON (`--out`). Run
pinned to one core, as tune_cpu.py's rows were:
`OMP_WAIT_POLICY=PASSIVE taskset -c 1 .venv/bin/python benchmarks/ort_headroom.py`
(`--rows model:batch,... --runs 8`; by default the rows tune_cpu.json measured). The JSON
is written after every row; `--resume` keeps the rows it has and runs the rest.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

RESULTS = Path(__file__).parent / "results" / "ort_headroom.json"
TUNE_CPU = Path(__file__).parent / "results" / "tune_cpu.json"
# onnxruntime's kernels (op_name in its profile) that are matrix products (its fused forms
# carry an activation: FusedGemm is Gemm + relu), and how their FLOPs follow from the
# node's input shapes (`_flops`).
MATRIX_OPS = ("Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul")


def _flops(op: str, ins: list[list[int]], outs: list[list[int]]) -> float:
    """Multiply-adds x 2 of one matrix node, from its input and output shapes."""
    out = outs[0]
    if op in ("Conv", "FusedConv"):
        w = ins[1]  # (C_out, C_in / groups, kh, kw): each output reads one group's inputs
        return 2.0 * math.prod(out) * math.prod(w[1:])
    a = ins[0]
    k = a[-1] if len(a) > 1 else a[0]
    if op == "FusedMatMul" or (op in ("Gemm", "FusedGemm") and len(a) == 2):
        # transA may hold: K is the dimension the output does not keep
        k = a[-1] if a[-2] == out[-2] else a[-2]
    return 2.0 * math.prod(out) * k


def _session(path: str, threads: int, profile: str | None) -> Any:
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.log_severity_level = 3
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile:
        o.enable_profiling = True
        o.profile_file_prefix = profile
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def _feeds(sess: Any, graph: Any = None) -> dict[str, Any]:
    """The session's inputs: the reference interpreter's draw for `graph` (token ids in
    range, as every other onnxruntime timing here draws them), else uniform floats."""
    import numpy as np

    from superopt.ir import random_feeds
    from superopt.ir.types import ORT_DTYPES

    if graph is None:
        rng = np.random.default_rng(0)
        return {i.name: rng.random(i.shape, dtype=np.float32) for i in sess.get_inputs()}
    drawn = random_feeds(graph, seed=0)
    return {i.name: np.asarray(drawn[i.name], dtype=ORT_DTYPES.get(i.type, None))
            for i in sess.get_inputs()}


def roof(threads: int, n: int = 1024) -> float:
    """GFLOP/s of one n x n x n float32 MatMul (constant right operand) in onnxruntime."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).random((n, n), dtype=np.float32),
                                "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "roof",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
                          [w])
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "roof.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
        s = _session(p, threads, None)
        f = _feeds(s)
        for _ in range(3):
            s.run(None, f)
        ts = []
        for _ in range(15):
            t = time.perf_counter()
            s.run(None, f)
            ts.append(time.perf_counter() - t)
    return 2.0 * n ** 3 / statistics.median(ts) / 1e9


def profile_row(model: str, batch: int, runs: int, threads: int, peak: float) -> dict:
    """One model's kernel-time split and matrix rate as onnxruntime runs it."""
    from superopt import zoo
    from superopt.exporters import onnx as export

    graph = zoo.build(model, batch=batch)
    with tempfile.TemporaryDirectory() as d:
        path = str(export.write_model(export.to_onnx(graph, seed=0),
                                      os.path.join(d, "m.onnx"), 0))
        s = _session(path, threads, os.path.join(d, "prof"))
        f = _feeds(s, graph)
        for _ in range(runs + 2):
            s.run(None, f)
        events = json.loads(Path(s.end_profiling()).read_text())
    per_node: dict[str, list[float]] = collections.defaultdict(list)
    info: dict[str, dict] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_node[e["name"]].append(e["dur"] * 1e-6)
            info[e["name"]] = e["args"]
    by_op: collections.Counter[str] = collections.Counter()
    matrix_s = matrix_flops = 0.0
    for name, durs in per_node.items():
        a = info[name]
        t = statistics.median(durs[2:] or durs)  # the first runs warm up
        by_op[a["op_name"]] += t
        if a["op_name"] in MATRIX_OPS:
            ins = [next(iter(x.values())) for x in a.get("input_type_shape", [])]
            outs = [next(iter(x.values())) for x in a.get("output_type_shape", [])]
            matrix_s += t
            matrix_flops += _flops(a["op_name"], ins, outs)
    total = sum(by_op.values())
    rate = matrix_flops / matrix_s / 1e9 if matrix_s else 0.0
    at_roof = min(matrix_flops / (peak * 1e9), matrix_s)
    return {"model": model, "batch": batch, "kernel_ms": total * 1e3,
            "matrix_share": matrix_s / total, "matrix_gflops": rate,
            "matrix_gflop": matrix_flops / 1e9,
            "matrix_of_roof": rate / peak if peak else None,
            "bound": total / at_roof if at_roof else None,
            "bound_non_matrix_free": total / matrix_s if matrix_s else None,
            "top_ops": {k: round(v / total, 4) for k, v in by_op.most_common(6)}}


def _default_rows() -> str:
    rows = json.loads(TUNE_CPU.read_text())["rows"]
    return ",".join(f"{r['model']}:{r['batch']}" for r in rows)


def _parse_rows(text: str) -> list[tuple[str, int]]:
    """`model:batch,...` checked before any measuring: a zoo name and a positive batch."""
    from superopt import zoo

    rows = []
    known = set(zoo.names(scale=True))
    for spec in text.split(","):
        m, _, b_text = spec.partition(":")
        if m not in known:
            raise SystemExit(f"ort_headroom: --rows: unknown model {m!r}; known: "
                             f"{', '.join(sorted(known))}")
        if not (b_text or "1").isdigit() or int(b_text or 1) < 1:
            raise SystemExit(f"ort_headroom: --rows: batch of {spec!r} must be a positive "
                             "integer")
        rows.append((m, int(b_text or 1)))
    return rows


def _geomean(xs: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def _write(out: Path, args: argparse.Namespace, peak: float, rows: list[dict]) -> dict:
    doc = {"settings": vars(args), "roof_gflops": peak, "rows": rows,
           "geomean_bound": _geomean([r["bound"] for r in rows if r["bound"]]),
           "geomean_bound_non_matrix_free": _geomean([r["bound_non_matrix_free"]
                                                      for r in rows
                                                      if r["bound_non_matrix_free"]])}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=None, help="model:batch,... (default: tune_cpu.json's)")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows --out already has (and its roof); run the others")
    args = ap.parse_args()
    specs = _parse_rows(args.rows or _default_rows())
    out = Path(args.out)
    rows: list[dict] = []
    if args.resume and out.exists():
        prior = json.loads(out.read_text())
        peak = prior["roof_gflops"]
        rows = [r for r in prior["rows"] if (r["model"], r["batch"]) in specs]
    else:
        peak = roof(args.threads)
    print(f"roof: a 1024^3 MatMul at {peak:.1f} GFLOP/s ({args.threads} thread)")
    for m, b in specs:
        if any((r["model"], r["batch"]) == (m, b) for r in rows):
            continue
        r = profile_row(m, b, args.runs, args.threads, peak)
        rows.append(r)
        _write(out, args, peak, rows)  # after every row: a killed run keeps what it measured
        print(f"{m:18s} b{b:<3d} {r['kernel_ms']:9.2f} ms  matrix {r['matrix_share']:6.1%}"
              f" at {r['matrix_gflops']:6.1f} GFLOP/s ({r['matrix_of_roof']:.0%} of roof)"
              f"  bound {r['bound']:.3f}x  (non-matrix free: "
              f"{r['bound_non_matrix_free']:.3f}x)", flush=True)
    doc = _write(out, args, peak, rows)
    print(f"geomean bound {doc['geomean_bound']:.3f}x; with matrix products as they run "
          f"and the rest free {doc['geomean_bound_non_matrix_free']:.3f}x")
    print(f"wrote {out}")

if __name__ == "__main__":
    main()
