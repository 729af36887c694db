"""Benchmark: the TASO-preset rule generator at 2 and 3 operators, next to TASO's figures.

Each run is a fresh process, so its peak memory is its own (the parent's and the largest
worker's resident set). Prints a table (wall and CPU time, peak memory, counts at every
stage) and writes JSON. TASO's own C++ generator on a 2-core machine like ours, size 3:
16.4 M graphs visited, 197 s wall, 106 s CPU, 7.1 GB peak, 619 rules (535 single-output,
84 two-output).

Coverage (`--coverage`): which of Tensat's 931 TASO equations our 3-op library derives by
rewriting (`superopt covers`), and which of our rules TASO's equations do not derive (the
new ones), with examples; written to `benchmarks/results/generate_coverage.json`. The
library is `--lib FILE` when given (a cached `superopt generate --preset taso --max-ops 3
--out FILE`), otherwise generated first. TASO's own 619-rule `graph_subst.pb` is binary
and could not be fetched here (see benchmarks/data/README.md), so its row is not measured.

The 4-op row: `--sizes 4 --workdir DIR --prune-derived --out
benchmarks/results/generate4_pruned.json` (its library is DIR/taso4.json); its coverage:
`--coverage --lib DIR/taso4.json --ops 4 --no-prune --coverage-out
benchmarks/results/generate_coverage4.json`.

The `modern` preset (issue 44: transformer-era ops): `--preset modern --sizes 2,3 --workers 1`
writes `benchmarks/results/generate_modern.json`, with each size's library in
`out/generate_modern{size}.json` and its rules classified into families by the ops TASO's
generator does not have (`families`: counts and examples). `--verify N` adds `superopt
verify`'s verdicts on at most N rules of each library (every k-th; `--verify-only`: on the
libraries of the rows already in --out).

Run: `.venv/bin/python benchmarks/generate.py [--sizes 2,3] [--workers 2] [--out FILE]`
(`--prune-derived --out benchmarks/results/generate_pruned.json`: with pruning by derivation),
`.venv/bin/python benchmarks/generate.py --coverage [--lib LIB.json] [--workers 2]`,
`.venv/bin/python benchmarks/generate.py --profile` (where the 3-op run's CPU goes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TASO_SIZE3 = {"graphs": 16_400_000, "wall_s": 197.0, "cpu_s": 106.0, "peak_mb": 7.1 * 1024,
              "rules": 619, "single": 535, "two_output": 84}

_CHILD = """
import json, sys
from superopt.substitutions.generator import generate
from superopt.substitutions.library import save_library
from superopt.substitutions.presets import make_config
cfg = make_config(sys.argv[1], max_ops=int(sys.argv[2]))
workdir, lib = (sys.argv[4] or None), (sys.argv[5] or None)
res = generate(cfg, workers=int(sys.argv[3]), workdir=workdir, executor=sys.argv[6] or None,
               prune_derived=sys.argv[7] == "1")
if lib:
    save_library(res.rules, lib, meta={"stages": res.stages})
