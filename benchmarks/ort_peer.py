"""Benchmark: onnxruntime's own offline transformer optimizer on users' files (issue 48).

`tune --target cpu` reports its gains over the user's file run by onnxruntime with every
graph optimization on (ORT_ENABLE_ALL). onnxruntime ships a second optimizer for
transformer models, `onnxruntime.transformers.optimizer`, that a user can run offline
before loading the file: it rewrites recognised subgraphs into the runtime's fused
operators (Attention, SkipLayerNormalization, BiasGelu, FastGelu, ...). If it made a
family's file faster, the honest baseline for that family would be its output, not the
file. This measures it on the transformer families `tune_cpu.py --hf published` tunes:

per family, the file as torch's ONNX exporter writes it (`published_onnx`, the same file
tune_cpu.py's rows start from), `optimize_model(file, model_type=...)` with its defaults
for the CPU, and the file again (the A/A control), in paired rounds in one loop,
ORT_ENABLE_ALL, `--threads` intra-op threads. Reported: medians, the file's time over the
optimized file's with a 95% bootstrap interval, the A/A ratio and interval, the fused
operators the optimizer reports, and the largest relative difference of their outputs.
A ratio above 1 outside the A/A band means the peer's optimizer helps and the tuner's
baseline for that family is too weak.

Run pinned to one core, as tune_cpu.py's rows were:
`OMP_WAIT_POLICY=PASSIVE taskset -c 1 .venv/bin/python benchmarks/ort_peer.py`
(`--families bert,gpt2 --rounds 20 --out FILE`). The JSON is written after every family;
a rerun keeps the families it has (`--fresh` starts over).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

RESULTS = Path(__file__).parent / "results" / "ort_peer.json"
TUNE_CPU_HF = Path(__file__).parent / "results" / "tune_cpu_hf.json"
# The optimizer's model type for each transformer family of `PUBLISHED` (its fusions are
# chosen by it); the CNN families have no transformer subgraphs to fuse.
MODEL_TYPES = {"bert": "bert", "bert-classifier": "bert", "gpt2": "gpt2", "vit": "vit",
               "vit-classifier": "vit", "swin": "swin", "t5-encoder": "t5"}


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _feeds(path: Path, sess: Any) -> dict[str, Any]:
    """The inputs tune_cpu.py times the file on: the imported graph's random feeds, typed
    as the session `sess` of the file declares them."""
    import numpy as np

    from superopt.importers import load_model
    from superopt.ir import random_feeds
    from superopt.ir.types import ORT_DTYPES

    feeds = random_feeds(load_model(str(path)), seed=0)
    return {i.name: np.asarray(feeds[i.name], dtype=ORT_DTYPES.get(i.type, None))
            for i in sess.get_inputs()}


def _optimize(family: str, path: Path, out: Path) -> dict[str, int]:
    """The peer's offline optimizer as a user runs it for a CPU (its default level)."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(str(path), model_type=MODEL_TYPES[family], use_gpu=False)
    stats = {k: int(v) for k, v in model.get_fused_operator_statistics().items() if v}
    model.save_model_to_file(str(out), use_external_data_format=False)
    return stats


def run_family(family: str, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from superopt.importers.hf import published_onnx
    from superopt.rewrite.check import interleave

    start = time.perf_counter()
    path = Path(published_onnx(family, args.workdir / "hf", 1))
    peer = args.workdir / "peer" / f"{family}_b1.onnx"
    peer.parent.mkdir(parents=True, exist_ok=True)
    fused = _optimize(family, path, peer)
    sessions = [_session(path, args.threads), _session(peer, args.threads),
                _session(path, args.threads)]
    feeds = _feeds(path, sessions[0])
    # The optimizer may drop an input nothing reads (a mask of ones): each session gets
    # the feeds it declares.
    mine = [{i.name: feeds[i.name] for i in s.get_inputs()} for s in sessions]
    outs = [s.run(None, f) for s, f in zip(sessions[:2], mine[:2], strict=True)]
    err = max(float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(a))), 1e-30))
              for a, b in zip(outs[0], outs[1], strict=True))
    runs = [(lambda s=s, f=f: s.run(None, f)) for s, f in zip(sessions, mine, strict=True)]
    t = interleave(runs, args.rounds, 2, "cpu", args.threads)
    lo, hi = t.ratio_ci(0, 1)
    aa_lo, aa_hi = t.ratio_ci(0, 2)
    return {"family": family, "model_type": MODEL_TYPES[family], "fused": fused,
            "file_ms": t.medians[0] * 1e3, "peer_ms": t.medians[1] * 1e3,
            "ratio": t.ratio(0, 1), "ci95": [lo, hi], "aa": t.ratio(0, 2),
            "aa_ci95": [aa_lo, aa_hi], "rounds": args.rounds, "max_rel_err": err,
            "wall_s": time.perf_counter() - start}


