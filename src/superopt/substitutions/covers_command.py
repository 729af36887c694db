"""`superopt covers LIB [RULES]`: which rules a library derives by rewriting.

With RULES, each of its rules is checked against LIB (`superopt.substitutions.covers`):
covered (with the chain of LIB rules applied), not covered, budget exhausted, or error
(the rule has no well-typed instance). Without RULES, LIB is pruned: each rule is checked
against the smaller rules kept before it, and `--out` writes the rules kept. Exit status:
0 done, 2 bad input (one line naming the file, line and problem).

The parser lives in `superopt.cli` (importing this package loads the IR); the checks run
in worker processes (`--jobs`), each reading the two files once.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

_LIBS: dict[str, Any] = {}  # per worker process: path -> compiled library / rules


def _read(path: str) -> list[Any]:
    from superopt.ir.errors import IRError
    from superopt.substitutions.readers import read_any

    if not Path(path).exists():
        raise IRError(f"{path}: no such file")
    rules = read_any(path)
    if not rules:
        raise IRError(f"{path}: no rules in the file")
    return rules


def _check_chunk(task: tuple[str, str, tuple[int, ...], tuple[int, float, int], bool]
                 ) -> list[dict[str, Any]]:
    from superopt.substitutions.covers import Budget, check, compile_library

    lib_path, rules_path, indices, (nodes, time_s, iters), commutative = task
    key = f"{lib_path}\0{commutative}"
    if key not in _LIBS:
        _LIBS[key] = compile_library(_read(lib_path), commutative)
    if rules_path not in _LIBS:
        _LIBS[rules_path] = _read(rules_path)
    lib, rules = _LIBS[key], _LIBS[rules_path]
    budget = Budget(max_nodes=nodes, time_s=time_s, max_iters=iters)
    return [check(lib, rules[i], budget).to_json() for i in indices]


def cover_files(lib_path: str, rules_path: str, budget: tuple[int, float, int], jobs: int,
                progress: Any = None, executor: str | None = None, commutative: bool = False
                ) -> list[dict[str, Any]]:
    """The verdict on every rule of `rules_path` by the library `lib_path` (with
    `commutative`: and ewadd/ewmul commutativity), in file order (JSON records, as
    `Coverage.to_json`)."""
    from superopt.executor import default_workers, run_tasks

    n = len(_read(rules_path))
    jobs = jobs or default_workers()
    size = max(1, min(25, n // (4 * jobs) or 1))
    tasks = [(lib_path, rules_path, tuple(range(k, min(n, k + size))), budget, commutative)
             for k in range(0, n, size)]
    chunks = run_tasks(_check_chunk, tasks, jobs, progress, executor)
    return [r for c in chunks for r in c]


def cmd_covers(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from superopt.progress import console as make_console
    from superopt.substitutions.covers import Budget, Coverage, compile_library, prune
    from superopt.substitutions.egraph import Step
    from superopt.substitutions.library import save_library

    console = make_console(width=None)  # watched by the piped-progress heartbeat
    lib = _read(args.lib)  # both files read before any work: bad input costs nothing
    if args.rules:
        _read(args.rules)
    budget = (args.max_nodes, args.time_limit, args.max_iters)
    t0 = time.perf_counter()
    kept: list[Any] = []
    if args.rules:
        skipped = compile_library(lib).skipped
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(TextColumn("checking rules"), BarColumn(), MofNCompleteColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task("check", total=len(_read(args.rules)))

            def advance(chunk: list[dict[str, Any]]) -> None:
                bar.update(task, advance=len(chunk))

            records = cover_files(args.lib, args.rules, budget, args.jobs, advance,
                                  commutative=args.commutative)
    else:
        skipped = ()
        with console.status(f"pruning {len(lib)} rules"):
            kept, covs = prune(lib, Budget(*budget), commutative=args.commutative)
        records = [c.to_json() for c in covs]
    wall = time.perf_counter() - t0
    verdicts = [Coverage(r["rule"], r["verdict"],
                         tuple(Step(s["rule"], s["forward"]) for s in r["derivation"]),
                         r["reason"], r["time_s"], r["nodes"], r["iterations"], r["instance"])
                for r in records]
    counts = Counter(v.verdict for v in verdicts)
    shown = [v for v in verdicts if args.verbose or v.verdict != "covered"]
    if shown:
        table = Table(title="rules " + ("by verdict" if args.verbose else "not shown covered"))
        for col in ("rule", "verdict", "derivation / reason", "nodes", "time (s)"):
            table.add_column(col)
        for v in shown:
            table.add_row(v.rule, v.verdict, escape(v.derivation() if v.steps else v.reason),
                          str(v.nodes), f"{v.time_s:.2f}")
        console.print(table)
    if skipped:
        why = Counter("a bare-variable source" if "bare variable" in s.reason
                      else "a source that leaves a variable unbound" for s in skipped)
        console.print(f"[yellow]note[/] {len(skipped)} rule directions of LIB cannot be "
                      "applied (" + ", ".join(f"{n} with {k}" for k, n in why.items()) + ")"
                      + ("" if args.verbose else "; --verbose lists them"))
        if args.verbose:
            for s in skipped:
                console.print(escape(f"  {s.rule} ({s.direction}): {s.reason}"))
    what = f"{args.rules} by {args.lib}" if args.rules else f"{args.lib} by its smaller rules"
    console.print(f"{what}: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in
                                          ("covered", "not covered", "budget", "error"))
                  + f" of {len(verdicts)} ({wall:.1f} s)")
    if not args.rules:
        console.print(f"kept {len(kept)} of {len(lib)} rules")
        if args.out:
            save_library(kept, args.out, meta={"pruned_from": args.lib,
                                               "budget": dict(zip(("max_nodes", "time_s",
                                                                   "max_iters"), budget,
                                                                  strict=True))})
            console.print(f"wrote {len(kept)} rules to {args.out}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "schema": "superopt.covers", "version": 1, "lib": args.lib, "rules": args.rules,
            "budget": {"max_nodes": budget[0], "time_s": budget[1], "max_iters": budget[2]},
            "summary": dict(counts), "wall_s": round(wall, 3),
            "skipped_directions": [vars(s) for s in skipped],
            "verdicts": records}, indent=1) + "\n")
    return 0