print(json.dumps({"stages": res.stages, "times": res.times, "info": res.info}))
"""


def run(preset: str, size: int, workers: int, workdir: str | None = None,
        lib: str | None = None, executor: str | None = None,
        prune_derived: bool = False) -> dict:
    """One generate run in a fresh process. With a work directory (the 4-op row) the run
    resumes from whatever an earlier, killed one left there, and runs under
    /usr/bin/time -v when present, for the maximum resident set of any process of it."""
    load0 = os.getloadavg()
    cmd = [sys.executable, "-c", _CHILD, preset, str(size), str(workers), workdir or "",
           lib or "", executor or "", "1" if prune_derived else "0"]
    timed = workdir is not None and Path("/usr/bin/time").exists()
    if timed:
        cmd = ["/usr/bin/time", "-v", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = wall
    out["load"] = [load0[0], os.getloadavg()[0]]
    out["load_1_5_15_before"] = list(load0)
    if timed:
        out["time_v"] = _time_v(proc.stderr)
    return out


def families(lib: str, examples: int = 3) -> dict:
    """The library's rules grouped by the ops in them that TASO's generator lacks (its
    preset's template ops): counts and a few examples per group, shortest first. The
    group `taso ops only` holds rules TASO's op set could express."""
    from superopt.substitutions.library import load_library
    from superopt.substitutions.pattern import PNode, walk
    from superopt.substitutions.presets import make_config
    from superopt.substitutions.text import format_rule

    taso_ops = {t.op for t in make_config("taso").templates}
    groups: dict[str, list[str]] = {}
    for rule in load_library(lib).rules:
        ops = {q.op for p in (*rule.source, *rule.target) for q in walk(p)
               if isinstance(q, PNode)}
        new = sorted(ops - taso_ops)
        groups.setdefault(",".join(new) or "taso ops only", []).append(format_rule(rule))
    out = {}
    for key in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        texts = sorted(groups[key], key=len)
        out[key] = {"rules": len(texts), "examples": texts[:examples]}
    return out


def verify_library(lib: str, most: int, workers: int, timeout: float = 5.0) -> dict:
    """`superopt verify` on every k-th rule of `lib` (at most `most` rules): the verdict
    counts, and per op TASO's generator lacks the verdicts of the rules using it."""
    import re
    from collections import Counter

    from superopt.substitutions.library import load_library, save_library
    from superopt.substitutions.presets import make_config

    rules = load_library(lib).rules
    step = max(1, -(-len(rules) // most))
    sample = rules[::step]
    tmp = Path(tempfile.mkdtemp())
    save_library(sample, tmp / "sample.json")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "superopt", "verify", str(tmp / "sample.json"),
                    "--timeout", str(timeout), "--jobs", str(workers), "--json",
                    str(tmp / "verify.json")], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    got = json.loads((tmp / "verify.json").read_text())["rules"]
    taso_ops = {t.op for t in make_config("taso").templates}
    by_op: dict[str, Counter] = {}
    for r in got:
        ops = set(re.findall(r"\((\w+)", r["rule"].split(": ", 1)[1].split(" if ")[0]))
        for op in sorted(ops - taso_ops) or ["taso ops only"]:
            by_op.setdefault(op, Counter())[r["state"]] += 1
    return {"rules": len(rules), "verified": len(sample), "every": step,
            "timeout_s": timeout, "wall_s": wall,
            "states": dict(Counter(r["state"] for r in got)),
            "by_op": {k: dict(v) for k, v in sorted(by_op.items())},
            "refuted": [r["rule"] for r in got if r["state"] in ("refuted", "invalid")]}


def print_families(size: int, fams: dict) -> None:
    print(f"{size} ops: rules by the ops TASO's generator lacks")
    for key, f in fams.items():
        print(f"  {f['rules']:4d}  {key}: {f['examples'][0][:110]}")


def _time_v(text: str) -> dict:
    """Wall, CPU and the largest process's peak memory from /usr/bin/time -v."""
    got: dict = {}
    for line in text.splitlines():
        key, _, val = line.strip().rpartition(": ")
        if key == "User time (seconds)":
            got["user_s"] = float(val)
        elif key == "System time (seconds)":
            got["sys_s"] = float(val)
        elif key == "Maximum resident set size (kbytes)":
            got["max_rss_mb"] = round(int(val) / 1024, 1)
        elif key.startswith("Elapsed (wall clock) time"):
            parts = [float(x) for x in val.split(":")]
            got["wall_s"] = sum(x * 60 ** k for k, x in enumerate(reversed(parts)))
    return got


def collect(workdir: str, logs: list[str]) -> dict:
    """A 4-op row from a run done in pieces (killed and resumed, longer than one sitting):
    the stage counts and times its work directory's checkpoint holds, how many rules the
    test at other shapes has finished, and each piece's /usr/bin/time -v figures."""
    wd = Path(workdir)
    saved = json.loads((wd / "checked.json").read_text())
    tested = 0
    shapes = wd / "shapes.jsonl"
    if shapes.exists():
        tested = sum(1 for line in shapes.read_text().splitlines() if line.endswith("}"))
    pieces = [{"log": log, **_time_v(Path(log).read_text())} for log in logs]
    return {"stages": saved["stages"], "times": saved["times"],
            "info": {k: v for k, v in saved["info"].items() if k != "level_counts"},
            "complete": False, "tested_at_other_shapes": tested,
            "pieces": pieces, "load": [os.getloadavg()[0]] * 2}


TENSAT = "benchmarks/data/tensat_taso_rules.txt"
VERDICTS = ("covered", "not covered", "budget", "error")


def _library(lib: str | None, workers: int) -> tuple[str, float | None]:
    """The 3-op library to measure: the given file, or a fresh generate run's."""
    if lib:
        return lib, None
    out = Path(tempfile.mkdtemp()) / "taso3.json"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "superopt", "generate", "--preset", "taso",
                    "--max-ops", "3", "--workers", str(workers), "--out", str(out), "--quiet"],
                   check=True, capture_output=True)
    return str(out), time.perf_counter() - t0


