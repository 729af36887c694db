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
              "hf:<family> (gpt2, llama, vit, ...: a transformers architecture from a small "
              "config), an .onnx file, a torch.export .pt2 program or a saved graph .json")


def _console() -> Any:
    from superopt.progress import console

    return console()


def _device(text: str) -> str:
    import re

    if not re.fullmatch(r"cpu|cuda(:\d{1,2})?|mps", text):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda, cuda:N or mps, found {text!r}")
    return text


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
                  ("[yellow]match, NaN/inf[/]" if cmp.nonfinite else "[green]match[/]")
                  if cmp.ok else "[red]MISMATCH[/]")
    console.print(table)
    if cmp.nonfinite:
        # Equal NaNs are not a meaningful match: say so rather than print a clean "match".
        console.print(f"[yellow]warning[/]: {cmp.nonfinite} of {cmp.size} output values are "
                      "NaN or inf in the reference too; the check compared the rest")
    return 0 if cmp.ok else 1


# ---- demo ---------------------------------------------------------------------------

def cmd_demo(args: argparse.Namespace) -> int:
    from superopt.demo import run_demo

    return run_demo(args.out_dir, model=args.model, tune_model=args.tune_model,
                    tune_budget=args.tune_budget, jobs=args.jobs)


# ---- simulate -----------------------------------------------------------------------

