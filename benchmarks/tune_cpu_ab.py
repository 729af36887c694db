"""Benchmark: how many measurements a real-target row gets within its time limit, one code
tree against another (issue 48: "measurements are expensive here").

`tune --target cpu` at batch 16 spends seconds per run, and `tune_cpu.py` gives a row 240 s
of tuning: the ResNeXt-50 row held 5 measurements. This runs one row of `tune_cpu.py`
under each code tree given (`--tree LABEL=DIR`, a checkout such as a `git worktree` of an
older commit; its `src` goes first on the path), one after the other on the same core,
each from a copy of the same per-op cost file (`--costs`, so no variant pays for pricing
the plan's search and the others not), and reads each run's records database back:

- measurements recorded within the row limit, and the wall time each took (the
  calibration, the input's A/A control, apart);
- the rounds each paired measurement ran (where the tree records them) and how many
  measurements ran none, onnxruntime running them as the incumbent's program;
- what the tuner kept and its final comparison.

Prints a table and writes JSON (`--out`). `--report` rebuilds both from the runs already
in `--workdir` without running anything. Trees run in the order given; list a tree twice
(`new=..., old=..., new2=...`) for an A/B/A order against drift. Example, as measured:
`OMP_WAIT_POLICY=PASSIVE taskset -c 1 .venv/bin/python benchmarks/tune_cpu_ab.py --model
resnext50 --batch 16 --tree old=/tmp/old --tree new=. --costs op_costs.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "tune_cpu_ab.json"


def _run(label: str, tree: Path, args: argparse.Namespace) -> None:
    work = args.workdir / label
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    costs = work / "op_costs.jsonl"
    if args.costs:
        shutil.copy(args.costs, costs)
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE",
           "PYTHONPATH": str(tree.resolve() / "src")}
    cmd = [sys.executable, "benchmarks/tune_cpu.py", "--models", args.model, "--batches",
           str(args.batch), "--budget", str(args.budget), "--row-limit", str(args.row_limit),
           "--bench-rounds", str(args.bench_rounds), "--torch-rounds", "1",
           "--workdir", str(work), "--cost-db", str(costs), "--out", str(work / "row.json")]
    proc = subprocess.Popen(cmd, cwd=tree, env=env)
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # Ctrl-C reached the row too: it stops and exits 130
        code = proc.wait()
    if code == 130 or code < 0:
        # The finished runs stay in --workdir (--report reads them); this one's records
        # too, but a rerun starts the row afresh for a like-for-like comparison.
        print(f"tune_cpu_ab.py: interrupted in tree {label!r}", file=sys.stderr)
        raise SystemExit(130)
    if code:
        raise SystemExit(f"tune_cpu_ab.py: tree {label!r} ({tree}): tune_cpu.py exited {code}")


def _commit(tree: Path) -> str:
    """The tree's commit (and whether it has changes since), for the JSON."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *a], capture_output=True, text=True,
                              check=False).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or str(tree)
    return head + (" (with changes)" if git("status", "--porcelain", "--", "src") else "")


def _read(label: str, tree: str, args: argparse.Namespace) -> dict[str, Any]:
    work = args.workdir / label
    path = work / "row.json"
    if not path.is_file():
        raise SystemExit(f"tune_cpu_ab.py: {path}: no run of tree {label!r} here")
    data = json.loads(path.read_text())
    if not data.get("rows"):
        why = "; ".join(data.get("failed", {}).values()) or "the row did not finish"
        raise SystemExit(f"tune_cpu_ab.py: {path}: no row ({why})")
    row = data["rows"][0]
    db = sqlite3.connect(work / f"{args.model}_b{args.batch}.sqlite")
    steps = db.execute("SELECT step, phase, wall_s, at FROM measurements ORDER BY step").fetchall()
    db.close()
    first = steps[0][3] - steps[0][2]  # when the calibration began
    calib = steps[0][2]
    rest = [w for _, phase, w, _ in steps[1:]]
    final = row.get("tuner_final") or {}
    rounds = row.get("measure_rounds")
    return {
        "label": label, "tree": tree, "measurements": row["measurements"],
        "calibration_s": calib,
        "measurement_s_mean": sum(rest) / len(rest) if rest else None,
        "measured_span_s": steps[-1][3] - first,
        "phases": [phase for _, phase, _, _ in steps],
        "rounds_run": rounds,
        "extended": row.get("measure_extended"),  # None: a tree before the extension
        # Measurements after the input's that ran no rounds: the incumbent's program
        # (or graph), counted from the records rather than a counter of the code tree.
        "not_timed": row["measured_now"] - 1 - len(rounds) if rounds is not None else None,
        "tune_wall_s": row["tune_wall_s"], "kept": row["kept"], "applied": row["applied"],
        "tuner_final": {k: final.get(k) for k in ("speedup", "ci", "aa", "aa_ci")},
        "input_ms": row["onnxruntime"]["original_ms"],
        "retimed": {k: row["onnxruntime"][k] for k in ("ratio", "ci95", "aa", "aa_ci95")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnext50")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                    help="a code tree to run the row under, in order (repeatable)")
    ap.add_argument("--costs", type=Path, default=None,
                    help="per-op cost file every run starts from a copy of")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--row-limit", type=float, default=240.0)
    ap.add_argument("--bench-rounds", type=int, default=2,
                    help="the re-timing's rounds (the tuning is what is compared)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/superopt_tune_cpu_ab"))
    ap.add_argument("--report", action="store_true", help="read the runs in --workdir only")
    ap.add_argument("--note", default="", help="kept in the JSON (what was run, when)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    trees = []
    for spec in args.tree:
        label, sep, path = spec.partition("=")
        if not sep or not label or not Path(path).is_dir():
            raise SystemExit(f"tune_cpu_ab.py: --tree {spec!r}: want LABEL=DIR, a directory")
        trees.append((label, Path(path)))
    if not trees:
        raise SystemExit("tune_cpu_ab.py: name at least one --tree LABEL=DIR")
    if not args.report:
        for label, tree in trees:
            _run(label, tree, args)
    runs = [_read(label, _commit(tree), args) for label, tree in trees]
    print(f"{args.model} b{args.batch}, {args.row_limit:.0f} s of tuning per run")
    print(f"{'tree':8s} {'meas':>4s} {'calib s':>8s} {'meas s':>7s} {'rounds':>12s} "
          f"{'same':>4s} {'kept':>5s} {'final':>7s} {'input ms':>9s}")
    for r in runs:
        rounds = r["rounds_run"]
        text = f"{sum(rounds)}/{10 * len(rounds)}" if rounds else "all"
        mean = r["measurement_s_mean"]
        print(f"{r['label']:8s} {r['measurements']:4d} {r['calibration_s']:8.1f} "
              f"{(mean or 0):7.1f} {text:>12s} {'-' if r['not_timed'] is None else r['not_timed']!s:>4s} "
              f"{r['kept']!s:>5s} {r['tuner_final']['speedup'] or 1:7.3f} "
              f"{r['input_ms']:9.1f}")
    args.out.write_text(json.dumps({
        "model": args.model, "batch": args.batch, "row_limit_s": args.row_limit,
        "budget": args.budget, "note": args.note, "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
