"""Benchmark: every causal-LM family `transformers` knows, captured and imported as a user
would (the importers' coverage of users' models, beyond the families `hf:NAME` builds).

For each model type in transformers' causal-LM mapping (`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`,
about 200 here), a child process builds the family from its config with one generic set of
small sizes (hidden 64, 2 layers, 4 heads, 2 key/value heads, vocabulary 256; each config
takes the keys it knows), seeded random weights that keep activations near unit scale (as
the `hf:` families are seeded: some libraries initialise routers to zero, and a top-k of
tied scores is the runtime's choice), captures `logits` of `input_ids` with
`torch.export`, imports the program, and runs the imported graph on other ids against the
exported program and against the eager model. Each family's outcome is one of:

- `ok`: imported; the largest relative difference of its logits from the program's;
- `import`: refused by the importer (the reason is the importer's one-line error);
- `values`: imported, but its logits differ from the program's by more than `--tol`;
- `config`, `build`, `export`: the generic small sizes do not make a valid config or
  model of that family, or torch.export fails on it: no verdict on the importer;
- `timeout`, `memory`: the child ran past `--timeout` seconds or `--memory` GiB.

The program and the eager model are compared too (`program_vs_eager`): where they differ
the export itself is not faithful, whatever the importer does.

`OMP_WAIT_POLICY=PASSIVE taskset -c 1 .venv/bin/python benchmarks/hf_sweep.py`
(`--types llama,mixtral`, `--out FILE`, `--report` to print the table of a finished
run). The JSON is written after every family; a rerun keeps the families it has (`--fresh`
starts over), and Ctrl-C stops it with the families done so far kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

RESULTS = Path(__file__).parent / "results" / "hf_sweep.json"
# Small sizes under every spelling the families' configs use; a config ignores the keys it
# does not know.
SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
         "n_embd": 64, "n_layer": 2, "n_head": 4, "d_model": 64, "num_layers": 2,
         "num_heads": 4, "head_dim": 16, "max_position_embeddings": 128, "use_cache": False,
         "ffn_dim": 128, "n_positions": 128, "pad_token_id": 0, "bos_token_id": 1,
         "eos_token_id": 2}
SEQ = 12


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:400]


def one(model_type: str, tol: float) -> dict[str, Any]:
    """Build, export, import and compare one family (run in a child process)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import warnings

    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    import numpy as np
    import torch
    import transformers

    from superopt.importers.errors import ModelImportError
    from superopt.importers.torch import import_exported
    from superopt.ir import interpret

    torch.manual_seed(0)
    torch.set_num_threads(1)
    try:
        config = transformers.AutoConfig.for_model(model_type, **SMALL)
    except Exception as e:
        return {"status": "config", "why": _first(e)}
    try:
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
    except Exception as e:
        return {"status": "build", "why": _first(e)}
    # Weights of unit-scale activations (the hf: families' seeding): the libraries' own
    # initialisation zeroes some routers, and a top-k of equal scores is the runtime's
    # choice (torch.topk promises no order among ties; the IR takes the lowest index).
    from superopt.importers.hf import _lively

    _lively(model)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=ids, use_cache=False).logits

    wrapped = Logits().eval()
    ids = torch.randint(3, 200, (1, SEQ), generator=torch.Generator().manual_seed(0))
    try:
        program = torch.export.export(wrapped, (ids,))
    except Exception as e:
        return {"status": "export", "why": f"{type(e).__name__}: {_first(e)}"}
    start = time.perf_counter()
    try:
        graph = import_exported(program, name=model_type)
    except ModelImportError as e:
        return {"status": "import", "why": _first(e)}
    seconds = time.perf_counter() - start
    other = torch.randint(3, 200, (1, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = program.module()(other).detach().numpy()
        eager = wrapped(other).numpy()
    got = interpret(graph, {graph.inputs[0].attr("name"): other.numpy()})[0]
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got - want).max()) / scale
    return {"status": "ok" if err <= tol else "values", "rel_err": err,
            "program_vs_eager": float(np.abs(want - eager).max()) / max(
                float(np.abs(eager).max()), 1e-30),
            "nodes": len(graph), "import_s": round(seconds, 3),
            "ops": len(set(graph.op_histogram()))}


