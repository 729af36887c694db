"""Benchmark: the joint benchmark's graphs timed on a torch device (CUDA where one is lent).

`benchmarks/joint.py --save-graphs DIR` writes, per row, the original graph and the best
joint graph (weight-only computations folded, as the simulator priced it; values checked
equal on the reference interpreter there). This times each pair side by side on the
torch backend, eager float32, in interleaved rounds with the original run twice: the
original against its own copy is the A/A control, which says how much of a ratio is
noise. The simulated speedup of the row (joint.json) is printed beside it, so a win the
TPU simulator sees and a GPU does not is visible as such.

Run: `python benchmarks/joint_device.py --graphs DIR [--device cuda] [--repeats N]
[--out FILE]`. Prints a table and writes JSON after every pair (`--resume` keeps the
pairs already in --out). A graph file that cannot be read is reported on one line and
the others still run; the exit status is then non-zero.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from superopt.ir.graph import Graph

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).parent))

RESULTS = Path(__file__).parent / "results"


class PairError(Exception):
    """A graph-pair file that cannot be used: the message names the file."""


def load_pair(path: Path) -> tuple[dict, Graph, Graph]:
    """The pair file's header (model, batch) and its two graphs."""
    from superopt.ir.errors import IRError
    from superopt.ir.serialize import from_json

    try:
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
    except (OSError, EOFError, ValueError) as e:
        raise PairError(f"{path}: not a gzip'd JSON graph pair ({e})") from None
    if not isinstance(doc, dict) or not {"model", "batch", "before", "after"} <= doc.keys():
        raise PairError(f"{path}: expected an object with model, batch, before and after")
    try:
        before = from_json(doc["before"], source=f"{path} (before)")
        after = from_json(doc["after"], source=f"{path} (after)")
    except IRError as e:
        raise PairError(str(e)) from None
    return {"model": doc["model"], "batch": doc["batch"]}, before, after


def simulated(joint_json: Path) -> dict[tuple[str, int], float]:
    """Each row's simulated joint speedup from joint.json (none when it is absent)."""
    if not joint_json.exists():
        return {}
    rows = json.loads(joint_json.read_text()).get("rows", [])
    return {(r["model"], r["batch"]): r["speedup"]["joint"] for r in rows}


def time_pair(before: Graph, after: Graph, device: str, repeats: int, warmup: int) -> dict:
    from superopt.rewrite.check import time_side_by_side

    t = time_side_by_side([before, after, before], repeats=repeats, warmup=warmup,
                          device=device)
    lo, hi = t.ratio_ci(0, 1)
    aa_lo, aa_hi = t.ratio_ci(0, 2)
    return {"before_s": t.medians[0], "after_s": t.medians[1], "ratio": t.ratio(0, 1),
            "ratio_ci": [lo, hi], "aa_ratio": t.ratio(0, 2), "aa_ci": [aa_lo, aa_hi],
            "repeats": repeats, "warmup": warmup}


def device_info(device: str) -> dict:
    import torch

    info = {"device": device, "torch": torch.__version__}
    if device.startswith("cuda"):
        info["name"] = torch.cuda.get_device_name(torch.device(device))
        # Eager float32 without TF32: the graphs' own arithmetic, as on the CPU.
        info["tf32"] = torch.backends.cuda.matmul.allow_tf32
    else:
        info["threads"] = torch.get_num_threads()
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphs", required=True, metavar="DIR",
                    help="the folder joint.py --save-graphs wrote")
    ap.add_argument("--device", default="cuda", help="torch device (default cuda)")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--joint-json", default=str(RESULTS / "joint.json"),
                    help="the simulated speedups to print beside (default: joint.json)")
    ap.add_argument("--out", default=str(RESULTS / "joint_device.json"))
    ap.add_argument("--resume", action="store_true",
                    help="keep the pairs already in --out (same device) and time the rest")
    args = ap.parse_args()
    if args.repeats < 1 or args.warmup < 0:
        raise SystemExit(f"--repeats must be >= 1 and --warmup >= 0, found {args.repeats}, "
                         f"{args.warmup}")
    folder = Path(args.graphs)
    files = sorted(folder.glob("*.json.gz")) if folder.is_dir() else []
    if not files:
        raise SystemExit(f"--graphs: {folder}: no *.json.gz graph pairs there")
    import torch
    from joint import geomean

    try:
        dev = torch.device(args.device)
    except RuntimeError as e:
        raise SystemExit(f"--device: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device: {args.device}: torch sees no CUDA device here")
    info = device_info(args.device)
    out = Path(args.out)
    rows: list[dict] = []
    if args.resume and out.exists():
        prev = json.loads(out.read_text())
        if prev.get("device_info", {}).get("name") == info.get("name") \
                and prev.get("device_info", {}).get("device") == info["device"]:
            rows = prev["rows"]
    done = {r["file"] for r in rows}
    sim = simulated(Path(args.joint_json))
    failed = 0
    t0 = time.perf_counter()

    def write() -> dict:
        doc = {"device_info": info, "rows": rows,
               "geomean_ratio": geomean([r["ratio"] for r in rows]),
               "geomean_aa": geomean([r["aa_ratio"] for r in rows]),
               "complete": len(rows) == len(files), "wall_s": time.perf_counter() - t0}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")
        return doc

    print(f"{'row':18s} {'before ms':>10s} {'after ms':>10s} {'ratio':>7s} {'95% CI':>15s} "
          f"{'A/A':>6s} {'sim':>6s}   ({info.get('name', args.device)})", flush=True)
    for path in files:
        if path.name in done:
            continue
        try:
            head, before, after = load_pair(path)
        except PairError as e:
            print(f"joint_device: {e}", file=sys.stderr, flush=True)
            failed += 1
            continue
        r = {"file": path.name, **head, **time_pair(before, after, args.device, args.repeats,
                                                     args.warmup)}
        r["simulated"] = sim.get((head["model"], head["batch"]))
        rows.append(r)
        write()
        s = f"{r['simulated']:.3f}" if r["simulated"] else "-"
        print(f"{head['model'] + '/' + str(head['batch']):18s} {r['before_s'] * 1e3:10.3f} "
              f"{r['after_s'] * 1e3:10.3f} {r['ratio']:7.3f} "
              f"[{r['ratio_ci'][0]:.3f},{r['ratio_ci'][1]:.3f}] {r['aa_ratio']:6.3f} {s:>6s}",
              flush=True)
    doc = write()
    print(f"geomean ratio {doc['geomean_ratio']:.3f} (A/A {doc['geomean_aa']:.3f}) over "
          f"{len(rows)} pairs; wrote {out}")
    if failed:
        print(f"joint_device: {failed} graph pair file(s) could not be read (above)",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        raise SystemExit("interrupted: the pairs timed so far are in --out; --resume "
                         "continues") from None
