"""`superopt tune`: tune a model's rewrites, layouts, fusion, tiles and flags on the TPU
simulator (XTAT), with every measurement in a records database.

Steps: load the model and the rules, build the default candidate (the default compiler's
program, measured first), run the schedule's phases with a live display (evaluations, best
so far, speedup over the default, choices changed per pass), pick the final candidate,
validate it through the simulator's ordinary compile path, attribute the gain to passes,
check the rewritten graph's values against the original on the reference interpreter when
the rewrite pass changed it, and save the graph, a JSON summary and a tuning-curve PNG.
`--replay DB` rebuilds a recorded run's best candidate without measuring anything.
Exit status: 0 done, 1 the values or validation failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from superopt.ir.errors import IRError

if TYPE_CHECKING:
    from rich.console import Console

    from superopt.ir.graph import Graph
    from superopt.xtat.records import Measurement, RecordsDB
    from superopt.xtat.session import Session
    from superopt.xtat.tuner import Measure, Phase, Tuner, TuneResult


def _check_out(path: str | None, what: str) -> None:
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise IRError(f"{what} {p}: is a directory")
    if not p.parent.exists():
        raise IRError(f"{what} {p}: directory {p.parent} does not exist")


def _fmt(t: float) -> str:
    if not math.isfinite(t):
        return "invalid"
    return f"{t * 1e3:.4f} ms" if t >= 1e-3 else f"{t * 1e6:.2f} us"


def _passes(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None  # every pass the target offers
    from superopt.xtat.tuner import ALL_PASSES

    names = tuple(p.strip() for p in text.split(",") if p.strip())
    aliases = {"tile": "tiling", "tiles": "tiling", "flag": "flags"}
    names = tuple(aliases.get(n, n) for n in names)
    for n in names:
        if n not in ALL_PASSES:
            raise IRError(f"unknown pass {n!r} in --passes: expected some of "
                          f"{', '.join(ALL_PASSES)}")
    if not names:
        raise IRError("--passes names no pass")
    return names


def validate_args(args: argparse.Namespace) -> None:
    from superopt.xtat.strategies.base import STRATEGIES, create

    if args.replay is None and args.model is None:
        raise IRError("tune needs MODEL_OR_FILE (or --replay RUNS.sqlite)")
    if args.replay is not None and args.model is not None:
        raise IRError("--replay rebuilds the database's own model: give no MODEL_OR_FILE")
    if args.replay is None and args.budget < 1:
        raise IRError(f"--budget must be >= 1, found {args.budget}")
    if args.workers < 1:
        raise IRError(f"--workers must be >= 1, found {args.workers}")
    if args.round < 1:
        raise IRError(f"--round must be >= 1, found {args.round}")
    if args.plan_budget < 0:
        raise IRError(f"--plan-budget must be >= 0, found {args.plan_budget}")
    from superopt.tpu_sim.tiling import DEFAULT_TILING, check_default_tiling

    # One line naming the known heuristics (callers building a Namespace may leave it out).
    check_default_tiling(getattr(args, "default", DEFAULT_TILING))
    create("random")  # registers the strategies
    if args.strategy not in STRATEGIES:
        raise IRError(f"unknown strategy {args.strategy!r}: expected one of "
                      f"{', '.join(sorted(STRATEGIES))}")
    for what in ("out", "json", "plot", "export", "waterfall"):
        _check_out(getattr(args, what), f"--{what}")
    if args.resume and not args.db:
        raise IRError("--resume needs --db FILE")
    if args.db:
        _check_out(args.db, "--db")
    if args.replay is None:
        from superopt.xtat.targets import check_device, get_target

        # getattr: the Python API builds the namespace without the options it leaves out.
        target = get_target(getattr(args, "target", None), getattr(args, "hardware", None))
        if target.real:
            # What needs the simulator's exact times, kernels or worker processes.
            for flag in ("workers", "executor", "cost_model", "explain", "waterfall", "torch"):
                on = getattr(args, flag, None)
                if on and not (flag == "workers" and on == 1):
                    raise IRError(f"--{flag.replace('_', '-')} needs a simulator target; "
                                  f"--target {target.name} measures in {target.measures} "
                                  "on this machine")
        elif getattr(args, "full_rounds", False):
            raise IRError("--full-rounds is for real targets (--target cpu, cuda, torch-cpu, "
                          "torch-cuda): the simulator times each candidate once, exactly")
        check_device(target)


def run(args: argparse.Namespace, console: Console) -> int:
    from superopt.xtat.records import RecordsDB

    validate_args(args)
    if args.replay is not None:
        return replay(args, console)
    from superopt.executor import parse_executor
    from superopt.xtat.session import PLAN_SEARCH, open_session, use_plan_cache
    from superopt.xtat.targets import get_target, tuned_passes
    from superopt.xtat.tuner import make_schedule

    target = get_target(args.target, args.hardware)
    passes = tuned_passes(target, _passes(args.passes))
    phases = make_schedule(args.schedule, passes, args.strategy)
    if args.executor is not None:
        parse_executor(args.executor)
    spec = {"model": args.model, "batch": args.batch, "hardware": args.hardware,
            "rules": args.rules, "allow_unproved": args.allow_unproved,
            "plan_budget": args.plan_budget,
            "plan_search": getattr(args, "plan_search", None) or PLAN_SEARCH,
            "default_tiling": getattr(args, "default", None)}
    if target.real:
        spec |= {"target": target.name, "threads": args.threads, "op_cost": args.op_cost,
                 "cost_db": args.cost_db or op_costs_beside(args.db), "rounds": args.rounds,
                 "stop_early": not getattr(args, "full_rounds", False), "seed": args.seed}
    with console.status(f"loading {args.model} and building the default candidate"):
        session = open_session(spec)
    settings = {"passes": list(passes), "schedule": args.schedule, "strategy": args.strategy,
                "budget": args.budget, "seed": args.seed, "round": args.round}
    if session.real:
        settings |= session.runner.settings()  # type: ignore[union-attr]
    db = RecordsDB(args.db, session.workload, settings, resume=args.resume) if args.db \
        else None
    # The plan's searches (not measurements) go to the same file as they finish: a resumed
    # run replays them instead of searching again (minutes to an hour on big models).
    plans = use_plan_cache(session, args.db) if db is not None else None
    graph = session.graph
    console.print(f"rewrite pass: {session.rules.describe()}")
    if session.real:
        from superopt.xtat.realcommand import describe

        where = describe(session)
    else:
        where = (f"{len(session.default.final.partition.kernels)} kernels by default "
                 f"({_fmt(session.runner.time(session.default))} on TPU "
                 f"{session.sim.hw.name}, "  # type: ignore[union-attr]
                 f"{session.sim.default_tiling} default tiles)")  # type: ignore[union-attr]
    console.print(f"{graph.name}: {len(graph)} nodes, {where}; "
                  f"schedule {args.schedule}: " + ", ".join(
                      f"{p.name} by {p.strategy}" for p in phases)
                  + (f"; resuming {db.count()} recorded measurements" if db and db.count() else ""))
    pool = None
    scratch = None  # a temporary plan cache for the workers, removed at the end
    try:
        if args.workers > 1 or args.executor is not None:
            from superopt.executor import open_executor
            from superopt.xtat.remote import RemoteMeasure

            remote = dict(session.spec)  # what a worker opens its session from
            if remote.get("plan_search", PLAN_SEARCH) != PLAN_SEARCH:
                # An eqsat plan is not searched the same way twice (its local moves stop
                # on the clock): workers rebuild candidates with this process's plans,
                # read from the file its searches are kept in (a scratch file without --db).
                if plans is None:
                    import tempfile

                    scratch = Path(tempfile.mkdtemp(prefix="superopt-plans-"))
                    plans = use_plan_cache(session, scratch / "plans.sqlite")
                assert plans is not None
                remote["plan_cache"] = str(plans.path.resolve())
            pool_cm = open_executor(args.executor, args.workers)
            pool = pool_cm.__enter__()
            measure = RemoteMeasure(pool, remote, session.runner, args.workers)
        else:
            measure = None
        result = _search(session, phases, args, db, console, measure)
    finally:
        if pool is not None:
            pool_cm.__exit__(None, None, None)
        if db is not None:
            db.close()
        if plans is not None:
            plans.close()
        if scratch is not None:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    if result.stopped == "interrupted":
        # Ctrl-C means exit 130 within 2 s with the records kept (--resume goes on from
        # them). Reporting takes longer (compile, attribution, values check), and a report
        # that came in under the watcher's grace period exited 0, as if tuning had finished.
        raise KeyboardInterrupt
    if session.real:
        from superopt.xtat.realcommand import report

        ok, summary, rewritten = report(session, result, args, console)
        _outputs(args, console, session, result, rewritten, summary)
        return 0 if ok else 1
    return _report(session, result, args, console)


def _search(session: Session, phases: list[Phase], args: argparse.Namespace,
            db: RecordsDB | None, console: Console, measure: Measure | None) -> TuneResult:
    from rich.live import Live
    from rich.table import Table

    from superopt.xtat.tuner import Tuner

    last = [0.0]
    # A real target's default is known once measured (its first measurement).
    default_time = math.nan if session.real else session.runner.time(session.default)

    def table(tuner: Tuner, phase: str) -> Table:
        t = Table(title=f"tuning {session.graph.name}", show_header=False)
        t.add_column("what")
        t.add_column("value", justify="right")
        best = tuner.ctx.best_time
        t.add_row("phase", phase)
        free = tuner.step - tuner.spent
        t.add_row("evaluations", f"{tuner.spent} / {args.budget}"
                  + (f" (+{free} not timed)" if free else "")
                  + (f" ({tuner.replayed} from the records)" if tuner.replayed else ""))
        t.add_row("best measured", _fmt(best))
        base = tuner.times.get(tuner.ctx.default.key, math.nan) if session.real \
            else default_time
        t.add_row("speedup over default", f"{base / best:.4f}x"
                  if math.isfinite(best) and best > 0 and math.isfinite(base) else "-")
        if tuner.ctx.best is not None:
            t.add_row("choices changed", ", ".join(
                f"{n} {c}" for n, c in tuner.ctx.best.changed().items()))
        return t

    if session.real:
        from superopt.xtat.screen import screening

        wrap = session.screen_hook = screening(session.screen)
    else:
        wrap = _cost_model(session, args, console)
    tuner = Tuner(session.pipeline, session.runner, session.default, seed=args.seed, db=db,
                  batch=args.round, measure=measure, wrap=wrap)
    with Live(table(tuner, "default"), console=console, transient=True,
              refresh_per_second=4) as live:
        def progress(t: Tuner, phase: str) -> None:
            now = time.perf_counter()
            if now - last[0] > 0.2:
                last[0] = now
                live.update(table(t, phase))

        tuner.progress = progress
        result = tuner.run(phases, args.budget)
    return result


def _cost_model(session: Session, args: argparse.Namespace, console: Console) -> Any:
    """The `--cost-model` ranking hook (None without one)."""
    name = getattr(args, "cost_model", None)
    if name is None:
        return None
    from superopt.xtat.models import create, load_model
    from superopt.xtat.models.topk import wrapper

    hw = session.sim.hw.name
    model = create(name, hw) if name == "analytical" else load_model(name, hw)
    console.print(f"ranking by the {model.describe()}: top {args.top_k} per round measured")
    return wrapper(model, k_graph=args.top_k)


def _report(session: Session, result: TuneResult, args: argparse.Namespace,
            console: Console) -> int:
    from rich.table import Table

    from superopt.tpu_sim import problems, simulate
    from superopt.xtat import explain
    from superopt.xtat.rules import certificate
    from superopt.xtat.session import applied_rewrites, rewritten_graph

    runner = session.runner
    best = result.best
    compiled = runner.compile(best)
    found = problems(compiled, lint=False)
    sim_time = simulate(compiled, sim=session.sim).time
    consistent = math.isclose(sim_time, result.best_time, rel_tol=1e-9)
    per_pass = explain.passes(session.pipeline, runner, best)
    per_decision = explain.decisions(session.pipeline, runner, best) \
        if args.explain or args.waterfall or args.json else []
    applied = applied_rewrites(best)
    cert = certificate(session.rules.rules, applied)
    t = Table(title=f"per pass ({session.graph.name}, final candidate)")
    for col in ("pass", "sites", "changed from default", "time gained"):
        t.add_column(col, justify="left" if col == "pass" else "right")
    tuned = set(_passes(args.passes) or best.names) if args.replay is None else set(best.names)
    for j, name in enumerate(best.names):
        # Sites of passes left untuned are not listed (the plan's would run its search).
        n_sites = len(session.pipeline.passes[j].sites(best.stages[j]).tunable) \
            if name in tuned else "-"
        changed, gain = per_pass[name]
        t.add_row(name, str(n_sites), str(changed), _fmt(gain) if changed else "-")
    console.print(t)
    if args.explain:
        _explain(console, result, per_decision, cert)
    s = Table(title="tuning", show_header=False)
    s.add_column("what")
    s.add_column("value", justify="right")
    rows = [
        ("default compiler", _fmt(result.default_time)),
        ("tuned", _fmt(result.best_time)),
        ("speedup", f"{result.speedup:.4f}x"),
        ("evaluations", f"{result.evaluations} ({result.measured} measured now, "
                        f"{result.replayed} from the records)"),
        ("phases", ", ".join(f"{n} {k}" for n, k in result.phases)),
        ("wall time", f"{result.wall_s:.2f} s ({result.evaluations / max(result.wall_s, 1e-9):.1f}"
                      " evaluations/s)"),
        ("stopped", result.stopped),
        ("valid", "[green]yes[/]" if not found and consistent else
         f"[red]no[/]: {found[0] if found else f'simulate says {_fmt(sim_time)}'}"),
    ]
    for k, v in rows:
        s.add_row(k, v)
    console.print(s)
    ok = not found and consistent
    summary: dict[str, Any] = {
        "model": session.spec["model"], "graph": session.graph.name,
        "hardware": session.sim.hw.name, "default_tiling": session.sim.default_tiling,
        "default_s": result.default_time,
        "tuned_s": result.best_time, "speedup": result.speedup,
        "evaluations": result.evaluations, "measured": result.measured,
        "replayed": result.replayed, "wall_s": result.wall_s, "stopped": result.stopped,
        "phases": [list(p) for p in result.phases],
        "per_pass": {k: {"changed": v[0], "gain_s": v[1]} for k, v in per_pass.items()},
        "candidate": json.loads(best.json), "valid": ok,
        "certificate": cert,
        "decisions": [{"pass": d.pass_name, "site": d.key, "label": d.label,
                       "choice": d.choice if not isinstance(d.choice, tuple)
                       else list(d.choice),
                       "gain_s": d.gain_s if math.isfinite(d.gain_s) else None}
                      for d in per_decision],
    }
    rewritten = rewritten_graph(session.pipeline, best)
    if rewritten is not session.graph and not args.no_check:
        from superopt.rewrite.check import check_values

        with console.status("checking the rewritten graph's values (reference interpreter)"):
            check = check_values(session.graph, rewritten, seed=args.seed)
        console.print(("[green]" if check.ok else "[red]") + check.summary() + "[/]")
        ok = ok and check.ok
        summary["max_rel_err"] = check.max_rel_err
        if args.torch and check.ok:
            summary |= _torch_timing(console, session.graph, rewritten, args)
    if args.waterfall:
        console.print("wrote " + str(explain.waterfall_png(
            result.default_time, result.best_time, per_decision, args.waterfall,
            f"{session.graph.name}: where the {result.speedup:.3f}x comes from")))
    _outputs(args, console, session, result, rewritten, summary)
    return 0 if ok else 1


def _copy_model(source: Path, dest: Path) -> Path:
    """An ONNX file copied, with its weights when they are external data beside it."""
    import onnx

    from superopt.exporters.onnx import write_model

    head = onnx.load(str(source), load_external_data=False)
    if not any(t.data_location == onnx.TensorProto.EXTERNAL for t in head.graph.initializer):
        import shutil

        shutil.copyfile(source, dest)
        return dest
    return write_model(onnx.load(str(source)), dest)


def _outputs(args: argparse.Namespace, console: Console, session: Session,
             result: TuneResult, rewritten: Graph, summary: dict[str, Any]) -> None:
    """--out, --plot and --json, on any target."""
    if args.out:
        source = Path(str(session.spec["model"]))
        export = getattr(session.runner, "export", None)
        if (rewritten is session.graph and session.spec.get("input_file")
                and not (export is not None and export.kept)
                and str(args.out).lower().endswith(".onnx")):
            # The input kept, and it was timed as the user's own file: that file is the
            # result (superopt's export of it was never the one measured).
            console.print(f"saved {_copy_model(source, Path(args.out))} (the input file, "
                          "unchanged)")
        else:
            console.print(f"saved {save_graph(rewritten, args.out, args.seed)}")
    if args.plot:
        console.print(f"wrote {tuning_curve_png(result, args.plot, session.graph.name)}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
        console.print(f"wrote {args.json}")


def _explain(console: Console, result: TuneResult, per_decision: list,
             cert: list[dict]) -> None:
    from rich.table import Table

    t = Table(title="decisions (time lost when each one alone reverts)")
    for col in ("pass", "site", "choice", "gained"):
        t.add_column(col, justify="right" if col == "gained" else "left")
    for d in per_decision[:30]:
        t.add_row(d.pass_name, d.label, str(d.choice), _fmt(d.gain_s))
    if len(per_decision) > 30:
        t.add_row("...", f"{len(per_decision) - 30} more", "", "")
    total = result.default_time - result.best_time
    single = sum(d.gain_s for d in per_decision if math.isfinite(d.gain_s))
    t.add_row("[bold]interaction[/]", "total gain minus the single-revert gains", "",
              _fmt(total - single) if math.isfinite(single) else "-")
    console.print(t)
    if cert:
        c = Table(title="certificate: why each applied rewrite preserves values")
        for col in ("rule", "applied", "status", "evidence"):
            c.add_column(col)
        times = Counter(e["rule"] for e in cert)  # the JSON keeps one entry per rewrite
        for e in {e["rule"]: e for e in cert}.values():
            evidence = ", ".join(e.get("axioms", [])) or str(e.get("check") or
                                                              e.get("reason", ""))
            c.add_row(e["rule"], str(times[e["rule"]]), e["status"], evidence[:90])
        console.print(c)
    else:
        console.print("certificate: no rewrite applied")


def _torch_timing(console: Console, before: Graph, after: Graph, args: argparse.Namespace
                  ) -> dict[str, Any]:
    """Both graphs timed side by side on torch (CPU here): is it only a simulator win?"""
    import os

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from superopt.rewrite.check import time_side_by_side
    from superopt.rewrite.fold import fold_weights

    final = fold_weights(after, seed=args.seed).graph
    with console.status("timing both graphs on torch"):
        timing = time_side_by_side([before, final], repeats=10, warmup=2, seed=args.seed)
    lo, hi = timing.ratio_ci()
    console.print(f"torch {timing.device} ({timing.threads} threads), median of 10: "
                  f"{timing.medians[0] * 1e3:.2f} ms -> {timing.medians[1] * 1e3:.2f} ms "
                  f"({timing.ratio():.3f}x, 95% CI [{lo:.3f}, {hi:.3f}])")
    return {"torch_before_s": timing.medians[0], "torch_after_s": timing.medians[1],
            "torch_ratio": timing.ratio(), "torch_ratio_ci": [lo, hi]}


def save_graph(graph: Graph, path: str, seed: int) -> Path:
    """Save a tuned graph with its weight-only computations folded into weights, in the
    format the suffix names (.json, .onnx)."""
    from superopt.exporters import export
    from superopt.rewrite.fold import fold_weights

    return export(fold_weights(graph, seed=seed).graph, path, seed=seed)


def tuning_curve_png(result: TuneResult, path: str, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p.step for p in result.history]
    fig, ax = plt.subplots(figsize=(7, 4))
    finite = [(p.step, p.measured * 1e6) for p in result.history if math.isfinite(p.measured)]
    if finite:
        ax.scatter(*zip(*finite, strict=True), s=6, alpha=0.4, label="measured")
    ax.plot(steps, [p.best * 1e6 for p in result.history], color="C1", label="best so far")
    ax.axhline(result.default_time * 1e6, color="grey", ls="--", label="default compiler")
    # Bad candidates (a tile 10x too small) would squash the curve that matters: clip the
    # axis just above the default and say how many points lie beyond.
    low = min([p.best for p in result.history if math.isfinite(p.best)] or
              [result.default_time]) * 1e6
    high = result.default_time * 1e6 * 1.3
    ax.set_ylim(low * 0.97, high)
    above = sum(1 for _, t in finite if t > high)
    if above:
        ax.text(0.99, 0.98, f"{above} measurements above the axis", ha="right", va="top",
                transform=ax.transAxes, fontsize=8, color="grey")
    ax.set_xlabel("evaluation")
    ax.set_ylabel("simulated time (us)")
    ax.set_title(f"{title}: {result.speedup:.3f}x over the default")
    ax.legend()
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def op_costs_beside(db: str | Path | None) -> str | None:
    """Where a real target's measured per-op costs are kept when `--cost-db` is not given:
    beside the records (`RUNS.sqlite.opcosts.jsonl`), or nowhere without `--db`. A resumed
    run must price proposals as the killed run did: the plan phase measures its options in
    the order their op-cost prices give, and op costs timed afresh differ by noise, so
    the replayed search proposed other candidates and the resume was refused."""
    return None if db is None else f"{db}.opcosts.jsonl"


def replay(args: argparse.Namespace, console: Console) -> int:
    """Rebuild the best recorded candidate of a database (no new measurement)."""
    from superopt.xtat.realcommand import final_pick, real_spec
    from superopt.xtat.records import RecordsDB, RecordsError
    from superopt.xtat.session import PLAN_BUDGET, PLAN_SEARCH, open_session, use_plan_cache

    with RecordsDB(args.replay, None) as db:
        best = db.best()
        if best is None:
            raise RecordsError(f"{args.replay}: holds no measurement")
        w = db.workload
        # A real target's result is its final paired comparison's pick, not the least
        # recorded time (a measurement within the noise is no result).
        final = final_pick(db) if "target" in w else None
        if final is not None:
            best = final
        config = db.config(best.candidate)
        if args.export:
            n = db.export_jsonl(args.export)
            console.print(f"wrote {n} measurements to {args.export}")
        count = db.count()
    session = open_session({"model": w["model"], "batch": w.get("batch"),
                            "hardware": w.get("hardware"), "rules": w.get("rules"),
                            "allow_unproved": w.get("allow_unproved"),
                            "plan_budget": w.get("plan_budget", PLAN_BUDGET),
                            "plan_search": w.get("plan_search", PLAN_SEARCH),
                            "default_tiling": w.get("default_tiling")}
                           | real_spec(w))
    if session.workload != w:
        raise RecordsError(f"{args.replay}: the model {w['model']!r} now builds another "
                           "graph or rule set than the one recorded")
    # A best candidate with a plan rebuilds it from the searches the run kept (read only:
    # replay writes nothing to the database).
    plans = use_plan_cache(session, args.replay, read_only=True)
    assert plans is not None
    try:
        return _replayed(args, console, session, w, best, config, count)
    except RecordsError as e:
        # The searches' keys hold the digest of the search code and rules: a file recorded
        # by another version of them is searched again, and a real target's per-op costs
        # are timed again, so the plan found can differ from the one measured.
        if plans.misses and len(plans):
            raise RecordsError(
                f"{e}; the plan searches the file keeps ({len(plans)}) were made by another "
                "version of superopt's search code or rules, so the plan was searched again: "
                "replay with the version that recorded it") from None
        raise
    finally:
        plans.close()


def _replayed(args: argparse.Namespace, console: Console, session: Session, w: dict,
              best: Measurement, config: dict, count: int) -> int:
    from superopt.xtat.records import RecordsError
    from superopt.xtat.session import rewritten_graph
    from superopt.xtat.space import PassConfig

    try:
        configs = [PassConfig.from_json(config.get(n, {})) for n in session.pipeline.names]
        cand = session.pipeline.from_configs(session.graph, configs)
    except (IRError, KeyError, ValueError) as e:
        raise RecordsError(f"{args.replay}: best candidate does not rebuild: {e}") from None
    if cand.key != best.candidate:
        raise RecordsError(f"{args.replay}: best candidate rebuilds as {cand.key}, recorded "
                           f"{best.candidate}")
    if session.real:
        from superopt.xtat.realcommand import replayed_times

        exact, default = replayed_times(args.replay)
    else:
        exact = session.runner.time(cand)
        default = session.runner.time(session.default)
    # A real target has no exact time: its final paired comparison's medians stand in.
    what = "final comparison" if session.real else "exact"
    console.print(f"{w['model']}: best of {count} recorded measurements (step {best.step}): "
                  f"measured {_fmt(best.runtime)}, {what} {_fmt(exact)}; default "
                  f"{_fmt(default)} ({default / exact:.4f}x); rebuilt without measuring")
    if args.out:
        graph = rewritten_graph(session.pipeline, cand)
        from superopt.xtat.realcommand import export_kept

        if (graph is session.graph and w.get("input_file")
                and str(args.out).lower().endswith(".onnx") and not export_kept(args.replay)):
            # As the run wrote it: the input kept as the user's own file (not its export,
            # which the records say was no faster).
            console.print(f"saved {_copy_model(Path(w['model']), Path(args.out))} (the "
                          "input file, unchanged)")
        else:
            console.print(f"saved {save_graph(graph, args.out, 0)}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "model": w["model"], "step": best.step, "measured_s": best.runtime,
            "tuned_s": exact, "default_s": default, "candidate": config}, indent=1) + "\n")
    return 0


__all__ = ["run", "tuning_curve_png"]
