"""Benchmark: our search strategies against TVM's MetaSchedule on real kernels (issue 45,
part 5), measured by TVM on this CPU.

Four kernels of the zoo (`superopt.xtat.tvm_kernels.KERNELS`: two resnet50 convs, two
bert-base matmuls, batch 1) are tuned by MetaSchedule (`tune_tir`, its evolutionary
search with its XGBoost model, trials of 64) and by `guided`, `evolution`, `autotvm` and
`mbo` driving a knob space of the kernel's loops (`tvm_kernels.KnobSpace`) whose every
trial TVM builds (`tvm.tirx.build`, the host's LLVM target) and times (`time_evaluator`, the
same number/repeat/min_repeat_ms as MetaSchedule's runner). Budgets count trials.

Cells are (kernel, tuner, seed, budget), one JSON each under `--cells` with every
trial's time in measurement order: a killed run continues where it stopped, and the
report reads whatever cells exist. A budget's results come from its own cell when one
was run, else from the first trials of a larger budget's cell of the same seed: no
strategy here reads its budget, and MetaSchedule's first 64 trials are its first round
whatever the budget, so the prefix is the run a smaller budget would have made.

Per kernel, budget and seed: each tuner's best GFLOP/s; MetaSchedule's trials to its own
best; each of our tuners' trials to reach MetaSchedule's best (the same seed's
MetaSchedule run at the same budget; "-" when it never does) and their ratio to
MetaSchedule's. The goal (issue 45): guided reaches MetaSchedule's best in <= 0.5x its
trials on >= 3 of the 4 kernels (at a budget, on every seed run).

Run pinned to one core with one TVM thread (the cells record the CPU and the pinning):
`TVM_NUM_THREADS=1 taskset -c 0 .venv/bin/python benchmarks/tvm_compare.py --budgets 256
--seeds 0`; `--report` only rebuilds the table and JSON from the cells.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
OURS = ("guided", "evolution", "autotvm", "mbo")
TUNERS = ("metaschedule", *OURS)
BUDGETS = (64, 256, 1000)


def cell_path(cells: Path, kernel: str, tuner: str, seed: int, budget: int) -> Path:
    return cells / f"{kernel}__{tuner}__s{seed}__b{budget}.json"


def run_cell(kernel: Any, tuner: str, seed: int, budget: int, cells: Path) -> dict:
    from superopt.xtat import tvm_kernels as tk

    path = cell_path(cells, kernel.name, tuner, seed, budget)
    if path.exists():
        return json.loads(path.read_text())
    start = time.perf_counter()
    ev = tk.Evaluator()
    extra: dict[str, Any] = {}
    if tuner == "metaschedule":
        work = Path(tempfile.mkdtemp(prefix=f"ms_{kernel.name}_"))
        try:
            secs = tk.tune_metaschedule(kernel, budget, seed, work, ev)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    else:
        space = tk.KnobSpace(kernel)
        measure = tk.TvmMeasure(space, ev)
        trials = tk.search(space, tuner, seed, budget, measure)
        secs = [t.seconds for t in trials]
        best = min(trials, key=lambda t: t.seconds)
        extra = {"best_config": best.config, "errors": len(measure.errors),
                 "first_errors": measure.errors[:3], "build_s": round(measure.build_s, 2),
                 "space_size": space.size()}
    out = {"kernel": kernel.name, "tuner": tuner, "seed": seed, "budget": budget,
           "seconds": [None if math.isinf(s) else s for s in secs],
           "wall_s": round(time.perf_counter() - start, 1), "evaluator": vars(ev),
           "cpu": platform.processor() or platform.machine(),
           "affinity": sorted(os.sched_getaffinity(0)),
           "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"), **extra}
    cells.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(path)
    return out


def load_cells(cells: Path) -> dict[tuple[str, str, int], dict[int, list[float]]]:
    """(kernel, tuner, seed) -> budget -> trial times (inf for failed trials)."""
    out: dict[tuple[str, str, int], dict[int, list[float]]] = {}
    for p in sorted(cells.glob("*.json")):
        c = json.loads(p.read_text())
        secs = [math.inf if s is None else float(s) for s in c["seconds"]]
        out.setdefault((c["kernel"], c["tuner"], c["seed"]), {})[c["budget"]] = secs
    return out


def at_budget(runs: dict[int, list[float]], budget: int) -> tuple[list[float], str] | None:
    """The trials a run of `budget` made: its own cell, else a larger cell's prefix."""
    if budget in runs:
        return runs[budget][:budget], "own"
    larger = sorted(b for b in runs if b > budget)
    if larger:
        return runs[larger[0]][:budget], f"prefix of {larger[0]}"
    return None


