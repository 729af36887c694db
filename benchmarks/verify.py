"""Benchmark: the verifier's throughput on rule libraries, against TASO's verifier.

Libraries (each verified with the same validated built-in axioms):

- `data/taso_like.rules`: a hand-written library of the kinds of rules TASO ships in
  graph_subst.pb (element-wise algebra, scalar multiplication, fused activations, conv
  and matmul merging, concat/split, transpose, pooling, constants, enlarge), every rule
  true (with its shape condition where it needs one);
- `data/false_rules.rules`: plausible but false rules, each of which must be refuted;
- `data/false_transformer.rules`: the same over the transformer-era ops (issue 44);
- a generated library: `superopt generate --preset taso --max-ops N` (when the generator
  is available; --max-ops 0 skips it);
- `--mutants`: the false one-place mutants (`superopt.verifier.mutate`) of the starter
  library and taso_like that the float64 reference separates: none may be proved;
- `data/tensat_taso_rules.txt`: Tensat's 931 TASO equations (see data/README.md), read
  as `superopt verify` reads them and verified at TASO's input shapes, against TASO's
  own verifier on the same file (32.7 s with z3 4.8.5); `--repeat N` runs this row N
  times (the machine is shared: the spread and the load average are reported);
- `--rules FILE` (repeatable): other published rule files as `superopt verify` reads
  them, e.g. TASO's `graph_subst.pb`, verified at TASO's input shapes (rules the reader
  cannot make count as invalid or unknown, as in the command).

`--only NAME,...` runs some of them: taso_like, false_rules, false_transformer, generated,
tensat, rules, mutants (e.g. `--only tensat` for the 931-equation row alone).

For each: rules, outputs, proved / refuted / invalid / unknown, wall time with `--jobs`
workers, CPU time in the workers, rules per second, the slowest rules, and, only on the
files TASO's own verifier was timed on, the speed-up over it: its `graph_subst.pb` (993 s
for its 133 rules with the current z3-solver; 15 of 146 outputs left unknown) and Tensat's
931 equations (32.7 s with z3 4.8.5). A ratio of times on different rule sets says
nothing, so other rows have none. Axiom validation
is timed separately, cold (no cache).

Run: `.venv/bin/python benchmarks/verify.py [--jobs 2] [--timeout 10] [--max-ops 3]
[--out benchmarks/results/verify.json]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
TASO_SECONDS = 993.0  # TASO's verify.py on its 133 rules (146 outputs), z3-solver 4.12+
TASO_RULES, TASO_OUTPUTS, TASO_UNKNOWN = 133, 146, 15
TASO_931_SECONDS = 32.7  # TASO's verify.py with z3 4.8.5 on Tensat's 931 TASO equations


def generated_library(max_ops: int, out: Path) -> tuple[list, float] | None:
    try:
        from superopt.substitutions.generator import generate
        from superopt.substitutions.presets import make_config
    except ImportError:
        return None
    t0 = time.perf_counter()
    result = generate(make_config("taso", max_ops=max_ops), workers=1)
    from superopt.substitutions.library import save_library

    save_library(result.rules, out)
    return list(result.rules), time.perf_counter() - t0


def run_library(name: str, rules: list, axioms: list, options, jobs: int,
                extra: list | None = None, taso: tuple[float, int] | None = None
                ) -> dict:
    """Verify one library (each rule as its source checked it) and summarise; `taso` is
    TASO's time and rule count on the same file, None for a file TASO was not timed on
    (a ratio of times on different rule sets means nothing)."""
    from superopt.verifier.command import summary
    from superopt.verifier.prover import at_source_shapes, verify_rules

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    results = verify_rules([at_source_shapes(r)[0] for r in rules], axioms, options, jobs)
    wall = time.perf_counter() - t0
    results += extra or []
    s = summary(results, wall)
    slow = sorted(results, key=lambda r: -r.time_s)[:5]
    taso_s, taso_rules = taso if taso is not None else (None, None)
    same = taso_s is not None and taso_rules is not None and wall > 0 and bool(rules)
    return {
        "library": name, **s,
        "load_avg_1min": [round(load, 2), round(os.getloadavg()[0], 2)],  # before, after
        "taso_s": taso_s,
        "speedup_vs_taso": round(taso_s / wall, 1) if same else None,
        "speedup_per_rule_vs_taso": round((taso_s / taso_rules) / (wall / len(rules)), 1)
        if same else None,
        "slowest": [{"rule": r.name, "state": r.state, "time_s": round(r.time_s, 3),
                     "test_s": round(r.test.time_s, 3), "prove_s": round(r.prove_time_s, 3)}
                    for r in slow],
        "not_proved": [{"rule": r.name, "state": r.state, "reason": r.reason}
                       for r in results if r.state != "proved"],
        "axioms_used": sorted({a for r in results for a in r.axioms}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0, help="Z3 limit per output (s)")
    ap.add_argument("--samples", type=int, default=12, help="random instances per rule")
    ap.add_argument("--max-ops", type=int, default=3, help="generated library size (0: skip)")
    ap.add_argument("--out", default=str(HERE / "results" / "verify.json"))
    ap.add_argument("--mutants", action="store_true",
                    help="also verify the false mutants of the starter and taso_like libraries")
    ap.add_argument("--rules", action="append", default=[], metavar="FILE",
                    help="also verify a published rule file (Tensat, TASO .pb, ...)")
    ap.add_argument("--only", default=None, metavar="NAME,...",
                    help="run only these: taso_like, false_rules, false_transformer, "
                         "generated, tensat, rules, mutants")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of the 931-equation row (median wall reported, all kept)")
    ap.add_argument("--save-generated", default=None, metavar="LIB.json",
                    help="keep the generated library here (default: a temporary file)")
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    from superopt.substitutions.text import read_rules
    from superopt.verifier.axioms import builtin_axioms, validate_axioms
    from superopt.verifier.prover import VerifyOptions

    console = Console(highlight=False, width=170)
    axioms = builtin_axioms()
    t0 = time.perf_counter()
    checks = validate_axioms(axioms, samples=8, jobs=args.jobs)
    validate_s = time.perf_counter() - t0
    bad = [c.name for c in checks if not c.ok]
    console.print(f"axioms: {len(axioms)} built-in, {sum(len(c.directions) for c in checks)} "
                  f"directions, {sum(c.instances for c in checks)} instances, "
                  f"validated in {validate_s:.1f} s (cold, {args.jobs} jobs); failed: {bad or 'none'}")
    if bad:
        raise SystemExit(3)

    options = VerifyOptions(timeout_s=args.timeout, samples=args.samples)
    only = set(args.only.split(",")) if args.only else None

    def wanted(key: str) -> bool:
        return only is None or key in only

    # (name, rules, rules the reader could not make, TASO's time and rule count)
    libraries: list[tuple[str, list, list, tuple[float, int] | None]] = []
    for key in ("taso_like", "false_rules", "false_transformer"):
        if wanted(key):
            libraries.append((key, read_rules(HERE / "data" / f"{key}.rules"), [], None))
    gen_info = None
    if args.max_ops > 0 and wanted("generated"):
        out = Path(args.save_generated or Path(tempfile.mkdtemp()) /
                   f"generated_taso{args.max_ops}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        got = generated_library(args.max_ops, out)
        if got is not None:
            libraries.append((f"generated (taso preset, {args.max_ops} ops)", got[0], [], None))
            gen_info = {"rules": len(got[0]), "generate_s": round(got[1], 2),
                        "path": str(out) if args.save_generated else
                        "(temporary file; pass --save-generated to keep it)"}
    if args.mutants and wanted("mutants"):
        from superopt.rewrite import starter_rules
        from superopt.verifier.mutate import false_mutants

        base = list(starter_rules()) + read_rules(HERE / "data" / "taso_like.rules")
        libraries.append(("false mutants (starter + taso_like)",
                          [m.rule for m in false_mutants(base)], [], None))
    # TASO's times are known on two files only: its own graph_subst.pb and Tensat's 931.
    files = [(p, (TASO_SECONDS, TASO_RULES) if Path(p).name == "graph_subst.pb" else None)
             for p in args.rules] if wanted("rules") else []
    if wanted("tensat"):
        files.append((str(HERE / "data" / "tensat_taso_rules.txt"), (TASO_931_SECONDS, 931)))
    read_s: dict[str, float] = {}
    for path, taso in files:
        from superopt.substitutions.readers import read_any
        from superopt.verifier.command import problem_result

        problems: list = []
        t0 = time.perf_counter()
        rules = read_any(path, problems)
        read_s[Path(path).name] = round(time.perf_counter() - t0, 3)
        libraries.append((Path(path).name, rules, [problem_result(p) for p in problems], taso))

    rows = []
    for name, rules, extra, taso in libraries:
        runs = []
        for k in range(args.repeat if name == "tensat_taso_rules.txt" else 1):
            with console.status(f"verifying {name} ({len(rules)} rules, run {k + 1})"):
                runs.append(run_library(name, rules, axioms, options, args.jobs, extra, taso))
        row = runs[0]
        if len(runs) > 1:
            walls = [r["wall_s"] for r in runs]
            # The machine is shared: every run's wall time and load, the median reported.
            row = {**min(runs, key=lambda r: abs(r["wall_s"] - statistics.median(walls))),
                   "runs": [{"wall_s": r["wall_s"], "load_avg_1min": r["load_avg_1min"],
                             "proved": r["proved"]} for r in runs]}
        if name in read_s:
            row["read_s"] = read_s[name]
        rows.append(row)

    table = Table(title=f"superopt verify benchmark ({args.jobs} jobs, Z3 limit "
                        f"{args.timeout:g} s/output, {args.samples} random instances/rule)")
    for col in ("library", "rules", "outputs", "proved", "refuted", "invalid", "unknown",
                "wall s",
                "CPU s", "rules/s", "median s", "max s", "vs TASO (total)", "vs TASO (per rule)"):
        table.add_column(col, justify="left" if col == "library" else "right")
    for r in rows:
        table.add_row(r["library"], str(r["rules"]), str(r["outputs"]), str(r["proved"]),
                      str(r["refuted"]), str(r["invalid"]), str(r["unknown"]),
                      f"{r['wall_s']:.1f}",
                      f"{r['cpu_sum_s']:.1f}", f"{r['rules_per_s']:.2f}",
                      f"{r['median_rule_s']:.3f}", f"{r['max_rule_s']:.3f}",
                      f"{r['speedup_vs_taso']}x vs {r['taso_s']:g} s"
                      if r["speedup_vs_taso"] is not None else "- (not timed)",
                      f"{r['speedup_per_rule_vs_taso']}x"
                      if r["speedup_per_rule_vs_taso"] is not None else "-")
    table.add_row("TASO verify.py (z3 4.12+)", str(TASO_RULES), str(TASO_OUTPUTS),
                  str(TASO_OUTPUTS - TASO_UNKNOWN) + " outputs", "-", "-",
                  f"{TASO_UNKNOWN} outputs", f"{TASO_SECONDS:.0f}", "-",
                  f"{TASO_RULES / TASO_SECONDS:.2f}", "-", "-", "1x", "1x")
    table.add_row("TASO verify.py (z3 4.8.5), Tensat's equations", "931", "-", "-", "-", "-",
                  "-", f"{TASO_931_SECONDS:.1f}", "-", f"{931 / TASO_931_SECONDS:.2f}", "-", "-",
                  "-", "-")
    console.print(table)
    for r in rows:
        slow = Table(title=f"slowest rules: {r['library']}")
        for col in ("rule", "outcome", "total s", "testing s", "proof s"):
            slow.add_column(col, justify="left" if col in ("rule", "outcome") else "right")
        for x in r["slowest"]:
            slow.add_row(x["rule"], x["state"], f"{x['time_s']:.3f}", f"{x['test_s']:.3f}",
                         f"{x['prove_s']:.3f}")
        console.print(slow)
        shown = [x for x in r["not_proved"]
                 if not r["library"].startswith("false_") or x["state"] != "refuted"]
        for x in shown[:10]:
            console.print(f"  {r['library']}: {x['rule']} {x['state']}: {x['reason']}")
        if len(shown) > 10:
            console.print(f"  ... and {len(shown) - 10} more not proved (see the JSON)")

    doc = {"benchmark": "verify", "python": platform.python_version(),
           "cpus": os.cpu_count(),
           "machine": platform.machine(), "jobs": args.jobs, "timeout_s": args.timeout,
           "samples": args.samples,
           "axioms": {"count": len(axioms), "validation_s": round(validate_s, 2),
                      "failed": bad},
           "taso_931_equations_s": TASO_931_SECONDS,
           "taso_reference": {"seconds": TASO_SECONDS, "rules": TASO_RULES,
                              "outputs": TASO_OUTPUTS, "unknown_outputs": TASO_UNKNOWN},
           "generated": gen_info, "libraries": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if only is not None and out.exists():
        # Some rows re-measured: the file keeps the others (each row says its load).
        old = json.loads(out.read_text())
        fresh = {r["library"] for r in rows}
        doc["libraries"] = [r for r in old.get("libraries", []) if r["library"] not in fresh]
        doc["libraries"] += rows
        doc["generated"] = doc["generated"] or old.get("generated")
    out.write_text(json.dumps(doc, indent=1) + "\n")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
