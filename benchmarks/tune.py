"""Benchmark: the XTAT tuner (`superopt tune`) on the TPU simulator.

Sections (each a table; all figures go to one JSON file):

1. zoo: every zoo model at batch 1 and 16, the joint schedule at `--budget`
   measurements: default-compiler time, tuned time, speedup (exact simulated times; the
   default is the first candidate, so the tuned program is never slower), evaluations,
   wall time, and the geometric mean of the speedups;
2. ablation: each pass tuned alone (its phase of the joint schedule: graph passes by
   annealing, kernel passes exhaustively) and all passes (joint schedule), equal budget;
3. schedules: joint vs sequential at equal budget over `--seeds` seeds (min, median, max);
4. throughput: evaluations per second of a search step (mutate + rebuild + time) on
   ResNet-50, BERT-base and a 100k-node synthetic graph, and the latency of a 10-choice
   fusion change on the 100k-node graph (goal: <= 50 ms; a full recompile by the
   simulator's ordinary path is timed beside it); the 100k-node graph tuned for
   `--big-budget` evaluations;
5. resume: `superopt tune` killed with SIGKILL mid-run, resumed with `--resume`, its
   records compared row by row with an uninterrupted run's;
6. tiles on real TPU data: per tunable TpuGraphs kernel, the measured time of the tile the
   simulator picks (what the exhaustive tile tuner picks among the measured
   configurations) over the measured best, next to XLA's default and the default
   compiler's analytical pick.

Run: `.venv/bin/python benchmarks/tune.py [--quick] [--budget N] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from superopt.ir.graph import Graph

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# The default compiler's tile heuristic the runs start from and are measured over
# (--default; `superopt.tpu_sim.tiling.DEFAULT_TILINGS`), set once by `main`.
DEFAULT = {"tiling": "xla"}


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def tune_once(model: str, batch: int | None, budget: int, schedule: str = "joint",
              passes: tuple[str, ...] | None = None, strategy: str = "anneal", seed: int = 0,
              graph: Graph | None = None, default_tiling: str | None = None) -> dict:
    from superopt.xtat.session import open_session
    from superopt.xtat.tuner import PASS_NAMES, Tuner, make_schedule

    t0 = time.perf_counter()
    s = open_session({"model": model, "batch": batch,
                      "default_tiling": default_tiling or DEFAULT["tiling"]}, graph)
    opened = time.perf_counter() - t0
    phases = make_schedule(schedule, passes or PASS_NAMES, strategy)
    r = Tuner(s.pipeline, s.runner, s.default, seed=seed).run(phases, budget)
    return {"model": model, "batch": batch, "schedule": schedule,
            "passes": list(passes or PASS_NAMES), "seed": seed, "nodes": len(s.graph),
            "default_s": r.default_time, "tuned_s": r.best_time, "speedup": r.speedup,
            "evaluations": r.evaluations, "search_s": r.wall_s, "setup_s": opened,
            "changed": r.best.changed()}


def section_zoo(models: list[str], batches: list[int], budget: int,
                legacy: bool = False) -> list[dict]:
    """Every model at every batch; with `legacy`, each row also tuned over the legacy
    default compiler (`legacy`: its default and tuned times and speedup), so the change of
    baseline is visible row by row."""
    rows = []
    for m in models:
        for b in batches:
            row = tune_once(m, b, budget)
            if legacy:
                old = tune_once(m, b, budget, default_tiling="legacy")
                row["legacy"] = {k: old[k] for k in ("default_s", "tuned_s", "speedup",
                                                     "changed")}
            rows.append(row)
            print(f"  {m:18s} b={b:<3d} default {row['default_s'] * 1e3:9.4f} ms  tuned "
                  f"{row['tuned_s'] * 1e3:9.4f} ms  {row['speedup']:.4f}x  "
                  + (f"(legacy default {row['legacy']['default_s'] * 1e3:9.4f} ms, "
                     f"{row['legacy']['speedup']:.4f}x)  " if legacy else "")
                  + f"{row['evaluations']} evals  {row['search_s']:.1f} s  {row['changed']}",
                  flush=True)
    return rows


def section_ablation(models: list[tuple[str, int]], budget: int) -> list[dict]:
    from superopt.xtat.tuner import PASS_NAMES

    rows = []
    for m, b in models:
        entry = {"model": m, "batch": b}
        for p in PASS_NAMES:  # the joint schedule's phase for p, with the whole budget
            entry[p] = tune_once(m, b, budget, "joint", (p,))["speedup"]
        entry["all"] = tune_once(m, b, budget)["speedup"]
        rows.append(entry)
        print("  " + f"{m:13s} b={b:<3d} " + "  ".join(
            f"{k} {entry[k]:.4f}x" for k in (*PASS_NAMES, "all")), flush=True)
    return rows


def section_schedules(models: list[tuple[str, int]], budget: int, seeds: int) -> list[dict]:
    rows = []
    for m, b in models:
        got = {}
        for sched in ("joint", "sequential"):
            sp = [tune_once(m, b, budget, sched, seed=s)["speedup"] for s in range(seeds)]
            got[sched] = {"speedups": sp, "min": min(sp), "median": statistics.median(sp),
                          "max": max(sp)}
        rows.append({"model": m, "batch": b, "budget": budget, **got})
        print(f"  {m:13s} b={b:<3d} " + "  ".join(
            f"{k} median {v['median']:.4f}x [{v['min']:.4f}, {v['max']:.4f}]"
            for k, v in got.items()), flush=True)
    return rows


def section_throughput(steps: int, big_nodes: int, big_budget: int) -> dict:
    import numpy as np

    from superopt.tpu_sim import Simulator, compile_with, simulate, synthetic_graph
    from superopt.xtat.context import TuneContext
    from superopt.xtat.session import open_session
    from superopt.xtat.tuner import PASS_NAMES, Tuner, make_schedule

    out: dict = {"rate": []}
    graphs = [("resnet50", None), ("bert-base", None),
              (f"synthetic:{big_nodes}", synthetic_graph(big_nodes))]
    for name, g in graphs:
        t0 = time.perf_counter()
        s = open_session({"model": name}, g)
        setup = time.perf_counter() - t0
        ctx = TuneContext(s.pipeline, s.default, np.random.default_rng(0))
        n = steps if g is None else max(20, steps // 5)
        for passes in (("fusion", "tiling", "flags"), PASS_NAMES):
            if g is not None:
                # The plan pass's sites are TASO's search over the whole graph (budget 20
                # expansions, each building and simulating dozens of rewritten copies):
                # over 100k nodes that alone runs for hours here, so the big graph's
                # rate is over the other passes.
                passes = tuple(p for p in passes if p != "plan")
            # The first step computes what a pass keeps per graph (the plan search, the
            # rewrite sites): timed apart, so the rate is of the steps a search repeats.
            t0 = time.perf_counter()
            s.runner.time(ctx.mutate(s.default, passes, 1))
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(n):
                s.runner.time(ctx.mutate(s.default, passes, 1))
            dt = time.perf_counter() - t0
            out["rate"].append({"model": name, "nodes": len(s.graph), "passes": list(passes),
                                "evaluations_per_s": n / dt, "setup_s": setup,
                                "first_step_s": first})
            print(f"  {name:18s} {len(s.graph):7d} nodes  {'+'.join(passes):36s} "
                  f"{n / dt:8.1f} evaluations/s (setup {setup:.1f} s, first step "
                  f"{first:.1f} s)", flush=True)
        if g is not None:
            # A 10-choice fusion change on the big graph, against a full recompile.
            f = s.pipeline.index("fusion")
            tun = s.pipeline.passes[f].sites(s.default.stages[f]).tunable
            rng = np.random.default_rng(1)
            lat = []
            for _ in range(15):
                configs = list(s.default.configs)
                cfg = configs[f]
                for i in rng.choice(len(tun), 10, replace=False):
                    cfg = cfg.with_choice(tun[i], not tun[i].default)
                configs[f] = cfg
                t0 = time.perf_counter()
                s.runner.time(s.pipeline.build(s.default, configs))
                lat.append(time.perf_counter() - t0)
            cand = s.pipeline.build(s.default, configs)
            cfg_full = s.runner.config(cand)
            sim = Simulator()
            compile_with(g, cfg_full, sim=sim)  # warm: layouts and kernel costs cached
            full = []
            for _ in range(3):
                t0 = time.perf_counter()
                simulate(compile_with(g, cfg_full, sim=sim), sim=sim)
                full.append(time.perf_counter() - t0)
            out["big_change"] = {"nodes": len(g), "choices": 10,
                                 "median_ms": 1e3 * statistics.median(lat),
                                 "max_ms": 1e3 * max(lat),
                                 "full_recompile_median_ms": 1e3 * statistics.median(full)}
            print(f"  10-choice fusion change on {len(g)} nodes: median "
                  f"{out['big_change']['median_ms']:.1f} ms (max {max(lat) * 1e3:.1f}); full "
                  f"recompile {out['big_change']['full_recompile_median_ms']:.0f} ms",
                  flush=True)
            t0 = time.perf_counter()
            r = Tuner(s.pipeline, s.runner, s.default, seed=0).run(
                make_schedule("joint", ("fusion", "tiling", "flags")), big_budget)
            out["big_tune"] = {"nodes": len(g), "evaluations": r.evaluations,
                               "wall_s": time.perf_counter() - t0, "speedup": r.speedup,
                               "passes": ["fusion", "tiling", "flags"]}
            print(f"  tuned {len(g)} nodes for {r.evaluations} evaluations in "
                  f"{out['big_tune']['wall_s']:.1f} s ({r.speedup:.4f}x)", flush=True)
    return out


def section_resume(model: str, budget: int, kill_at: int) -> dict:
    """`superopt tune` killed with SIGKILL mid-run and resumed, against an uninterrupted
    run with the same seed: the records must be identical, row for row."""
    import signal
    import sqlite3
    import subprocess
    import sys
    import tempfile

    def rows(db: Path) -> list[tuple]:
        con = sqlite3.connect(db)
        try:
            return con.execute("SELECT step, candidate, runtime FROM measurements "
                               "ORDER BY step").fetchall()
        finally:
            con.close()

    def cmd(db: Path) -> list[str]:
        return [sys.executable, "-m", "superopt", "tune", model, "--budget", str(budget),
                "--db", str(db), "--seed", "11"]

    with tempfile.TemporaryDirectory() as tmp:
        whole, killed = Path(tmp) / "whole.sqlite", Path(tmp) / "killed.sqlite"
        t0 = time.perf_counter()
        subprocess.run(cmd(whole), check=True, capture_output=True)
        t_whole = time.perf_counter() - t0
        proc = subprocess.Popen(cmd(killed), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        n = 0
        while proc.poll() is None and n < kill_at:
            time.sleep(0.01)
            try:
                n = len(rows(killed)) if killed.exists() else 0
            except sqlite3.Error:
                n = 0
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        at_kill = len(rows(killed))
        t0 = time.perf_counter()
        subprocess.run([*cmd(killed), "--resume"], check=True, capture_output=True)
        t_resume = time.perf_counter() - t0
        a, b = rows(whole), rows(killed)
        best_a, best_b = min(a, key=lambda r: (r[2], r[0])), min(b, key=lambda r: (r[2], r[0]))
        out = {"model": model, "budget": budget, "rows_at_kill": at_kill,
               "rows_uninterrupted": len(a), "rows_after_resume": len(b),
               "identical_records": a == b, "best_equal": best_a == best_b,
               "uninterrupted_s": t_whole, "resume_s": t_resume}
    print(f"  {model}: killed at {at_kill}/{budget} measurements, resumed: {len(b)} rows, "
          f"identical to the uninterrupted run: {a == b}, same best: {best_a == best_b}")
    return out


def section_tiles() -> list[dict]:
    from superopt.tpu_sim.replay import load_tiles, replay_tiles

    rows = []
    for k in load_tiles():
        if not k.tunable:
            continue
        try:
            rep = replay_tiles(k, "v3")
        except Exception as e:  # a kernel that does not import is reported, not fatal
            rows.append({"kernel": k.name, "error": f"{type(e).__name__}: {e}"})
            print(f"  {k.name:40s} skipped: {e}")
            continue
        m = rep.metrics
        rows.append({"kernel": rep.name, "configs": m.rows, "tuner_pick": m.top1,
                     "xla_default": m.xla_default, "analytical_pick": m.default, "tau": m.tau})
        print(f"  {rep.name[:40]:40s} {m.rows:3d} configs  tuner pick {m.top1:.3f}x best  "
              f"XLA default {m.xla_default:.3f}x  analytical {m.default:.3f}x", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--big-nodes", type=int, default=100_000)
    ap.add_argument("--big-budget", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="a few models, small budgets")
    ap.add_argument("--sections", default="zoo,ablation,schedules,throughput,resume,tiles")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "tune.json"))
    ap.add_argument("--default", choices=("xla", "legacy"), default="xla",
                    help="the default compiler's tile heuristic speedups are over (legacy: "
                         "the analytical roofline the figures before 2026-11-29 were over)")
    ap.add_argument("--no-legacy-column", action="store_true",
                    help="zoo section: do not also tune each row over the legacy default")
    args = ap.parse_args()
    DEFAULT["tiling"] = args.default
    from superopt import zoo

    models = ["resnet18", "squeezenet"] if args.quick else zoo.names()
    batches = [1] if args.quick else [1, 16]
    pairs = [("resnet18", 1)] if args.quick else [("resnet50", 16), ("bert-base", 16),
                                                   ("inception_v3", 16)]
    budget = 60 if args.quick else args.budget
    sections = set(args.sections.split(","))
    result: dict = {"machine": platform.node(), "python": platform.python_version(),
                    "budget": budget, "quick": args.quick, "default_tiling": args.default}
    t_all = time.perf_counter()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        # After every section: a run stopped in a later one keeps the finished sections.
        result["wall_s"] = time.perf_counter() - t_all
        out.write_text(json.dumps(result, indent=1) + "\n")

    if "zoo" in sections:
        print(f"zoo models, joint schedule, budget {budget}")
        legacy = not args.no_legacy_column and args.default != "legacy"
        rows = section_zoo(models, batches, budget, legacy)
        result["zoo"] = rows
        result["zoo_geomean_speedup"] = geomean([r["speedup"] for r in rows])
        print(f"  geomean speedup {result['zoo_geomean_speedup']:.4f}x over {len(rows)} runs "
              f"(over the {args.default} default)")
        if legacy:
            result["zoo_geomean_speedup_legacy"] = geomean([r["legacy"]["speedup"]
                                                            for r in rows])
            result["zoo_geomean_default_ratio"] = geomean(
                [r["legacy"]["default_s"] / r["default_s"] for r in rows])
            print(f"  over the legacy default: {result['zoo_geomean_speedup_legacy']:.4f}x; "
                  f"legacy default / xla default time {result['zoo_geomean_default_ratio']:.4f}"
                  "x; legacy default / tuned over xla "
                  + f"{geomean([r['legacy']['default_s'] / r['tuned_s'] for r in rows]):.4f}x")
        save()
    if "ablation" in sections:
        print(f"ablation (budget {budget} each)")
        result["ablation"] = section_ablation(pairs, budget)
        save()
    if "schedules" in sections:
        seeds = 2 if args.quick else args.seeds
        print(f"joint vs sequential, {seeds} seeds, budget {budget}")
        result["schedules"] = section_schedules(pairs, budget, seeds)
        save()
    if "throughput" in sections:
        print("throughput")
        result["throughput"] = section_throughput(
            50 if args.quick else 200, 20_000 if args.quick else args.big_nodes,
            100 if args.quick else args.big_budget)
        save()
    if "resume" in sections:
        print("SIGKILL and --resume")
        result["resume"] = section_resume("inception_v3", 60 if args.quick else 300,
                                          25 if args.quick else 120)
        save()
    if "tiles" in sections:
        print("tiles on the TpuGraphs samples (TPU v3, measured)")
        result["tiles"] = section_tiles()
        save()
    save()
    print(f"wrote {out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
