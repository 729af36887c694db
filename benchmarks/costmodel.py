"""Benchmark: learned cost models (issue 18) against the analytical model.

Sections (tables on stdout; every figure in one JSON file; a scatter PNG):

1. accuracy: gbt and graphsage trained on the simulator data (`superopt costmodel
   dataset`: zoo at batch 1 and 8 plus two synthetic graphs), tested on the random split
   and on the held-out-model split (resnet18, squeezenet, bert_small never in training):
   tile APE, fusion MAPE, Kendall tau and OPA, next to the analytical model and as ratios
   to it beside the paper's (APE 0.53x, MAPE 0.145x; goals 0.5x and 0.15x); training time
   and prediction throughput (kernel configurations per second, features included);
2. transfer: a gbt trained on simulator data of TPU v3 only ranks the real TpuGraphs tile
   measurements (package data): Kendall tau and top-1 per kernel, next to the simulator's
   own ranking and the analytical model's;
3. tuner: on the three held-out models, the measurements plain annealing (the joint
   schedule) needs to reach its own best at `--budget` and the measurements the same
   search with the gbt top-k ranking needs to reach that time (median over seeds).

Run: `.venv/bin/python benchmarks/costmodel.py [--data DIR] [--budget N] [--seeds N]`.
The data folder is generated when missing and completed when partial (resumable).
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
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

from superopt.xtat.models import create
from superopt.xtat.models import dataset as ds
from superopt.xtat.models.metrics import evaluate, kendall_tau

RESULTS = Path(__file__).parent / "results"
PAPER = {"ape_ratio": 3.3 / 6.2, "mape_ratio": 4.5 / 31.1}
V3_WORKLOADS = [("resnet50", 1), ("inception_v3", 1), ("bert_small", 8), ("vgg19", 1),
                ("synthetic:400", None)]


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def accuracy(data: ds.KernelData, opts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for split in ("random", "models"):
        train, test = data.split(split, seed=0)
        rows: dict[str, Any] = {"train": len(train), "test": len(test)}
        for name in ("analytical", "gbt", "graphsage"):
            model = create(name, data.hardware, **opts.get(name, {}))
            model.fit(train)
            start = time.perf_counter()
            # A fresh model's featurizer has no cache: throughput includes features.
            fresh = create(name, data.hardware, **opts.get(name, {}))
            if name != "analytical":
                fresh.set_state(model.state())
                fresh.fitted = True
            fresh.predict(test.samples)
            thr = len(test) / (time.perf_counter() - start)
            r = evaluate(model, test)
            r["fit_s"] = model.fit_s
            r["kernels_per_s"] = thr
            rows[name] = r
            if split == "models":
                out.setdefault("_models", {})[name] = model
        base = rows["analytical"]
        for name in ("gbt", "graphsage"):
            r = rows[name]
            r["ape_ratio"] = r["tile"]["ape"] / base["tile"]["ape"]
            r["mape_ratio"] = r["fusion"]["mape"] / base["fusion"]["mape"]
            r["goal_met"] = r["ape_ratio"] <= 0.5 and r["mape_ratio"] <= 0.15
        out[split] = rows
        print(f"\n{split} split: {len(train)} training samples, {len(test)} test samples")
        print(f"{'model':>11} {'tile APE':>9} {'x ana':>6} {'fus MAPE':>9} {'x ana':>6} "
              f"{'tau':>6} {'OPA':>6} {'flg APE':>8} {'fit s':>7} {'kern/s':>8}")
        for name in ("analytical", "gbt", "graphsage"):
            r = rows[name]
            print(f"{name:>11} {r['tile']['ape']:9.2f} {_fmt(r.get('ape_ratio')):>6} "
                  f"{r['fusion']['mape']:9.2f} {_fmt(r.get('mape_ratio')):>6} "
                  f"{_fmt(r['tile']['tau']):>6} {_fmt(r['tile']['opa']):>6} "
                  f"{r['flags']['ape']:8.2f} {r['fit_s']:7.1f} {r['kernels_per_s']:8.0f}")
    print(f"paper ratios: APE {PAPER['ape_ratio']:.3f}x, MAPE {PAPER['mape_ratio']:.3f}x")
    return out


def scatter(data: ds.KernelData, models: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, test = data.split("models")
    fus = test.task("fusion").samples
    meas = np.asarray([s.measured for s in fus]) * 1e6
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=True)
    for ax, name in zip(axes, ("analytical", "gbt", "graphsage"), strict=True):
        pred = models[name].predict(fus) * 1e6
        ax.loglog(meas, pred, ".", ms=2, alpha=0.4)
        lo, hi = meas.min(), meas.max()
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_title(f"{name} (held-out models)")
        ax.set_xlabel("measured kernel time (us)")
    axes[0].set_ylabel("predicted (us)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def transfer(data_dir: Path, settings: ds.Settings) -> dict[str, Any]:
    from superopt.tpu_sim import KernelCosts, get_hardware
    from superopt.tpu_sim.replay import load_tiles, prepare_all

    v3 = data_dir.parent / f"{data_dir.name}_v3"
    ds.generate(v3, V3_WORKLOADS, ds.Settings(**{**settings.__dict__, "hardware": "v3"}))
    data = ds.load(v3)
    gbt = create("gbt", "v3").fit(data)
    ana = create("analytical", "v3")
    sim = KernelCosts(get_hardware("v3"))
    kernels, skipped = prepare_all(load_tiles())
    rows = []
    for pk in kernels:
        if not pk.tunable or len(pk.tiles) < 2:
            continue
        its = [(pk.sig, t, pk.flags(sim, t)) for t in pk.tiles]
        meas = list(pk.measured)
        best = min(meas)
        r = {"kernel": pk.name, "rows": len(meas)}
        for name, sc in (("gbt", gbt.score_items(its)), ("analytical", ana.score_items(its)),
                         ("simulator", np.asarray(pk.times(sim)))):
            sc = np.asarray(sc, dtype=np.float64)
            r[f"{name}_tau"] = kendall_tau(list(sc), meas)
            r[f"{name}_top1"] = meas[int(np.argmin(sc))] / best
        rows.append(r)
    print(f"\ntransfer to real TPU v3 tiles (gbt trained on {len(data)} simulator samples of "
          f"v3 only; {len(rows)} tunable kernels, {len(skipped)} skipped)")
    print(f"{'kernel':>14} {'rows':>5} " + " ".join(f"{n + ' tau':>14} {n + ' top1':>15}"
                                                   for n in ("gbt", "analytical", "simulator")))
    for r in rows:
        print(f"{r['kernel']:>14} {r['rows']:5d} " + " ".join(
            f"{_fmt(r[n + '_tau']):>14} {_fmt(r[n + '_top1']):>15}"
            for n in ("gbt", "analytical", "simulator")))
    summary = {f"{n}_{k}": statistics.median(r[f"{n}_{k}"] for r in rows)
               for n in ("gbt", "analytical", "simulator") for k in ("tau", "top1")}
    print("median: " + ", ".join(f"{k} {v:.3f}" for k, v in summary.items()))
    return {"kernels": rows, "median": summary, "train_samples": len(data),
            "skipped": [s.name for s in skipped]}


def tuner(model: Any, budget: int, seeds: int, models: list[str]) -> dict[str, Any]:
    from superopt.xtat.models.topk import wrapper
    from superopt.xtat.session import open_session
    from superopt.xtat.tuner import Tuner, make_schedule

    out: dict[str, Any] = {}
    print(f"\ntuner: measurements to reach plain annealing's best at {budget} (joint schedule)")
    for name in models:
        s = open_session({"model": name, "batch": 1})
        runs = []
        for seed in range(seeds):
            plain = Tuner(s.pipeline, s.runner, s.default, seed=seed)
            rp = plain.run(make_schedule("joint"), budget)
            target = rp.history[-1].best
            need_plain = next(p.step + 1 for p in rp.history if p.best <= target)
            wrap = wrapper(model)
            ranked = Tuner(s.pipeline, s.runner, s.default, seed=seed, wrap=wrap)
            start = time.perf_counter()
            rm = ranked.run(make_schedule("joint"), budget)
            wall = time.perf_counter() - start
            need_model = next((p.step + 1 for p in rm.history if p.best <= target), None)
            runs.append({"seed": seed, "target_s": target, "plain": need_plain,
                         "model": need_model, "model_best_s": rm.history[-1].best,
                         "model_evaluations": rm.evaluations, "model_wall_s": wall,
                         "predicted_kernels": wrap.costs.predicted,
                         "plain_speedup": rp.speedup, "model_speedup": rm.speedup})
            print(f"  {name} seed {seed}: plain reaches {target * 1e6:.2f} us at "
                  f"{need_plain}; with the model at {need_model} "
                  f"(model's best {rm.history[-1].best * 1e6:.2f} us in {rm.evaluations})")
        reached = [r["model"] for r in runs]
        out[name] = {"runs": runs, "median_plain": statistics.median(r["plain"] for r in runs),
                     "median_model": statistics.median(x if x is not None else budget + 1
                                                       for x in reached)}
        print(f"  {name}: median plain {out[name]['median_plain']}, with model "
              f"{out[name]['median_model']} (>{budget}: not reached)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/tmp/superopt_costmodel_data")
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--skip", default="", help="sections to skip: accuracy,transfer,tuner")
    ap.add_argument("--out", default=str(RESULTS / "costmodel.json"))
    args = ap.parse_args(argv)
    skip = set(args.skip.split(","))
    settings = ds.Settings()
    data_dir = Path(args.data)
    # Sections run separately (--skip) update one JSON file.
    result: dict[str, Any] = json.loads(Path(args.out).read_text()) \
        if Path(args.out).exists() else {}
    result |= {"machine": platform.processor() or platform.machine(),
                              "cpus": os.cpu_count(), "python": sys.version.split()[0],
                              "settings": settings.as_dict()}
    start = time.perf_counter()
    ds.generate(data_dir, ds.default_workloads(), settings)
    data = ds.load(data_dir)
    result["data"] = {"samples": len(data), "hash": data.data_hash,
                      "tasks": {t: len(data.task(t)) for t in ("fusion", "tile", "flags")},
                      "groups": len(data.groups()), "workloads": len(ds.db_paths(data_dir)),
                      "load_s": time.perf_counter() - start}
    print(f"data: {len(data)} kernel samples ({result['data']['tasks']}), hash {data.data_hash}")
    opts = {"gbt": {"rounds": 300}, "graphsage": {"epochs": args.epochs}}
    models: dict[str, Any] = {}
    if "accuracy" not in skip:
        acc = accuracy(data, opts)
        models = acc.pop("_models")
        result["accuracy"] = acc
        scatter(data, models, RESULTS / "costmodel_scatter.png")
        Path(args.out).write_text(json.dumps(result, indent=1))
    if "transfer" not in skip:
        result["transfer"] = transfer(data_dir, settings)
        Path(args.out).write_text(json.dumps(result, indent=1))
    if "tuner" not in skip:
        # Trained without the three models it tunes (the held-out split).
        gbt = models.get("gbt") or create("gbt", data.hardware).fit(data.split("models")[0])
        result["tuner"] = tuner(gbt, args.budget, args.seeds, list(ds.HELD_OUT))
        result["tuner_settings"] = {"budget": args.budget, "seeds": args.seeds}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