def _side(lib: str, rules: str, budget: tuple[int, float, int], workers: int,
          commutative: bool) -> dict:
    from superopt.substitutions.covers_command import cover_files

    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    records = cover_files(lib, rules, budget, workers, commutative=commutative)
    wall = time.perf_counter() - t0
    times = sorted(r["time_s"] for r in records)
    counts = {k: sum(r["verdict"] == k for r in records) for k in VERDICTS}
    steps = sorted(len(r["derivation"]) for r in records if r["verdict"] == "covered")
    return {"lib": lib, "rules": rules, "commutative": commutative, "total": len(records),
            "counts": counts,
            "wall_s": wall, "load": [load0, os.getloadavg()[0]],
            "time_per_rule_s": {"median": statistics.median(times), "max": times[-1],
                                "sum": sum(times)},
            "derivation_steps": {"median": statistics.median(steps) if steps else None,
                                 "max": steps[-1] if steps else None},
            # Kept small: every rule not covered with its reason, every derivation as text.
            "not_covered": [{k: r[k] for k in ("rule", "verdict", "reason", "nodes", "time_s")}
                            for r in records if r["verdict"] != "covered"],
            "derivations": {r["rule"]: " ; ".join(d["rule"] + ("" if d["forward"] else " (<-)")
                                                  for d in r["derivation"])
                            for r in records if r["verdict"] == "covered"}}


def _prune(lib: str, budget: tuple[int, float, int]) -> dict:
    """`superopt covers LIB --out PRUNED`: the rules no smaller kept rule derives."""
    from superopt.substitutions.covers import Budget, prune
    from superopt.substitutions.library import save_library
    from superopt.substitutions.readers import read_any

    rules = read_any(lib)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    kept, covs = prune(rules, Budget(*budget))
    wall = time.perf_counter() - t0
    out = Path(tempfile.mkdtemp()) / "taso3_pruned.json"
    save_library(kept, out)
    records = [c.to_json() for c in covs]
    times = sorted(r["time_s"] for r in records)
    return {"lib": lib, "file": str(out), "total": len(records), "kept": len(kept),
            "counts": {k: sum(r["verdict"] == k for r in records) for k in VERDICTS},
            "wall_s": wall, "load": [load0, os.getloadavg()[0]],
            "time_per_rule_s": {"median": statistics.median(times), "max": times[-1],
                                "sum": sum(times)},
            "not_covered": [], "derivations": {}}


