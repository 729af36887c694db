"""Benchmark: public `transformers` architectures through every step, as a new user runs them.

Each family of `superopt.importers.hf.FAMILIES` (GPT-2, Llama, Mistral, Qwen2, Phi, Gemma,
BERT, DistilBERT, RoBERTa, T5's encoder, ViT, DeiT, Swin, ConvNeXt, MobileViT, ResNet,
EfficientNet, Whisper's encoder) is built from a small config with seeded random weights and
captured twice: as a `.pt2` file (`torch.export.save`) and, where torch's exporter takes it,
as `.onnx` (`torch.onnx.export`, TorchScript-based). Every file then goes through:

1. import: `superopt.load(file)` (the CLI's MODEL_OR_FILE path), timed;
2. values: the reference interpreter on the imported graph against torch running the
   original module in float64 on other inputs than the capture's; for `.onnx` also against
   onnxruntime running the captured file;
3. optimize: `superopt.optimize` (the starter library; --cost, default the simulator's as
   on the command line; --budget), and the optimized
   graph's values against torch's again;
4. export: the optimized graph written as ONNX by `superopt.export`, run in onnxruntime and
   imported back, both compared with the reference interpreter;
5. tune: `superopt.tune(budget=--tune-budget)` on the simulated TPU, its speedup.

A step that fails is recorded with the exact reason (the error's first line) and the
steps that need its result are skipped. Each family runs in its own process (a crash or a
hang costs that family's rows, --timeout s per file at most). Values agree when the largest absolute
difference is at most --tol times the largest magnitude of the expected output: float32
constants folded by torch's capture (rotary tables), scalars stored as float32 weights and
the models' own casts to float32 (RMSNorm's `.to(torch.float32)`, which rounds even in the
float64 copy of the module) put the honest error near 1e-7; a wrong op gives errors of
order 1.

Run: `.venv/bin/python benchmarks/models.py [--families a,b] [--formats pt2,onnx]
[--out benchmarks/results/models.json]`; the table prints at the end.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

STEPS = ("capture", "import", "values", "optimize", "export", "tune")
FORMATS = ("pt2", "onnx")


class StepFailed(Exception):
    """A step's failure, with the one-line reason the table shows."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def _rel_err(got: Any, want: Any) -> float:
    import numpy as np

    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise StepFailed(f"output shape {list(got.shape)} differs from {list(want.shape)}")
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-6)
    return float(np.max(np.abs(got - want))) / scale if want.size else 0.0


def _compare(got: list[Any], want: list[Any], tol: float, what: str) -> float:
    if len(got) != len(want):
        raise StepFailed(f"{what}: {len(got)} outputs, expected {len(want)}")
    err = max(_rel_err(g, w) for g, w in zip(got, want, strict=True))
    if not err <= tol:  # NaN fails too
        raise StepFailed(f"{what}: relative error {err:.2e} > {tol:.0e}")
    return err


def _capture(family: str, fmt: str, workdir: Path) -> Path:
    import torch

    from superopt.importers.hf import hf_export, hf_onnx

    path = workdir / f"{family}.{fmt}"
    if fmt == "pt2":
        torch.export.save(hf_export(family), str(path))
        return path
    return hf_onnx(family, path)


def _feeds(graph: Any, inputs: tuple[Any, ...]) -> dict[str, Any]:
    names = [v.attr("name") if hasattr(v, "attr") else v for v in graph.inputs]
    if len(names) != len(inputs):
        raise StepFailed(f"the graph has {len(names)} inputs, the model {len(inputs)}")
    return {n: x.numpy() for n, x in zip(names, inputs, strict=True)}