def report(cells: Path) -> dict:
    from superopt.xtat import tvm_kernels as tk

    data = load_cells(cells)
    kernels = []
    goal_rows: dict[int, dict[str, bool | None]] = {}
    for k in tk.KERNELS:
        entry: dict[str, Any] = {"kernel": k.name, "model": k.model, "op": k.op,
                                 "shapes": k.shapes(), "gflop": round(k.flops / 1e9, 4),
                                 "budgets": {}}
        seeds = sorted({s for (kn, _, s) in data if kn == k.name})
        for b in BUDGETS:
            rows = []
            for seed in seeds:
                ms_runs = data.get((k.name, "metaschedule", seed)) or data.get(
                    (k.name, "metaschedule", 0))
                ms = at_budget(ms_runs, b) if ms_runs else None
                ms_best = min(ms[0]) if ms else None
                ms_trials = tk.trials_to(ms[0], ms_best) if ms else None
                for tuner in TUNERS:
                    runs = data.get((k.name, tuner, seed))
                    got = at_budget(runs, b) if runs else None
                    if got is None:
                        continue
                    secs, source = got
                    best = min(secs)
                    row: dict[str, Any] = {
                        "tuner": tuner, "seed": seed, "source": source,
                        "trials_run": len(secs),
                        "best_gflops": round(k.flops / best / 1e9, 3) if math.isfinite(best)
                        else None}
                    if tuner == "metaschedule":
                        row["trials_to_own_best"] = ms_trials
                        # The other way round: MetaSchedule's trials to each of our
                        # tuners' best (same seed and budget).
                        row["trials_to_best_of"] = {
                            t: tk.trials_to(secs, min(o[0]))
                            for t in OURS
                            if (o := at_budget(data.get((k.name, t, seed), {}), b))}
                    elif ms_best is not None and ms_trials:
                        n = tk.trials_to(secs, ms_best)
                        row["ms_seed"] = seed if (k.name, "metaschedule", seed) in data else 0
                        row["trials_to_ms_best"] = n
                        row["ratio_vs_ms"] = round(n / ms_trials, 3) if n else None
                        row["gflops_share_of_ms_best"] = round(ms_best / best, 3)
                    rows.append(row)
            if rows:
                entry["budgets"][str(b)] = rows
                entry.setdefault("knob_space", {})[str(b)] = _within_knobs(data, k, b, seeds)
                guided = [r for r in rows if r["tuner"] == "guided" and "ratio_vs_ms" in r]
                if guided:
                    goal_rows.setdefault(b, {})[k.name] = all(
                        r["ratio_vs_ms"] is not None and r["ratio_vs_ms"] <= 0.5 for r in guided)
        # Trial 0 of each of our cells is the same (naive) schedule, measured at other
        # moments: its spread is the machine's noise on one measurement.
        zero = [runs[max(runs)][0] for (kn, t, _), runs in data.items()
                if kn == k.name and t in OURS and runs and math.isfinite(runs[max(runs)][0])]
        if len(zero) >= 2:
            entry["noise_default_schedule"] = {
                "measurements": len(zero), "min_ms": round(min(zero) * 1e3, 3),
                "max_ms": round(max(zero) * 1e3, 3),
                "max_over_min": round(max(zero) / min(zero), 3)}
        kernels.append(entry)
    goal = {}
    for b, per in sorted(goal_rows.items()):
        met = sum(1 for v in per.values() if v)
        goal[str(b)] = {"kernels_with_guided_ratio_le_0.5": met, "kernels_measured": len(per),
                        "per_kernel": per, "met": met >= 3}
    return {"what": "issue 45 part 5: our strategies vs TVM MetaSchedule on real kernels "
                    "(TVM builds and times every trial, this CPU, 1 core, 1 thread)",
            "goal_rule": "guided's trials to reach MetaSchedule's best (same seed, same "
                         "budget) <= 0.5x MetaSchedule's trials to that best, on every seed "
                         "run, on >= 3 of 4 kernels",
            "kernels": kernels, "goal": goal}