def coverage(args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    from superopt.substitutions.readers import read_any
    from superopt.substitutions.text import format_rule

    # Checked before any work: without --lib the library is generated first.
    sides = set(args.sides.split(","))
    if sides - {"alone", "commutative", "new"}:
        raise SystemExit(f"--sides: expected some of alone,commutative,new, found {args.sides!r}")
    lib, gen_s = _library(args.lib, args.workers)
    budget = (args.max_nodes, args.time_limit, args.max_iters)
    # Tensat's equations by our library, alone and with ewadd/ewmul commutativity (which
    # the generator leaves out: its rules hold modulo it); our rules by Tensat's equations
    # (TASO's verifier has commutativity as an axiom, so it is added there too).
    skipped = {"total": 0, "counts": dict.fromkeys(VERDICTS, 0), "not_covered": [],
               "skipped": True}
    alone = _side(lib, TENSAT, budget, args.workers, False) if "alone" in sides else skipped
    ours = _side(lib, TENSAT, budget, args.workers, True) if "commutative" in sides else skipped
    new = _side(TENSAT, lib, budget, args.workers, True) if "new" in sides else skipped
    # A library written with --prune-derived is pruned already (`--no-prune`).
    pruned = None if args.no_prune else _prune(lib, budget)
    # The pruned library must still derive what the whole one did (a check of the pruning).
    after_prune = None if pruned is None else _side(pruned["file"], TENSAT, budget,
                                                     args.workers, True)
    texts = {r.name: format_rule(r) for r in read_any(lib)}
    name = f"our {args.ops}-op library"
    table = Table(title=f"rule coverage by derivation (superopt covers; budget {budget[0]} "
                        f"e-nodes, {budget[1]:g} s, {budget[2]} rounds per rule; "
                        f"{args.workers} workers)")
    for col in ("rules", "by", *VERDICTS, "wall (s)", "median / max per rule (s)",
                "load before / after"):
        table.add_column(col, justify="right" if col not in ("rules", "by") else "left")
    rows = [("Tensat's 931 TASO equations", name, alone),
            ("Tensat's 931 TASO equations", f"{name} + commutativity", ours),
            (name, "Tensat's 931 equations + commutativity", new)]
    if pruned is not None and after_prune is not None:
        rows += [(name, "its own smaller rules (pruning)", pruned),
                 ("Tensat's 931 TASO equations",
                  f"the pruned library ({pruned['kept']} rules) + commutativity", after_prune)]
    for label, by, r in rows:
        if r.get("skipped"):
            continue
        c = r["counts"]
        table.add_row(f"{label} ({r['total']})", by, *(f"{c[k]} ({100 * c[k] / r['total']:.1f}%)"
                                                       for k in VERDICTS),
                      f"{r['wall_s']:.1f}", f"{r['time_per_rule_s']['median']:.3f} / "
                      f"{r['time_per_rule_s']['max']:.2f}",
                      f"{r['load'][0]:.1f} / {r['load'][1]:.1f}")
    table.add_row("TASO's 619-rule graph_subst.pb", name, *([""] * 4),
                  "not measured: the binary file could not be fetched", "", "")
    console = Console(width=160)
    console.print(table)
    fresh = new["not_covered"]
    if not new.get("skipped"):
        console.print(f"{len(fresh)} of our {new['total']} rules are not derived by Tensat's "
                      f"equations ({new['counts']['not covered']} saturated, "
                      f"{new['counts']['budget']} out of budget, {new['counts']['error']} "
                      "without an instance); examples:")
    for v in fresh[:args.examples]:
        console.print(f"  [{v['verdict']}] {texts.get(v['rule'], v['rule'])}", markup=False)
    label, missed = ("with commutativity", ours["not_covered"]) if ours["not_covered"] else (
        "alone", alone["not_covered"])
    if missed:
        console.print(f"Tensat equations our library ({label}) does not derive "
                      f"({len(missed)}), first ones:")
        for v in missed[:args.examples]:
            console.print(f"  [{v['verdict']}] {v['rule']} {v['reason']}", markup=False)
    out = Path(args.coverage_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": platform.machine(), "cpus": os.cpu_count(), "workers": args.workers,
        "library": {"file": lib, "ops": args.ops, "rules": len(texts), "generate_wall_s": gen_s},
        "budget": {"max_nodes": budget[0], "time_s": budget[1], "max_iters": budget[2]},
        "tensat_by_ours": alone, "tensat_by_ours_commutative": ours, "ours_by_tensat": new,
        "prune": pruned, "tensat_by_pruned_commutative": after_prune,
        "new_rules_examples": [texts.get(v["rule"], v["rule"]) for v in fresh[:args.examples]],
        "taso_pb": "not measured: graph_subst.pb could not be fetched"}, indent=1) + "\n")
    print(f"wrote {out}")


