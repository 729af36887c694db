"""Benchmark: the TPU simulator against real TPU v3 measurements, before and after calibration.

Replays the TpuGraphs samples (real TPU v3 runtimes, shipped as package data:
`superopt.tpu_sim.replay.data_dir()`; `--data DIR` reads another directory of the same files) on the
simulator's v3 preset (see `superopt.tpu_sim.replay`), fits the kernel model's free constants
(`superopt.tpu_sim.calibration`) and replays again. Per tile-tuned kernel it prints: rows,
Kendall's tau-b between simulated and measured runtimes, the measured runtime of the
simulator's top-1 configuration over the measured best, the same for the configuration the
default compiler's analytical model picks (and, for reference, XLA's own default), and the
mean absolute percentage error -- each before and after calibration. Config-free kernels (the
reshapes: repeat timings of one setting) have no ranking; their tau and top-1 are "n/a".
For the layout program it prints whether the simulator reproduces the three measured runtime
levels, with each level's measured offset and mean simulated change. Then the fitted
constants, their ranges, the loss, per-kernel residuals and the v4 preset derived from them.

With `--cv`, leave-one-kernel-out cross-validation: per kernel, the constants fitted to the
other kernels only, and the held-out kernel's tau, top-1 and MAPE next to the fit-on-all ones
(an honest figure for kernels the simulator was not fitted to).

Run: `.venv/bin/python benchmarks/calibrate.py [--data DIR] [--out FILE] [--no-fit] [--cv]
[--write-record]`. `--no-fit` replays with the recorded calibration instead of fitting;
`--write-record` stores the fit as the package's v3 calibration record (the v3, v4 and v5e
presets read it at import).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="TpuGraphs samples directory (default: the package's own)")
    parser.add_argument("--out", default="benchmarks/results/calibrate.json")
    parser.add_argument("--no-fit", action="store_true", help="use the recorded calibration")
    parser.add_argument("--write-record", action="store_true",
                        help="store the fit as src/superopt/tpu_sim/v3_calibration.json")
    parser.add_argument("--rounds", type=int, default=3, help="Nelder-Mead restarts")
    parser.add_argument("--free", default=None,
                        help="comma-separated constants to fit (default: calibration.FREE); "
                             "the others keep their uncalibrated values")
    parser.add_argument("--cv", action="store_true",
                        help="leave-one-kernel-out cross-validation next to the fit-on-all "
                             "figures (one fit per kernel: minutes)")
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    from superopt.ir.errors import IRError
    from superopt.tpu_sim import calibration as cal
    from superopt.tpu_sim import hardware as hwmod
    from superopt.tpu_sim.replay import data_dir, load_layouts, load_tiles, prepare_all

    free = tuple(args.free.split(",")) if args.free else cal.FREE
    unknown = [n for n in free if n not in cal.RANGES]
    if unknown:
        raise SystemExit(f"calibrate: --free names unknown constants {unknown}; known: "
                         f"{', '.join(cal.RANGES)}")
    console = Console(width=140)
    directory = Path(args.data) if args.data else data_dir()
    t0 = time.perf_counter()
    try:
        kernels_all, skipped = prepare_all(load_tiles(directory / "op_tuning_data.json"))
        layout_file = directory / "module_tuning_data_layout.json"
        layouts = load_layouts(layout_file) if layout_file.is_file() else None
    except IRError as e:  # a missing or malformed file: one line, not a traceback
        raise SystemExit(f"calibrate: {e}") from None
    kernels = list(kernels_all)
    if skipped:
        table = Table(title=f"skipped kernels ({len(skipped)} of "
                            f"{len(skipped) + len(kernels)}: not replayed, not fitted)")
        table.add_column("kernel")
        table.add_column("reason")
        for sk in skipped:
            table.add_row(sk.name, sk.reason)
        console.print(table)
    if not kernels:
        raise SystemExit("calibrate: no kernel of the data could be replayed")
    if layouts is None:
        console.print(f"no {layout_file.name} in {directory}: the layout program is not "
                      "replayed")
    before_hw = hwmod.UNCALIBRATED.apply(hwmod.BASE_V3)
    before = cal.evaluate(before_hw, kernels, layouts)
    if args.no_fit:
        result = None
        constants = hwmod.CALIBRATED
    else:
        result = cal.fit(kernels, before_hw, start=hwmod.UNCALIBRATED, rounds=args.rounds,
                         free=free)
        constants = result.constants
    after_hw = constants.apply(hwmod.BASE_V3)
    after = cal.evaluate(after_hw, kernels, layouts)
    wall = time.perf_counter() - t0

    table = Table(title="TPU v3 tile-size replay (TpuGraphs): before -> after calibration")
    for col in ("kernel", "rows", "tau", "top-1/best", "default/best", "XLA default/best",
                "MAPE"):
        table.add_column(col, justify="left" if col == "kernel" else "right")
    for b, a, k in zip(before.tiles, after.tiles, kernels, strict=True):
        mb, ma = b.metrics, a.metrics

        def pair(x: float, y: float, tunable: bool = True) -> str:
            return f"{_fmt(x)} -> {_fmt(y)}" if tunable else "n/a"

        table.add_row(k.name, str(ma.rows), pair(mb.tau, ma.tau, k.tunable),
                      pair(mb.top1, ma.top1, k.tunable), pair(mb.default, ma.default, k.tunable),
                      _fmt(ma.xla_default) if k.tunable else "n/a", pair(mb.mape, ma.mape))
    console.print(table)
    for b, a in zip(before.tiles, after.tiles, strict=True):
        if b.invalid or a.invalid or a.error_rows:
            console.print(f"  {a.name}: measured-valid rows the simulator puts over VMEM "
                          f"{len(b.invalid)} -> {len(a.invalid)}; failed measurements "
                          f"{a.error_rows}, of which the simulator calls invalid "
                          f"{b.error_rows_invalid} -> {a.error_rows_invalid}")

    for title, ev in (("before", before), ("after", after)):
        if ev.layout is None:
            continue
        lay = ev.layout.to_json()
        table = Table(title=f"layout program ({lay['runs']} runs, output layouts applied): "
                            f"levels {'REPRODUCED' if lay['reproduced'] else 'NOT reproduced'}"
                            f" {title} calibration ({lay['runs_at_their_level']}/{lay['runs']} "
                            "runs nearest their own level)")
        for col in ("level", "runs", "measured offset ms", "simulated mean change ms"):
            table.add_column(col, justify="right")
        for lv, info in lay["levels"].items():
            table.add_row(lv, str(info["runs"]), f"{info['measured_offset_ms']:.2f}",
                          f"{info['simulated_mean_delta_ms']:.2f}")
        console.print(table)
    if after.layout_all is not None:
        la = after.layout_all.to_json()
        console.print(f"layout program with every tensor's layout applied (operands too), after "
                      f"calibration: {la['runs_at_their_level']}/{la['runs']} runs nearest their "
                      "level; mean simulated change per level (ms): "
                      + ", ".join(f"{lv} {i['simulated_mean_delta_ms']:.1f}"
                                  for lv, i in la["levels"].items()))

    table = Table(title="calibrated constants (v3 at 940 MHz, 450 GB/s)")
    for col in ("constant", "before", "after", "range"):
        table.add_column(col, justify="left" if col == "constant" else "right")
    cb, ca = hwmod.UNCALIBRATED.to_json(), constants.to_json()
    for name in ca:
        rng = cal.RANGES.get(name)
        fitted = result.free if result is not None else cal.FREE
        table.add_row(name + ("" if name in fitted else " (fixed)"), f"{cb[name]:.4g}",
                      f"{ca[name]:.4g}", f"{rng[0]:.3g} .. {rng[1]:.3g}" if rng else "")
    console.print(table)
    fitted_names = result.free if result is not None else cal.FREE
    for name, (value, why) in cal.FIXED.items():
        if name not in fitted_names:  # why each held constant has the value it has
            console.print(f"  {name} held at {value:.4g}: {why}")
    console.print(f"loss (mean over kernels of mean squared log error): {before.loss:.4f} -> "
                  f"{after.loss:.4f}" + (f" ({result.evaluations} evaluations)"
                                         if result is not None else " (recorded constants)"))
    table = Table(title="residuals after calibration (log = log(simulated / measured))")
    for col in ("kernel", "rows", "mean log", "rms log", "MAPE", "tau"):
        table.add_column(col, justify="left" if col == "kernel" else "right")
    for r in after.residuals:
        table.add_row(r.name, str(r.rows), f"{r.mean_log_error:+.3f}", f"{r.rms_log_error:.3f}",
                      f"{r.mape:.3f}", _fmt(r.tau))
    console.print(table)
    held: tuple = ()
    if args.cv:
        t_cv = time.perf_counter()
        held = cal.cross_validate(kernels, before_hw, start=hwmod.UNCALIBRATED,
                                  free=free,
                                  rounds=args.rounds)
        table = Table(title="leave-one-kernel-out cross-validation (fit on the other kernels, "
                            "score the one left out) | fit on all kernels")
        for col in ("kernel", "rows", "CV tau", "CV top-1/best", "CV MAPE", "CV mean log",
                    "all tau", "all top-1/best", "all MAPE"):
            table.add_column(col, justify="left" if col == "kernel" else "right")
        for h, a in zip(held, after.tiles, strict=True):
            m = a.metrics
            t = h.tunable
            table.add_row(h.name, str(h.rows), _fmt(h.tau) if t else "n/a",
                          _fmt(h.top1) if t else "n/a", _fmt(h.mape), f"{h.mean_log_error:+.3f}",
                          _fmt(m.tau) if t else "n/a", _fmt(m.top1) if t else "n/a",
                          _fmt(m.mape))
        console.print(table)
        goal = [h for h in held if h.tunable and h.rows >= 10]
        met = [h.name for h in goal if h.tau >= 0.7 and h.top1 <= 1.10]
        console.print(f"goal (CV tau >= 0.7 and top-1 within 10% on every kernel with >= 10 "
                      f"valid rows): {len(met)}/{len(goal)} kernels "
                      f"({', '.join(h.name for h in goal if h.name not in met) or 'all met'}"
                      f"{' missed' if len(met) < len(goal) else ''}); "
                      f"{time.perf_counter() - t_cv:.0f} s")
        spread = {n: [getattr(h.constants, n) for h in held] for n in free}
        console.print("fitted constants across folds (min .. max): " + ", ".join(
            f"{n} {min(v):.4g} .. {max(v):.4g}" for n, v in spread.items()))

    defaults = default_strength(kernels, after, after_hw, held)
    console.print(defaults["line"])
    layout_rank = None
    if layouts is not None and after.layout is not None:
        from superopt.tpu_sim.replay import default_layout_rank

        layout_rank = default_layout_rank(layouts, after.layout, after_hw).to_json()
        console.print(
            f"default layouts: ours simulated {layout_rank['simulated_delta_ms']:+.1f} ms from "
            f"XLA's default run, rank {layout_rank['rank']} of {layout_rank['runs']} runs by "
            f"simulated change, nearest measured level {layout_rank['level']}; XLA's default "
            f"is at level {layout_rank['xla_default_level']} with "
            f"{layout_rank['xla_default_rank_measured']} runs measured faster; ours equals a "
            f"measured run: {layout_rank['same_as_run'] is not None}")

    v4 = constants.apply(hwmod.BASE_V4)
    console.print(f"derived v4 (1.05 GHz, 600 GB/s): launch {v4.launch_s * 1e6:.3f} us, step "
                  f"{v4.step_s * 1e9:.1f} ns, DMA half size {v4.dma_half_bytes:.0f} B, MXU fill "
                  f"{v4.mxu_fill_cycles:.0f} cycles, VPU {v4.vpu_op_cycles:.3f} cycles/vreg op")
    console.print(f"wall time {wall:.1f} s")

    after_json = after.to_json()
    by_kernel = {r["kernel"]: r for r in defaults["kernels"]}
    for js in after_json["kernels"]:
        js.update(by_kernel.get(js["kernel"], {}))
    payload = {"data": cal.data_provenance(directory), "wall_s": wall,
               "fitted": result is not None,
               "skipped": [{"kernel": sk.name, "reason": sk.reason} for sk in skipped],
               "cross_validation": [h.to_json() for h in held] if args.cv else None,
               "constants": {"before": cb, "after": ca},
               "ranges": {k: list(v) for k, v in cal.RANGES.items()},
               "before": before.to_json(), "after": after_json,
               "default_strength": {k: v for k, v in defaults.items() if k != "line"},
               "default_layouts": layout_rank,
               "v4_derived": cal.hardware_json(v4)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1))
    console.print(f"wrote {out}")
    if args.write_record:
        if result is None:
            raise SystemExit("--write-record needs a fit (drop --no-fit)")
        rec = cal.record(result, before, after, directory)
        hwmod.CALIBRATION_FILE.write_text(json.dumps(rec, indent=1) + "\n")
        console.print(f"wrote {hwmod.CALIBRATION_FILE}")


def _geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def default_strength(kernels: list, after: Any, hw: Any, held: tuple) -> dict[str, Any]:
    """Per tunable kernel, the measured time over the measured best of the default
    compiler's pick (the "xla" heuristic, fit on all; the "legacy" heuristic; the "xla"
    heuristic under constants fitted without the kernel when cross-validated) and of XLA's
    own default (`main` also writes them into `after.kernels[*]`); geomeans over the kernels that
    have all of them, and a summary line."""
    from superopt.tpu_sim.kernel_costs import KernelCosts

    legacy = KernelCosts(hw, default_tiling="legacy")
    cv = {h.name: h.default for h in held}
    rows = []
    for k, rep in zip(kernels, after.tiles, strict=True):
        if not k.tunable:
            continue
        best = min(k.measured)
        row = {"kernel": k.name, "default": rep.metrics.default,
               "default_legacy": k.measured[k.default_pick(legacy)] / best,
               "xla_default": rep.metrics.xla_default,
               "default_cv": cv.get(k.name)}
        rows.append(row)
    with_xla = [r for r in rows if r["xla_default"] is not None
                and not math.isnan(r["xla_default"])]
    geo = {name: _geomean([r[name] for r in with_xla])
           for name in ("default", "default_legacy", "xla_default")}
    geo["default_cv"] = (_geomean([r["default_cv"] for r in with_xla])
                         if held and all(r["default_cv"] is not None for r in with_xla) else None)

    def f(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4f}"
    line = (f"default strength over {len(with_xla)} tunable kernels (measured time of the "
            f"pick / measured best, geomean): ours {f(geo['default'])} (leave-one-kernel-out "
            f"{f(geo['default_cv'])}), legacy {f(geo['default_legacy'])}, XLA's default "
            f"{f(geo['xla_default'])}: ours "
            + ("<=" if geo["default"] is not None and geo["xla_default"] is not None
               and geo["default"] <= geo["xla_default"] + 1e-12 else ">") + " XLA's")
    return {"kernels": rows, "geomean": geo, "line": line}


if __name__ == "__main__":
    main()
