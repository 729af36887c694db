"""Benchmark: `superopt tune --target cpu` on every zoo model at batch 1 and 16 (issue 48).

Per row (model, batch), in this order: tune the rewrite plan and the rewrite points for
real (onnxruntime, ORT_ENABLE_ALL, `--threads` intra-op threads; each candidate paired
against the incumbent, an A/A control deciding what is real, proposals screened by this
machine's per-op costs, each op timed alone in onnxruntime (`--op-cost`), kept in one cost
database for all rows), with a fixed
measurement budget and a wall limit per row (Ctrl-C's path: the tuner stops and picks
from what it measured); then, side by side in one loop, the original, the tuned graph
and the original again (the A/A control) in onnxruntime, and the same three in torch
eager as a second real backend. The onnxruntime ratio is over onnxruntime's own graph
optimizer (both sides run with every optimization on). Reported per row: medians, the
ratio with its 95% bootstrap interval, the A/A ratio and interval, measurements used
and screened out, the rewrites kept, wall time, the 1-minute load average. The JSON is
written after every row and a rerun skips finished rows (and resumes a row's records
database), so a killed benchmark continues; rows never reached are listed as not run.

Run pinned to one core with one thread, as the committed JSON was:
`OMP_WAIT_POLICY=PASSIVE taskset -c 1 .venv/bin/python benchmarks/tune_cpu.py`
(`--models a,b --batches 1 --budget 16 --row-limit 300 --out FILE`).

`--hf FAMILIES` (or `--hf published`) tunes users' files instead of the zoo: each
`transformers` family at its published size (`superopt.importers.hf.PUBLISHED`) written
by torch's ONNX exporter, tuned from that file as `superopt tune FILE.onnx --target cpu`
does, so the input every candidate and the final comparison are measured against is the
file itself (`OrtTimer.use_file`), and the re-timing runs the file beside the tuned
graph's export (torch eager times the imported graph). Where the input is kept, the tuner
also compares the file with superopt's export of it (`RealRunner.export`); when the
export is measurably faster it is the result, and the re-timing runs it beside the file.
Rows are named `hf:FAMILY`, in the order given; the default output is
`results/tune_cpu_hf.json`. `--exporter dynamo` writes the users' files with the exporter
`torch.onnx.export` runs by default since torch 2.9 instead of the TorchScript one
(`results/tune_cpu_hf_dynamo.json`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Listed by size; `--order flops` (the default) runs the rows by FLOPs x batch, so when a
# time box ends the rows that ran are the cheap ones.
MODELS = ("squeezenet", "mobilenet_v2", "efficientnet_b0", "resnet18", "bert_small",
          "t5_small_encoder", "gpt2", "squeezenet1_0", "inception_v3", "resnet50",
          "resnext50", "nasnet_a", "csrnet", "vit_b16", "bert_base", "vgg19", "llama3_2_1b")
RESULTS = Path(__file__).parent / "results" / "tune_cpu.json"
HF_RESULTS = Path(__file__).parent / "results" / "tune_cpu_hf.json"
HF_DYNAMO_RESULTS = HF_RESULTS.with_name("tune_cpu_hf_dynamo.json")


def _tune(model: str, batch: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from superopt.xtat.passes.chunk import chunk_count
    from superopt.xtat.records import RecordsDB
    from superopt.xtat.screen import screening
    from superopt.xtat.session import applied_rewrites, open_session, use_plan_cache
    from superopt.xtat.tuner import Tuner, make_schedule

    spec = {"model": str(_source(model, batch, args)), "batch": batch, "target": "cpu",
            "threads": args.threads, "op_cost": args.op_cost, "cost_db": str(args.cost_db),
            "rounds": args.rounds, "plan_budget": args.plan_budget,
            "stop_early": not args.full_rounds}
    t0 = time.perf_counter()
    session = open_session(spec)
    settings = {"budget": args.budget, "schedule": "joint", "seed": 0,
                **session.runner.settings()}  # type: ignore[union-attr]
    path = workdir / f"{model.replace(':', '_')}_b{batch}.sqlite"
    db = RecordsDB(path, session.workload, settings, resume=path.exists())
    plans = use_plan_cache(session, path)
    hook = screening(session.screen)
    deadline = t0 + args.row_limit
    limited: list[bool] = []  # the row limit stopped the tuner (not Ctrl-C)

    def progress(tuner: Tuner, phase: str) -> None:
        if time.perf_counter() > deadline:
            limited.append(True)
            raise KeyboardInterrupt  # the tuner stops and picks from what it measured

    tuner = Tuner(session.pipeline, session.runner, session.default, seed=0, db=db, batch=4,
                  wrap=hook, progress=progress)
    try:
        result = tuner.run(make_schedule("joint", session.target.passes()), args.budget)  # type: ignore[union-attr]
    finally:
        db.close()
        if plans is not None:
            plans.close()
    if result.stopped == "interrupted" and not limited:
        # Ctrl-C: the tuner hands back its best so far, which is not this row's result
        # (its measurements stay in the row's records for the rerun).
        raise KeyboardInterrupt
    runner = session.runner
    from superopt.xtat.session import rewritten_graph

    return {"session": session, "tuned": rewritten_graph(session.pipeline, result.best),
            "result": result, "applied": applied_rewrites(result.best),
            # The batch's chunk count in the result (1: whole; `passes.chunk`).
            "chunks": chunk_count(result.best),
            "final": runner.final.__dict__ if runner.final else None,  # type: ignore[union-attr]
            "noise": runner.noise.__dict__ if runner.noise else None,  # type: ignore[union-attr]
            "screened": hook.screened(),  # type: ignore[attr-defined]
            # Rounds each paired measurement of this process ran (fewer: stopped early).
            "measure_rounds": [p.rounds for p in runner.log],  # type: ignore[union-attr]
            # Of those, unsettled after their rounds and run as many again (pooled).
            "measure_extended": sum(p.extended for p in runner.log),  # type: ignore[union-attr]
            # Proposals onnxruntime runs as the incumbent's program: not timed.
            "same_program": runner.not_timed,  # type: ignore[union-attr]
            "tune_wall_s": time.perf_counter() - t0}


def _figures(t: Any) -> dict[str, Any]:
    """Slots: 0 original, 1 tuned, 2 original again (A/A); ratio = original / tuned."""
    lo, hi = t.ratio_ci(0, 1)
    aa_lo, aa_hi = t.ratio_ci(0, 2)
    return {"original_ms": t.medians[0] * 1e3, "tuned_ms": t.medians[1] * 1e3,
            "ratio": t.ratio(0, 1), "ci95": [lo, hi], "aa": t.ratio(0, 2),
            "aa_ci95": [aa_lo, aa_hi], "rounds": len(t.times[0])}


def _source(model: str, batch: int, args: argparse.Namespace) -> str | Path:
    """What the session loads: a zoo name, or for `hf:FAMILY` the family's published-size
    model as torch's ONNX exporter writes it (made once per batch in the work folder)."""
    if not model.startswith("hf:"):
        return model
    from superopt.importers.hf import published_onnx

    return published_onnx(model[3:], args.workdir / "hf", batch,
                          dynamo=args.exporter == "dynamo")