_PROFILE_CHILD = """
import cProfile, json, os, pstats, sys, time
from superopt.substitutions.generator import generate
from superopt.substitutions.presets import make_config
cfg = make_config(sys.argv[1], max_ops=int(sys.argv[2]))
pr = cProfile.Profile()
c0 = time.process_time()
pr.enable()
res = generate(cfg, workers=1)
pr.disable()
cpu = time.process_time() - c0
st = pstats.Stats(pr)
rows = []
for (file, line, fn), (cc, nc, tt, ct, _) in st.stats.items():
    rows.append({"function": f"{os.path.relpath(file) if file.startswith('/') else file}:"
                             f"{line}({fn})", "calls": nc, "tottime_s": tt, "cumtime_s": ct})
top = lambda key: sorted(rows, key=lambda r: -r[key])[:int(sys.argv[3])]
print(json.dumps({"cpu_s": cpu, "times": res.times, "rules": res.stages["rules written"],
                  "by_cumtime": top("cumtime_s"), "by_tottime": top("tottime_s")}))
"""


def profile(args: argparse.Namespace) -> None:
    """The 3-op run in one process under cProfile (workers=1, so every stage is seen;
    cProfile's overhead inflates Python-heavy stages more than Z3's C calls)."""
    load0 = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, "-c", _PROFILE_CHILD, args.preset, "3", "25"],
                          capture_output=True, text=True, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["load"] = [load0, os.getloadavg()[0]]
    stages = {k: v for k, v in out["times"].items() if k not in ("total", "cpu_parent",
                                                                   "cpu_workers")}
    print(f"3-op run under cProfile: {out['times']['total']:.1f} s wall, {out['cpu_s']:.1f} s "
          f"CPU, {out['rules']} rules, load {out['load'][0]:.1f} / {out['load'][1]:.1f}")
    for k, v in stages.items():
        print(f"  {k:24s} {v:7.1f} s  {100 * v / out['times']['total']:5.1f}%")
    print("top functions by own time:")
    for r in out["by_tottime"][:12]:
        print(f"  {r['tottime_s']:7.1f} s {r['calls']:>9,} calls  {r['function']}")
    path = Path(args.profile_out)
    path.write_text(json.dumps({"machine": platform.machine(), "cpus": os.cpu_count(),
                                "preset": args.preset, **out}, indent=1) + "\n")
    print(f"wrote {path}")


