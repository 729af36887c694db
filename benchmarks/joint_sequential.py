"""Benchmark: the sequential pipelines (TASO-only's or PET-only's graph, then the compiler
tuned as XTAT-only tunes it) against joint tuning, on joint.py's rows.

joint.py compares joint tuning with each ingredient alone. The question it leaves open is
whether joint beats the obvious pipeline: rewrite first with a cost model of one's own,
then tune the compiler on the rewritten graph. Per row this measures

- TASO then XTAT: TASO-only's graph (joint.py's `taso_only`: the starter library, the
  simulator as cost, weight-only computations folded), then XTAT-only's search on it;
- PET then XTAT: PET-only's graph (PET's corrected mutants applied by the rewrite pass's
  exhaustive search, seed 0, as joint.py does), then XTAT-only's search on it;

with joint.py's budget, schedule, strategy and seeds for the XTAT part. TASO then XTAT
measures as much as joint (TASO's search prices graphs with the simulator as its cost
model, as joint's plan does: not measurements); PET then XTAT measures PET-only's
evaluations *plus* a full budget, more than joint. Joint and
XTAT-only are read from joint.py's result file (`--joint`), whose settings must match;
the TASO-only and PET-only times found again here must equal the ones kept there (the
searches are deterministic), or the row stops with an error.

Prints a table and writes JSON (`--out`), saved after every row and resumed with
`--resume` (which also reads the kept rows' XTAT-only and joint columns from the joint
file again, so a re-measured joint column needs no sequential search; a file whose
sequential pipelines ran another XTAT-only schedule is refused: run without it).
Run: `.venv/bin/python benchmarks/joint_sequential.py [--rows vgg19:16,...]`.
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

RESULTS = Path(__file__).parent / "results"


def xtat_on(model: str, batch: int, graph: object, budget: int, seeds: int,
            taso_budget: int, strategy: str) -> dict:
    """XTAT-only's search (joint.py's column 4) on `graph`, one run per seed."""
    import joint

    runs = joint.run_tuner(model, batch, graph, None, joint.COMPILER, "joint",
                           strategy, budget, range(seeds), plan_budget=taso_budget)
    return {"runs": [{k: r[k] for k in ("time_s", "default_s", "evaluations", "wall_s",
                                         "changed")} for r in runs]}


def pet_graph(model: str, batch: int, graph: object, budget: int,
              tmp: Path) -> tuple[object, float | None, int, int]:
    """PET-only's graph as the later passes see it (weight-only computations folded), its
    simulated time (None without a PET rule: the graph is the original), the rules found
    and the evaluations its search used."""
    import joint

    from superopt.xtat.session import open_session
    from superopt.xtat.tuner import Tuner, make_schedule

    path, n_pet, _ = joint.pet_rules(graph, batch, tmp / f"pet_{model}_{batch}.json")
    if not path:
        return graph, None, 0, 0
    s = open_session({"model": model, "batch": batch, "rules": [path]}, graph)
    r = joint.finished(Tuner(s.pipeline, s.runner, s.default, seed=0).run(
        make_schedule("custom", ("rewrite",), "exhaustive"), budget))
    after = r.best.stages[s.pipeline.index("rewrite") + 1].graph
    return after, r.best_time, n_pet, r.evaluations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=None,
                    help="comma-separated model:batch (default: every row of --joint)")
    ap.add_argument("--joint", default=str(RESULTS / "joint.json"),
                    help="joint.py's result file: its settings, XTAT-only and joint columns")
    ap.add_argument("--out", default=str(RESULTS / "joint_sequential.json"))
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out")
    args = ap.parse_args()
    import joint

    try:
        ref = json.loads(Path(args.joint).read_text())
        kept = {f"{r['model']}:{r['batch']}": r for r in ref["rows"]}
        settings = {k: ref[k] for k in ("budget", "taso_budget", "seeds")}
        strategy = ref.get("strategy", joint.STRATEGY)  # files before --strategy: sweep
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{args.joint}: not a joint.py result file ({e})") from None
    rows = joint.parse_rows(args.rows) if args.rows else [
        (r["model"], r["batch"]) for r in ref["rows"]]
    missing = [f"{m}:{b}" for m, b in rows if f"{m}:{b}" not in kept]
    if missing:
        raise SystemExit(f"{args.joint}: no row for {', '.join(missing)}")
    # Its XTAT-only column must be the search run here (same phases, strategy, tile order).
    want = joint.schedule_key("joint", joint.COMPILER, strategy)
    stale = [f"{m}:{b}" for m, b in rows if kept[f"{m}:{b}"].get("xtat_schedule") != want]
    if stale:
        raise SystemExit(f"{args.joint}: XTAT-only of {', '.join(stale)} measured with "
                         "another schedule than this tuner's: run joint.py --remeasure first")

    from superopt import zoo

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res: dict = json.loads(out.read_text()) if args.resume and out.exists() else {}
    if res and {k: res.get(k) for k in settings} != settings:
        raise SystemExit(f"{out}: made with other settings than {args.joint}; run without "
                         "--resume")
    # Its kept rows' sequential columns ran XTAT-only's search: after a change to it they
    # are stale, and the file must not label them with the new schedule.
    if res and res.get("xtat_schedule") != want:
        raise SystemExit(f"{out}: its sequential pipelines ran another XTAT-only schedule "
                         f"({res.get('xtat_schedule')}, now {want}); run without --resume")
    res = {**settings, "hardware": "v4", "joint_file": Path(args.joint).name,
           "strategy": strategy, "xtat_schedule": want,
           "rows": res.get("rows", {}), **({"note": res["note"]} if "note" in res else {})}
    budget, seeds, taso_budget = settings["budget"], settings["seeds"], settings["taso_budget"]
    cols = ("taso", "pet", "xtat", "taso+xtat", "pet+xtat", "joint")

    def beats(sp: dict) -> bool:
        return sp["joint"] >= max(sp["taso+xtat"], sp["pet+xtat"]) * (1 - 1e-9)

    def line(key: str, sp: dict, tail: str) -> str:
        return f"{key:16s} " + " ".join(f"{sp[c]:9.4f}" for c in cols) + f"  {tail}"

    print(f"{'row':16s} " + " ".join(f"{c:>9s}" for c in cols) + "  wall (s)")
    with tempfile.TemporaryDirectory() as tmp:
        for m, b in rows:
            key = f"{m}:{b}"
            if key in res["rows"]:
                # Kept: the sequential pipelines were measured; XTAT-only and joint are
                # read from the joint file again (a re-measured joint column shows here).
                row = res["rows"][key]
                sp = row["speedup"]
                sp["xtat"], sp["joint"] = (kept[key]["speedup"]["xtat"],
                                           kept[key]["speedup"]["joint"])
                row["joint_beats_sequential"] = beats(sp)
                continue
            t0 = time.perf_counter()
            k = kept[key]
            d = k["default_s"]
            graph = zoo.build(m, batch=b)
            got: dict = {}
            taso = joint.taso_only(graph, taso_budget, keep=got)
            pet_g, pet_t, n_pet, pet_evals = pet_graph(m, b, graph, budget, Path(tmp))
            if pet_t is None:  # joint.py keeps the default compiler's time for PET-only then
                pet_t = d
            # The first stages must be the very searches joint.py measured: else the
            # comparison with its columns is between different graphs.
            for name, now, then in (("TASO-only", taso["time_s"], k["taso"]["time_s"]),
                                    ("PET-only", pet_t, k["pet"]["time_s"])):
                if not math.isclose(now, then, rel_tol=1e-9):
                    raise SystemExit(f"{key}: {name} found {now * 1e3:.4f} ms, "
                                     f"{args.joint} kept {then * 1e3:.4f} ms")
            row = {"default_s": d, "pet_rules": n_pet, "pet_evaluations": pet_evals,
                   "taso_evaluations": taso["evaluations"],
                   "taso+xtat": xtat_on(m, b, got["graph"], budget, seeds, taso_budget,
                                        strategy)}
            row["pet+xtat"] = xtat_on(m, b, pet_g, budget, seeds, taso_budget, strategy)
            if not n_pet:
                row["pet+xtat"]["note"] = "no PET rule: XTAT-only on the original graph"
            sp = {"taso": d / k["taso"]["time_s"], "pet": d / k["pet"]["time_s"],
                  "xtat": k["speedup"]["xtat"], "joint": k["speedup"]["joint"]}
            for c in ("taso+xtat", "pet+xtat"):
                runs = [d / r["time_s"] for r in row[c]["runs"]]
                sp[c] = statistics.median(runs)
                sp[f"{c}_range"] = [min(runs), max(runs)]
            row["speedup"] = sp
            row["joint_beats_sequential"] = beats(sp)
            row["wall_s"] = time.perf_counter() - t0
            res["rows"][key] = row
            print(line(key, sp, f"{row['wall_s']:.0f}"), flush=True)
            out.write_text(json.dumps(res, indent=1) + "\n")
    done = list(res["rows"].values())
    res["geomean"] = {c: joint.geomean([r["speedup"][c] for r in done])
                      for c in cols} if done else {}
    res["joint_beats_sequential"] = sum(r["joint_beats_sequential"] for r in done)
    out.write_text(json.dumps(res, indent=1) + "\n")
    if done:
        print("every row:")
        for key, r in res["rows"].items():
            print(line(key, r["speedup"], f"{r['wall_s']:.0f}"))
        print(line("geomean", res["geomean"], f"({len(done)} rows; joint >= both sequential "
                   f"pipelines on {res['joint_beats_sequential']})"))
    print(f"wrote {out}")


if __name__ == "__main__":
    import joint

    joint.run_main(main)