def cmd_simulate(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from rich.table import Table

    from superopt.ir.analysis import human, human_bytes
    from superopt.tpu_sim import compile_default, get_hardware, problems, simulate

    hw = get_hardware(args.hardware)
    graph = _load(args.model, args.batch)
    console = _console()
    with console.status(f"compiling {graph.name} for TPU {hw.name}"):
        t0 = time.perf_counter()
        compiled = compile_default(graph, hw)
        t_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        sim = simulate(compiled)
        t_sim = time.perf_counter() - t0
    found = problems(compiled, lint=False)
    copies = sum(1 for n in compiled.graph.nodes if n.op == "layout") - sum(
        1 for n in graph.nodes if n.op == "layout")
    summary = Table(title=f"superopt simulate {args.model} --hardware {hw.name} "
                          "(default compiler)", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    rows = [
        ("hardware", f"TPU {hw.name} core: {hw.peak_flops / 1e12:.1f} TFLOP/s, "
                     f"{hw.hbm_bytes_per_s / 1e9:.0f} GB/s, {hw.vmem_bytes / 2**20:.0f} MiB VMEM"),
        ("nodes / kernels", f"{len(graph)} / {len(sim.kernels)}"),
        ("layout copies inserted", str(copies)),
        ("simulated time", f"{sim.time * 1e3:.4f} ms"),
        ("roofline lower bound", f"{sim.roofline * 1e3:.4f} ms (time / bound = "
                                 f"{sim.roofline_ratio:.2f})"),
        ("useful FLOPs", f"{human(sim.flops)} ({100 * sim.flops_fraction:.1f}% of peak)"),
        ("HBM traffic", f"{human_bytes(sim.bytes)} ({100 * sim.bandwidth_fraction:.1f}% of "
                        "bandwidth)"),
        ("compulsory bytes", human_bytes(sim.compulsory_bytes)),
        ("time by bound", ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in sim.breakdown().items())),
        ("compile / simulate", f"{t_compile:.3f} s / {t_sim * 1e3:.1f} ms"),
        ("valid", "[green]yes[/]" if not found else f"[red]no[/]: {found[0]}"),
    ]
    for k, v in rows:
        summary.add_row(k, v)
    console.print(summary)
    top = Table(title=f"top {args.top} kernels by time")
    for col in ("root", "ops", "time us", "% total", "bound", "compute us", "memory us",
                "overhead us", "FLOP/B", "tile", "flags"):
        top.add_column(col, justify="left" if col in ("ops", "bound", "tile", "flags") else "right")
    for r in sim.top(args.top):
        top.add_row(f"%{r.root}", r.name if len(r.name) <= 40 else r.name[:37] + "...",
                    f"{r.time * 1e6:.2f}", f"{100 * r.time / sim.time:.1f}", r.bound,
                    f"{r.cost.compute * 1e6:.2f}", f"{r.cost.memory * 1e6:.2f}",
                    f"{r.cost.overhead * 1e6:.2f}", f"{r.intensity:.1f}",
                    "x".join(str(x) for x in r.tile), r.flags.short())
    console.print(top)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        data = sim.to_json() | {"nodes": len(graph), "compile_s": t_compile,
                                "simulate_s": t_sim, "layout_copies": copies}
        out.write_text(json.dumps(data, indent=1))
        console.print(f"wrote {out}")
    if args.plot:
        from superopt.tpu_sim.plot import roofline_png

        console.print(f"wrote {roofline_png(sim, args.plot)}")
    return 0 if not found else 1


def cmd_covers(args: argparse.Namespace) -> int:
    from superopt.substitutions.covers_command import cmd_covers as run

    return run(args)


# ---- generate -----------------------------------------------------------------------

# From this size on, generate prunes derived rules unless told not to: at 4 ops 79% of the
# 30,499 rules of the largest size are derived by the smaller ones, and testing them all
# at other shapes would take the run from 27 minutes to over an hour on 2 cores.
PRUNE_DERIVED_FROM = 4


def prune_derived_default(max_ops: int, no_verify: bool, asked: bool | None) -> bool:
    """Whether generate prunes derived rules: as asked, else from PRUNE_DERIVED_FROM ops
    on when the rules are tested (pruning reads the tested smaller rules)."""
    if asked and no_verify:
        from superopt.ir.errors import IRError

        # Pruning reads the tested smaller rules; without the test it would do nothing.
        raise IRError("--prune-derived needs the rules' test at other shapes, which "
                      "--no-verify skips")
    if asked is None:
        return max_ops >= PRUNE_DERIVED_FROM and not no_verify
    return asked


def cmd_generate(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from superopt.substitutions.generator import generate
    from superopt.substitutions.library import save_library
    from superopt.substitutions.presets import make_config
    from superopt.substitutions.text import format_rules

    cfg = make_config(args.preset, max_ops=args.max_ops,
                      ops=[o for o in (args.ops or "").split(",") if o] or None,
                      inputs=args.inputs, max_outputs=args.max_outputs, seed=args.seed)
    workers = args.workers or (os.cpu_count() or 1)
    prune = prune_derived_default(cfg.max_ops, args.no_verify, args.prune_derived)
    if args.executor is not None:
        from superopt.executor import check_executor

        check_executor(args.executor)  # a bad spec or no scheduler, before any work
    console = _console()
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total}"), TimeElapsedColumn(), console=console, transient=True,
                  disable=args.quiet) as progress:
        tasks: dict[str, Any] = {}

        def report(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                label = {"enumerate": "enumerating shards", "candidates": "pairing and pruning",
                         "verify": "checking rules"}.get(stage, stage)
                tasks[stage] = progress.add_task(label, total=total)
            progress.update(tasks[stage], completed=done, total=total)

        result = generate(cfg, workers=workers, workdir=args.workdir, progress=report,
                          verify=not args.no_verify, drop_instances=args.drop_instances,
                          executor=args.executor, prune_derived=prune)
    meta = {"config": cfg.key(), "stages": result.stages,
            "times_s": {k: round(v, 3) for k, v in result.times.items()},
            "peak_rss_mb": result.info["peak_rss_mb"]}
    path = save_library(result.rules, args.out, meta=meta)
    if args.text:
        with open(args.text, "w") as f:
            f.write(format_rules(result.rules))
    table = Table(title=f"superopt generate --preset {cfg.preset} --max-ops {cfg.max_ops}")
    table.add_column("stage")
    table.add_column("count", justify="right")
    for k, v in result.stages.items():
        table.add_row(k, f"{v:,}")
    table.add_section()
    t = result.times
    peak = result.info["peak_rss_mb"]
    table.add_row("wall time", f"{t['total']:.1f} s")
    table.add_row("CPU time (parent + workers)",
                  f"{t['cpu_parent'] + t['cpu_workers']:.1f} s")
    table.add_row("peak memory (parent / largest worker)",
                  f"{peak['parent']:.0f} / {peak['largest_worker']:.0f} MB")
    if args.executor is None:
        runs_on = f"{workers} workers" if workers > 1 else "1 process"
    else:  # a Dask scheduler's cluster has its own workers: --workers does not count them
        from superopt.executor import parse_executor

        runs_on = parse_executor(args.executor).describe(workers)
    table.add_row("ran on; shards (resumed)",
                  f"{runs_on}; {result.info['shards']} ({result.info['shards_resumed']})")
    resumed = result.info.get("stages_resumed") or []
    if resumed or result.info.get("shape_tests_resumed"):
        table.add_row("resumed from the work directory",
                      ", ".join([*resumed, f"{result.info.get('shape_tests_resumed', 0)} "
                                 "rules tested at other shapes"]))
    console.print(table)
    console.print(f"wrote {len(result.rules)} rules to {path}"
                  + (f" and {args.text}" if args.text else ""))
    return 0


# ---- verify -------------------------------------------------------------------------

def cmd_verify(args: argparse.Namespace) -> int:
    from superopt.verifier.command import run

    return run(args)


# ---- mutants ------------------------------------------------------------------------

def cmd_mutants(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from superopt.mutants.report import table, totals, write_json
    from superopt.mutants.search import Settings, search_model
    from superopt.substitutions.library import save_library

    console = _console()
    graph = _load(args.model, args.batch)
    settings = Settings(depth=args.depth, max_ops=args.max_ops, min_equal=args.min_equal,
                        dfs=not args.no_dfs, dfs_states=args.dfs_states,
                        dfs_seconds=args.dfs_seconds, measure_top=1 if args.torch else 0)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("subprograms", total=None)

        def step(i: int, n: int, name: str) -> None:
            progress.update(task, total=n, completed=i, description=f"PET {name}")

        report = search_model(graph, settings, batch=args.batch, use_sim=not args.no_sim,
                              use_torch=args.torch, progress=step, limit=args.limit)
    console.print(table(report))
    t = totals(report)
    console.print(f"{t['subprograms']} subprograms, {t['candidates']} candidates, "
                  f"{t['box_tested']} box-tested, {t['mutants']} mutants kept "
                  f"({t['fully_equivalent']} fully, {t['partially_equivalent']} partially "
                  f"equivalent, all corrected programs exactly equal); {t['seconds']} s")
    if not report.simulator:
        console.print("TPU simulator not available: simulated times are not reported")
    rules = report.rules
    if args.out:
        path = save_library(rules, args.out, meta={"model": graph.name, "batch": args.batch,
                                                   "generator": "pet"})
        console.print(f"wrote {len(rules)} PET rules to {path}")
    if args.json:
        console.print(f"wrote {write_json([report], args.json)}")
    errors = [e for s in report.subprograms for e in s.errors]
    for e in errors[:5]:
        console.print(f"[red]error[/]: {e}", markup=True)
    return 1 if errors else 0


# ---- optimize -----------------------------------------------------------------------

def cmd_optimize(args: argparse.Namespace) -> int:
    from superopt.rewrite.command import run

    return run(args, _console(), _load)


# ---- entry point --------------------------------------------------------------------

def cmd_tune(args: argparse.Namespace) -> int:
    from superopt.xtat.command import run

    return run(args, _console())


def cmd_costmodel(args: argparse.Namespace) -> int:
    from superopt.xtat.models.command import run

    return run(args, _console())


def build_parser() -> argparse.ArgumentParser:
    from superopt.options import OneLineParser

    parser = OneLineParser(
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
    p.add_argument("--device", default="cpu", type=_device, help="torch device (cpu or cuda)")
    p.add_argument("--batch", type=int, default=None, help="batch size (zoo and ONNX models)")
    p.add_argument("--repeats", type=int, default=10, help="timed repeats (median is reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed warm-up runs")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs and weights")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of the check")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("demo", help="the main job: generate, verify, optimize, export, tune",
                       description="Generate a small TASO rule library, verify it (and refute "
                                   "a false rule), optimize a model with it, export the result "
                                   "as ONNX and run it in onnxruntime, tune a model jointly, "
                                   "and print a summary table (a few minutes on 2 cores).")
    p.add_argument("--out-dir", default="out/demo", help="where the files go")
    p.add_argument("--model", default="bert_small", help="the model to optimize and export")
    p.add_argument("--tune-model", default="squeezenet", help="the model to tune")
    p.add_argument("--tune-budget", type=int, default=40, help="tuning measurements")
    p.add_argument("--jobs", type=int, default=2, help="processes for generate and verify")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("simulate", help="default-compile a model for a TPU core and simulate it",
                       description="Compile a model with the default (XLA-like) compiler for "
                                   "one simulated TPU core and report its runtime, the top "
                                   "kernels, achieved FLOP/s and bandwidth, and the roofline "
                                   "lower bound.")
    p.add_argument("model", metavar="MODEL_OR_FILE", help=MODEL_HELP)
    p.add_argument("--hardware", default="v4", help="TPU preset: v4 (default), v3 or v5e")
    p.add_argument("--batch", type=int, default=None, help="batch size (zoo and ONNX models)")
    p.add_argument("--top", type=int, default=10, help="kernels in the top-kernels table")
    p.add_argument("--json", metavar="OUT.json", help="write the results (with every kernel)")
    p.add_argument("--plot", metavar="OUT.png", help="draw the per-kernel roofline")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("generate", help="enumerate graphs and write a rule library (TASO)",
                       description="Enumerate every graph of up to N operators over a set of "
                                   "typed inputs, fingerprint the outputs exactly mod p, keep "
                                   "equal pairs confirmed on fresh inputs, prune as TASO does, "
                                   "check each rule with the IR's interpreter and write a "
                                   "JSON rule library.")
    p.add_argument("--preset", choices=("taso", "modern", "linear", "conv", "small"), default="taso",
                   help="inputs and operator templates (taso: TASO's generator setting)")
    p.add_argument("--max-ops", type=int, default=None, help="largest graph size (default 3)")
    p.add_argument("--max-outputs", type=int, choices=(1, 2), default=None,
                   help="also look for two-output rules (default 2)")
    p.add_argument("--ops", default=None, metavar="A,B,...",
                   help="keep only these templates or ops (e.g. matmul,ewadd,concat2d_1)")
    p.add_argument("--inputs", default=None, metavar="NAME:2x4,...",
                   help="replace the preset's inputs (e.g. x1:2x4,x2:2x4,w1:4x4,s0:scalar)")
    p.add_argument("--seed", type=int, default=None, help="seed of the random inputs")
    p.add_argument("--out", default="rules.json", metavar="LIB.json",
                   help="rule library to write (.json or .jsonl)")
    p.add_argument("--text", default=None, metavar="LIB.rules", help="also write the text form")
    p.add_argument("--workers", type=int, default=0,
                   help="processes for the enumeration (default 0: one per core)")
    p.add_argument("--executor", default=None, metavar="SPEC",
                   help="run the shards and rule checks on 'process' (a spawned pool), "
                        "'dask' (a local Dask cluster) or dask://HOST:PORT (a Dask scheduler) "
                        "instead of forked workers")
    p.add_argument("--workdir", default=None, metavar="DIR",
                   help="keep finished shards here; an interrupted run resumes from them")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the final check of every rule with the IR's interpreter")
    p.add_argument("--drop-instances", action="store_true",
                   help="leave out rules another rule yields by substituting a variable")
    p.add_argument("--prune-derived", action=argparse.BooleanOptionalAction, default=None,
                   help="leave out the largest rules that the smaller ones, tested first, "
                        "derive by rewriting (superopt covers), before testing them at "
                        "other shapes (TASO's pruning, decided by derivation); on by "
                        f"default from --max-ops {PRUNE_DERIVED_FROM} (unless --no-verify)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_generate)
    p = sub.add_parser("covers", help="which rules a library derives by rewriting",
                       description="Check each rule of RULES against LIB by bounded equality "
                       "saturation: covered (with the chain of LIB rules applied), not covered, "
                       "or budget exhausted. Without RULES, prune LIB: keep the rules its "
                       "smaller rules do not derive.")
    p.add_argument("lib", metavar="LIB", help="the library (any rule file format)")
    p.add_argument("rules", metavar="RULES", nargs="?",
                   help="rules to check (any format); omitted: prune LIB by its own rules")
    p.add_argument("--max-nodes", type=int, default=4000, help="e-nodes per check (4000)")
    p.add_argument("--time-limit", type=float, default=2.0, help="seconds per check (2)")
    p.add_argument("--max-iters", type=int, default=12, help="saturation rounds per check (12)")
    p.add_argument("--jobs", type=int, default=0, help="processes (0: one per core)")
    p.add_argument("--json", metavar="REPORT.json", help="write every verdict as JSON")
    p.add_argument("--out", metavar="PRUNED.json", help="without RULES: write the rules kept")
    p.add_argument("--commutative", action="store_true",
                   help="also apply ewadd/ewmul commutativity (the generator's rules hold "
                        "modulo it and it never emits it)")
    p.add_argument("-v", "--verbose", action="store_true", help="also list covered rules")
    p.set_defaults(func=cmd_covers)
    p = sub.add_parser("verify", help="prove rule files with Z3, refute false rules",
                       description="Verify substitution rules: random testing against the "
                                   "reference semantics first (a counterexample refutes a "
                                   "rule), then a Z3 proof per output from validated operator "
                                   "axioms. PROVED needs a satisfiable premise and a concrete "
                                   "instance where both sides agree; a rule with no instance "
                                   "is INVALID. A rule that cannot be read (one-sided input, "
                                   "inconsistent ranks, unsupported op) is reported INVALID or "
                                   "UNKNOWN with its file:line or .pb rule index and the rest "
                                   "is verified. Exit status: 0 nothing refuted or invalid, 1 "
                                   "some rule refuted or invalid (or, with --strict, unknown), "
                                   "2 bad input (syntax error at file:line:col, missing, empty "
                                   "or truncated file, a directory), 3 an axiom failed "
                                   "validation.")
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="rule files: our text or JSON libraries, Tensat's equations or "
                        "s-expressions, TASO's graph_subst.pb")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="Z3 time limit per rule output in seconds (default 10)")
    p.add_argument("--restarts", type=int, default=1, metavar="N",
                   help="Z3 runs per rule output that times out, each with the next seed and "
                        "the full time limit (default 1; proof times of deep rules vary "
                        "widely with the seed)")
    p.add_argument("--jobs", type=int, default=0, metavar="N",
                   help="worker processes (default: the usable cores, at most 8)")
    p.add_argument("--executor", default=None, metavar="SPEC",
                   help="where the per-rule work runs: 'process' (default: a local process "
                        "pool), 'dask' (a local Dask cluster) or dask://HOST:PORT (a Dask "
                        "scheduler)")
    p.add_argument("--json", metavar="OUT.json", help="write every result as JSON")
    p.add_argument("--save", metavar="LIB.json",
                   help="write the rules as a library with their proof status")
    p.add_argument("--axioms", action="append", metavar="LIB",
                   help="also use this rule library as axioms (validated first); repeatable")
    p.add_argument("--no-builtin-axioms", action="store_true",
                   help="use only --axioms libraries (is a rule implied by my library?)")
    p.add_argument("--check-axioms", action="store_true",
                   help="validate the axioms afresh and print a table (alone: only that)")
    p.add_argument("--list-axioms", action="store_true",
                   help="print the built-in axioms in the rule text format")
    p.add_argument("--strict", action="store_true", help="exit 1 unless every rule is proved")
    p.add_argument("--generalise", action="store_true",
                   help="TASO/Tensat rules are verified at TASO's input shapes; then also "
                        "prove each proved one under the weakest condition found (as read, "
                        "attributes fixed, dimension equalities) and report those shapes")
    p.add_argument("--samples", type=int, default=12, metavar="N",
                   help="well-typed random instances tested per rule (default 12)")
    p.add_argument("--axiom-samples", type=int, default=0, metavar="N",
                   help="instances per axiom direction in validation (default 8, 24 with "
                        "--check-axioms)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampler and test values")
    p.add_argument("--no-cache", action="store_true",
                   help="validate the axioms even if a cached validation matches")
    p.add_argument("--checkpoint", metavar="FILE.jsonl",
                   help="append each verdict to FILE as it is reached; a rerun with the same "
                        "FILE, rules and settings verifies only the rules left (after Ctrl-C "
                        "or a kill)")
    p.add_argument("--verbose", action="store_true", help="list every rule, not only problems")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("mutants", help="PET: partially equivalent mutants with corrections",
                       description="Split a model into multi-linear subprograms, enumerate "
                                   "mutants, test their output boxes exactly mod p, correct "
                                   "the wrong boxes and export the corrected mutants as rules.")
    p.add_argument("model", metavar="MODEL_OR_FILE", help=MODEL_HELP)
    p.add_argument("--batch", type=int, default=None, help="batch size (zoo and ONNX models)")
    p.add_argument("--depth", type=int, default=4, help="ops per mutant (reshape/transpose "
                   "runs count once)")
    p.add_argument("--max-ops", type=int, default=4, help="ops per subprogram")
    p.add_argument("--out", metavar="pet_rules.json", help="write the corrected mutants as a "
                   "rule library")
    p.add_argument("--json", metavar="REPORT.json", help="write the full report as JSON")
    p.add_argument("--min-equal", type=float, default=0.5,
                   help="keep mutants equal on at least this fraction of output positions")
    p.add_argument("--dfs-states", type=int, default=3000, help="search states per subprogram")
    p.add_argument("--dfs-seconds", type=float, default=3.0, help="search time per subprogram")
    p.add_argument("--no-dfs", action="store_true", help="only the transformation families")
    p.add_argument("--limit", type=int, default=None, help="at most N subprograms")
    p.add_argument("--torch", action="store_true", help="also time the best mutant of each "
                   "subprogram on the torch backend")
    p.add_argument("--no-sim", action="store_true", help="skip the TPU simulator")
    p.set_defaults(func=cmd_mutants)

    p = sub.add_parser("optimize", help="search rewrites of a model (TASO), check and time it",
                       description="Optimize a model with substitution rules: TASO's cost-based "
                                   "backtracking search (or Tensat's equality saturation, "
                                   "--search eqsat), then a value check against the "
                                   "original (reference interpreter) and the torch CPU time "
                                   "of both graphs side by side. Ctrl-C ends the search early "
                                   "and keeps the best graph found so far.")
    p.add_argument("model", metavar="MODEL_OR_FILE", help=MODEL_HELP)
    p.add_argument("--rules", metavar="LIB", default=None,
                   help="a rule file (.rules text) or library (.json/.jsonl), or a library "
                        "shipped with superopt: 'groups' (group merges, depthwise channel "
                        "padding) or 'runtime' (against onnxruntime's slower fused kernels); "
                        "default: the starter library shipped with superopt")
    p.add_argument("--cost", choices=("sim", "simop", "torch", "onnxruntime", "flops"),
                   default="sim",
                   help="search cost: the TPU simulator's default-compiled time (sim, default),"
                        " the sum of each op's simulated time alone (simop), the sum of "
                        "per-op torch CPU times as in TASO (torch) or of per-op onnxruntime "
                        "CPU times (onnxruntime), or an analytical FLOP/byte count (flops)")
    p.add_argument("--search", choices=("backtracking", "eqsat"), default="backtracking",
                   help="backtracking: TASO's cost-ordered search (default); eqsat: "
                        "equality saturation as in Tensat (every rewrite of the same rules "
                        "into an e-graph, then the cheapest graph extracted)")
    p.add_argument("--extraction", choices=("ilp", "greedy"), default="ilp",
                   help="with --search eqsat: exact extraction by integer programming "
                        "(HiGHS, default) or greedy per e-class")
    p.add_argument("--node-limit", type=int, default=50_000, metavar="N",
                   help="with --search eqsat: stop saturating at N e-nodes (default 50000)")
    p.add_argument("--iter-limit", type=int, default=6, metavar="N",
                   help="with --search eqsat: stop saturating after N iterations (default 6)")
    p.add_argument("--ilp-time-limit", type=float, default=60.0, metavar="S",
                   help="with --search eqsat: HiGHS time limit per extraction (default 60; "
                        "at the limit its best solution so far is used)")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="with --search eqsat: processes at once (the cost proxies' HiGHS "
                        "solves, the climbs of local moves; default 0: one per core "
                        "this process may use)")
    p.add_argument("--refine-limit", type=float, default=20.0, metavar="S",
                   help="with --search eqsat and a whole-graph cost (sim): seconds of local "
                        "moves priced with that cost after extraction (default 20)")
    p.add_argument("--refine-patience", type=float, default=0.5, metavar="F",
                   help="with --search eqsat: a climb of local moves stops once it has gone F "
                        "of the search's time so far without a gain (default 0.5; 1: only "
                        "at --refine-limit)")
    p.add_argument("--refine-share", type=float, default=0.01, metavar="F",
                   help="with --search eqsat: ... or once that last stretch gained at most F "
                        "of all the search has gained from the input (default 0.01; 0: only "
                        "a stretch with no gain)")
    p.add_argument("--refine-min", type=float, default=1.0, metavar="S",
                   help="with --search eqsat: but neither before the climb has run S seconds "
                        "(default 1)")
    p.add_argument("--alpha", type=float, default=1.05,
                   help="keep graphs costing less than alpha x the best (default 1.05)")
    p.add_argument("--budget", type=int, default=100, help="graphs to expand at most (default 100)")
    p.add_argument("--time-limit", type=float, default=300.0, metavar="S",
                   help="stop the search (with eqsat: the saturation) after S seconds "
                        "(default 300)")
    p.add_argument("--no-batch-moves", action="store_true",
                   help="propose single rewrites only (TASO exactly); by default a rule's "
                        "independent sites may also be applied together in one step")
    p.add_argument("--screen", type=int, default=16,
                   help="with a whole-graph cost (sim): evaluate only the N most promising "
                        "single rewrites per graph by FLOPs and the N by each op's simulated "
                        "time, plus the batches")
    p.add_argument("--hardware", default="v4", help="TPU preset for --cost sim and simop")
    p.add_argument("--batch", type=int, default=None, help="batch size (zoo and ONNX models)")
    p.add_argument("--out", metavar="OUT.json|OUT.onnx",
                   help="save the optimized graph: .json (weights in a side .npz) or .onnx")
    p.set_defaults(out_format="graph")  # --out's suffix is checked before the run
    p.add_argument("--json", metavar="RESULT.json", help="write the figures as JSON")
    p.add_argument("--no-fold", action="store_true",
                   help="keep weight-only computations as ops instead of folding them")
    p.add_argument("--no-check", action="store_true",
                   help="skip the value check with the reference interpreter")
    p.add_argument("--keep-different", action="store_true",
                   help="save --out even when the value check fails (marked in --json); by "
                        "default a result whose values differ is not saved")
    p.add_argument("--repeats", type=int, default=10,
                   help="timed torch runs per graph (0: no timing); medians are reported")
    p.add_argument("--warmup", type=int, default=2, help="untimed torch runs per graph")
    p.add_argument("--threads", type=int, default=0,
                   help="threads for --cost torch or onnxruntime and the timing (default "
                        "0: the runtime's default, all cores; 1 is steadier on a shared machine, but which "
                        "rewrites pay off depends on it)")
    p.add_argument("--cost-db", metavar="FILE.jsonl", default=None,
                   help="with --cost torch or onnxruntime: keep measured op costs in this "
                        "file and reuse those measured on the same machine and settings (a "
                        "rerun then makes the same choices, without measuring again)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser("tune", help="tune rewrites, layouts, fusion, tiles and flags on the "
                                    "TPU simulator (XTAT)",
                       description="Tune a model for a simulated TPU core: every place a rule "
                                   "applies, the layouts of convolutions, matmuls, reshapes "
                                   "and transposes, every fusion decision, and each kernel's "
                                   "tile and flags are choices, searched by a schedule of "
                                   "strategies starting from the default compiler's program "
                                   "(measured first, so the result is never slower). Every "
                                   "measurement is committed to --db as it arrives; --resume "
                                   "continues a killed run without measuring anything twice. "
                                   "Ctrl-C stops the search and keeps the best so far. Exit "
                                   "status: 0 done, 1 values or validation failed, 2 bad "
                                   "input (unknown model, pass or strategy, --budget < 1, a "
                                   "corrupt or foreign database).")
    p.add_argument("model", metavar="MODEL_OR_FILE", nargs="?", default=None,
                   help=MODEL_HELP + ", or synthetic:N (a synthetic graph of about N nodes)")
    p.add_argument("--passes", default=None,
                   help="passes to tune, comma-separated (default: all the target offers: "
                        "plan,rewrite,layout,fusion,tiling,flags on a TPU, plan,rewrite,chunk "
                        "on cpu/cuda/torch-*; plan: TASO's cost-model search's result as one "
                        "choice, refined by rewrite; chunk: the batch run in 2, 4 or 8 "
                        "chunks)")
    p.add_argument("--target", default=None,
                   help="where the model will run: tpu-v4 (default; the simulator, or the "
                        "--hardware preset), tpu-v3, tpu-v5e, cpu (onnxruntime on this "
                        "machine, every candidate measured for real), cuda (onnxruntime "
                        "on a CUDA GPU, where there is one), torch-cpu, torch-cuda (torch "
                        "eager on either)")
    p.add_argument("--threads", type=int, default=1,
                   help="real targets: the runtime's intra-op threads (default 1)")
    p.add_argument("--rounds", type=int, default=10,
                   help="cpu/cuda: paired rounds per measurement against the incumbent "
                        "(default 10; the final comparison runs twice as many)")
    p.add_argument("--full-rounds", action="store_true",
                   help="real targets: run every round of every measurement (by default "
                        "one ends once its rounds so far leave the candidate no way to be "
                        "measured faster)")
    p.add_argument("--op-cost", choices=("onnxruntime", "torch", "flops"), default=None,
                   help="real targets: the per-op cost that prices the plan's search and "
                        "screens proposals before they are measured: onnxruntime or torch "
                        "(each op timed alone on this machine in that runtime, kept in "
                        "--cost-db; default: the runtime the target measures in) or flops "
                        "(analytical)")
    p.add_argument("--cost-db", metavar="OPS.jsonl", default=None,
                   help="cpu/cuda: per-op costs measured on this machine, kept across runs "
                        "(default: beside --db as RUNS.sqlite.opcosts.jsonl, so that "
                        "--resume prices proposals as the killed run did; without --db "
                        "none kept)")
    p.add_argument("--schedule", choices=("joint", "plan_last", "rewrite_first", "sequential",
                                          "custom"),
                   default="joint",
                   help="joint (default): the rewrite plan, every kernel's tiles and flags "
                        "from profiled runs, layout+fusion by the strategy, kernels again, "
                        "rewrite points judged on those, kernels again; plan_last: the "
                        "same without the first plan phase (the plan judged last, "
                        "kernels tuned); rewrite_first: "
                        "kernels, rewrite points, rewrite+layout+fusion, kernels; "
                        "sequential: one pass at a time; custom: the given passes together "
                        "by the strategy")
    from superopt.xtat.strategies import CATALOGUE, DEFAULT_STRATEGY

    p.add_argument("--strategy", default=DEFAULT_STRATEGY,
                   help=f"the search strategy (default {DEFAULT_STRATEGY}): " + "; ".join(
                       f"{name} ({what})" for name, what in CATALOGUE.items()))
    p.add_argument("--budget", type=int, default=200,
                   help="measurements in all, the default candidate included (default 200); "
                        "on cpu/cuda a candidate onnxruntime runs as the incumbent's program "
                        "is not timed and does not count (up to 3x the budget of them)")
    p.add_argument("--round", type=int, default=8,
                   help="candidates proposed and measured per round (default 8)")
    p.add_argument("--db", metavar="RUNS.sqlite", default=None,
                   help="records database (SQLite, one file per run)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run recorded in --db (same model and settings)")
    p.add_argument("--replay", metavar="RUNS.sqlite", default=None,
                   help="rebuild the best candidate recorded in a database, measuring nothing")
    p.add_argument("--export", metavar="RUNS.jsonl", default=None,
                   help="with --replay: also write every measurement as JSON lines")
    p.add_argument("--workers", type=int, default=1,
                   help="measure each round on this many worker processes (default 1: here)")
    p.add_argument("--executor", default=None,
                   help="process (default with --workers > 1), dask, or dask://HOST:PORT")
    p.add_argument("--seed", type=int, default=0, help="seed of the search and its noise")
    p.add_argument("--hardware", default=None, help="TPU preset: v4 (default), v3, v5e")
    # Checked by the command (`tiling.check_default_tiling`): naming the table here would
    # import the simulator into the parser.
    p.add_argument("--default", default="xla", metavar="HEURISTIC",
                   help="the default compiler's tile heuristic, which tuning starts from and "
                        "its speedup is over: xla (default; as strong as XLA's own pick on "
                        "the measured TPU v3 kernels) or legacy (the analytical roofline "
                        "the figures before 2026-11-29 were over)")
    p.add_argument("--batch", type=int, default=None, help="batch size (zoo and ONNX models)")
    p.add_argument("--rules", metavar="LIB", action="append", default=None,
                   help="rule source for the rewrite pass, repeatable: 'starter' (shipped "
                        "with its proofs), 'groups' (group merges, depthwise channel padding) "
                        "and 'runtime' (against onnxruntime's slower fused kernels), shipped "
                        "with theirs, "
                        "a .rules/.json/.jsonl library, TASO's .pb, Tensat's files, or PET's "
                        "corrected mutants (superopt mutants --out); default: 'starter', and "
                        "'groups' and 'runtime' too on --target cpu and cuda")
    p.add_argument("--plan-budget", type=int, default=20,
                   help="graphs TASO's search expands for the rewrite plan, with the "
                        "simulator as its cost model (default 20; 0: no plan)")
    p.add_argument("--plan-search", choices=("backtracking", "eqsat", "both"),
                   default="backtracking",
                   help="how the rewrite plan is searched: backtracking (TASO's, default), "
                        "eqsat (equality saturation and extraction, as optimize --search "
                        "eqsat), or both (backtracking's plan and its variants, and "
                        "eqsat's plan as one more option); the same cost model, the "
                        "searches kept in --db")
    p.add_argument("--allow-unproved", action="store_true",
                   help="also use rules that are neither proved nor exactly corrected "
                        "(refuted and invalid rules are never used)")
    p.add_argument("--explain", action="store_true",
                   help="print each changed decision's gain and the certificate of the "
                        "applied rewrites (rule, proof status, axioms)")
    p.add_argument("--waterfall", metavar="GAINS.png",
                   help="write the per-decision gains as a waterfall PNG")
    p.add_argument("--torch", action="store_true",
                   help="time the original and the rewritten graph on torch (CPU here)")
    p.add_argument("--out", metavar="OUT.json|OUT.onnx",
                   help="save the tuned (rewritten) graph as .json or .onnx")
    p.set_defaults(out_format="graph")  # --out's suffix is checked before the run
    p.add_argument("--json", metavar="RESULT.json", help="write a summary as JSON")
    p.add_argument("--plot", metavar="CURVE.png", help="write the tuning curve as a PNG")
    p.add_argument("--no-check", action="store_true",
                   help="skip the value check of a rewritten graph")
    p.add_argument("--cost-model", metavar="MODEL", default=None,
                   help="rank proposals by a cost model and measure only the top k: "
                        "analytical, or a model file from superopt costmodel train")
    p.add_argument("--top-k", type=int, default=10,
                   help="with --cost-model: measured per graph-level round (default 10; "
                        "5 per kernel for tiles and flags)")
    p.set_defaults(func=cmd_tune)
    from superopt.xtat.models.command import add_parser

    add_parser(sub)
    sub.choices["costmodel"].set_defaults(func=cmd_costmodel)
    from superopt.options import install

    install(parser)  # every numeric option range-checked, in one place
    return parser