def _retime(original: Any, tuned: Any, args: argparse.Namespace,
            file: Path | None = None, export: bool = False) -> dict[str, Any]:
    import numpy as np

    from superopt.rewrite.check import time_side_by_side
    from superopt.rewrite.fold import fold_weights
    from superopt.xtat.realrunner import OrtTimer

    ort = OrtTimer(threads=args.threads)
    if file is not None and not ort.use_file(original, file):
        raise ValueError(f"{file}: its inputs are not the imported graph's")
    # The result superopt's export of the kept input (`export`): the file against it.
    t = ort.export_vs_file(original, args.bench_rounds, 2) if export else None
    out = {"onnxruntime": _figures(t or ort([original, tuned, original], args.bench_rounds,
                                              2))}
    # The two graphs compute the same values in onnxruntime (float32).
    out["onnxruntime"]["max_rel_err"] = max(
        float(np.max(np.abs(x - y)) / max(float(np.max(np.abs(x))), 1e-30))
        for x, y in zip(ort.outputs(original), ort.outputs(tuned), strict=True))
    # True when memory let the original's second slot run only as its first session (its
    # A/A control then compares one session with itself; llama3_2_1b's 5 GB sessions).
    out["onnxruntime"]["aa_one_session"] = ort.shared_slots > 0
    ort.clear()  # torch's three programs need that memory
    if args.torch_rounds:
        folded = fold_weights(tuned).graph if tuned is not original else original
        t = time_side_by_side([original, folded, original], repeats=args.torch_rounds,
                              warmup=2, threads=args.threads)
        out["torch_eager"] = _figures(t)
    return out


