"""Benchmark: where can the starter rules pay on a CPU over onnxruntime's own optimizer?
(issue 48's headroom).

Per zoo model (batch 1 unless `--batch`) and per starter rule direction with sites in the
model: the rule applied at all its disjoint sites at once (`apply_sites`), the rewritten
graph timed in onnxruntime (ORT_ENABLE_ALL, `--threads` intra-op threads) side by side
with the input, in paired rounds of the input, the rewritten graph and the input again
(the A/A control). Reported: the ratio input / rewritten (> 1: the rewrite is faster)
with its 95% bootstrap interval, the A/A ratio and interval, and the verdict
(`superopt.xtat.realrunner.verdict`: faster or slower only outside both the interval
and the A/A control). The tuner's `--target cpu` decides per site; this says whether a
rule pays anywhere at all when it is applied everywhere, the cheapest screen of how much
a rewrite search can gain over onnxruntime on a model.

Run pinned to one core: `OMP_WAIT_POLICY=PASSIVE taskset -c 1 .venv/bin/python
benchmarks/cpu_rules.py [--models a,b] [--rounds 15] --out
benchmarks/results/cpu_rules.json`. The JSON is rewritten after every model, and a rerun
with `--resume` keeps the models it has.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Llama-3.2-1B takes 4.6 s per onnxruntime run on one thread: left out by default.
DEFAULT_MODELS = ("squeezenet", "squeezenet1_0", "mobilenet_v2", "efficientnet_b0",
                  "resnet18", "resnet50", "resnext50", "inception_v3", "nasnet_a", "csrnet",
                  "vgg19", "bert_small", "bert_base", "t5_small_encoder", "gpt2", "vit_b16")


def bench_model(name: str, args: argparse.Namespace) -> dict:
    from superopt import zoo
    from superopt.rewrite import Matcher, load_rules
    from superopt.rewrite.apply import apply_sites
    from superopt.xtat.realrunner import OrtTimer, verdict

    g = zoo.build(name, batch=args.batch)
    rules, _ = load_rules(None)
    matcher = Matcher(rules)
    timer = OrtTimer(threads=args.threads)
    rows = []
    for rule, sites in sorted(matcher.match(g).by_rule().items()):
        new = apply_sites(g, sites, matcher).graph
        if new.structural_hash == g.structural_hash:
            continue  # the rule's sites change nothing (a rewrite back to the same graph)
        t0 = time.perf_counter()
        t = timer([g, new, g], args.rounds, 2)
        ratio, ci = t.ratio(0, 1), t.ratio_ci(0, 1)
        aa, aa_ci = t.ratio(0, 2), t.ratio_ci(0, 2)
        rows.append({"rule": rule, "sites": len(sites), "input_ms": t.medians[0] * 1e3,
                     "rewritten_ms": t.medians[1] * 1e3, "ratio": ratio, "ci95": list(ci),
                     "aa": aa, "aa_ci95": list(aa_ci), "verdict": verdict(ratio, ci, aa_ci),
                     "wall_s": time.perf_counter() - t0})
        timer.clear()
        print(f"{name} b{args.batch} {rule:32s} sites {len(sites):4d} "
              f"ratio {ratio:.4f} [{ci[0]:.3f}, {ci[1]:.3f}] A/A {aa:.4f} "
              f"[{aa_ci[0]:.3f}, {aa_ci[1]:.3f}] {rows[-1]['verdict']}", flush=True)
    return {"model": name, "batch": args.batch, "nodes": len(g), "rules": rows,
            "faster": [r["rule"] for r in rows if r["verdict"] == "faster"],
            "slower": [r["rule"] for r in rows if r["verdict"] == "slower"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default="benchmarks/results/cpu_rules.json")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    out = Path(args.out)
    if not out.parent.is_dir():
        ap.error(f"--out {out}: folder {out.parent} does not exist")
    from superopt import zoo

    for m in args.models.split(","):
        if m not in zoo.names():
            ap.error(f"--models: unknown model {m!r}")
    rows: list[dict] = []
    if args.resume and out.exists():
        rows = [r for r in json.loads(out.read_text())["models"]
                if r["model"] in args.models.split(",") and r["batch"] == args.batch]
    import onnxruntime

    t0 = time.perf_counter()
    for m in args.models.split(","):
        if any(r["model"] == m for r in rows):
            continue
        rows.append(bench_model(m, args))
        tried = sum(len(r["rules"]) for r in rows)
        out.write_text(json.dumps({
            "what": __doc__.split("\n")[0], "note": args.note,
            "settings": {"batch": args.batch, "threads": args.threads, "rounds": args.rounds,
                         "graph_optimization_level": "ORT_ENABLE_ALL",
                         "onnxruntime": onnxruntime.__version__,
                         "affinity": sorted(os.sched_getaffinity(0)),
                         "host": platform.node()},
            "wall_s": time.perf_counter() - t0,
            "summary": {"models": len(rows), "rule_models_tried": tried,
                        "faster": {r["model"]: r["faster"] for r in rows if r["faster"]},
                        "slower": sum(len(r["slower"]) for r in rows),
                        "noise": tried - sum(len(r["faster"]) + len(r["slower"])
                                             for r in rows)},
            "models": rows}, indent=1) + "\n")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("interrupted; the models finished so far are in --out "
                         "(--resume runs the rest)") from None
