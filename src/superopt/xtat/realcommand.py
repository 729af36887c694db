"""`superopt tune --target cpu|cuda`: the parts of the command that differ on a real
target (measured in onnxruntime, `superopt.xtat.realrunner`).

The report is the final paired comparison (the input, the tuned graph and the input
again in each round) with its 95% interval and the A/A control, the measurements the run
used and how many proposals the screen left unmeasured, then the value check of the
rewritten graph, `--out`, `--json` and `--plot` as on the simulator. `--replay` reads the
final comparison kept in the records instead of measuring.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from superopt.xtat.passes.chunk import chunk_count
from superopt.xtat.realrunner import Final, RealRunner
from superopt.xtat.targets import TORCH

if TYPE_CHECKING:
    from rich.console import Console

    from superopt.ir.graph import Graph
    from superopt.xtat.records import Measurement, RecordsDB
    from superopt.xtat.session import Session
    from superopt.xtat.tuner import TuneResult


def describe(session: Session) -> str:
    s = session.spec
    if session.target is not None and session.target.measures == TORCH:
        return (f"measured in {s['onnxruntime']} eager on {s['machine']}, "
                f"{s['threads']} intra-op thread(s)")
    return (f"measured in onnxruntime {s['onnxruntime']} on {s['machine']}, "
            f"{s['threads']} intra-op thread(s), all graph optimizations on")


def _ms(t: float) -> str:
    return f"{t * 1e3:.3f} ms" if math.isfinite(t) else "-"


def _again(again: dict[str, Any]) -> str:
    """Each of the two comparisons' figures (`Final.again`)."""
    def one(f: dict[str, Any]) -> str:
        ci, aa_ci = f["ci"], f["aa_ci"]
        return (f"{f['speedup']:.4f}x [{ci[0]:.4f}, {ci[1]:.4f}], A/A "
                f"[{aa_ci[0]:.4f}, {aa_ci[1]:.4f}]")
    return f"first {one(again['first'])}; fresh sessions {one(again['fresh'])}"


def applied_summary(applied: list[str], shown: int = 6) -> str:
    """How many rewrites, and which rules the most of them: "54: reshape_compose x38,
    scale_softmax_product x5, ..." (a user reads there which rewrites paid)."""
    if not applied:
        return "0"
    counts = Counter(applied).most_common()
    text = ", ".join(f"{rule} x{n}" for rule, n in counts[:shown])
    if len(counts) > shown:
        text += f", {len(counts) - shown} more rules"
    return f"{len(applied)}: {text}"


def _rounds_saved(runner: RealRunner) -> str:
    """How many of this process's comparisons were not timed (the same program), were
    unsettled and ran as many rounds again, or ended early, and the rounds run."""
    same = runner.not_timed
    text = (f"; {same} not timed: onnxruntime runs them as the incumbent's program"
            if same else "")
    longer = sum(p.extended for p in runner.log)
    if longer:
        text += (f"; {longer} unsettled after {runner.rounds} rounds (interval above 1, "
                 "ratio inside the A/A interval) ran as many again")
    planned = [runner.rounds * (2 if p.extended else 1) for p in runner.log]
    stopped = sum(p.rounds < n for p, n in zip(runner.log, planned, strict=True))
    if not stopped:
        return text
    ran = sum(p.rounds for p in runner.log)
    return text + (f"; {stopped} of {len(runner.log)} ended early, once the candidate "
                   f"could no longer be measured faster ({ran} of {sum(planned)} rounds "
                   "run)")