def main() -> None:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="taso")
    parser.add_argument("--sizes", default="2,3",
                        help="2,3,4: the 4-op row runs with --workdir (resumable) and keeps "
                             "rows of sizes not measured this time from --out")
    parser.add_argument("--workdir", default="out/generate_taso4",
                        help="work directory of the 4-op run (shards, bucket partitions, "
                             "checkpoints); a killed run resumes from it")
    parser.add_argument("--executor", help="superopt.executor spec for the 4-op run")
    parser.add_argument("--collect", nargs="*", metavar="TIME_V_LOG",
                        help="record the 4-op row from --workdir's checkpoints and these "
                             "/usr/bin/time -v logs of its pieces, without running")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--verify", type=int, default=0, metavar="N",
                        help="also run superopt verify on each size's library (every k-th "
                             "rule, at most N of them) and record the verdicts by op")
    parser.add_argument("--verify-only", action="store_true",
                        help="with --verify: verify the libraries of the rows in --out "
                             "without generating again")
    parser.add_argument("--prune-derived", action="store_true",
                        help="generate --prune-derived (the largest rules that smaller ones "
                             "derive are left out before their test); use another --out")
    parser.add_argument("--out", help="default benchmarks/results/generate.json for the taso "
                        "preset, generate_PRESET.json for the others")
    parser.add_argument("--coverage", action="store_true",
                        help="measure rule coverage instead of the generator")
    parser.add_argument("--lib", help="with --coverage: the library (else a 3-op one generated)")
    parser.add_argument("--ops", type=int, default=3,
                        help="with --coverage --lib: its largest rule size, for the labels")
    parser.add_argument("--sides", default="alone,commutative,new",
                        help="with --coverage: Tensat's equations by the library alone "
                             "(alone), with commutativity (commutative), the library's rules "
                             "by Tensat's (new)")
    parser.add_argument("--no-prune", action="store_true",
                        help="with --coverage: skip pruning the library by its smaller rules "
                             "(for one written with --prune-derived)")
    parser.add_argument("--max-nodes", type=int, default=4000)
    parser.add_argument("--time-limit", type=float, default=2.0)
    parser.add_argument("--max-iters", type=int, default=12)
    parser.add_argument("--examples", type=int, default=12)
    parser.add_argument("--coverage-out", default="benchmarks/results/generate_coverage.json")
    parser.add_argument("--profile", action="store_true",
                        help="CPU profile of the 3-op run (one process) instead")
    parser.add_argument("--profile-out", default="benchmarks/results/generate_profile.json")
    args = parser.parse_args()
    if args.profile:
        profile(args)
        return
    if args.coverage:
        coverage(args)
        return

    if args.out is None:
        args.out = ("benchmarks/results/generate.json" if args.preset == "taso"
                    else f"benchmarks/results/generate_{args.preset}.json")
    out = Path(args.out)
    runs: dict[int, dict] = {}
    if out.exists():  # rows not re-measured this time stay
        runs = {int(k): v for k, v in json.loads(out.read_text()).get("runs", {}).items()}
    measure = [] if args.collect is not None or args.verify_only else \
        [int(x) for x in args.sizes.split(",")]
    for size in measure:
        if size >= 4:
            Path(args.workdir).mkdir(parents=True, exist_ok=True)
            runs[size] = run(args.preset, size, args.workers, args.workdir,
                             str(Path(args.workdir) / f"{args.preset}{size}.json"),
                             args.executor, args.prune_derived)
        elif args.preset != "taso":
            # in a work directory: a killed run resumes (the machine is shared)
            lib = Path("out") / f"generate_{args.preset}{size}.json"
            work = Path("out") / f"generate_{args.preset}{size}_work"
            work.mkdir(parents=True, exist_ok=True)
            runs[size] = run(args.preset, size, args.workers, str(work), str(lib),
                             prune_derived=args.prune_derived)
            runs[size]["library"] = str(lib)
            runs[size]["families"] = families(str(lib))
        else:
            runs[size] = run(args.preset, size, args.workers, prune_derived=args.prune_derived)
    if args.collect is not None:
        runs[4] = collect(args.workdir, args.collect)
    if args.verify:
        for size, r in runs.items():
            if "library" in r and (not measure or size in measure):
                r["verify"] = verify_library(r["library"], args.verify, args.workers)
    runs = dict(sorted(runs.items()))

    table = Table(title=f"superopt generate --preset {args.preset} --workers {args.workers} "
                        "(TASO's C++ generator, size 3, for reference)")
    table.add_column("")
    for size in runs:
        table.add_column(f"{size} ops", justify="right")
    table.add_column("TASO, 3 ops", justify="right")
    keys = list(dict.fromkeys(k for r in runs.values() for k in r["stages"]))
    taso_for = {"graphs enumerated (terms evaluated)": TASO_SIZE3["graphs"],
                "rules written": TASO_SIZE3["rules"], "single-output rules": TASO_SIZE3["single"],
                "two-output rules": TASO_SIZE3["two_output"]}
    for k in keys:
        table.add_row(k, *(f"{r['stages'][k]:,}" if k in r["stages"] else "-"
                           for r in runs.values()),
                      f"{taso_for[k]:,}" if k in taso_for else "")
    table.add_section()

    def row(label: str, fn, taso: str) -> None:
        table.add_row(label, *(fn(r) for r in runs.values()), taso)

    def fig(fn) -> Callable[[dict], str]:
        """A figure that a row measured in pieces (see collect) may not have."""
        def get(r: dict) -> str:
            try:
                return fn(r)
            except (KeyError, TypeError):
                return "-"
        return get

    def pieces(r: dict, key: str) -> float:
        return sum(p[key] for p in r["pieces"])

    row("wall time (s)", fig(lambda r: f"{r['times']['total']:.1f}"),
        f"{TASO_SIZE3['wall_s']:.0f}")
    row("CPU time, parent + workers (s)",
        fig(lambda r: f"{r['times']['cpu_parent'] + r['times']['cpu_workers']:.1f}"),
        f"{TASO_SIZE3['cpu_s']:.0f}")
    row("peak memory, parent (MB)", fig(lambda r: f"{r['info']['peak_rss_mb']['parent']:.0f}"),
        f"{TASO_SIZE3['peak_mb']:.0f}")
    row("peak memory, largest worker (MB)",
        fig(lambda r: f"{r['info']['peak_rss_mb']['largest_worker']:.0f}"), "")
    row("max RSS of any process, /usr/bin/time -v (MB)",
        fig(lambda r: f"{r['time_v']['max_rss_mb']:.0f}" if "time_v" in r else
            f"{max(p['max_rss_mb'] for p in r['pieces']):.0f}"), "")
    row("run in pieces: wall / user+sys CPU, summed (s)",
        fig(lambda r: f"{pieces(r, 'wall_s'):.0f} / "
            f"{pieces(r, 'user_s') + pieces(r, 'sys_s'):.0f}"), "")
    row("rules tested at other shapes so far", fig(
        lambda r: f"{r['tested_at_other_shapes']:,}" if not r.get("complete", True) else ""), "")
    row("bucket partitions (resumed)", lambda r: f"{r['info'].get('bucket_partitions', '')} "
        f"({r['info'].get('bucket_partitions_resumed', '')})", "")
    # older rows name the stages before bucketing was partitioned
    for stage in ("enumerate", "bucket+confirm", "pair+prune", "bucket+confirm+pair",
                  "two-output pair+prune", "dedup", "build+verify", "test at other shapes"):
        row(f"  {stage} (s)", lambda r, s=stage: f"{r['times'][s]:.1f}" if s in r["times"]
            else "", "")
    # Other work on the machine stretches wall times; the load says how much there was.
    row("load average before / after",
        fig(lambda r: f"{r['load'][0]:.1f} / {r['load'][1]:.1f}"), "")
    Console(width=140).print(table)
    for size, r in runs.items():
        if "families" in r:
            print_families(size, r["families"])
        if "verify" in r:
            v = r["verify"]
            print(f"{size} ops: superopt verify on {v['verified']} of {v['rules']} rules "
                  f"(every {v['every']}, Z3 limit {v['timeout_s']:.0f} s): {v['states']}")
    if 3 in runs and "pieces" not in runs[3]:
        r = runs[3]
        print(f"size 3 vs TASO: {r['stages']['rules written'] / TASO_SIZE3['rules']:.2f}x the "
              f"rules in {r['times']['total'] / TASO_SIZE3['wall_s']:.2f}x the wall time, "
              f"{max(r['info']['peak_rss_mb'].values()) / TASO_SIZE3['peak_mb']:.2f}x the peak "
              "memory (largest process)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.machine(), "cpus": os.cpu_count(),
                               "preset": args.preset, "workers": args.workers,
                               "prune_derived": args.prune_derived, "taso_size3": TASO_SIZE3,
                               "runs": {str(k): v for k, v in runs.items()}}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