def _child(model_type: str, args: argparse.Namespace) -> dict[str, Any]:
    def limit() -> None:
        import resource

        cap = int(args.memory * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    cmd = [sys.executable, __file__, "--one", model_type, "--tol", str(args.tol)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                             preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "why": f"past {args.timeout} s"}
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
    if run.returncode != 0 or not lines:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        kind = "memory" if "MemoryError" in run.stderr or run.returncode in (-9, 137) \
            else "crash"
        return {"status": kind, "why": tail[:400]}
    return json.loads(lines[-1])


def _types(spec: str | None) -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    known = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if not spec:
        return known
    asked = [t.strip() for t in spec.split(",") if t.strip()]
    unknown = [t for t in asked if t not in known]
    if unknown or not asked:
        raise SystemExit(f"hf_sweep.py: no causal-LM family named {unknown or spec!r}; "
                         f"e.g. {', '.join(known[:5])}")
    return asked


def summarize(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for r in rows.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    judged = sum(counts.get(k, 0) for k in ("ok", "import", "values", "timeout", "memory",
                                           "crash"))
    return {"families": len(rows), "counts": counts, "judged": judged,
            "imported_share_of_judged": counts.get("ok", 0) / judged if judged else None,
            "export_not_faithful": sorted(t for t, r in rows.items()
                                          if r.get("program_vs_eager", 0) > 1e-4)}


def report(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="transformers causal-LM families: torch.export, then import")
    for col in ("family", "outcome", "rel err", "nodes", "why (importer or torch)"):
        table.add_column(col)
    for name, r in sorted(data["rows"].items()):
        err = f"{r['rel_err']:.1e}" if "rel_err" in r else "-"
        table.add_row(name, r["status"], err, str(r.get("nodes", "-")),
                      r.get("why", "")[:110])
    Console(width=170).print(table)
    s = data["summary"]
    print(f"{s['families']} families: {s['counts']}; judged {s['judged']} "
          f"(import verdicts), imported {s['counts'].get('ok', 0)}")


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"hf_sweep.py: {path}: not a sweep's JSON ({e}); --fresh starts "
                         "over") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict):
        raise SystemExit(f"hf_sweep.py: {path}: not a sweep's JSON (no rows); --fresh starts "
                         "over")
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", help="comma-separated model types (default: all)")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative difference")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per family")
    ap.add_argument("--memory", type=float, default=10.0, help="GiB per family")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--fresh", action="store_true", help="drop the families already in --out")
    ap.add_argument("--report", action="store_true", help="print the table of --out")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.tol)))
        return
    if args.timeout <= 0 or args.memory <= 0:
        raise SystemExit("hf_sweep.py: --timeout and --memory must be positive")
    if args.report:
        if not args.out.exists():
            raise SystemExit(f"hf_sweep.py: {args.out}: no such file (run the sweep first)")
        report(_read(args.out))
        return
    import transformers

    data: dict[str, Any] = {"rows": {}}
    if args.out.exists() and not args.fresh:
        data = _read(args.out)
    data["settings"] = {"small": SMALL, "seq": SEQ, "tol": args.tol,
                        "transformers": transformers.__version__}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    todo = [t for t in _types(args.types) if t not in data["rows"]]
    current = ""
    try:
        for current in todo:
            start = time.perf_counter()
            row = _child(current, args)
            row["wall_s"] = round(time.perf_counter() - start, 1)
            data["rows"][current] = row
            data["summary"] = summarize(data["rows"])
            args.out.write_text(json.dumps(data, indent=1, sort_keys=True))
            print(f"{current:28s} {row['status']:8s} {row.get('why', '')[:100]}", flush=True)
    except KeyboardInterrupt:
        print(f"hf_sweep.py: interrupted in {current}: {len(data['rows'])} families kept in "
              f"{args.out}", file=sys.stderr)
        raise SystemExit(130) from None
    data["summary"] = summarize(data["rows"])
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True))
    report(data)


if __name__ == "__main__":
    main()
