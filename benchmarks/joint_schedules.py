"""Benchmark: orders of the joint schedule's phases, side by side on rows of joint.py.

Issue 20 asks where joint tuning misses pass interactions. In joint.json the joint
schedule (greedy rewrites first, then rewrite + layout + fusion annealing, then tiles and
flags) is below XTAT-only on vgg19, csrnet and bert-small at batch 16: the rewrites it
adopts first leave the anneal few layout gains. This runs other phase orders with the same
budget, rules (starter + PET's corrected mutants), TASO plan budget and seeds as
joint.py's joint column, so each variant's median speedup over the default compiler can be
compared with the current one and with the XTAT-only figure kept in joint.json:

- `current`: the joint schedule as it was then (now the tuner's `rewrite_first`, whose
  kernel phases are since measured from profiles, every kernel at once: this study keeps
  its own exhaustive kernel phases so that a re-run reproduces its results);
- `lf_first`: layout + fusion annealing first (35%), then the greedy rewrite phase (15%)
  measured on top of those layouts (XTAT-M repair keeps them by key), then tiles, flags;
- `lf_rw_rlf`: layout + fusion (30%), greedy rewrites (10%), then rewrite + layout +
  fusion annealing (10%), then tiles, flags;
- `rw_lf`: greedy rewrites (15%), then layout + fusion annealing without rewrite moves
  (35%), then tiles, flags;
- `two_starts`: greedy rewrites (15%), rewrite + layout + fusion annealing from there
  (15%), then layout + fusion annealing from the default compiler's candidate (20%, XTAT's
  path: no rewrites), then tiles and flags on the best of all;
- `plan_lf_rw` (the tuner's `joint` schedule, without its profiled kernel phases before
  the layouts and the rewrite points): the rewrite plan alone (TASO's search result: one measurement, kept if
  faster), then layout + fusion annealing (35%), then the greedy rewrite points (15%)
  measured on top of those layouts, then tiles, flags. The plan's folds and merges change
  which kernels exist (layouts tuned before them would be lost), PET's points change
  what the layouts then fix (judged after them, a point that overlaps a layout gain is
  not taken);
- `plan_lf_rw_rlf`: as `plan_lf_rw` with shares 25% / 12%, then rewrite + layout + fusion
  annealing (13%), so that layouts can follow the rewrites taken;
- `plan_lf_rw_lf`: the plan, layout + fusion (20%), the rewrite points judged on those
  layouts (15%), then layout + fusion again (15%, no rewrite moves) to fit the layouts to
  the rewrites taken, then tiles, flags.

Prints a table and writes JSON (`--out`), saved after every row and resumed with
`--resume`. Run: `.venv/bin/python benchmarks/joint_schedules.py [--rows vgg19:16,...]`.
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

ROWS = "vgg19:16,csrnet:16,bert-small:16,resnet18:1,squeezenet:1,squeezenet:16,bert-base:16"
VARIANTS = ("current", "lf_first", "lf_rw_rlf", "rw_lf", "two_starts", "plan_lf_rw",
            "plan_lf_rw_rlf", "plan_lf_rw_lf")


def schedule(name: str) -> list:
    from superopt.xtat.tuner import PATIENCE, TILE_TOP_K, Phase

    # The kernel phases as this study ran them (each kernel's options measured one at a
    # time: tiles 30%, flags 20%), before the tuner's profiled `parallel` kernel phases;
    # so a re-run measures what results/joint_schedules*.json hold.
    KERNEL_PHASES = (Phase("tiling", ("tiling",), "exhaustive", 0.3,
                           (("top_k", TILE_TOP_K),)),
                     Phase("flags", ("flags",), "exhaustive", 0.2))

    def rewrite(share: float, passes: tuple[str, ...] = ("plan", "rewrite")) -> Phase:
        return Phase(passes[-1], passes, "exhaustive", share, patience=PATIENCE)

    def graph(name: str, passes: tuple[str, ...], share: float, **opts: str) -> Phase:
        # A second start has to climb back from the default before it can beat the
        # best so far: patience (counted from the last new best) would end it first.
        return Phase(name, passes, "anneal", share, tuple(opts.items()),
                     patience=None if opts else PATIENCE)

    if name == "current":
        return [rewrite(0.15), graph("rewrite+layout+fusion", ("rewrite", "layout", "fusion"),
                                     0.35), *KERNEL_PHASES]
    if name == "lf_first":
        return [graph("layout+fusion", ("layout", "fusion"), 0.35), rewrite(0.15),
                *KERNEL_PHASES]
    if name == "lf_rw_rlf":
        return [graph("layout+fusion", ("layout", "fusion"), 0.3), rewrite(0.1),
                graph("rewrite+layout+fusion", ("rewrite", "layout", "fusion"), 0.1),
                *KERNEL_PHASES]
    if name == "rw_lf":
        return [rewrite(0.15), graph("layout+fusion", ("layout", "fusion"), 0.35),
                *KERNEL_PHASES]
    if name == "two_starts":
        return [rewrite(0.15), graph("rewrite+layout+fusion", ("rewrite", "layout", "fusion"),
                                     0.15),
                graph("layout+fusion from default", ("layout", "fusion"), 0.2,
                      start="default"), *KERNEL_PHASES]
    if name == "plan_lf_rw":
        return [Phase("plan", ("plan",), "exhaustive", 0.0),
                graph("layout+fusion", ("layout", "fusion"), 0.35),
                rewrite(0.15, ("rewrite",)), *KERNEL_PHASES]
    if name == "plan_lf_rw_rlf":
        return [Phase("plan", ("plan",), "exhaustive", 0.0),
                graph("layout+fusion", ("layout", "fusion"), 0.25),
                rewrite(0.12, ("rewrite",)),
                graph("rewrite+layout+fusion", ("rewrite", "layout", "fusion"), 0.13),
                *KERNEL_PHASES]
    if name == "plan_lf_rw_lf":
        return [Phase("plan", ("plan",), "exhaustive", 0.0),
                graph("layout+fusion", ("layout", "fusion"), 0.2),
                rewrite(0.15, ("rewrite",)),
                graph("layout+fusion again", ("layout", "fusion"), 0.15), *KERNEL_PHASES]
    raise SystemExit(f"unknown variant {name!r}: expected one of {', '.join(VARIANTS)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=ROWS, help="comma-separated model:batch")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--taso-budget", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--table", default=str(Path(__file__).parent / "results" / "joint.json"),
                    help="joint.py's results, for the XTAT-only and joint columns beside")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"
                                         / "joint_schedules.json"))
    ap.add_argument("--resume", action="store_true", help="keep the variants already in --out")
    args = ap.parse_args()
    import joint

    from superopt import zoo
    from superopt.xtat.session import open_session
    from superopt.xtat.tuner import Tuner

    variants = args.variants.split(",")
    for v in variants:
        schedule(v)  # an unknown name fails before any work
    rows = joint.parse_rows(args.rows)
    table = {(r["model"], r["batch"]): r for r in json.loads(Path(args.table).read_text())["rows"]}
    out = Path(args.out)
    res: dict = json.loads(out.read_text()) if args.resume and out.exists() else {
        "budget": args.budget, "taso_budget": args.taso_budget, "seeds": args.seeds,
        "hardware": "v4", "rows": {}}
    print(f"{'row':16s} {'variant':10s} {'median':>7s}  seeds                       "
          f"(joint.json: XTAT, joint)")
    with tempfile.TemporaryDirectory() as tmp:
        for m, b in rows:
            key = f"{m}:{b}"
            graph = zoo.build(m, batch=b)
            path, _, _ = joint.pet_rules(graph, b, Path(tmp) / f"pet_{m}_{b}.json")
            s = open_session({"model": m, "batch": b, "plan_budget": args.taso_budget,
                              "rules": ["starter", path] if path else ["starter"]}, graph)
            kept = table.get((m, b), {}).get("speedup", {})
            for v in variants:
                if v in res["rows"].get(key, {}):
                    continue
                t0 = time.perf_counter()
                runs = [joint.finished(Tuner(s.pipeline, s.runner, s.default, seed=seed).run(
                    schedule(v), args.budget)) for seed in range(args.seeds)]
                sp = [r.default_time / r.best_time for r in runs]
                res["rows"].setdefault(key, {})[v] = {
                    "speedups": sp, "median": statistics.median(sp),
                    "phases": [r.phases for r in runs], "wall_s": time.perf_counter() - t0,
                    "load": os.getloadavg()[0]}
                print(f"{key:16s} {v:10s} {statistics.median(sp):7.4f}  "
                      f"{' '.join(f'{x:.4f}' for x in sp):27s} "
                      f"({kept.get('xtat', math.nan):.4f}, {kept.get('joint', math.nan):.4f})",
                      flush=True)
                out.write_text(json.dumps(res, indent=1) + "\n")
    done = [k for k, r in res["rows"].items() if all(v in r for v in variants)]
    res["geomean"] = {v: math.exp(statistics.fmean(math.log(res["rows"][k][v]["median"])
                                                   for k in done)) for v in variants}
    res["geomean_rows"] = done
    out.write_text(json.dumps(res, indent=1) + "\n")
    print("geomean over " + ", ".join(done) + ": "
          + "  ".join(f"{v} {g:.4f}" for v, g in res["geomean"].items()))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("interrupted: the variants measured so far are in --out; "
                         "--resume continues") from None
