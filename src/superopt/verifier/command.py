"""`superopt verify`: read rule files, validate the axioms, verify every rule, report.

Nothing is reported until every input file has been read: a syntax error stops the run
with its file:line:column error (exit status 2) before any work is done, as does an
unreadable or empty file or a directory. A rule that parses but cannot be used (an input
on one side only, inconsistent ranks, an op the encoding lacks, a TASO rule the shape
inference cannot type) costs only that rule: it is reported INVALID or UNKNOWN with its
location and the others are verified. Exit status 0 means nothing was refuted or invalid
(with --strict: nothing unknown either), 1 that some rule was refuted or invalid (or,
with --strict, not proved), 2 bad input, 3 that an axiom failed validation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from superopt.executor import check_executor
from superopt.ir.files import atomic_write_text
from superopt.progress import console as progress_console
from superopt.substitutions.readers import RuleProblem
from superopt.substitutions.rule import Rule
from superopt.substitutions.text import format_rule
from superopt.verifier.axioms import (
    REAL_ONLY,
    Axiom,
    AxiomCheck,
    axioms_from_rules,
    builtin_axioms,
    builtin_text,
    compile_axioms,
)
from superopt.verifier.cache import validate_axioms_cached
from superopt.verifier.parallel import default_jobs
from superopt.verifier.prover import (
    INVALID,
    OUTCOMES,
    PROVED,
    REFUTED,
    UNKNOWN,
    RuleResult,
    VerifyOptions,
    at_source_shapes,
    axiom_data,
    verify_rules,
)

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_AXIOMS = 0, 1, 2, 3


def read_rule_file(path: str) -> tuple[list[Rule], list[RuleProblem], str]:
    """Rules of one file, the rules that could not be read as rules (with their location
    and reason) and the reader's format. A syntax error, an unreadable file, a directory
    and a file without a single rule raise (an IRError: exit status 2)."""
    from superopt.substitutions.readers import RuleFileError, detect_format, read_any

    problems: list[RuleProblem] = []
    rules = list(read_any(path, problems))
    if not rules and not problems:
        raise RuleFileError(f"{path}: no rules in this file (empty?)")
    return rules, problems, detect_format(path)


def problem_result(p: RuleProblem) -> RuleResult:
    """A rule the reader could not make: UNKNOWN where the op set lacks something, else
    INVALID; never verified, always reported with its location."""
    state = UNKNOWN if p.unsupported else INVALID
    return RuleResult(p.name or p.location, "", state, reason=p.reason, location=p.location)


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("{task.fields[note]}"), console=console,
                    transient=True)


def _body(rule: Rule) -> str:
    return format_rule(rule).split(":", 1)[1].strip()


# ---- axioms -------------------------------------------------------------------------

def _axiom_table(checks: Sequence[AxiomCheck], title: str, only_failures: bool) -> Table:
    table = Table(title=title)
    for col in ("axiom", "origin", "directions", "instances", "result", "time s"):
        table.add_column(col, justify="right" if col in ("instances", "time s") else "left")
    for c in checks:
        if only_failures and c.ok:
            continue
        dirs = " ".join(d.direction for d in c.directions)
        if c.ok and c.origin == "builtin" and c.name in REAL_ONLY:
            result = "[green]valid[/] on the float64 reference (not modelled mod p)"
        elif c.ok:
            result = "[green]valid[/]"
        else:
            why = [f"{d.direction} {d.failure}" for d in c.directions if d.failure]
            why += [f"shape theory: {p}" for p in c.shape_problems[:2]]
            result = "[red]FAILED[/] " + "; ".join(why)
        every = " (all)" if c.directions and all(d.exhausted for d in c.directions) else ""
        table.add_row(c.name, c.origin, dirs, f"{c.instances}{every}", result, f"{c.time_s:.2f}")
    return table


def _validate(console: Console, axioms: Sequence[Axiom], args: argparse.Namespace, jobs: int
              ) -> tuple[list[AxiomCheck], int, float]:
    t0 = time.perf_counter()
    samples = args.axiom_samples or (24 if args.check_axioms else 8)
    with _progress(console) as progress:
        task = progress.add_task("validating axioms", total=len(axioms), note="")

        def advance(c: AxiomCheck) -> None:
            progress.update(task, advance=1, note=c.name if c.ok else f"[red]{c.name} FAILED")

        checks, cached = validate_axioms_cached(
            axioms, samples=samples, seed=args.seed, jobs=jobs,
            shape_checks=2 if args.check_axioms else 1,
            use_cache=not (args.no_cache or args.check_axioms), progress=advance,
            executor=args.executor)
    return checks, cached, time.perf_counter() - t0


# ---- reporting ----------------------------------------------------------------------

def _counterexample_text(ce: dict[str, Any]) -> str:
    parts = [", ".join(f"?{k}: {v}" for k, v in ce.get("shapes", {}).items())]
    if ce.get("attrs"):
        parts.append(", ".join(f"?{k} = {v}" for k, v in ce["attrs"].items()))
    if ce.get("kind") == "shape":
        parts.append(f"output {ce['output']} shapes {ce['source_shape']} vs {ce['target_shape']}")
    else:
        parts.append(f"output {ce.get('output', 0)} differs by up to {ce.get('max_abs_diff', 0):.3g}")
    return "; ".join(p for p in parts if p)


def _issues_table(results: Sequence[tuple[str, RuleResult]], verbose: bool) -> Table | None:
    rows = [(f, r) for f, r in results if verbose or r.state != PROVED or r.shape_note]
    if not rows:
        return None
    table = Table(title="rules" if verbose else "rules that need attention")
    for col in ("rule", "file", "outcome", "time s", "detail"):
        table.add_column(col, justify="right" if col == "time s" else "left",
                         overflow="fold")
    style = {PROVED: "[green]PROVED[/]", REFUTED: "[red]REFUTED[/]", UNKNOWN: "[yellow]UNKNOWN[/]",
             INVALID: "[red]INVALID[/]"}
    for f, r in rows:
        detail = []
        if r.state == REFUTED and r.counterexample:
            detail.append(f"{r.reason}: {_counterexample_text(r.counterexample)}")
        elif r.state in (UNKNOWN, INVALID):
            detail.append(r.reason)
        if r.location and r.state != PROVED:
            detail.append(f"at {r.location}")
        elif verbose:
            detail.append("axioms: " + ", ".join(r.axioms))
        if r.shape_note:
            detail.append(f"shapes: {r.shape_note}")
        table.add_row(r.name, Path(f).name, style[r.state], f"{r.time_s:.3f}",
                      "\n".join(detail))
    return table


def summary(results: Sequence[RuleResult], wall_s: float) -> dict[str, Any]:
    times = [r.time_s for r in results]
    counts = {s: sum(r.state == s for r in results) for s in OUTCOMES}
    # A rule's outputs, also where no per-output proof was made (refuted, invalid).
    outputs = sum(r.n_outputs for r in results)
    return {
        "rules": len(results), "outputs": outputs, **counts,
        "outputs_proved": sum(r.n_outputs for r in results if r.state == PROVED),
        "outputs_by_state": {st: sum(r.n_outputs for r in results if r.state == st)
                             for st in OUTCOMES},
        "shape_warnings": sum(bool(r.shape_note) for r in results),
        "wall_s": round(wall_s, 3), "rule_time_sum_s": round(sum(times), 3),
        "cpu_sum_s": round(sum(r.cpu_s for r in results), 3),
        "rules_per_s": round(len(results) / wall_s, 2) if wall_s > 0 else None,
        "median_rule_s": round(statistics.median(times), 4) if times else None,
        "max_rule_s": round(max(times), 4) if times else None,
        "prove_time_sum_s": round(sum(r.prove_time_s for r in results), 3),
        "test_time_sum_s": round(sum(r.test.time_s for r in results), 3),
    }


def _summary_table(s: dict[str, Any], axioms_line: str, jobs: int, timeout: float) -> Table:
    table = Table(title="superopt verify", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("rules (outputs)", f"{s['rules']} ({s['outputs']})")
    table.add_row("proved", f"[green]{s['proved']}[/]")
    table.add_row("refuted", f"[red]{s['refuted']}[/]" if s["refuted"] else "0")
    table.add_row("invalid", f"[red]{s['invalid']}[/]" if s["invalid"] else "0")
    table.add_row("unknown", f"[yellow]{s['unknown']}[/]" if s["unknown"] else "0")
    table.add_row("shape warnings", str(s["shape_warnings"]))
    table.add_row("axioms", axioms_line)
    table.add_row("wall time", f"{s['wall_s']:.2f} s ({jobs} jobs, Z3 limit {timeout:g} s/output)")
    table.add_row("throughput", f"{s['rules_per_s']} rules/s (CPU {s['cpu_sum_s']:.1f} s in "
                  "workers)")
    table.add_row("per rule", f"median {s['median_rule_s']} s, max {s['max_rule_s']} s")
    table.add_row("time in testing / proving", f"{s['test_time_sum_s']:.2f} s / "
                  f"{s['prove_time_sum_s']:.2f} s")
    return table


def _slowest_table(results: Sequence[RuleResult], n: int = 5) -> Table:
    table = Table(title=f"slowest {min(n, len(results))} rules")
    for col in ("rule", "outcome", "total s", "testing s", "proof s"):
        table.add_column(col, justify="left" if col in ("rule", "outcome") else "right")
    for r in sorted(results, key=lambda r: -r.time_s)[:n]:
        table.add_row(r.name, r.state, f"{r.time_s:.3f}", f"{r.test.time_s:.3f}",
                      f"{r.prove_time_s:.3f}")
    return table


# ---- the command --------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    console = progress_console(width=None)
    if args.list_axioms:
        sys.stdout.write(builtin_text())
        return EXIT_OK
    if not args.files and not args.check_axioms:
        console.print("superopt verify: give rule files to verify, or --check-axioms")
        return EXIT_INPUT
    check_executor(args.executor)  # a bad spec or no scheduler: an input error, no work
    import z3

    # z3's own Ctrl-C handler cancels the running check (the rule would read "unknown")
    # and keeps the signal from Python: Ctrl-C must stop the command instead.
    z3.set_param("ctrl_c", False)
    jobs = args.jobs or default_jobs()
    options = VerifyOptions(timeout_s=args.timeout, samples=args.samples, seed=args.seed,
                            restarts=args.restarts)

    # Read every input before doing anything: a bad file must not leave a partial report.
    inputs = [(f, *read_rule_file(f)) for f in args.files]
    libraries = [(f, *read_rule_file(f)) for f in args.axioms or []]
    readers = sorted({how for *_, how in (*inputs, *libraries)})

    axioms: list[Axiom] = [] if args.no_builtin_axioms else builtin_axioms()
    taken = {a.name for a in axioms}
    for path, rules, _, _ in libraries:
        lib = axioms_from_rules(rules, Path(path).name)
        for ax in lib:
            name = ax.name if ax.name not in taken else f"{Path(path).stem}:{ax.name}"
            taken.add(name)
            axioms.append(Axiom(name, ax.rule, ax.spec, ax.origin))
    if not axioms:
        console.print("superopt verify: no axioms (--no-builtin-axioms without --axioms)")
        return EXIT_INPUT

    checks, cached, validate_s = _validate(console, axioms, args, jobs)
    by_name = {c.name: c for c in checks}
    builtin_bad = [c for c in checks if c.origin == "builtin" and not c.ok]
    unsound_lib = [c for c in checks if c.origin != "builtin" and any(
        d.kind == "differs" for d in c.directions)]
    usable: list[Axiom] = []
    notes: list[str] = []
    for ax in axioms:
        c = by_name[ax.name]
        if c.ok:
            usable.append(ax)
        elif ax.origin != "builtin":
            kinds = {d.kind for d in c.directions if d.failure}
            if kinds <= {"partial"}:
                usable.append(Axiom(ax.name, ax.rule, ax.spec, ax.origin, weak=True))
                notes.append(f"{ax.name}: partial (its target does not always type-check); "
                             "used only where both sides are well typed")
            elif "differs" not in kinds:
                notes.append(f"{ax.name}: not used as an axiom ("
                             + "; ".join(d.failure for d in c.directions if d.failure) + ")")
    if args.check_axioms or builtin_bad or unsound_lib:
        table = _axiom_table(checks, f"axiom validation ({len(checks)} axioms, "
                             f"{sum(c.instances for c in checks)} instances, "
                             f"{validate_s:.1f} s)", only_failures=not args.check_axioms)
        console.print(table)
    if builtin_bad or unsound_lib:
        console.print(f"[red]{len(builtin_bad) + len(unsound_lib)} axiom(s) failed validation; "
                      "nothing was verified.[/]")
        return EXIT_AXIOMS
    if args.check_axioms:
        console.print(f"all {len(checks)} axioms valid "
                      f"({sum(len(c.directions) for c in checks)} directions).")
        if not args.files:
            return EXIT_OK
    # A usable library rule may still have a direction Z3 cannot take as an axiom (a
    # bare-variable trigger, an attribute its trigger does not bind): say so, since the
    # prover would otherwise leave it out without a word.
    _, unusable = compile_axioms([a for a in usable if a.origin != "builtin"])
    notes += [f"{name} ({d}): not used as an axiom ({why})" for name, d, why in unusable]
    notes += [f"{p.location}: {p.name}: not used as an axiom ({p.reason})"
              for _, _, problems, _ in libraries for p in problems]
    for note in notes:
        console.print(f"[yellow]axiom note[/] {note}")

    # TASO's and Tensat's rules are verified at the shapes TASO found them at (unless
    # --generalise asks for more afterwards); `checked` holds what is verified.
    rules = [(path, r) for path, rs, _, _ in inputs for r in rs]
    checked = [at_source_shapes(r) for _, r in rules]
    unread = [(path, problem_result(p)) for path, _, problems, _ in inputs for p in problems]
    lib_bodies: dict[str, set[str]] = {}
    for ax in usable:
        if ax.origin != "builtin":
            lib_bodies.setdefault(_body(ax.rule), set()).add(ax.name)

    def exclude(rule: Rule) -> list[str]:
        # A library rule is not an axiom for itself (redundancy check).
        same = set(lib_bodies.get(_body(rule), set()))
        same |= {a.name for a in usable if a.origin != "builtin" and a.rule.name == rule.name}
        return sorted(same)

    t0 = time.perf_counter()
    done = dict.fromkeys(OUTCOMES, 0)
    with _progress(console) as progress:
        task = progress.add_task("verifying rules", total=len(rules), note="")

        def advance(r: RuleResult) -> None:
            done[r.state] += 1
            progress.update(task, advance=1, note="  ".join(f"{k} {v}" for k, v in done.items()))

        log = None
        if getattr(args, "checkpoint", None):
            from superopt.verifier.checkpoint import VerdictLog

            log = VerdictLog(args.checkpoint, (axiom_data(usable), options))
        try:
            results = verify_rules([r for r, _ in checked], usable, options, jobs, exclude,
                                   advance, args.executor, log)
        finally:
            if log is not None:
                log.close()
        if log is not None and log.resumed:
            console.print(f"{log.resumed} verdicts from {args.checkpoint} (an earlier run)")
        results = [replace(res, shapes=where) for res, (_, where) in zip(results, checked,
                                                                         strict=True)]
    if getattr(args, "generalise", False):
        from superopt.verifier.generalise import generalise

        with console.status("generalising rules proved at their source's shapes"):
            results = generalise([r for _, r in rules], results, usable, options, jobs,
                                 exclude, args.executor)
    wall = time.perf_counter() - t0

    paired = [(f, res) for (f, _), res in zip(rules, results, strict=True)] + unread
    issues = _issues_table(paired, args.verbose)
    if issues is not None:
        console.print(issues)
    s = summary([r for _, r in paired], wall)
    lib_count = sum(a.origin != "builtin" for a in usable)
    axioms_line = (f"{len(usable) - lib_count} built-in + {lib_count} from libraries, "
                   f"validated in {validate_s:.1f} s" + (f" ({cached} cached)" if cached else ""))
    console.print(_summary_table(s, axioms_line, jobs, args.timeout))
    if results:
        console.print(_slowest_table(results))
    if args.json:
        doc = {
            "schema": "superopt.verify", "version": 1, "files": list(args.files),
            "readers": readers, "axiom_libraries": list(args.axioms or []),
            "options": {"timeout_s": args.timeout, "restarts": args.restarts,
                        "samples": args.samples, "seed": args.seed,
                        "jobs": jobs, "builtin_axioms": not args.no_builtin_axioms},
            "axioms": {"count": len(usable), "validation_s": round(validate_s, 3),
                       "cached": cached, "notes": notes,
                       "checks": [{"name": c.name, "origin": c.origin, "ok": c.ok,
                                   "instances": c.instances, "time_s": round(c.time_s, 3)}
                                  for c in checks]},
            "summary": s,
            "rules": [{"file": f, **r.to_json()} for f, r in paired],
        }
        atomic_write_text(args.json, json.dumps(doc, indent=1, default=str) + "\n")
        console.print(f"wrote {args.json}")
    if args.save:
        from superopt.substitutions.library import save_library

        # What was verified is saved: a rule proved at TASO's shapes is saved pinned there.
        save_library([r.with_status(res.status()) for r, res in zip(
                          [c for c, _ in checked] if not getattr(args, "generalise", False)
                          else [r for _, r in rules], results, strict=True)],
                     args.save, meta={"verified_by": "superopt verify", "files": list(args.files)})
        console.print(f"wrote {args.save}")
    if s[REFUTED] or s[INVALID] or (args.strict and s[UNKNOWN]):
        return EXIT_FAILED
    return EXIT_OK