LONG_COMMANDS = frozenset({"generate", "verify", "optimize", "tune", "mutants", "covers",
                           "demo"})


def main(argv: Sequence[str] | None = None) -> int:
    from superopt.options import UsageError

    real = argv is None  # the real command line, not a call from Python or a test
    if real:
        from superopt.interrupts import install

        install()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError:
        return 2  # already reported in one line
    if real and args.command in LONG_COMMANDS:
        from superopt.progress import heartbeat

        heartbeat(args.command)  # piped stdout: a plain progress line every few seconds
    func: Callable[[argparse.Namespace], int] = args.func
    from superopt.ir.errors import IRError
    from superopt.options import PathError, check_paths

    try:
        outputs = check_paths(args)  # before any work: a bad path must not cost a run
    except PathError as e:
        print(f"superopt: error: {e}", file=sys.stderr)
        return 2
    status = 1
    try:
        status = func(args)
        return status
    except IRError as e:
        print(f"superopt: error: {e}", file=sys.stderr)
        status = 2
        return status
    except KeyboardInterrupt:
        print("superopt: interrupted", file=sys.stderr)
        status = 130
        return status
    finally:
        if status != 0:
            outputs.cleanup()
        if real and status == 130:
            from superopt.interrupts import exit_fast

            exit_fast(130)  # what was finished is written; no slow interpreter teardown


if __name__ == "__main__":
    sys.exit(main())