def _within_knobs(data: dict, k: Any, b: int, seeds: list[int]) -> list[dict]:
    """Our tuners against each other on their one space: per seed, the target is the
    least of their bests at budget `b` (so each reaches it), and each one's trials to it."""
    from superopt.xtat import tvm_kernels as tk

    out = []
    for seed in seeds:
        runs = {t: at_budget(data.get((k.name, t, seed), {}), b) for t in OURS}
        secs_of = {t: r[0] for t, r in runs.items() if r}
        if len(secs_of) < 2:
            continue
        target = max(min(secs) for secs in secs_of.values())
        out.append({"seed": seed, "target_gflops": round(k.flops / target / 1e9, 3),
                    "trials": {t: tk.trials_to(secs, target) for t, secs in secs_of.items()}})
    return out


def print_table(res: dict) -> None:
    for k in res["kernels"]:
        print(f"\n{k['kernel']} ({k['op']} {k['shapes']}, {k['gflop']} GFLOP)")
        print(f"  {'budget':>6} {'tuner':<13} {'seed':>4} {'GFLOP/s':>8} {'trials':>7} "
              f"{'ratio':>6} {'/MS':>6}  source")
        for b, rows in k["budgets"].items():
            for r in rows:
                trials = r.get("trials_to_own_best", r.get("trials_to_ms_best"))
                ratio = r.get("ratio_vs_ms")
                print(f"  {b:>6} {r['tuner']:<13} {r['seed']:>4} "
                      f"{r['best_gflops'] if r['best_gflops'] is not None else '-':>8} "
                      f"{trials if trials is not None else '-':>7} "
                      f"{ratio if ratio is not None else '-':>6} "
                      f"{r.get('gflops_share_of_ms_best', '-'):>6}  {r['source']}")
        if "noise_default_schedule" in k:
            z = k["noise_default_schedule"]
            print(f"  noise: the default schedule measured {z['measurements']}x, "
                  f"{z['min_ms']}..{z['max_ms']} ms (max/min {z['max_over_min']})")
        for b, rows in k.get("knob_space", {}).items():
            for r in rows:
                print(f"  knob space, budget {b}, seed {r['seed']}: trials to "
                      f"{r['target_gflops']} GFLOP/s (the least of our bests): "
                      + ", ".join(f"{t} {n}" for t, n in r["trials"].items()))
    print("\ngoal (guided <= 0.5x MetaSchedule's trials on >= 3 of 4 kernels):")
    for b, g in res["goal"].items():
        print(f"  budget {b}: {g['kernels_with_guided_ratio_le_0.5']} of "
              f"{g['kernels_measured']} kernels -> {'met' if g['met'] else 'not met'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="256", help="comma-separated trial budgets")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--kernels", default="", help="comma-separated kernel names (all)")
    ap.add_argument("--tuners", default=",".join(TUNERS))
    ap.add_argument("--cells", type=Path, default=ROOT / "results" / "tvm_compare_cells")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "tvm_compare.json")
    ap.add_argument("--report", action="store_true", help="only rebuild the report")
    a = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "1")
    from superopt.xtat import tvm_kernels as tk

    if not a.report:
        names = [n for n in a.kernels.split(",") if n]
        kernels = [k for k in tk.KERNELS if not names or k.name in names]
        for budget in (int(b) for b in a.budgets.split(",")):
            for seed in (int(s) for s in a.seeds.split(",")):
                for k in kernels:
                    for tuner in a.tuners.split(","):
                        t0 = time.perf_counter()
                        done = cell_path(a.cells, k.name, tuner, seed, budget).exists()
                        c = run_cell(k, tuner, seed, budget, a.cells)
                        secs = [s for s in c["seconds"] if s is not None]
                        best = k.flops / min(secs) / 1e9 if secs else 0.0
                        print(f"{k.name} {tuner} seed {seed} budget {budget}: "
                              f"{len(c['seconds'])} trials, best {best:.2f} GFLOP/s, "
                              f"{'cached' if done else f'{time.perf_counter() - t0:.0f} s'}",
                              flush=True)
    res = report(a.cells)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print_table(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
