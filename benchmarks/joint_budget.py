"""Benchmark: XTAT-only and joint tuning at several measurement budgets, on rows of joint.py.

Issue 20's goal is joint >= 1.3x the default compiler in geomean; joint.py measures at one
budget (300 measurements per search). This measures both searches at larger equal budgets
on the same rows, with the same rules (starter + PET's corrected mutants), TASO plan
budget, schedule and seeds as joint.py, to show how much of the gap is search budget.
Each row opens one tuning session per column, so the plan's cost-model search (not
counted as measurements) runs once per row and the budgets share it.

Prints a table and writes JSON (`--out`), saved after every row and resumed with
`--resume`. Run: `.venv/bin/python benchmarks/joint_budget.py [--rows resnet50:16,...]
[--budgets 300,1000,3000] [--seeds 1]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).parent))

ROWS = "resnet50:16,bert-base:16,vgg19:16,resnet18:1,inception_v3:1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=ROWS, help="comma-separated model:batch")
    ap.add_argument("--budgets", default="300,1000,3000")
    ap.add_argument("--taso-budget", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"
                                         / "joint_budget.json"))
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out")
    args = ap.parse_args()
    try:
        budgets = [int(b) for b in args.budgets.split(",")]
    except ValueError:
        raise SystemExit(f"--budgets: expected integers, found {args.budgets!r}") from None
    if not budgets or min(budgets) < 1:
        raise SystemExit(f"--budgets: each must be >= 1, found {args.budgets!r}")
    import joint

    rows = joint.parse_rows(args.rows)

    from superopt import zoo
    from superopt.xtat.session import open_session
    from superopt.xtat.tuner import KERNEL_PASSES, PASS_NAMES, Tuner, make_schedule

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {"taso_budget": args.taso_budget, "seeds": args.seeds, "hardware": "v4",
                "schedule": joint.schedule_key()}
    res: dict = json.loads(out.read_text()) if args.resume and out.exists() else {}
    if res and {k: res.get(k) for k in settings} != settings:
        raise SystemExit(f"{out}: made with other settings; run without --resume")
    res = {**settings, "budgets": budgets, "rows": res.get("rows", {})}
    columns = {"xtat": ("layout", "fusion", *KERNEL_PASSES), "joint": PASS_NAMES}
    print(f"{'row':16s} {'budget':>6s}  {'XTAT-only':>9s}  {'joint':>9s}  wall (s)")
    with tempfile.TemporaryDirectory() as tmp:
        for m, b in rows:
            key = f"{m}:{b}"
            row = res["rows"].setdefault(key, {})
            todo = [n for n in budgets if str(n) not in row]
            if not todo:
                continue
            graph = zoo.build(m, batch=b)
            path, n_pet, _ = joint.pet_rules(graph, b, Path(tmp) / f"pet_{m}_{b}.json")
            rules = {"xtat": None, "joint": ["starter", path] if path else ["starter"]}
            sessions = {c: open_session({"model": m, "batch": b, "rules": rules[c],
                                         "plan_budget": args.taso_budget}, graph)
                        for c in columns}
            for n in todo:
                cell: dict = {"pet_rules": n_pet}
                for c, passes in columns.items():
                    s = sessions[c]
                    t0 = time.perf_counter()
                    runs = [joint.finished(Tuner(s.pipeline, s.runner, s.default,
                                                 seed=seed).run(make_schedule("joint", passes), n))
                            for seed in range(args.seeds)]
                    sp = [r.default_time / r.best_time for r in runs]
                    cell[c] = {"speedups": sp, "median": statistics.median(sp),
                               "phases": [r.phases for r in runs],
                               "wall_s": time.perf_counter() - t0}
                cell["load"] = os.getloadavg()[0]
                row[str(n)] = cell
                print(f"{key:16s} {n:6d}  {cell['xtat']['median']:9.4f}  "
                      f"{cell['joint']['median']:9.4f}  "
                      f"{cell['xtat']['wall_s']:.0f} / {cell['joint']['wall_s']:.0f}",
                      flush=True)
                out.write_text(json.dumps(res, indent=1) + "\n")
    done = [k for k, r in res["rows"].items() if all(str(n) in r for n in budgets)]
    res["geomean"] = {str(n): {c: math.exp(statistics.fmean(
        math.log(res["rows"][k][str(n)][c]["median"]) for k in done)) for c in columns}
        for n in budgets} if done else {}
    res["geomean_rows"] = done
    out.write_text(json.dumps(res, indent=1) + "\n")
    for n, g in res["geomean"].items():
        print(f"geomean at budget {n}: XTAT-only {g['xtat']:.4f}  joint {g['joint']:.4f} "
              f"({len(done)} rows)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        # Each finished cell is already in --out.
        raise SystemExit("interrupted: the cells measured so far are in --out; "
                         "--resume continues") from None
