"""`superopt optimize`: search a model's rewrites, then check values and time it for real.

Steps: load the model and the rules (the starter library by default; rules a verifier
refuted are left out), list the sites in the input, run TASO's search under the chosen cost
with a progress bar, fold weight-only computations into weights, print the rules applied
and the cost before and after, check with the reference interpreter that the result
computes the original's values, and time both graphs side by side on the torch backend.
Exit status 0 when the values match, 1 when they do not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from superopt.ir.files import atomic_write_text


def run(args: argparse.Namespace, console: Any, load: Any) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from superopt.ir.analysis import human
    from superopt.ir.errors import IRError
    from superopt.rewrite import Matcher, create_cost, load_rules, optimize
    from superopt.rewrite.check import time_side_by_side
    from superopt.rewrite.cost import OrtOpCost, TorchOpCost
    from superopt.rewrite.fold import runtime_ops

    if args.budget < 1:
        raise IRError(f"--budget must be >= 1, found {args.budget}")
    if args.cost_db is not None and args.cost not in ("torch", "onnxruntime"):
        raise IRError(f"--cost-db keeps measured op costs: it needs --cost torch or "
                      f"onnxruntime, not --cost {args.cost}")
    graph = load(args.model, args.batch)
    if not args.no_check:
        from superopt.ir.interpret import check_memory

        check_memory(graph)  # before the search, not after it
    rules, refuted = load_rules(args.rules)
    matcher = Matcher(rules)
    threads = args.threads or None  # 0: torch's default
    options: dict[str, Any] = {}
    if args.cost in ("sim", "simop"):
        options["hardware"] = args.hardware
    elif args.cost in ("torch", "onnxruntime"):
        options["threads"] = threads
        options["database"] = args.cost_db
    cost = create_cost(args.cost, **options)
    source = args.rules or "starter library"
    console.print(f"{graph.name}: {len(graph)} nodes, {runtime_ops(graph)} runtime ops; "
                  f"{len(matcher.rules)} rules from {source}"
                  + (f" ({refuted} refuted rules left out)" if refuted else "")
                  + f"; cost: {cost.describe()}")
    if getattr(args, "search", "backtracking") == "eqsat":
        return _run_eqsat(args, console, graph, matcher, cost)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        task = progress.add_task(f"optimizing {graph.name}", total=args.budget, best="")

        def step(done: int, budget: int, best: float) -> None:
            progress.update(task, completed=done, best=f"best {_fmt(best, cost.unit)}")

        result = optimize(graph, matcher, cost, alpha=args.alpha, budget=args.budget,
                          time_limit=args.time_limit, batch=not args.no_batch_moves,
                          screen=args.screen, progress=step)
    from superopt.interrupts import allow_finish, interrupted

    stopped = interrupted()
    if stopped:
        # The search was cut short but its best graph is finished work: save it now. The
        # values check (25 s for resnet50 on a loaded machine) and the timing would break
        # the 2 s promise of Ctrl-C, so the graph is saved unchecked (and unfolded), and
        # said to be.
        allow_finish(5)
    exact, final, stopped = _fold(result.graph, args, stopped)
    applied = result.applied
    table = Table(title=f"rules applied to {graph.name}")
    for col in ("rule", "sites in input", "applied"):
        table.add_column(col, justify="left" if col == "rule" else "right")
    shown = [r for r in result.initial_sites if result.initial_sites[r] or applied.get(r)]
    for name in sorted(shown, key=lambda r: (-applied.get(r, 0), r)):
        table.add_row(name, str(result.initial_sites[name]), str(applied.get(name, 0)))
    table.add_row("[bold]total[/]", str(sum(result.initial_sites.values())),
                  str(sum(applied.values())))
    console.print(table)
    if result.steps:
        path = Table(title="path from the input to the result (which rule changed what)")
        for col in ("step", "rule", "sites", f"cost after ({cost.name})"):
            path.add_column(col, justify="left" if col == "rule" else "right")
        shown_steps = result.steps if len(result.steps) <= 24 else \
            (*result.steps[:12], None, *result.steps[-11:])
        for i, st in enumerate(shown_steps, start=1):
            if st is None:
                path.add_row("...", f"{len(result.steps) - 23} more steps", "", "")
                continue
            number = i if i <= 12 or len(result.steps) <= 24 else len(result.steps) - 24 + i
            path.add_row(str(number), st.rule, str(len(st.sites)), _fmt(st.cost, cost.unit))
        console.print(path)
    summary = Table(title="search", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    rows = [
        (f"cost ({cost.name})", f"{_fmt(result.cost_before, cost.unit)} -> "
                               f"{_fmt(result.cost_after, cost.unit)} "
                               f"({result.speedup:.3f}x)"),
        ("runtime ops", f"{runtime_ops(graph)} -> {runtime_ops(final)}"),
        ("nodes", f"{len(graph)} -> {len(final)}"),
        ("steps on the path", f"{len(result.steps)} ({sum(applied.values())} sites)"),
        ("graphs expanded / built / proposals", f"{result.expanded} / {result.evaluated} / "
                                                f"{human(result.proposed)}"),
        ("search time", f"{result.seconds:.2f} s (matching {result.match_seconds:.2f} s); "
                        f"stopped: {result.stopped}"),
    ]
    if isinstance(cost, TorchOpCost | OrtOpCost):
        rows.append(("op signatures priced", f"{cost.cached} ({cost.reused} from the database, "
                                             f"{cost.measured_s:.1f} s measuring)"))
    for k, v in rows:
        summary.add_row(k, v)
    console.print(summary)
    figures: dict[str, Any] = {
        "model": graph.name, "nodes_before": len(graph), "nodes_after": len(final),
        "cost": cost.name, "cost_before": result.cost_before, "cost_after": result.cost_after,
        "applied": dict(applied), "sites_in_input": dict(result.initial_sites),
        "search_s": result.seconds, "expanded": result.expanded, "stopped": result.stopped,
    }
    ok, stopped = _values(console, graph, exact, final, args, figures, stopped)
    timing = None
    if args.repeats > 0 and not stopped:
        with console.status(f"timing both graphs on torch (cpu), {args.repeats} runs each"):
            timing, stopped = _unless_interrupted(lambda: time_side_by_side(
                [graph, final], repeats=args.repeats, warmup=args.warmup, threads=threads,
                seed=args.seed))
    if args.repeats > 0 and timing is not None:
        before, after = timing.medians
        lo, hi = timing.ratio_ci()
        console.print(f"torch cpu ({timing.threads} threads), median of {args.repeats}: "
                      f"{before * 1e3:.2f} ms -> {after * 1e3:.2f} ms "
                      f"({timing.ratio():.3f}x paired per round, 95% CI [{lo:.3f}, {hi:.3f}]; "
                      f"medians {before / after:.3f}x)")
        figures.update(torch_before_s=before, torch_after_s=after,
                       torch_ratio=timing.ratio(), torch_ratio_ci=[lo, hi],
                       torch_threads=timing.threads)
    if args.out and (ok or args.keep_different):
        from superopt.exporters import export

        console.print(f"saved {export(final, args.out)}"  # the suffix picks the format
                      + ("" if ok else " (values differ: kept by --keep-different)"))
        figures["saved"] = str(args.out)
        figures["kept_different"] = not ok
    elif args.out:
        console.print(f"[red]not saved[/]: the values differ, so {args.out} would not compute "
                      "the model (--keep-different saves it anyway)")
    if args.json:
        atomic_write_text(args.json, json.dumps(figures, indent=1) + "\n")
        console.print(f"wrote {args.json}")
    if stopped or interrupted():
        print("superopt: interrupted", file=sys.stderr)
        return 130  # saved, but the run did not finish: a script must not read it as done
    return 0 if ok else 1


def _run_eqsat(args: argparse.Namespace, console: Any, graph: Any, matcher: Any,
               cost: Any) -> int:
    """`--search eqsat`: saturate, extract, then the same fold, value check, timing and
    output as the backtracking search."""
    from rich.table import Table

    from superopt.rewrite.check import time_side_by_side
    from superopt.rewrite.eqsat import EqsatOptions, eqsat_optimize
    from superopt.rewrite.fold import runtime_ops

    opts = EqsatOptions(extraction=args.extraction, node_limit=args.node_limit,
                        iter_limit=args.iter_limit,
                        time_limit=args.time_limit, ilp_time_limit=args.ilp_time_limit,
                        refine_limit=args.refine_limit,
                        refine_patience=args.refine_patience,
                        refine_share=args.refine_share, refine_min=args.refine_min,
                        workers=args.workers)
    from superopt.interrupts import allow_finish, interrupted

    with console.status(f"equality saturation on {graph.name}, then {args.extraction} "
                        "extraction"):
        res = eqsat_optimize(graph, matcher, cost, opts)
    stopped = res.interrupted
    if stopped:
        # Ctrl-C during the local moves: their best graph is finished work, saved unchecked
        # and unfolded within the interrupt's grace, as the backtracking search's is.
        allow_finish(5)
    exact, final, stopped = _fold(res.graph, args, stopped)
    table = Table(title=f"rules in the e-graph of {graph.name}")
    table.add_column("rule")
    table.add_column("unions made", justify="right")
    table.add_column("applications in the result", justify="right")
    for name, n in sorted(res.applied.items(), key=lambda t: (-res.used.get(t[0], 0), -t[1],
                                                               t[0])):
        table.add_row(name, str(n), str(res.used.get(name, 0)))
    console.print(table)
    summary = Table(title="equality saturation", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    rows = [
        (f"cost ({res.cost_name})", f"{_fmt(res.cost_before, cost.unit)} -> "
                                   f"{_fmt(res.cost_after, cost.unit)} ({res.speedup:.3f}x)"
                                   + (" (input kept: no extraction was cheaper)"
                                      if res.kept_input else "")),
        ("runtime ops", f"{runtime_ops(graph)} -> {runtime_ops(final)}"),
        ("nodes", f"{len(graph)} -> {len(final)}"),
        ("e-graph", f"{res.enodes} e-nodes, {res.eclasses} e-classes, {res.iterations} "
                    f"iterations; stopped: {res.stopped}"),
        ("extraction", f"{res.extraction} under {res.extraction_cost}"
                       + (f" ({res.ilp_status})" if res.ilp_status else "")),
        ("search time", f"{res.seconds:.2f} s (saturation {res.saturate_s:.2f} s, "
                        f"extraction {res.extract_s:.2f} s)"),
    ]
    if res.refine_ends:
        rows.append(("local moves", f"{res.refine_moves} priced; climbs ended: "
                                    + ", ".join(res.refine_ends)))
    for k, v in rows:
        summary.add_row(k, v)
    console.print(summary)
    figures: dict[str, Any] = {
        "model": graph.name, "search": "eqsat", "extraction": res.extraction,
        "extraction_cost": res.extraction_cost, "ilp_status": res.ilp_status,
        "nodes_before": len(graph), "nodes_after": len(final), "cost": res.cost_name,
        "cost_before": res.cost_before, "cost_after": res.cost_after,
        "unions": dict(res.applied), "applied": dict(res.used), "enodes": res.enodes, "eclasses": res.eclasses,
        "iterations": res.iterations, "stopped": res.stopped, "search_s": res.seconds,
        "saturate_s": res.saturate_s, "extract_s": res.extract_s, "kept_input": res.kept_input,
        "refine_moves": res.refine_moves, "refine_ends": list(res.refine_ends),
    }
    ok, stopped = _values(console, graph, exact, final, args, figures, stopped)
    timing = None
    if args.repeats > 0 and not stopped:
        with console.status(f"timing both graphs on torch (cpu), {args.repeats} runs each"):
            timing, stopped = _unless_interrupted(lambda: time_side_by_side(
                [graph, final], repeats=args.repeats, warmup=args.warmup,
                threads=args.threads or None, seed=args.seed))
    if args.repeats > 0 and timing is not None:
        before, after = timing.medians
        console.print(f"torch cpu ({timing.threads} threads), median of {args.repeats}: "
                      f"{before * 1e3:.2f} ms -> {after * 1e3:.2f} ms "
                      f"({timing.ratio():.3f}x paired per round)")
        figures.update(torch_before_s=before, torch_after_s=after, torch_ratio=timing.ratio())
    if args.out and (ok or args.keep_different):
        from superopt.exporters import export

        console.print(f"saved {export(final, args.out)}"
                      + ("" if ok else " (values differ: kept by --keep-different)"))
        figures["saved"] = str(args.out)
    elif args.out:
        console.print(f"[red]not saved[/]: the values differ, so {args.out} would not compute "
                      "the model (--keep-different saves it anyway)")
    if args.json:
        atomic_write_text(args.json, json.dumps(figures, indent=1) + "\n")
        console.print(f"wrote {args.json}")
    if stopped or interrupted():
        print("superopt: interrupted", file=sys.stderr)
        return 130  # saved, but the run did not finish: a script must not read it as done
    return 0 if ok else 1


T = TypeVar("T")


def _unless_interrupted(work: Callable[[], T]) -> tuple[T | None, bool]:
    """`work()` and False, or None and True when Ctrl-C lands during it: what the run
    finished before (the search's graph) is then saved unchecked, within the interrupt's
    grace, as an interrupted search's is."""
    from superopt.interrupts import allow_finish

    try:
        return work(), False
    except KeyboardInterrupt:
        allow_finish(5)
        return None, True


def _fold(graph: Any, args: argparse.Namespace, stopped: bool) -> tuple[Any, Any, bool]:
    """The searched graph's weight-only parts folded once at the interpreter's precision
    (`exact`, what the value check judges), then stored in the weights' dtypes (`final`,
    what is saved and timed), and whether the run is stopped. Folding takes seconds on a
    large model, so a stopped run (before or during the fold) keeps the graph as the
    search left it: the same values, and optimizing it again folds it."""
    from superopt.rewrite import fold_weights
    from superopt.rewrite.fold import stored

    if not (args.no_fold or stopped):
        exact, stopped = _unless_interrupted(
            lambda: fold_weights(graph, seed=args.seed, exact=True).graph)
        if exact is not None:
            return exact, stored(exact, graph), False
    if stopped:
        args.repeats = 0
    return graph, graph, stopped


def _values(console: Any, graph: Any, exact: Any, final: Any, args: argparse.Namespace,
            figures: dict[str, Any], stopped: bool) -> tuple[bool, bool]:
    """Whether the values agree (`_check_values`; True when not checked) and whether the
    run is stopped (Ctrl-C during the check leaves them unchecked)."""
    ok = True
    if not (stopped or args.no_check):
        got, stopped = _unless_interrupted(
            lambda: _check_values(console, graph, exact, final, args.seed, figures))
        ok = True if got is None else got
    if stopped:
        figures["values"] = "not checked (interrupted)"
        for k in ("max_rel_err", "max_rel_err_float32"):
            figures.pop(k, None)
        console.print("[yellow]values not checked[/]: the run was interrupted"
                      + (f"; `superopt run {args.out}` checks them" if args.out else ""))
    return ok, stopped


def _check_values(console: Any, graph: Any, exact: Any, final: Any, seed: int,
                  figures: dict[str, Any]) -> bool:
    """The optimized graph's values against the input's (reference interpreter), printed
    and recorded in `figures`; True when they agree. `exact` has its weight-only parts
    folded at the interpreter's precision, `final` the same stored as float32, whose
    rounding a model with large activations amplifies (efficientnet_b0's folded batch
    norms on drawn weights: 1.2e-4 at the output) without the rewrite or the fold being
    any less exact: the verdict is on `exact`, and `final`'s own difference is printed
    and recorded beside it."""
    from superopt.rewrite.check import check_values

    with console.status("checking values with the reference interpreter"):
        check = check_values(graph, exact, seed=seed)
        kept = check_values(graph, final, seed=seed) if final is not exact else None
    console.print(("[green]" if check.ok else "[red]") + check.summary() + "[/]", markup=True)
    figures["max_rel_err"] = check.max_rel_err
    figures["values"] = "equal" if check.ok else "differ"
    if kept is not None:
        console.print(f"with the folded weights stored as float32: max relative error "
                      f"{kept.max_rel_err:.2e}")
        figures["max_rel_err_float32"] = kept.max_rel_err
    return check.ok


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1e3:.4g} ms" if value >= 1e-3 else f"{value * 1e6:.4g} us"
    return f"{value:.4g} {unit}"
