"""The `superopt` command line. Subsystems are imported inside each command so that
`superopt --help` stays instant."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

MODEL_HELP = ("a zoo model (resnet50, bert-base, ...), onnx:light_<name>, hf:bert-<tiny|small|base>, "
              "an .onnx file or a saved graph .json")


def _console() -> Any:
    from rich.console import Console

    # Not a terminal (CI logs, pipes): rich would wrap tables at 80 columns.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _load(spec: str, batch: int | None) -> Any:
    from superopt.importers import load_model

    return load_model(spec, batch=batch)


# ---- show ---------------------------------------------------------------------------

def cmd_show(args: argparse.Namespace) -> int:
    from rich.table import Table

    from superopt.ir.analysis import human, human_bytes, stats
    from superopt.ir.serialize import save, to_text

    graph = _load(args.model, args.batch)
    console = _console()
    if args.text:
        console.print(to_text(graph, max_nodes=args.max_nodes), markup=False)
        return 0
    s = stats(graph)
    summary = Table(title=f"{graph.name}", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    rows = [
        ("nodes", str(s.nodes)),
        ("inputs", ", ".join(f"{n.attr('name')} {n.type}" for n in graph.inputs)),
        ("outputs", ", ".join(str(graph.type_of(v)) for v in graph.outputs)),
        ("parameters", f"{s.params:,} ({human(s.params)})"),
        ("parameter bytes", human_bytes(s.param_bytes)),
        ("multiply-accumulates", f"{s.macs:,} ({human(s.macs)})"),
        ("FLOPs", f"{s.flops:,} ({human(s.flops)})"),
        ("activation bytes", human_bytes(s.activation_bytes)),
        ("structural hash", graph.structural_hash),
    ]
    for k, v in rows:
        summary.add_row(k, v)
    console.print(summary)
    hist = Table(title="op histogram")
    hist.add_column("op")
    hist.add_column("count", justify="right")
    for op, count in s.ops.most_common():
        hist.add_row(op, str(count))
    console.print(hist)
    if args.save:
        path = save(graph, args.save)
        console.print(f"saved {path}")
    return 0


# ---- run ----------------------------------------------------------------------------

def _time_reference(graph: Any, feeds: dict[str, Any], repeats: int) -> list[float]:
    from superopt.ir.interpret import interpret

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        interpret(graph, feeds)
        times.append(time.perf_counter() - t0)
    return times


def cmd_run(args: argparse.Namespace) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import statistics

    from rich.table import Table

    from superopt.backends import torch as tb
    from superopt.ir.interpret import random_feeds

    console = _console()
    graph = _load(args.model, args.batch)
    feeds = random_feeds(graph, seed=args.seed)
    with console.status(f"checking {graph.name}: torch ({args.device}, float64) vs reference"):
        cmp = tb.compare(graph, feeds, device=args.device, seed=args.seed, rtol=args.rtol)
    with console.status(f"timing {graph.name} on the {args.backend} backend"):
        if args.backend == "torch":
            timing = tb.benchmark(graph, feeds, device=args.device, warmup=args.warmup,
                                  repeats=args.repeats, seed=args.seed)
            times = list(timing.times)
        else:
            times = _time_reference(graph, feeds, max(1, args.repeats))
    table = Table(title=f"superopt run {args.model} --backend {args.backend}")
    for col in ("model", "nodes", "backend", "device", "median ms", "min ms", "runs",
                "max abs err", "max rel err", "values"):
        table.add_column(col, justify="right" if col not in ("model", "backend") else "left")
    table.add_row(graph.name, str(len(graph)), args.backend,
                  args.device if args.backend == "torch" else "cpu (numpy)",
                  f"{statistics.median(times) * 1e3:.2f}", f"{min(times) * 1e3:.2f}",
                  str(len(times)), f"{cmp.max_abs_err:.2e}", f"{cmp.max_rel_err:.2e}",
                  "[green]match[/]" if cmp.ok else "[red]MISMATCH[/]")
    console.print(table)
    return 0 if cmp.ok else 1


# ---- demo ---------------------------------------------------------------------------

DEMO_MODELS = ("resnet18", "squeezenet", "bert-small", "onnx:light_squeezenet", "hf:bert-tiny")


def cmd_demo(args: argparse.Namespace) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import statistics

    from rich.progress import Progress
    from rich.table import Table

    from superopt.backends import torch as tb
    from superopt.ir.analysis import human, stats
    from superopt.ir.interpret import random_feeds

    console = _console()
    table = Table(title="superopt demo: import, run on the reference interpreter and on torch")
    for col in ("model", "source", "nodes", "params", "MACs", "import s", "reference ms",
                "torch ms", "speedup", "max rel err", "values"):
        table.add_column(col, justify="left" if col in ("model", "source") else "right")
    failures = 0
    models = args.models or list(DEMO_MODELS)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("demo", total=len(models))
        for spec in models:
            progress.update(task, description=f"{spec}: import")
            t0 = time.perf_counter()
            graph = _load(spec, None)
            t_import = time.perf_counter() - t0
            s = stats(graph)
            feeds = random_feeds(graph, seed=0)
            progress.update(task, description=f"{spec}: reference")
            ref_ms = statistics.median(_time_reference(graph, feeds, 1)) * 1e3
            progress.update(task, description=f"{spec}: torch")
            cmp = tb.compare(graph, feeds)
            timing = tb.benchmark(graph, feeds, warmup=2, repeats=args.repeats)
            torch_ms = timing.median * 1e3
            failures += not cmp.ok
            source = spec.split(":")[0] if ":" in spec else "zoo"
            table.add_row(graph.name, source, str(len(graph)), human(s.params), human(s.macs),
                          f"{t_import:.2f}", f"{ref_ms:.1f}", f"{torch_ms:.2f}",
                          f"{ref_ms / torch_ms:.1f}x", f"{cmp.max_rel_err:.1e}",
                          "[green]match[/]" if cmp.ok else "[red]MISMATCH[/]")
            progress.advance(task)
    console.print(table)
    console.print("torch runs float32 on CPU (median of repeats after warm-up); values are "
                  "checked in float64 against the reference interpreter.")
    return 1 if failures else 0


# ---- entry point --------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="superopt",
        description="Find, prove and apply tensor-graph rewrites; tune them with an ML compiler.")
    parser.add_argument("--version", action="version", version="superopt 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("show", help="summarise a model: op histogram, parameters, FLOPs, bytes",
                       description="Summarise a model or graph file.")
    p.add_argument("model", metavar="MODEL_OR_FILE", help=MODEL_HELP)
    p.add_argument("--batch", type=int, default=None, help="batch size (zoo and ONNX models)")
    p.add_argument("--text", action="store_true", help="print the graph, one node per line")
    p.add_argument("--max-nodes", type=int, default=None, help="with --text: print at most N nodes")
    p.add_argument("--save", metavar="OUT.json", help="also save the graph as JSON")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("run", help="run a model on a backend: values check and timing",
                       description="Run a model on the reference interpreter or the torch "
                                   "backend, check values against the reference, and time it.")
    p.add_argument("model", metavar="MODEL_OR_FILE", help=MODEL_HELP)
    p.add_argument("--backend", choices=("reference", "torch"), default="torch")
    p.add_argument("--device", default="cpu", help="torch device (cpu or cuda)")
    p.add_argument("--batch", type=int, default=None, help="batch size (zoo and ONNX models)")
    p.add_argument("--repeats", type=int, default=10, help="timed repeats (median is reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed warm-up runs")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs and weights")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of the check")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("demo", help="the main job: import models, run them on both backends",
                       description="Import a few models (zoo, ONNX, HuggingFace), run each on "
                                   "the reference interpreter and the torch backend, and print "
                                   "a summary table.")
    p.add_argument("models", nargs="*", metavar="MODEL", help=f"models (default: {', '.join(DEMO_MODELS)})")
    p.add_argument("--repeats", type=int, default=5, help="timed torch repeats")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    from superopt.ir.errors import IRError

    try:
        return func(args)
    except IRError as e:
        print(f"superopt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("superopt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