def run_row(model: str, batch: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    start = time.perf_counter()
    load = os.getloadavg()[0]
    got = _tune(model, batch, args, workdir)
    result = got["result"]
    session = got["session"]
    row = {"model": model, "batch": batch, "nodes": len(session.graph),
           "measurements": result.evaluations, "measured_now": result.measured,
           "replayed": result.replayed, "screened": got["screened"],
           "measure_rounds": got["measure_rounds"], "same_program": got["same_program"],
           "measure_extended": got["measure_extended"],
           "stopped": result.stopped, "applied": got["applied"], "chunks": got["chunks"],
           "kept": bool(got["final"] and got["final"]["kept"]),
           "tuner_final": got["final"], "tuner_noise": got["noise"],
           "tune_wall_s": got["tune_wall_s"], "row_limit_s": args.row_limit}
    timer = getattr(session.runner, "timer", None)
    row["tuner_aa_one_session"] = bool(getattr(timer, "shared_slots", 0))
    if timer is not None and hasattr(timer, "clear"):
        timer.clear()  # the tuner's sessions are not timed again: their memory is free
    file = session.spec.get("input_file")
    export = getattr(session.runner, "export", None)
    row["export_vs_file"] = export.__dict__ if export else None
    row |= _retime(session.graph, got["tuned"], args,
                   Path(session.spec["model"]) if file else None,
                   bool(export and export.kept and not row["kept"]))
    if file:
        row["input_file"] = file
    row["wall_s"] = time.perf_counter() - start
    row["load_avg_1min"] = [round(load, 2), round(os.getloadavg()[0], 2)]  # before, after
    return row


def _line(r: dict[str, Any]) -> str:
    o = r["onnxruntime"]
    text = (f"{r['model']:17s} b={r['batch']:<3d} {o['original_ms']:9.2f} {o['tuned_ms']:9.2f} "
            f"{o['ratio']:6.3f} [{o['ci95'][0]:.3f}, {o['ci95'][1]:.3f}] "
            f"{o['aa']:6.3f} [{o['aa_ci95'][0]:.3f}, {o['aa_ci95'][1]:.3f}] "
            f"{r['measurements']:4d} {r['wall_s']:7.1f}")
    if r.get("chunks", 1) > 1:
        text += f"  in {r['chunks']} chunks"
    t = r.get("torch_eager")
    if t:
        text += f"  | torch {t['ratio']:.3f} [{t['ci95'][0]:.3f}, {t['ci95'][1]:.3f}]" \
                f" A/A {t['aa']:.3f}"
    return text


def _flops(model: str) -> float:
    """The model's FLOPs at batch 1 (`superopt.ir.analysis`): the rows' cost order (users'
    files keep the order given)."""
    from superopt.ir.analysis import stats
    from superopt.zoo import build

    if model.startswith("hf:"):
        return 0.0
    return float(stats(build(model, batch=1)).flops)


def _geomean(xs: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def _outside(f: dict[str, Any], sign: int) -> bool:
    """The ratio's interval beyond 1 and the ratio beyond the A/A interval, on the side
    `sign` says (1: faster, -1: slower)."""
    if sign > 0:
        return f["ci95"][0] > 1 and f["ratio"] > f["aa_ci95"][1]
    return f["ci95"][1] < 1 and f["ratio"] < f["aa_ci95"][0]


def _changed(r: dict[str, Any]) -> bool:
    """The row's result is not the input as it came: a tuned graph, or for a user's file
    superopt's export of it (measured faster than the file)."""
    return bool(r["kept"] or (r.get("export_vs_file") or {}).get("kept"))


def summarize(data: dict[str, Any]) -> None:
    rows = data["rows"]
    ort = [r["onnxruntime"]["ratio"] for r in rows]
    torch = [r["torch_eager"]["ratio"] for r in rows if "torch_eager" in r]
    data["geomean_onnxruntime"] = _geomean(ort)
    data["geomean_torch_eager"] = _geomean(torch)
    # Where the tuner kept the input, "tuned" is the same model in another session: a
    # difference there is between two onnxruntime sessions of one graph, not a rewrite
    # (vit_b16 b16: 0.983 [0.975, 0.992] against its A/A's [0.987, 1.007]), so it is
    # listed apart, as what sessions alone can do, and not as a tuned row slower.
    for sign, key in ((-1, "slower_outside_noise"), (1, "faster_outside_noise")):
        data[key] = [f"{r['model']} b{r['batch']}" for r in rows
                     if _changed(r) and _outside(r["onnxruntime"], sign)]
    data["same_graph_outside_noise"] = [
        f"{r['model']} b{r['batch']}" for r in rows if not _changed(r)
        and (_outside(r["onnxruntime"], -1) or _outside(r["onnxruntime"], 1))]
    data["input_kept"] = [f"{r['model']} b{r['batch']}" for r in rows if not _changed(r)]
    data["export_kept"] = [f"{r['model']} b{r['batch']}" for r in rows
                           if not r["kept"] and _changed(r)]
    done = {(r["model"], r["batch"]) for r in rows}
    data["not_run"] = [f"{m} b{b}" for b in data["settings"]["batches"] for m in
                       data["settings"]["models"] if (m, b) not in done
                       and f"{m} b{b}" not in data.get("failed", {})]


def kill_check(model: str, batch: int, after: int, args: argparse.Namespace) -> dict[str, Any]:
    """`superopt tune MODEL --target cpu --db F` killed with SIGKILL once F holds `after`
    measurements, then run again with --resume: every row recorded before the kill must
    come back unchanged (a measurement taken again would have another time), no
    candidate appears twice, and the resumed run says how many it read back."""
    import signal
    import subprocess
    import sys

    from superopt.xtat.records import RecordsDB, RecordsError

    db = args.workdir / f"kill_{model}_b{batch}.sqlite"
    for f in args.workdir.glob(f"{db.name}*"):
        f.unlink()
    summary = args.workdir / f"kill_{model}_b{batch}.json"
    cmd = [sys.executable, "-m", "superopt", "tune", model, "--batch", str(batch),
           "--target", "cpu", "--threads", str(args.threads), "--budget", str(args.budget),
           "--cost-db", str(args.cost_db), "--db", str(db), "--no-check"]

    def rows() -> list[tuple]:
        with RecordsDB(db, None) as records:
            return [(m.step, m.candidate, m.runtime) for m in records.measurements()]

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    n = 0
    while proc.poll() is None:
        try:
            n = len(rows()) if db.exists() else 0
        except RecordsError:  # created but its tables not yet written
            n = 0
        if n >= after:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = time.perf_counter() - t0
    before = rows()
    subprocess.run([*cmd, "--resume", "--json", str(summary)], check=True,
                   capture_output=True)
    later = rows()
    got = json.loads(summary.read_text())
    out = {"model": model, "batch": batch, "budget": args.budget,
           "killed_after_s": killed_at, "rows_at_kill": len(before),
           "rows_after_resume": len(later),
           "prefix_unchanged": later[:len(before)] == before,
           "distinct_candidates": len({r[1] for r in later}),
           "resumed_read_back": got["replayed"], "resumed_measured": got["measured"],
           "no_measurement_repeated": later[:len(before)] == before
           and got["replayed"] == len(before) and len({r[1] for r in later}) == len(later)}
    print(json.dumps(out, indent=1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kill-check", metavar="MODEL", default=None,
                    help="only the SIGKILL/resume check on MODEL at the first batch")
    ap.add_argument("--order", choices=("listed", "flops"), default="flops",
                    help="rows in --models order per batch, or by FLOPs x batch (default: "
                         "the cheapest rows first, so a time box runs the most rows)")
    ap.add_argument("--summarize", action="store_true",
                    help="only recompute the summary of --out (no timing)")
    ap.add_argument("--kill-after", type=int, default=4,
                    help="measurements recorded before the kill")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--budget", type=int, default=16, help="measurements per row")
    ap.add_argument("--row-limit", type=float, default=300.0,
                    help="seconds of tuning per row before it stops and picks")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10, help="paired rounds per measurement")
    ap.add_argument("--full-rounds", action="store_true",
                    help="every measurement runs all its rounds (no early stop)")
    ap.add_argument("--bench-rounds", type=int, default=20,
                    help="paired rounds of the side-by-side onnxruntime timing")
    ap.add_argument("--torch-rounds", type=int, default=10,
                    help="paired rounds of the torch eager re-timing (0: none)")
    ap.add_argument("--plan-budget", type=int, default=20)
    ap.add_argument("--until", type=float, default=None,
                    help="a time.time() after which no new row starts")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/superopt_tune_cpu"))
    ap.add_argument("--op-cost", choices=("onnxruntime", "torch"), default="onnxruntime",
                    help="the per-op cost that screens proposals (rows before the group "
                         "merges were measured with torch's)")
    ap.add_argument("--cost-db", type=Path, default=None,
                    help="per-op costs kept across rows (default WORKDIR/op_costs.jsonl)")
    ap.add_argument("--hf", default="", metavar="FAMILIES",
                    help="users' files instead of the zoo: these transformers families at "
                         "their published sizes, as torch's ONNX exporter writes them "
                         "('published': every family with one)")
    ap.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript",
                    help="with --hf: which of torch's ONNX exporters writes the users' files "
                         "(torchscript, opset 17; or dynamo, torch.onnx.export's default "
                         "since torch 2.9; its files and records go under WORKDIR/dynamo)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.exporter != "torchscript" and not args.hf:
        ap.error("--exporter applies to users' files (--hf)")
    args.out = args.out or (
        (HF_DYNAMO_RESULTS if args.exporter == "dynamo" else HF_RESULTS) if args.hf
        else RESULTS)
    if args.exporter == "dynamo":  # its files, and so its records, are other files'
        args.workdir = args.workdir / "dynamo"
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.cost_db = args.cost_db or args.workdir / "op_costs.jsonl"
    import onnxruntime
    import torch

    models = [m for m in args.models.split(",") if m]
    if args.hf:
        from superopt.importers.hf import published_families

        try:
            models = [f"hf:{n}" for n in published_families(args.hf)]
        except ValueError as e:
            ap.error(f"--hf: {e}")
    else:
        from superopt.zoo import MODELS as ZOO

        unknown = [m for m in models if m not in ZOO]
        if unknown:
            ap.error(f"--models: unknown {', '.join(map(repr, unknown))}; known: "
                     f"{', '.join(ZOO)}")
    batches = [int(b) for b in args.batches.split(",")]
    if args.summarize:
        if not args.out.is_file():
            ap.error(f"--summarize: {args.out}: no such results file")
        data = json.loads(args.out.read_text())
        summarize(data)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        return
    if args.kill_check:
        got = kill_check(args.kill_check, batches[0], args.kill_after, args)
        args.out.write_text(json.dumps({"kill_resume": got, "threads": args.threads,
                                        "load_avg_1min": os.getloadavg()[0]}, indent=1) + "\n")
        return
    settings = {"models": models, "batches": batches, "budget": args.budget,
                "row_limit_s": args.row_limit, "threads": args.threads,
                "rounds": args.rounds, "stop_early": not args.full_rounds,
                "bench_rounds": args.bench_rounds,
                "torch_rounds": args.torch_rounds, "plan_budget": args.plan_budget,
                "op_cost": args.op_cost,
                **({"exporter": args.exporter} if args.hf else {}),
                "graph_optimization_level": "ORT_ENABLE_ALL",
                "affinity": sorted(os.sched_getaffinity(0)),
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                "versions": {"onnxruntime": onnxruntime.__version__,
                             "torch": torch.__version__}}
    data: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    if data.get("settings", {}).get("budget") != args.budget:
        data = {}
    data["settings"] = settings
    data.setdefault("rows", [])
    data.setdefault("failed", {})
    done = {(r["model"], r["batch"]) for r in data["rows"]}
    print(f"{'model':17s} {'batch':5s} {'orig ms':>9s} {'tuned ms':>9s} {'ratio':>6s} "
          f"{'95% CI':16s} {'A/A':>6s} {'A/A CI':16s} {'meas':>4s} {'wall s':>7s}")
    for r in data["rows"]:
        print(_line(r))
    order = [(m, b) for b in batches for m in models]
    if args.order == "flops":
        order = sorted(order, key=lambda mb: _flops(mb[0]) * mb[1])
    data["settings"]["order"] = [f"{m} b{b}" for m, b in order]
    for m, b in order:
        if (m, b) in done:  # a failed row is tried again (after a fix)
            continue
        if args.until is not None and time.time() > args.until:
            break
        try:
            row = run_row(m, b, args, args.workdir)
        except KeyboardInterrupt:
            kept = (f"{len(data['rows'])} rows kept in {args.out}" if args.out.exists()
                    else "no row written yet")
            print(f"interrupted in {m} b{b}: {kept}; a rerun goes on from there, this row "
                  "from its records", file=sys.stderr)
            raise SystemExit(130) from None
        except Exception as e:  # one row's failure is reported for it; the rest still run
            data["failed"][f"{m} b{b}"] = f"{type(e).__name__}: {e}"
            print(f"{m:17s} b={b:<3d} failed: {type(e).__name__}: {e}", flush=True)
            args.out.write_text(json.dumps(data, indent=1) + "\n")
            continue
        data["rows"].append(row)
        data["failed"].pop(f"{m} b{b}", None)
        print(_line(row), flush=True)
        summarize(data)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    summarize(data)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"geomean onnxruntime {data['geomean_onnxruntime']}, torch eager "
          f"{data['geomean_torch_eager']}; slower outside noise: "
          f"{data['slower_outside_noise']}; the input kept, its two sessions apart: "
          f"{data['same_graph_outside_noise']}; not run: {len(data['not_run'])} rows")


if __name__ == "__main__":
    main()
