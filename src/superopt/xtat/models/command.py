"""`superopt costmodel dataset|train|eval`: generate cost-model data on the simulator,
train a model (on that data and on any tuning run's records, `--db`), and report its
accuracy next to the analytical model's. Exit status: 0 done, 2 bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _workloads(args: argparse.Namespace) -> list[tuple[str, int | None]]:
    from superopt.xtat.models import dataset as ds

    if not args.models:
        return ds.default_workloads()
    out: list[tuple[str, int | None]] = []
    batches = [int(b) for b in args.batches.split(",")]
    for m in (x.strip() for x in args.models.split(",") if x.strip()):
        out += [(m, None)] if m.startswith("synthetic:") else [(m, b) for b in batches]
    return out


def _data(args: argparse.Namespace) -> Any:
    from superopt.ir.errors import IRError
    from superopt.xtat.models import dataset as ds

    where = list(args.data or []) + list(args.db or [])
    if not where:
        raise IRError("no data: give --data DIR (superopt costmodel dataset) and/or --db RUNS")
    return ds.load(where)


def run(args: argparse.Namespace, console: Any) -> int:
    # (The parser imports this module: superopt.ir and numpy load only when it runs.)
    from superopt.ir.errors import IRError
    from superopt.xtat.models import create, load_model
    from superopt.xtat.models import dataset as ds
    from superopt.xtat.models.metrics import evaluate

    if args.action == "dataset":
        settings = ds.Settings(seed=args.seed, fusion=args.fusion, sites=args.sites,
                               tiles=args.tiles, hardware=args.hardware)

        def progress(name: str, n: int, resumed: int) -> None:
            console.print(f"{name}: {n} measured" + (f" ({resumed} resumed)" if resumed else ""))

        paths = ds.generate(args.out, _workloads(args), settings, progress)
        data = ds.load(paths)
        console.print(f"{len(paths)} records databases in {args.out}: {len(data)} kernel "
                      f"samples, data hash {data.data_hash}")
        return 0
    data = _data(args)
    train, test = data.split(args.split, args.seed) if args.split != "none" else (data, data)
    if args.action == "train":
        if not args.out:
            raise IRError("train needs --out MODEL")
        opts: dict[str, Any] = {}
        if args.epochs is not None:
            opts["epochs"] = args.epochs
        if args.rounds is not None:
            opts["rounds"] = args.rounds
        if args.model == "ensemble":  # each member takes its own options
            opts = {"gbt": {k: v for k, v in opts.items() if k == "rounds"},
                    "graphsage": {k: v for k, v in opts.items() if k == "epochs"}}
        model = create(args.model, data.hardware, **opts).fit(train)
        path = model.save(args.out)
        console.print(f"trained {model.describe()} on {len(train)} samples in "
                      f"{model.fit_s:.1f} s: saved {path}")
        report = {"train": len(train), "fit_s": model.fit_s}
        if args.split != "none":
            report["test"] = evaluate(model, test)
            console.print(json.dumps(report["test"], indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
        return 0
    model = load_model(args.model_file, data.hardware)
    rows = {"analytical": evaluate(create("analytical", data.hardware), test),
            model.name: evaluate(model, test)}
    from rich.table import Table

    t = Table(title=f"{len(test)} test samples ({args.split} split)")
    for c in ("model", "fusion MAPE %", "tile APE %", "tile tau", "tile OPA", "flags APE %"):
        t.add_column(c, justify="right")
    for name, r in rows.items():
        def f(task: str, key: str, r: dict = r) -> str:
            v = r.get(task, {}).get(key)
            return "-" if v is None else f"{v:.3f}"
        t.add_row(name, f("fusion", "mape"), f("tile", "ape"), f("tile", "tau"),
                  f("tile", "opa"), f("flags", "ape"))
    console.print(t)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("costmodel", help="cost models for the tuner: data, training, accuracy",
                       description="Learned cost models (GraphSAGE, gradient-boosted trees) "
                                   "and the analytical baseline. dataset: measure random "
                                   "layout, fusion, tile and flag configurations on the "
                                   "simulator into records databases (seeded, resumable); "
                                   "train: fit a model on them and on tuning records (--db); "
                                   "eval: tile APE, fusion MAPE, Kendall tau and OPA next to "
                                   "the analytical model's.")
    p.add_argument("action", choices=("dataset", "train", "eval"))
    p.add_argument("--out", help="dataset: output folder; train: model file")
    p.add_argument("--data", action="append", help="dataset folder or records file (repeatable)")
    p.add_argument("--db", action="append", help="tuning records to train on too (repeatable)")
    p.add_argument("--model", default="gbt", help="train: gbt (default), graphsage or ensemble "
                                                 "(the two averaged in log space)")
    p.add_argument("--model-file", help="eval: the saved model")
    p.add_argument("--models", help="dataset: comma-separated models (default: the zoo and "
                                    "two synthetic graphs)")
    p.add_argument("--batches", default="1,2,8,32",
                   help="dataset: batch sizes of --models (default 1,2,8,32)")
    p.add_argument("--fusion", type=int, default=160, help="dataset: fusion candidates per "
                                                           "workload (default 160)")
    p.add_argument("--sites", type=int, default=16, help="dataset: tile groups per workload")
    p.add_argument("--tiles", type=int, default=16, help="dataset: tiles per group")
    p.add_argument("--split", choices=("random", "models", "none"), default="random",
                   help="train/eval split (models: resnet18, squeezenet, bert_small held out)")
    p.add_argument("--epochs", type=int, default=None, help="graphsage epochs")
    p.add_argument("--rounds", type=int, default=None, help="gbt boosting rounds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hardware", default="v4", help="dataset: TPU preset (default v4)")
    p.add_argument("--json", metavar="OUT.json", help="write the figures as JSON")


__all__ = ["add_parser", "run"]
