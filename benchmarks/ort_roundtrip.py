"""Benchmark: does a user's ONNX model run as fast in onnxruntime after superopt has read
and written it? (issue 48: tuning for where users run starts from the user's own file.)

Per `transformers` family (`superopt.importers.hf`; by default those with a published
size, `PUBLISHED`: MobileNet-V2, ResNet-50, EfficientNet-B0, ConvNeXt-T, Swin-T,
ViT-B/16, BERT-base, GPT-2, T5-small's encoder; `--small` for every family at its small
test size): the model written by torch's ONNX exporter (the user's file), then imported
by superopt and written back (`import_onnx`, then `to_onnx`: what every `superopt
optimize`/`tune` result goes through). Both run in onnxruntime (ORT_ENABLE_ALL,
`--threads` intra-op threads) in paired rounds with a second session of the user's file
as the A/A control, on the same seeded inputs, whose outputs must agree.

Reported per family: the two median times, ratio = user's time / superopt's (> 1: the
re-written file is faster) with its 95% bootstrap interval, the A/A ratio and interval,
the verdict (`superopt.xtat.realrunner.verdict`: faster or slower only outside the
interval and the A/A control), the largest output difference relative to the output's
scale, and the ONNX op counts of both files.

Run pinned to one core: `OMP_WAIT_POLICY=PASSIVE taskset -c 1 .venv/bin/python
benchmarks/ort_roundtrip.py [--families a,b] [--rounds 15] [--out FILE]`. The JSON is
rewritten after every family; `--resume` keeps the families already in it (and runs a
failed one again).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before onnxruntime/torch load

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any


def _session(path: str, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3  # unused initializers (a bound now read by Clip) are fine
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def bench_family(name: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    import numpy as np
    import onnx

    from superopt.exporters.onnx import to_onnx, write_model
    from superopt.importers.hf import hf_inputs, hf_onnx
    from superopt.importers.onnx import import_onnx
    from superopt.rewrite.check import interleave
    from superopt.xtat.realrunner import verdict

    published = not args.small
    t0 = time.perf_counter()
    user = hf_onnx(name, folder / f"{name}.onnx", batch=args.batch, published=published)
    t1 = time.perf_counter()
    graph = import_onnx(user)
    ours = write_model(to_onnx(graph), folder / f"{name}.superopt.onnx", 0)
    t2 = time.perf_counter()
    sessions = [_session(str(user), args.threads), _session(str(ours), args.threads),
                _session(str(user), args.threads)]
    x = hf_inputs(name, batch=args.batch, seed=1, published=published)[0].numpy()
    feeds = [{s.get_inputs()[0].name: x} for s in sessions]
    want, got = sessions[0].run(None, feeds[0]), sessions[1].run(None, feeds[1])
    scale = max(float(np.abs(w).max()) for w in want) or 1.0
    err = max(float(np.abs(np.asarray(g, np.float64) - w).max())
              for g, w in zip(got, want, strict=True)) / scale
    runs = [lambda s=s, f=f: s.run(None, f) for s, f in zip(sessions, feeds, strict=True)]
    t = interleave(runs, args.rounds, 2, "cpu", args.threads)
    ratio, ci = t.ratio(0, 1), t.ratio_ci(0, 1)
    aa, aa_ci = t.ratio(0, 2), t.ratio_ci(0, 2)
    ops_user = Counter(n.op_type for n in onnx.load(str(user), load_external_data=False)
                       .graph.node if n.op_type not in ("Constant", "Identity"))
    ops_ours = Counter(n.op_type for n in onnx.load(str(ours), load_external_data=False)
                       .graph.node)
    row = {"family": name, "published_size": published, "batch": args.batch,
           "user_ms": t.medians[0] * 1e3, "superopt_ms": t.medians[1] * 1e3,
           "ratio": ratio, "ci95": list(ci), "aa": aa, "aa_ci95": list(aa_ci),
           "verdict": verdict(ratio, ci, aa_ci), "max_rel_diff": err,
           "values_agree": err <= args.tol, "export_s": t1 - t0, "import_export_s": t2 - t1,
           "ops_user": dict(ops_user.most_common()), "ops_superopt": dict(ops_ours.most_common()),
           "wall_s": time.perf_counter() - t0}
    print(f"{name:16s} user {row['user_ms']:9.3f} ms  superopt {row['superopt_ms']:9.3f} ms  "
          f"ratio {ratio:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]  A/A {aa:.3f} "
          f"[{aa_ci[0]:.3f}, {aa_ci[1]:.3f}]  {row['verdict']:6s}  diff {err:.1e}", flush=True)
    return row


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if "ratio" in r]
    return {"families": len(rows), "failed": [r["family"] for r in rows if "error" in r],
            "geomean_ratio": (math.exp(statistics.fmean(math.log(r["ratio"]) for r in ok))
                              if ok else None),
            "slower": [r["family"] for r in ok if r["verdict"] == "slower"],
            "faster": [r["family"] for r in ok if r["verdict"] == "faster"],
            "values_disagree": [r["family"] for r in ok if not r["values_agree"]]}


def main() -> None:
    from superopt.importers.hf import FAMILIES, PUBLISHED

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default="")
    ap.add_argument("--small", action="store_true",
                    help="every family at its small test size (default: published sizes)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="largest output difference, relative to the output's scale")
    ap.add_argument("--out", default="benchmarks/results/ort_roundtrip.json")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    known = FAMILIES if args.small else PUBLISHED
    names = args.families.split(",") if args.families else list(known)
    for n in names:
        if n not in known:
            ap.error(f"--families: unknown family {n!r}"
                     f"{'' if args.small else ' at a published size'}; known: "
                     f"{', '.join(known)}")
    if args.batch < 1 or args.threads < 1 or args.rounds < 2:
        ap.error("--batch and --threads must be >= 1 and --rounds >= 2")
    out = Path(args.out)
    if not out.parent.is_dir():
        ap.error(f"--out {out}: folder {out.parent} does not exist")
    rows: list[dict[str, Any]] = []
    if args.resume and out.exists():
        # A failed family is tried again (after a fix); finished ones are kept.
        rows = [r for r in json.loads(out.read_text())["rows"]
                if r["family"] in names and "error" not in r]
    import onnxruntime

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            if any(r["family"] == n for r in rows):
                continue
            try:
                rows.append(bench_family(n, args, Path(tmp)))
            except Exception as e:  # one family's failure is its row; the rest still run
                line = str(e).splitlines()[0] if str(e) else ""
                rows.append({"family": n, "error": f"{type(e).__name__}: {line}"})
                print(f"{n:16s} failed: {rows[-1]['error']}", file=sys.stderr, flush=True)
            out.write_text(json.dumps({
                "what": __doc__.split("\n")[0], "note": args.note,
                "settings": {"batch": args.batch, "threads": args.threads,
                             "rounds": args.rounds, "published_sizes": not args.small,
                             "graph_optimization_level": "ORT_ENABLE_ALL",
                             "onnxruntime": onnxruntime.__version__,
                             "affinity": sorted(os.sched_getaffinity(0)),
                             "host": platform.node()},
                "wall_s": time.perf_counter() - t0, "summary": _summary(rows),
                "rows": rows}, indent=1) + "\n")
    s = _summary(rows)
    print(f"\n{s['families']} families; geomean user/superopt {s['geomean_ratio']:.3f}; "
          f"slower {s['slower'] or 'none'}; faster {s['faster'] or 'none'}; "
          f"failed {s['failed'] or 'none'}; values disagree {s['values_disagree'] or 'none'}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("interrupted; the families finished so far are in --out "
                         "(--resume runs the rest)") from None