def _torch_outputs(family: str, inputs: tuple[Any, ...]) -> list[Any]:
    import copy

    import torch

    from superopt.importers.hf import hf_module

    model = copy.deepcopy(hf_module(family)).double()
    args = [x.double() if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        out = model(*args)
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def _ort(path: Path, feeds: dict[str, Any]) -> list[Any]:
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    typed = {}
    for i, (name, arr) in zip(sess.get_inputs(), feeds.items(), strict=False):
        want = np.int64 if "int64" in i.type else np.int32 if "int32" in i.type else np.float32
        typed[i.name if i.name in names else name] = np.asarray(arr).astype(want)
    return sess.run(None, typed)


def run_one(family: str, fmt: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every step for one captured file; a failed step stops the ones that need it."""
    row: dict[str, Any] = {"family": family, "format": fmt, "steps": {}}
    steps = row["steps"]
    state: dict[str, Any] = {}
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)

    def step(name: str, fn: Any, needs: str | None = None) -> None:
        if needs is not None and not steps.get(needs, {}).get("ok"):
            steps[name] = {"ok": False, "skipped": True, "reason": f"needs {needs}"}
            return
        t0 = time.perf_counter()
        try:
            info = fn() or {}
            steps[name] = {"ok": True, "s": round(time.perf_counter() - t0, 3), **info}
        except Exception as e:  # every failure is a row's finding, never the run's end
            steps[name] = {"ok": False, "s": round(time.perf_counter() - t0, 3),
                           "reason": str(e) if isinstance(e, StepFailed) else _first_line(e)}
            if args.traceback:
                traceback.print_exc()

    def capture() -> dict[str, Any]:
        state["path"] = _capture(family, fmt, workdir)
        return {"file": str(state["path"]), "bytes": state["path"].stat().st_size}

    def load() -> dict[str, Any]:
        import superopt

        t0 = time.perf_counter()
        g = superopt.load(str(state["path"]))
        import_s = time.perf_counter() - t0
        state["graph"] = g
        hist = g.op_histogram()
        ops = {op: n for op, n in sorted(hist.items()) if op not in ("input", "weight")}
        return {"import_s": round(import_s, 3), "nodes": len(g), "ops": ops}

    def values() -> dict[str, Any]:
        from superopt.importers.hf import hf_inputs
        from superopt.ir import interpret

        inputs = hf_inputs(family, 1, seed=1)  # not the capture's inputs
        feeds = _feeds(state["graph"], inputs)
        state["inputs"], state["feeds"] = inputs, feeds
        state["torch"] = _torch_outputs(family, inputs)
        got = interpret(state["graph"], feeds)
        state["reference"] = got
        info = {"vs_torch": _compare(got, state["torch"], args.tol, "reference vs torch")}
        if fmt == "onnx":
            info["ort_vs_reference"] = _compare(_ort(state["path"], feeds), got, args.tol,
                                                "onnxruntime vs reference")
        return info

    def optimize() -> dict[str, Any]:
        import superopt
        from superopt.ir import interpret

        r = superopt.optimize(state["graph"], cost=args.cost, budget=args.budget)
        state["optimized"] = r.graph
        got = interpret(r.graph, state["feeds"])
        err = _compare(got, state["torch"], args.tol, "optimized graph vs torch")
        return {"applied": dict(r.applied), "cost_before": r.cost_before,
                "cost_after": r.cost_after, "nodes_after": len(r.graph), "vs_torch": err}

    def export() -> dict[str, Any]:
        import superopt
        from superopt.importers.onnx import import_onnx
        from superopt.ir import interpret

        g = state["optimized"]
        path = superopt.export(g, workdir / f"{family}.{fmt}.optimized.onnx")
        want = interpret(g, state["feeds"])
        ort_err = _compare(_ort(path, state["feeds"]), want, args.tol,
                           "onnxruntime on the exported file vs reference")
        back = import_onnx(path)
        back_err = _compare(interpret(back, _feeds(back, state["inputs"])), want, args.tol,
                            "re-imported export vs reference")
        return {"ort_vs_reference": ort_err, "reimport_vs_reference": back_err,
                "reimport_nodes": len(back)}

    def tune() -> dict[str, Any]:
        import superopt

        r = superopt.tune(state["graph"], budget=args.tune_budget, seed=0)
        return {"speedup": r.speedup, "default_us": r.default_time, "best_us": r.best_time,
                "evaluations": r.evaluations}

    step("capture", capture)
    step("import", load, "capture")
    step("values", values, "import")
    step("optimize", optimize, "values")
    step("export", export, "optimize")
    step("tune", tune, "import")
    return row


def _child(family: str, formats: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One family's files in a process of their own (torch and transformers load once per
    family); a crash or a hang costs that family's rows only."""
    cmd = [sys.executable, __file__, "--one", family, "--formats", ",".join(formats),
           "--workdir", args.workdir, "--cost", args.cost, "--budget", str(args.budget),
           "--tune-budget", str(args.tune_budget), "--tol", str(args.tol)]

    def failed(reason: str, wall: float) -> list[dict[str, Any]]:
        return [{"family": family, "format": fmt, "wall_s": round(wall, 1),
                 "steps": {"run": {"ok": False, "reason": reason}}} for fmt in formats]

    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True,
                             timeout=args.timeout * len(formats))
    except subprocess.TimeoutExpired:
        return failed(f"timed out after {args.timeout * len(formats)} s", time.perf_counter() - t0)
    rows = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or len(rows) != len(formats):
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        done = {r["format"] for r in rows}
        return rows + [r for r in failed(f"exit {out.returncode}: {tail}",
                                         time.perf_counter() - t0) if r["format"] not in done]
    return rows


def status(row: dict[str, Any]) -> str:
    """'ok', or every failed step with its reason (skipped steps are not repeated)."""
    failed = [f"{name}: {s['reason']}" for name, s in row["steps"].items()
              if not s.get("ok") and not s.get("skipped")]
    return "; ".join(failed) or "ok"


def print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="transformers families: capture, import, values, optimize, export, tune")
    for col in ("family", "format", "nodes", "import s", "ops used", "optimize rules applied",
                "tune speedup", "status"):
        table.add_column(col, justify="right" if col in ("nodes", "import s", "tune speedup")
                         else "left")
    for r in rows:
        st = r["steps"]
        imp, opt, tune = st.get("import", {}), st.get("optimize", {}), st.get("tune", {})
        ops = ", ".join(imp.get("ops", {})) if imp.get("ok") else "-"
        applied = ", ".join(f"{k} x{v}" for k, v in opt.get("applied", {}).items()) \
            if opt.get("ok") else "-"
        table.add_row(r["family"], r["format"], str(imp.get("nodes", "-")),
                      f"{imp['import_s']:.2f}" if imp.get("ok") else "-", ops, applied or "none",
                      f"{tune['speedup']:.3f}x" if tune.get("ok") else "-", status(r))
    Console(width=200).print(table)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per format and step: how many files passed, and which families did not."""
    out: dict[str, Any] = {}
    for fmt in FORMATS:
        mine = [r for r in rows if r["format"] == fmt]
        if not mine:
            continue
        out[fmt] = {"files": len(mine), "all_steps": sum(status(r) == "ok" for r in mine)}
        for name in STEPS:
            passed = [r["family"] for r in mine if r["steps"].get(name, {}).get("ok")]
            out[fmt][name] = {"passed": len(passed),
                              "failed": sorted(r["family"] for r in mine
                                               if r["family"] not in passed)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=None, help="comma-separated (default: all)")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--cost", default="sim",
                        help="optimize's cost (default sim, as the CLI's optimize)")
    parser.add_argument("--budget", type=int, default=20, help="optimize's budget")
    parser.add_argument("--tune-budget", type=int, default=50)
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per file at most")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "superopt_models"))
    parser.add_argument("--out", default="benchmarks/results/models.json")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # FAMILY (a child)
    parser.add_argument("--traceback", action="store_true", help="print failed steps' tracebacks")
    args = parser.parse_args()

    if args.one:
        for fmt in args.formats.split(","):
            t0 = time.perf_counter()
            row = run_one(args.one, fmt, args)
            row["wall_s"] = round(time.perf_counter() - t0, 1)
            print(json.dumps(row), flush=True)
        return

    from superopt.importers import HF_FAMILIES

    families = args.families.split(",") if args.families else list(HF_FAMILIES)
    formats = args.formats.split(",")
    rows = []
    t0 = time.perf_counter()
    for family in families:
        for row in _child(family, formats, args):
            rows.append(row)
            print(f"{family:16s} {row['format']:5s} {row['wall_s']:6.1f}s  {status(row)}",
                  flush=True)
    print_table(rows)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    doc = {"measured_at": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "machine": platform.machine(), "cpus": os.cpu_count(),
           "settings": {"optimize_cost": args.cost, "optimize_budget": args.budget,
                        "tune_budget": args.tune_budget, "tol": args.tol,
                        "onnx_exporter": "torch.onnx.export(dynamo=False, opset 17)"},
           "wall_s": round(time.perf_counter() - t0, 1), "summary": summary(rows), "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"], indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
