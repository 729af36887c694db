"""Benchmark: the TASO-preset rule generator at 2 and 3 operators, next to TASO's figures.

Each run is a fresh process, so its peak memory is its own (the parent's and the largest
worker's resident set). Prints a table (wall and CPU time, peak memory, counts at every
stage) and writes JSON. TASO's own C++ generator on a 2-core machine like ours, size 3:
16.4 M graphs visited, 197 s wall, 106 s CPU, 7.1 GB peak, 619 rules (535 single-output,
84 two-output).

Run: `.venv/bin/python benchmarks/generate.py [--sizes 2,3] [--workers 2] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

TASO_SIZE3 = {"graphs": 16_400_000, "wall_s": 197.0, "cpu_s": 106.0, "peak_mb": 7.1 * 1024,
              "rules": 619, "single": 535, "two_output": 84}

_CHILD = """
import json, sys
from superopt.substitutions.generator import generate
from superopt.substitutions.presets import make_config
cfg = make_config(sys.argv[1], max_ops=int(sys.argv[2]))
res = generate(cfg, workers=int(sys.argv[3]))
print(json.dumps({"stages": res.stages, "times": res.times, "info": res.info}))
"""


def run(preset: str, size: int, workers: int) -> dict:
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, preset, str(size), str(workers)],
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = wall
    out["load"] = [load0, os.getloadavg()[0]]
    return out


def main() -> None:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="taso")
    parser.add_argument("--sizes", default="2,3")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default="benchmarks/results/generate.json")
    args = parser.parse_args()

    runs = {}
    for size in (int(s) for s in args.sizes.split(",")):
        runs[size] = run(args.preset, size, args.workers)

    table = Table(title=f"superopt generate --preset {args.preset} --workers {args.workers} "
                        "(TASO's C++ generator, size 3, for reference)")
    table.add_column("")
    for size in runs:
        table.add_column(f"{size} ops", justify="right")
    table.add_column("TASO, 3 ops", justify="right")
    keys = list(next(iter(runs.values()))["stages"])
    taso_for = {"graphs enumerated (terms evaluated)": TASO_SIZE3["graphs"],
                "rules written": TASO_SIZE3["rules"], "single-output rules": TASO_SIZE3["single"],
                "two-output rules": TASO_SIZE3["two_output"]}
    for k in keys:
        table.add_row(k, *(f"{r['stages'].get(k, 0):,}" for r in runs.values()),
                      f"{taso_for[k]:,}" if k in taso_for else "")
    table.add_section()

    def row(label: str, fn, taso: str) -> None:
        table.add_row(label, *(fn(r) for r in runs.values()), taso)

    row("wall time (s)", lambda r: f"{r['times']['total']:.1f}", f"{TASO_SIZE3['wall_s']:.0f}")
    row("CPU time, parent + workers (s)",
        lambda r: f"{r['times']['cpu_parent'] + r['times']['cpu_workers']:.1f}",
        f"{TASO_SIZE3['cpu_s']:.0f}")
    row("peak memory, parent (MB)", lambda r: f"{r['info']['peak_rss_mb']['parent']:.0f}",
        f"{TASO_SIZE3['peak_mb']:.0f}")
    row("peak memory, largest worker (MB)",
        lambda r: f"{r['info']['peak_rss_mb']['largest_worker']:.0f}", "")
    for stage in ("enumerate", "bucket+confirm", "pair+prune", "dedup", "build+verify",
                  "test at other shapes"):
        row(f"  {stage} (s)", lambda r, s=stage: f"{r['times'].get(s, 0.0):.1f}", "")
    # Other work on the machine stretches wall times; the load says how much there was.
    row("load average before / after", lambda r: f"{r['load'][0]:.1f} / {r['load'][1]:.1f}", "")
    Console(width=140).print(table)
    if 3 in runs:
        r = runs[3]
        print(f"size 3 vs TASO: {r['stages']['rules written'] / TASO_SIZE3['rules']:.2f}x the "
              f"rules in {r['times']['total'] / TASO_SIZE3['wall_s']:.2f}x the wall time, "
              f"{max(r['info']['peak_rss_mb'].values()) / TASO_SIZE3['peak_mb']:.2f}x the peak "
              "memory (largest process)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.machine(), "cpus": os.cpu_count(),
                               "preset": args.preset, "workers": args.workers,
                               "taso_size3": TASO_SIZE3,
                               "runs": {str(k): v for k, v in runs.items()}}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