def _tuned(family: str) -> dict[str, Any] | None:
    """tune_cpu.py's row for the same file (its ratio over the file), if committed."""
    if not TUNE_CPU_HF.exists():
        return None
    for r in json.loads(TUNE_CPU_HF.read_text())["rows"]:
        if r["model"] == f"hf:{family}" and r["batch"] == 1:
            f = r["onnxruntime"]
            return {"ratio": f["ratio"], "ci95": f["ci95"], "aa": f["aa"]}
    return None


def _verdict(r: dict[str, Any]) -> str:
    """The tuner's own rule (`realrunner.verdict`): faster or slower only outside noise."""
    from superopt.xtat.realrunner import verdict

    v = verdict(r["ratio"], tuple(r["ci95"]), tuple(r["aa_ci95"]))  # type: ignore[arg-type]
    return "within noise" if v == "noise" else v


def report(data: dict[str, Any]) -> None:
    rows = data["rows"]
    print("| family | file ms | peer-optimized ms | ratio [95% CI] | A/A [95% CI] | "
          "peer is | superopt tune (tune_cpu_hf.json) | fused by the peer |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        tuned = r.get("superopt")
        tuned_s = (f"{tuned['ratio']:.3f} [{tuned['ci95'][0]:.3f}, {tuned['ci95'][1]:.3f}]"
                   if tuned else "-")
        fused = ", ".join(f"{k} {v}" for k, v in r["fused"].items()) or "nothing"
        print(f"| {r['family']} | {r['file_ms']:.2f} | {r['peer_ms']:.2f} | "
              f"{r['ratio']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] | "
              f"{r['aa']:.3f} [{r['aa_ci95'][0]:.3f}, {r['aa_ci95'][1]:.3f}] | "
              f"{_verdict(r)} | {tuned_s} | {fused} |")
    if rows:
        g = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
        print(f"geomean of the peer's ratio over {len(rows)} files: {g:.3f}x; faster outside "
              f"noise on {sum(_verdict(r) == 'faster' for r in rows)}, slower on "
              f"{sum(_verdict(r) == 'slower' for r in rows)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(MODEL_TYPES))
    ap.add_argument("--rounds", type=int, default=20, help="paired rounds per family")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/superopt_tune_cpu"),
                    help="where the files are made (shared with tune_cpu.py)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--fresh", action="store_true", help="drop the rows already in --out")
    ap.add_argument("--report", action="store_true",
                    help="print the table of --out and measure nothing")
    args = ap.parse_args()
    if args.report:
        if not args.out.exists():
            ap.error(f"{args.out}: no such file (run the benchmark first)")
        report(json.loads(args.out.read_text()))
        return
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in MODEL_TYPES]
    if unknown:
        ap.error(f"unknown family {unknown[0]!r}; known: {', '.join(MODEL_TYPES)}")
    if args.rounds < 2 or args.threads < 1:
        ap.error("--rounds must be at least 2 and --threads at least 1")
    data: dict[str, Any] = {"rows": []}
    if args.out.exists() and not args.fresh:
        data = json.loads(args.out.read_text())
    import onnxruntime

    data["settings"] = {"rounds": args.rounds, "threads": args.threads,
                        "graph_optimization_level": "ORT_ENABLE_ALL",
                        "affinity": sorted(os.sched_getaffinity(0)),
                        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                        "onnxruntime": onnxruntime.__version__}
    done = {r["family"] for r in data["rows"]}
    for family in families:
        if family in done:
            continue
        try:
            row = run_family(family, args)
        except KeyboardInterrupt:
            print(f"interrupted in {family}: {len(data['rows'])} families kept in {args.out}; "
                  "a rerun goes on from there", file=sys.stderr)
            raise SystemExit(130) from None
        row["verdict"] = _verdict(row)
        row["superopt"] = _tuned(family)
        data["rows"].append(row)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{family}: {row['ratio']:.3f} [{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}] "
              f"(A/A {row['aa']:.3f}), {row['verdict']}", flush=True)
    report(data)


if __name__ == "__main__":
    main()
