"""Benchmark: joint rewrite + PET + layout + fusion + tile + flag tuning against each
ingredient alone (issue 20's headline experiment), simulated on the TPU v4 preset.

Per model and batch, the simulated time of:

1. default: the default compiler;
2. TASO-only: `optimize` (TASO's backtracking search) with the verified starter library
   and the simulator cost, weight-only computations folded, then the default compiler;
3. PET-only: PET's corrected mutants of the model (`mutants`, transformation families),
   applied greedily by the simulator (one rewrite point at a time, each option measured,
   the best kept), then the default compiler;
4. XTAT-only: layout + fusion + tiles + flags tuned (joint schedule without the rewrite
   passes: kernels, layout + fusion, kernels), no rewrites;
5. joint: everything (starter + PET rules: the rewrite plan, i.e. TASO's search with the
   same cost model and budget as 2 offered as one choice, and the rewrite points of the
   graph it leaves), joint schedule; the best seed's graph is checked for equal values
   and timed against the original on torch CPU.

Searches 3-5 get the same measurement budget (`--budget`); TASO's search is bounded by
graphs expanded (`--taso-budget`) and its evaluation count is reported beside it. XTAT
and joint run with `--seeds` seeds (median, min, max). Prints a table, writes JSON and a
bar chart PNG.

Run: `.venv/bin/python benchmarks/joint.py [--models a,b] [--batches 1,16] [--budget N]
[--schedule joint|plan_last|rewrite_first] [--strategy sweep|ranked|...] [--attribution]`
(`--attribution` adds each tuned run's per-pass attribution: the simulated time lost when
that pass alone goes back to its default, `superopt.xtat.explain.passes`, as `tune`
reports it). The default models are the ten of the committed joint.json; the
transformer-era rows (issue 44) are `--models llama3_2_1b,vit_b16 --attribution --out
results/joint_modern.json`.
`--equal-info` adds the column `xtat_exact` (issue 49's equal information): XTAT-only with
as many exact simulator evaluations per seed as joint's plan search spent on the row
(`plan_cost_evaluations`), screening its proposals (`superopt.xtat.screen.Budgeted`); on a
kept table, `--resume --remeasure xtat_exact --equal-info` adds only that column.
(`--resume --joint-only` with another `--schedule` and a copy of the result file
measures only the joint column again; `--resume --remeasure
xtat,joint` both tuner columns, after a change to the tuner, keeping TASO-only and
PET-only; `--remeasure taso,joint` after a change to the starter library).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from superopt.interrupts import finished

if TYPE_CHECKING:
    from collections.abc import Callable

    from superopt.ir.graph import Graph
    from superopt.xtat.session import Session

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

STRATEGY = "sweep"  # the graph phases' strategy, XTAT-only's and joint's (--strategy)
COMPILER = ("layout", "fusion", "tiling", "flags")  # XTAT-only's passes: no rewriting
# The rows of the committed joint.json (TASO/PET/Tensat's models); the zoo's newer models
# are measured when named with --models.
TABLE_MODELS = ("resnet18", "resnet50", "resnext50", "inception_v3", "squeezenet", "nasnet_a",
                "bert_base", "bert_small", "csrnet", "vgg19")


# The default compiler's tile heuristic every row is compiled and measured over (--default;
# `superopt.tpu_sim.tiling.DEFAULT_TILINGS`), set once by `main`.
DEFAULT = {"tiling": "xla"}


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def taso_only(graph: Graph, budget: int, keep: dict | None = None) -> dict:
    """TASO-only's row cell; given `keep`, its rewritten graph (weight-only computations
    folded, as simulated) is left there under "graph". Only what the rewrites made
    weight-only is folded, as the tuner's rewrite pass does: a weight-only computation
    the model already had (t5's relative position buckets, llama's rotary tables) stays
    computed, as the default compiler computes it, so the column's speedup over the
    default is its rewrites' and not constant folding's (folding t5's alone is 1.32x)."""
    from superopt.rewrite import Matcher, create_cost, fold_weights, optimize
    from superopt.rewrite.fold import foldable_hashes
    from superopt.tpu_sim import Simulator, simulate
    from superopt.xtat.rules import rule_set

    t0 = time.perf_counter()
    res = finished(optimize(graph, Matcher(rule_set(None).rules),
                            create_cost("sim", hardware="v4", default_tiling=DEFAULT["tiling"]),
                            budget=budget))
    folded = fold_weights(res.graph, evaluate=False, skip=foldable_hashes(graph)).graph
    sim = Simulator("v4", default_tiling=DEFAULT["tiling"])
    t = simulate(sim.compile(folded), sim=sim).time
    if keep is not None:
        keep["graph"] = folded
    return {"time_s": t, "evaluations": res.evaluated, "wall_s": time.perf_counter() - t0,
            "applied": sum(res.applied.values())}


def pet_rules(graph: Graph, batch: int, path: Path) -> tuple[str, int, float]:
    from superopt.mutants.search import Settings, search_model
    from superopt.substitutions.library import save_library
    from superopt.xtat.rules import exactly_corrected

    t0 = time.perf_counter()
    report = search_model(graph, Settings(dfs=False, measure_top=0), batch=batch,
                          use_sim=False)
    rules = [r for r in report.rules if exactly_corrected(r)]
    if rules:
        save_library(rules, path, meta={"generator": "pet", "model": graph.name})
    return (str(path) if rules else ""), len(rules), time.perf_counter() - t0


def run_tuner(model: str, batch: int, graph: Graph, rules: list[str] | None, passes: tuple,
              schedule: str, strategy: str, budget: int, seeds: range,
              keep: dict | None = None, plan_budget: int = 20,
              plan_cache: str | None = None, attribution: bool = False,
              exact_screen: list[int] | None = None,
              plan_search: str = "backtracking") -> list[dict]:
    """One tuning run per seed, on one session: its passes' caches (the plan's search,
    rule matching per stage) are keyed by content, so the seeds share them. With
    `plan_cache` (a file), the plan's searches are also kept there for later runs. With
    `exact_screen` (one number per seed), each seed's proposals are screened by the exact
    simulated time, up to that many distinct candidates (`equal_info`)."""
    from superopt.xtat.session import open_session, use_plan_cache

    s = open_session({"model": model, "batch": batch, "rules": rules,
                      "plan_budget": plan_budget, "plan_search": plan_search,
                      "default_tiling": DEFAULT["tiling"]}, graph)
    cache = use_plan_cache(s, plan_cache)
    try:
        return [tune_once(s, graph, passes, schedule, strategy, budget, seed, keep,
                          attribution, exact_screen[i] if exact_screen else None)
                for i, seed in enumerate(seeds)]
    finally:
        if cache is not None:
            cache.close()


def tune_once(s: Session, graph: Graph, passes: tuple, schedule: str, strategy: str,
              budget: int, seed: int, keep: dict | None, attribution: bool = False,
              exact_screen: int | None = None) -> dict:
    from superopt.xtat.explain import passes as per_pass
    from superopt.xtat.screen import Budgeted, screening
    from superopt.xtat.session import applied_rewrites, rewritten_graph
    from superopt.xtat.tuner import Tuner, make_schedule

    # Equal information: the exact simulator prices up to `exact_screen` proposals, and a
    # proposal exactly slower than the incumbent is not measured (margin 0: the price is
    # exact, not a per-op sum). Only the graph phases are screened, as the plan's search
    # prices whole graphs: a kernel phase (tiles, flags: `per_kernel` passes) reads each
    # kernel's time from the profile of one candidate that changes every kernel at once,
    # which a whole-program price would reject before it is measured.
    exact = Budgeted(s.runner.time, exact_screen) if exact_screen is not None else None
    pipe = s.pipeline
    hook = screening(exact, margin=0.0, skip=lambda ph: all(
        pipe.passes[pipe.index(p)].per_kernel for p in ph.passes)) if exact else None
    r = finished(Tuner(s.pipeline, s.runner, s.default, seed=seed, wrap=hook).run(
        make_schedule(schedule, passes, strategy), budget))
    plan = s.pipeline.passes[s.pipeline.index("plan")].plan(graph) \
        if "plan" in passes and r.best.config("plan").choices else None
    if keep is not None and (not keep or r.best_time < keep["time_s"]):
        keep.update(time_s=r.best_time, graph=rewritten_graph(s.pipeline, r.best))
    out = {"time_s": r.best_time, "default_s": r.default_time, "evaluations": r.evaluations,
           "wall_s": r.wall_s, "changed": r.best.changed(), "phases": r.phases,
           "applied": applied_rewrites(r.best),
           # The plan's search priced graphs with its cost model (the simulator, as
           # TASO-only does); those are not measurements and are counted apart.
           "plan_cost_evaluations": plan.evaluations if plan else 0}
    if exact is not None:
        out |= {"exact_screen_allowed": exact_screen, "exact_evaluations": exact.used,
                "screened": hook.screened()}
    if attribution:  # per pass: choices changed, time lost when it alone reverts
        # A pass whose revert alone is not a valid program (the plan's rewrites that later
        # choices are keyed on) has no finite gain: null and says so, as strict JSON.
        out["per_pass"] = {k: {"changed": n, "gain_s": g if math.isfinite(g) else None,
                               **({} if math.isfinite(g) else {"revert": "invalid"})}
                           for k, (n, g) in per_pass(s.pipeline, s.runner, r.best).items()}
    return out


def torch_ratio(before: Graph, after: Graph) -> dict:
    """Values of the tuned graph against the original (reference interpreter), then both
    timed side by side on torch CPU: is the joint win only a simulator win?"""
    from superopt.rewrite.check import check_values, time_side_by_side
    from superopt.rewrite.fold import fold_weights

    if after.structural_hash == before.structural_hash:
        return {"values_equal": True, "torch_ratio": 1.0, "note": "graph unchanged"}
    check = check_values(before, after)
    out: dict = {"values_equal": check.ok, "max_rel_err": check.max_rel_err}
    if check.ok:
        timing = time_side_by_side([before, fold_weights(after).graph], repeats=7, warmup=2)
        lo, hi = timing.ratio_ci()
        out |= {"torch_before_s": timing.medians[0], "torch_after_s": timing.medians[1],
                "torch_ratio": timing.ratio(), "torch_ratio_ci": [lo, hi],
                "torch_threads": timing.threads}
    return out


def save_pair(folder: Path, model: str, batch: int, before: Graph, after: Graph) -> Path:
    """`<model>_b<batch>.json.gz`: the original graph and the joint one, weight-only
    computations folded as the simulator saw them, as graph documents without weight data
    (timing needs shapes, not values: the values were checked here)."""
    import gzip

    from superopt.ir.files import atomic_path
    from superopt.ir.serialize import to_json
    from superopt.rewrite.fold import fold_weights

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{model}_b{batch}.json.gz"
    doc = {"model": model, "batch": batch, "before": to_json(before),
           "after": to_json(fold_weights(after, evaluate=False).graph)}
    with atomic_path(path) as tmp, gzip.open(tmp, "wt") as f:
        json.dump(doc, f)
    return path


@functools.cache
def code_state() -> str:
    """The commit this benchmark runs at (`+changes` when src/ or benchmarks/ differ from
    it): each row records it, so a table that mixes code states says so."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "benchmarks"],
                               cwd=root, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    changed = [ln for ln in dirty.splitlines() if not ln[3:].startswith("benchmarks/results")]
    return head + ("+changes" if changed else "")


TIE = 1 - 1e-3  # joint within 0.1% of the best single system


def parse_rows(text: str) -> list[tuple[str, int]]:
    """`model:batch,...` (the other joint benchmarks' --rows), checked before any work."""
    from superopt import zoo

    try:
        rows = [(m, int(b)) for m, b in (r.split(":") for r in text.split(","))]
    except ValueError:
        raise SystemExit(f"--rows: expected model:batch,..., found {text!r}") from None
    for m, _ in rows:
        try:
            zoo.get(m)
        except zoo.ZooError as e:
            raise SystemExit(f"--rows: {e}") from None
    return rows


def schedule_key(kind: str = "joint", passes: tuple | None = None,
                 strategy: str = STRATEGY, plan_search: str = "backtracking") -> str:
    """A column's schedule's phases (strategies and their options), the order the kernel
    phases try tiles in and how the plan's options are made (and searched, when not by
    TASO's backtracking), hashed: a --remeasure run skips the rows already measured with
    this schedule, so a killed run resumes where it stopped."""
    import hashlib

    from superopt.xtat.passes.kernel import TileSites
    from superopt.xtat.passes.plan import SITE_OPTIONS
    from superopt.xtat.tuner import PASS_NAMES, make_schedule

    passes = passes or PASS_NAMES
    phases = make_schedule(kind, passes, strategy)
    # The kernel phases try each kernel's first tiles: their order is part of the schedule;
    # so are the rewrite plan's options (its variants, each rule source's own plan).
    key = (phases, TileSites.ORDER, *([SITE_OPTIONS] if "plan" in passes else []),
           *([plan_search] if "plan" in passes and plan_search != "backtracking" else []))
    return hashlib.sha256(repr(key).encode()).hexdigest()[:12]


@functools.cache
def library_key() -> str:
    """The verified starter library's rules (names, patterns, conditions), hashed: the
    TASO-only and joint columns use it, so a row measured with an older library is stale
    for both (re-proving the rules, which changes only their timings, is not)."""
    import hashlib

    from superopt.xtat.rules import rule_set

    rules = sorted((r.name, repr(r.source), repr(r.target), r.condition, r.bidirectional)
                   for r in rule_set(None).rules)
    return hashlib.sha256(repr(rules).encode()).hexdigest()[:12]


def stale(row: dict, columns: set[str], schedule: str, strategy: str = STRATEGY,
          plan_search: str = "backtracking") -> set[str]:
    """The columns of `columns` that `row` measured with another schedule or starter
    library than now."""
    want = {"joint": schedule_key(schedule, strategy=strategy, plan_search=plan_search),
            "xtat": schedule_key("joint", COMPILER, strategy),
            "xtat_exact": schedule_key("joint", COMPILER, strategy)}
    lib = library_key()
    return {c for c in columns
            if (c in want and row.get(f"{c}_schedule") != want[c])
            or (c in ("taso", "joint") and row.get(f"{c}_library") != lib)}


def exact_column(row: dict, graph: Graph, budget: int, seeds: int, strategy: str,
                 attribution: bool) -> None:
    """Equal information (issue 49): joint's plan search priced each seed's graphs with
    the exact simulator (`plan_cost_evaluations`, not counted as measurements); XTAT-only
    gets as many exact evaluations per seed to screen its proposals, at the same
    measurement budget and seeds. Adds `xtat_exact` (per seed) and its speedups."""
    model, batch = row["model"], row["batch"]
    allowed = [j["plan_cost_evaluations"] for j in row["joint"]][:seeds]
    row["xtat_exact"] = run_tuner(model, batch, graph, None, COMPILER, "joint", strategy,
                                  budget, range(seeds), attribution=attribution,
                                  exact_screen=allowed)
    row["xtat_exact_schedule"] = schedule_key("joint", COMPILER, strategy)
    d = row["default_s"]
    times = [d / x["time_s"] for x in row["xtat_exact"]]
    row.setdefault("speedup", {}).update(xtat_exact=statistics.median(times),
                                         xtat_exact_range=[min(times), max(times)])
    print(f"  {model:13s} b={batch:<3d} XTAT-only with {max(allowed)} exact evaluations: "
          f"{statistics.median(times):.3f}x [{min(times):.3f}, {max(times):.3f}] (used "
          + ", ".join(str(x["exact_evaluations"]) for x in row["xtat_exact"])
          + f"; joint {row['speedup'].get('joint', math.nan):.3f}x)", flush=True)


def equal_information(rows: list[dict]) -> dict:
    """The summary of the xtat_exact column over the rows that have it (none: {})."""
    have = [r for r in rows if "xtat_exact" in r.get("speedup", {})]
    if not have:
        return {}
    return {"equal_information": {
        "rows": len(have),
        "geomean_xtat_exact": geomean([r["speedup"]["xtat_exact"] for r in have]),
        "geomean_xtat_same_rows": geomean([r["speedup"]["xtat"] for r in have]),
        "geomean_joint_same_rows": geomean([r["speedup"]["joint"] for r in have]),
        "joint_at_least_xtat_exact": sum(r["speedup"]["joint"] >= r["speedup"]["xtat_exact"]
                                         * (1 - 1e-9) for r in have),
        "exact_evaluations_allowed": sum(x["exact_screen_allowed"] for r in have
                                         for x in r["xtat_exact"]),
        "exact_evaluations_used": sum(x["exact_evaluations"] for r in have
                                      for x in r["xtat_exact"])}}


def bench(model: str, batch: int, budget: int, taso_budget: int, seeds: int,
          tmp: Path, torch: bool = True, row: dict | None = None,
          schedule: str = "joint", again: frozenset[str] = frozenset({"joint"}),
          strategy: str = STRATEGY, plan_cache: str | None = None,
          save_graphs: Path | None = None, attribution: bool = False,
          equal_info: bool = False,
          checkpoint: Callable[[dict], None] | None = None,
          plan_search: str = "backtracking") -> dict:
    """One table row. Given `row` (a row measured before), only the columns in `again`
    (xtat, taso, joint, xtat_exact) are measured again and the others are kept: PET-only
    depends on neither the tuner's schedules nor the starter library; `again` of only
    xtat_exact adds that column to a kept row. A partial row (`checkpoint`'s, from a run
    stopped within the row) gets only the columns it lacks. Given `save_graphs`, the
    original and the best joint graph are written there (for timing on other devices).
    With `equal_info`, the row also gets `xtat_exact` (`exact_column`). `checkpoint` is
    called with the row after each column: a nasnet_a row takes two CPU-hours, and a run
    stopped within it keeps the columns it finished."""
    from superopt import zoo
    from superopt.xtat.tuner import PASS_NAMES

    graph = zoo.build(model, batch=batch)
    if row is not None and again == {"xtat_exact"}:
        exact_column(row, graph, budget, seeds, strategy, attribution)
        row["measured_at_xtat_exact"] = code_state()
        return row
    row = row if row is not None else {"model": model, "batch": batch}
    state = row.setdefault("columns_measured_at", {})

    def need(col: str) -> bool:
        return col in again or col not in row

    def done(*cols: str) -> None:
        state.update(dict.fromkeys(cols, code_state()))
        if checkpoint is not None:
            checkpoint(row)

    if need("xtat"):
        row["xtat"] = run_tuner(model, batch, graph, None, COMPILER, "joint", strategy,
                                budget, range(seeds), attribution=attribution)
        row["xtat_schedule"] = schedule_key("joint", COMPILER, strategy)
        row["default_s"] = row["xtat"][0]["default_s"]
        done("xtat")
    if need("taso"):
        row["taso"] = taso_only(graph, taso_budget)
        row["taso_library"] = library_key()
        done("taso")
    # The joint column needs PET's rules; a row whose joint column was kept (from a
    # partial row, with its torch check and saved graphs) does not.
    joint_again = need("joint") or (torch and "joint_torch" not in row) or (
        save_graphs is not None and not (save_graphs / f"{model}_b{batch}.json.gz").exists())
    if need("pet") or joint_again:
        path, n_pet, pet_s = pet_rules(graph, batch, tmp / f"pet_{model}_{batch}.json")
        if "pet" not in row:
            row["pet_rules"], row["pet_search_s"] = n_pet, pet_s
            if path:
                row["pet"] = run_tuner(model, batch, graph, [path], ("rewrite",), "custom",
                                       "exhaustive", budget, range(1))[0]
            else:
                row["pet"] = {"time_s": row["default_s"], "evaluations": 0,
                              "note": "no PET rule"}
            done("pet")
        elif n_pet != row["pet_rules"]:
            raise SystemExit(f"{model} b={batch}: PET found {n_pet} rules, the kept row "
                             f"{row['pet_rules']}; measure the whole row again")
    if joint_again:
        sources = ["starter", path] if path else ["starter"]
        best: dict = {}
        row["joint"] = run_tuner(model, batch, graph, sources, PASS_NAMES, schedule,
                                 strategy, budget, range(seeds), keep=best,
                                 plan_budget=taso_budget, plan_cache=plan_cache,
                                 attribution=attribution, plan_search=plan_search)
        row["joint_schedule"] = schedule_key(schedule, strategy=strategy,
                                             plan_search=plan_search)
        row["joint_plan_search"] = plan_search
        row["joint_library"] = library_key()
        row["joint_schedule_name"] = schedule
        row.pop("joint_torch", None)
        if torch:
            row["joint_torch"] = torch_ratio(graph, best["graph"])
        if save_graphs is not None:
            save_pair(save_graphs, model, batch, graph, best["graph"])
        # The equal-information column is screened with joint's evaluation counts.
        row.pop("xtat_exact", None)
        done("joint")
    states = sorted(set(state.values()))
    row["measured_at"] = states[0] if len(states) == 1 else ", ".join(states)
    d, xtat = row["default_s"], row["xtat"]
    row["speedup"] = {
        "taso": d / row["taso"]["time_s"], "pet": d / row["pet"]["time_s"],
        "xtat": statistics.median(d / x["time_s"] for x in xtat),
        "joint": statistics.median(d / x["time_s"] for x in row["joint"]),
        "xtat_range": [min(d / x["time_s"] for x in xtat), max(d / x["time_s"] for x in xtat)],
        "joint_range": [min(d / x["time_s"] for x in row["joint"]),
                        max(d / x["time_s"] for x in row["joint"])]}
    if equal_info and need("xtat_exact"):
        exact_column(row, graph, budget, seeds, strategy, attribution)
    elif not equal_info:  # a kept row's column was screened with the old joint's evaluation counts
        row.pop("xtat_exact", None)
        row.pop("xtat_exact_schedule", None)
    sp = row["speedup"]
    best_single = max(sp["taso"], sp["pet"], sp["xtat"])
    row["joint_beats_best_single"] = sp["joint"] >= best_single * (1 - 1e-9)
    print(f"  {model:13s} b={batch:<3d} default {d * 1e3:8.4f} ms  TASO {sp['taso']:.3f}x  "
          f"PET {sp['pet']:.3f}x ({row['pet_rules']} rules)  XTAT {sp['xtat']:.3f}x "
          f"[{sp['xtat_range'][0]:.3f}, {sp['xtat_range'][1]:.3f}]  joint {sp['joint']:.3f}x "
          f"[{sp['joint_range'][0]:.3f}, {sp['joint_range'][1]:.3f}]"
          f"{'' if row['joint_beats_best_single'] else '  (joint < best single)'}"
          + (f"  torch CPU {row['joint_torch'].get('torch_ratio', math.nan):.3f}x"
             if torch else ""), flush=True)
    if attribution:
        for col in ("xtat", "joint"):
            runs = row[col]
            top = min(runs, key=lambda x: x["time_s"])
            print(f"    {col} best seed, time lost when one pass reverts: " + ", ".join(
                f"{k} " + (f"{v['gain_s'] / d * 100:+.1f}%" if v["gain_s"] is not None
                           else "(revert invalid)") + f" ({v['changed']} choices)"
                for k, v in top["per_pass"].items() if v["changed"]), flush=True)
    return row


def bar_chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = ("taso", "pet", "xtat", "joint")
    labels = [f"{r['model']}/{r['batch']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(rows)), 4))
    w = 0.2
    for i, c in enumerate(cols):
        ax.bar([k + (i - 1.5) * w for k in range(len(rows))],
               [r["speedup"][c] for r in rows], w, label=c)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("speedup over the default compiler (simulated, v4)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=None,
                    help="comma-separated zoo models (default: the ten of joint.json)")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--taso-budget", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true",
                    help="skip the value check and torch CPU timing of the joint graph")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "joint.json"))
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in --out (same settings) and run the rest; "
                         "a row stopped within continues from its finished columns")
    ap.add_argument("--include", action="append", default=[],
                    help="also take the rows of this result file (same settings; e.g. a "
                         "model run in another process), repeatable")
    ap.add_argument("--joint-only", action="store_true",
                    help="with --resume: measure only the joint column again in the kept "
                         "rows of --models (after a change to the joint schedule); the "
                         "same as --remeasure joint")
    ap.add_argument("--remeasure", default=None,
                    help="with --resume: measure these columns (xtat, taso, joint; comma-"
                         "separated) again in the kept rows of --models whose schedule or "
                         "starter library differs from now (after a change to the tuner "
                         "or the library); xtat_exact alone adds the equal-information "
                         "column to kept rows that lack it")
    ap.add_argument("--equal-info", action="store_true",
                    help="also run XTAT-only with as many exact simulator evaluations "
                         "(screening its proposals) as joint's plan search spent on the "
                         "row, per seed: the xtat_exact column")
    ap.add_argument("--schedule", default="joint",
                    help="the joint column's schedule (superopt.xtat.tuner.SCHEDULES; XTAT-only "
                         "always runs joint's phases without the rewrite passes)")
    ap.add_argument("--strategy", default=STRATEGY,
                    help="the graph phases' strategy, XTAT-only's and joint's "
                         f"(superopt.xtat.strategies; default {STRATEGY})")
    ap.add_argument("--plan-cache", default=None, metavar="FILE",
                    help="keep the joint column's plan searches (TASO's, not measurements) "
                         "in this SQLite file and replay the ones made before with the same "
                         "inputs and code (superopt.xtat.plancache): the same results, "
                         "without the searches (an hour on nasnet_a)")
    ap.add_argument("--plan-search", choices=("backtracking", "eqsat", "both"),
                    default="backtracking",
                    help="how the joint column's rewrite plan is searched (tune "
                         "--plan-search): TASO's backtracking at --taso-budget (default), "
                         "equality saturation, or both (eqsat's plan one more option); "
                         "TASO-only stays TASO's search")
    ap.add_argument("--attribution", action="store_true",
                    help="record each tuned run's per-pass attribution (per_pass: choices "
                         "changed and the time lost when the pass alone reverts)")
    ap.add_argument("--save-graphs", default=None, metavar="DIR",
                    help="write each measured row's original and best joint graph there "
                         "(benchmarks/joint_device.py times them on another device)")
    ap.add_argument("--default", choices=("xla", "legacy"), default="xla",
                    help="the default compiler's tile heuristic every column is compiled and "
                         "measured over (legacy: the analytical roofline the rows before "
                         "2026-11-29 were measured over)")
    args = ap.parse_args()
    DEFAULT["tiling"] = args.default
    save_graphs = Path(args.save_graphs) if args.save_graphs else None
    from superopt import zoo
    from superopt.xtat.strategies import CATALOGUE
    from superopt.xtat.tuner import SCHEDULES

    if args.strategy not in CATALOGUE:
        raise SystemExit(f"--strategy: expected one of {', '.join(CATALOGUE)}, "
                         f"found {args.strategy!r}")
    if args.schedule not in SCHEDULES or args.schedule == "custom":
        raise SystemExit(f"--schedule: expected one of {', '.join(SCHEDULES[:-1])}, "
                         f"found {args.schedule!r}")

    # Rows are keyed by the zoo's canonical name ("bert-small" and "bert_small" are one
    # model: a row kept under one spelling must not be measured again under the other).
    try:
        models = [zoo.get(m).name for m in args.models.split(",")] if args.models else list(
            TABLE_MODELS)
    except zoo.ZooError as e:
        raise SystemExit(f"--models: {e}") from None
    batches = [int(b) for b in args.batches.split(",")]
    rows: list[dict] = []
    t0 = time.perf_counter()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {"budget": args.budget, "taso_budget": args.taso_budget, "seeds": args.seeds,
                "default_tiling": args.default}
    # A resumed file keeps its note (how its rows were measured): a summary-only run must
    # not drop it.
    note: dict = {}
    # Rows stopped within (their finished columns, `bench`'s checkpoints), by (model,
    # batch): kept apart from the table, and continued by --resume.
    partial: dict[tuple[str, int], dict] = {}
    for f in ([str(out)] if args.resume and out.exists() else []) + args.include:
        prev = json.loads(Path(f).read_text())
        if f == str(out) and "note" in prev:
            note = {"note": prev["note"]}
        if f == str(out):
            partial = {(zoo.get(r["model"]).name, r["batch"]): r
                       for r in prev.get("partial", [])}
        prev.setdefault("default_tiling", "legacy")  # files from before the choice existed
        if {k: prev.get(k) for k in settings} != settings:
            raise SystemExit(f"{f}: made with other settings "
                             f"({ {k: prev.get(k) for k in settings} }), not {settings}")
        for r in prev["rows"]:
            r["model"] = zoo.get(r["model"]).name
        rows.extend(r for r in prev["rows"]
                    if (r["model"], r["batch"]) not in {(q["model"], q["batch"]) for q in rows})
    done = {(r["model"], r["batch"]) for r in rows}
    again = set(args.remeasure.split(",")) if args.remeasure else set()
    if args.joint_only:
        again.add("joint")
    if again - {"xtat", "taso", "joint"} and again != {"xtat_exact"}:
        raise SystemExit(f"--remeasure: expected some of xtat,taso,joint, or xtat_exact "
                         f"alone, found {args.remeasure!r}")
    if again and not args.resume:
        raise SystemExit("--joint-only/--remeasure re-measure rows kept by --resume: "
                         "add --resume")

    def write(done: bool) -> tuple[dict, int]:
        # Written after every row, so an interrupted run keeps what it measured.
        summary = {c: geomean([r["speedup"][c] for r in rows])
                   for c in ("taso", "pet", "xtat", "joint")}
        wins = sum(r["joint_beats_best_single"] for r in rows)
        # Also within 0.1% of it (the simulator's measurement noise is 1.5% per kernel):
        # a row where joint and XTAT-only end on the same choices up to noise is a tie.
        ties = sum(r["speedup"]["joint"] >= TIE * max(
            r["speedup"][c] for c in ("taso", "pet", "xtat")) for r in rows)
        out.write_text(json.dumps({"budget": args.budget, "taso_budget": args.taso_budget,
                                   "strategy": args.strategy,
                                   "seeds": args.seeds, "hardware": "v4", "complete": done,
                                   "default_tiling": args.default,
                                   "rows": rows, "geomean": summary,
                                   **({"partial": list(partial.values())} if partial else {}),
                                   "joint_beats_best_single": wins,
                                   "joint_within_0.1pct_of_best_single": ties,
                                   **equal_information(rows),
                                   "wall_s": time.perf_counter() - t0, **note},
                                  indent=1) + "\n")
        return summary, wins, ties

    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            for b in batches:
                if again and (m, b) in done:
                    i = next(i for i, r in enumerate(rows) if (r["model"], r["batch"]) == (m, b))
                    cols = stale(rows[i], again, args.schedule, args.strategy,
                                 args.plan_search)
                    if not cols:
                        continue
                    # The joint column is compared with the XTAT-only one: measured again
                    # with it (a joint result is never kept beside a newer XTAT-only one);
                    # TASO-only (one search, no seeds) and the equal-information column
                    # alone only replace themselves.
                    cols = cols | {"joint"} if "xtat" in cols else cols
                    rows[i] = bench(m, b, args.budget, args.taso_budget, args.seeds, Path(tmp),
                                    not args.no_torch, rows[i], args.schedule,
                                    frozenset(cols), args.strategy,
                                    args.plan_cache, save_graphs, args.attribution,
                                    args.equal_info, plan_search=args.plan_search)
                elif (m, b) not in done:
                    def keep(row: dict, key: tuple[str, int] = (m, b)) -> None:
                        partial[key] = row
                        write(False)

                    got = partial.get((m, b))
                    if got is not None:
                        print(f"  {m} b={b}: continuing the partial row (kept: "
                              f"{', '.join(got.get('columns_measured_at', {}))})", flush=True)
                    rows.append(bench(m, b, args.budget, args.taso_budget, args.seeds,
                                      Path(tmp), not args.no_torch, row=got,
                                      again=frozenset(), schedule=args.schedule,
                                      strategy=args.strategy, plan_cache=args.plan_cache,
                                      save_graphs=save_graphs,
                                      attribution=args.attribution,
                                      equal_info=args.equal_info, checkpoint=keep,
                                      plan_search=args.plan_search))
                    partial.pop((m, b), None)
                else:
                    continue
                write(False)
    summary, wins, ties = write(True)
    print("geomean speedups: " + "  ".join(f"{k} {v:.3f}x" for k, v in summary.items())
          + f"; joint >= best single on {wins}/{len(rows)}, within 0.1% of it on "
          f"{ties}/{len(rows)}")
    png = out.with_suffix(".png")
    bar_chart(rows, png)
    print(f"wrote {out} and {png}")


def run_main(main: Callable[[], None]) -> None:
    """Run a row-by-row benchmark's `main`: Ctrl-C exits with one line, the rows measured
    so far already in its --out (written after every row)."""
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("interrupted: the rows measured so far are in --out; --resume "
                         "continues") from None


if __name__ == "__main__":
    run_main(main)