def report(session: Session, result: TuneResult, args: argparse.Namespace,
           console: Console) -> tuple[bool, dict[str, Any], Graph]:
    """Print the final comparison and check the values; (values ok, the JSON summary,
    the rewritten graph) for the command's outputs."""
    from rich.table import Table

    from superopt.xtat.rules import certificate
    from superopt.xtat.session import applied_rewrites, rewritten_graph

    runner = session.runner
    assert isinstance(runner, RealRunner)
    final, noise = runner.final, runner.noise
    # This process's comparisons whose A/A control ran one session twice (`OrtTimer`).
    one_session = getattr(runner.timer, "shared_slots", 0) > 0
    best = result.best
    applied = applied_rewrites(best)
    screened = session.screen_hook.screened() if session.screen_hook is not None else 0
    t = Table(title=f"tuning {session.graph.name} for {session.spec['machine']}",
              show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    rows = [("threads", str(session.spec["threads"]))]
    if session.spec.get("input_file"):
        rows.append(("input timed as", "the given file itself, not superopt's export of it"))
    if final is not None:
        rows += [
            ("input (median)", _ms(final.input_s)),
            ("tuned candidate (median)", _ms(final.tuned_s)),
            ("speedup, 95% CI", f"{final.speedup:.4f}x [{final.ci[0]:.4f}, {final.ci[1]:.4f}]"),
            ("A/A control, 95% CI", f"{final.aa:.4f}x [{final.aa_ci[0]:.4f}, "
                                    f"{final.aa_ci[1]:.4f}]"
             + (" (one session run twice: two did not fit in memory)" if one_session else "")),
            *([("first comparison", f"unsettled at {runner.final_rounds} rounds (its "
                "interval above 1, its ratio inside the A/A interval): ran as many again "
                "in the same sessions, judged on both")] if final.extended else []),
            *([("each comparison (the figures above pool both)",
                _again(final.again))] if final.again is not None else []),
            ("result", ("the tuned graph (measurably faster)" if final.kept else
                        "the input (faster in the first comparison, not confirmed in "
                        "fresh sessions)" if final.again is not None else
                        "the input (the tuned graph is not measurably faster)")
             + f", {final.rounds} paired rounds")]
    elif noise is not None:
        rows += [("input (median)", _ms(noise.input_s)),
                 ("result", "the input (no measured candidate changed the graph)")]
    export = runner.export
    if export is not None:
        rows += [("superopt's export of the input vs the file",
                  f"{export.speedup:.4f}x [{export.ci[0]:.4f}, {export.ci[1]:.4f}], A/A "
                  f"[{export.aa_ci[0]:.4f}, {export.aa_ci[1]:.4f}]"
                  + (f" (pooled; {_again(export.again)})" if export.again else "")
                  + ": " + ("the export is the result (measurably faster)" if export.kept
                            else "the file is the result"))]
    chunks = chunk_count(best)
    rows += [("rewrites applied", applied_summary(applied)),
             ("batch", "whole" if chunks == 1 else f"in {chunks} chunks"),
             ("measurements", f"{result.evaluations} ({result.measured} measured now, "
                              f"{result.replayed} from the records); {screened} proposals "
                              "screened out by the op-cost model" + _rounds_saved(runner)),
             ("phases", ", ".join(f"{n} {k}" for n, k in result.phases)),
             ("wall time", f"{result.wall_s:.1f} s"), ("stopped", result.stopped)]
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)
    summary: dict[str, Any] = {
        "model": session.spec["model"], "graph": session.graph.name,
        "target": session.target.name if session.target else None,
        "machine": session.spec["machine"], "threads": session.spec["threads"],
        "onnxruntime": session.spec["onnxruntime"],
        # The input timed as the user's .onnx file (name and digest), or None: an export.
        "input_file": session.spec.get("input_file"),
        "default_s": result.default_time, "tuned_s": result.best_time,
        "speedup": result.speedup, "final": final.__dict__ if final else None,
        "noise": noise.__dict__ if noise else None, "aa_one_session": one_session,
        "export_vs_file": export.__dict__ if export else None,
        "evaluations": result.evaluations, "measured": result.measured,
        "replayed": result.replayed, "screened": screened, "wall_s": result.wall_s,
        "rounds_run": [p.rounds for p in runner.log],
        "extended": sum(p.extended for p in runner.log),
        "same_program": runner.not_timed,
        "stopped": result.stopped, "phases": [list(p) for p in result.phases],
        "applied": applied, "chunks": chunks, "candidate": json.loads(best.json),
        "certificate": certificate(session.rules.rules, applied)}
    ok = True
    rewritten = rewritten_graph(session.pipeline, best)
    if rewritten is not session.graph and not args.no_check:
        from superopt.rewrite.check import check_values

        with console.status("checking the rewritten graph's values (reference interpreter)"):
            check = check_values(session.graph, rewritten, seed=args.seed)
        console.print(("[green]" if check.ok else "[red]") + check.summary() + "[/]")
        ok = check.ok
        summary["max_rel_err"] = check.max_rel_err
    summary["valid"] = ok
    return ok, summary, rewritten


def real_spec(workload: dict[str, Any]) -> dict[str, Any]:
    """The session spec entries a recorded real target's workload gives back (nothing for
    a simulator's)."""
    if "target" not in workload:
        return {}
    return {"target": workload["target"], "hardware": None, "threads": workload["threads"],
            "op_cost": workload["op_cost"]}


def _final(db: RecordsDB, key: str = "final") -> Final | None:
    """The comparison the records keep under `key`: the final one, or (`export`) the
    user's file against superopt's export of it."""
    got = db.get_meta(key)
    if got is None:
        return None
    return Final.from_json(got)


def final_pick(db: RecordsDB) -> Measurement | None:
    """The measurement of a real run's result: the final comparison's candidate when it
    was kept, else the input (step 0)."""
    rows = db.measurements()
    if not rows:
        return None
    final = _final(db)
    if final is not None and final.kept:
        return next((m for m in rows if m.candidate == final.candidate), rows[0])
    return rows[0]


def replayed_times(path: str | Path) -> tuple[float, float]:
    """(tuned, input) seconds of a real run as its final comparison measured them (the
    export's and the file's when superopt's export of a user's file was the result; the
    input's A/A time when no candidate changed the graph)."""
    from superopt.xtat.records import RecordsDB

    with RecordsDB(path, None) as db:
        final, export = _final(db), _final(db, "export")
        if final is not None and final.kept:
            return final.tuned_s, final.input_s
        if export is not None and export.kept:
            return export.tuned_s, export.input_s
        if final is not None:
            return final.input_s, final.input_s
        noise = db.get_meta("noise")
        t = float(noise["input_s"]) if noise else math.nan
        return t, t


def export_kept(path: str | Path) -> bool:
    """Whether a real run's result was superopt's export of the user's file (the input
    kept, its export measured faster than the file)."""
    from superopt.xtat.records import RecordsDB

    with RecordsDB(path, None) as db:
        export = _final(db, "export")
    return export is not None and export.kept


__all__ = ["describe", "export_kept", "final_pick", "real_spec", "replayed_times", "report"]
