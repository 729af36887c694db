"""`superopt demo` (and `make demo`): the main job, end to end, in a few minutes on 2 cores.

1. generate a small TASO rule library (every graph of up to 2 ops over TASO's inputs);
2. verify it with Z3, together with one false rule, which is refuted with a counterexample;
3. optimize a model with the proved rules (and the starter library), check its values;
4. export the optimized model as ONNX and run it in onnxruntime against the reference;
5. tune a model jointly (rewrite, layout, fusion, tiles, flags) and draw its tuning curve;

then a summary table of what each step produced. Every step goes through the Python API
(`superopt.generate`, `verify`, `optimize`, `export`, `tune`) and prints the command line
that does the same. Files go to `out/demo/`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A rule that looks plausible and is false: relu does not distribute over a sum.
FALSE_RULE = "relu_over_add: (relu (ewadd ?x ?y)) => (ewadd (relu ?x) (relu ?y))"


@dataclass(frozen=True)
class StepReport:
    """One row of the summary table."""

    step: str
    produced: str
    seconds: float
    ok: bool


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run_demo(out_dir: str | Path = "out/demo", model: str = "bert_small",
             tune_model: str = "squeezenet", tune_budget: int = 40, jobs: int = 2) -> int:
    """Run the five steps, print each result and the summary; 0 when every step is ok."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import numpy as np
    from rich.table import Table

    import superopt
    from superopt.ir import interpret, random_feeds
    from superopt.progress import console as make_console
    from superopt.rewrite import starter_rules
    from superopt.rewrite.check import check_values
    from superopt.substitutions.library import save_library
    from superopt.substitutions.text import format_rule, parse_rules

    console = make_console(width=None)  # watched by the piped-progress heartbeat
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    reports: list[StepReport] = []
    t_start = time.perf_counter()

    def header(n: int, what: str, command: str) -> None:
        console.rule(f"[bold]{n}/5 {what}")
        console.print(f"[dim]same as: {command}[/]")

    # 1. generate
    header(1, "generate a TASO rule library",
           f"superopt generate --preset taso --max-ops 2 --out {out}/rules.json")
    lib, secs = _timed(lambda: superopt.generate("taso", max_ops=2, workers=jobs))
    save_library(lib.rules, out / "rules.json")
    (out / "rules.rules").write_text("".join(format_rule(r) + "\n" for r in lib.rules))
    console.print(f"{len(lib.rules)} rules from graphs of up to 2 ops, e.g.")
    for r in lib.rules[:3]:
        console.print(f"  {format_rule(r)}")
    reports.append(StepReport("generate", f"{len(lib.rules)} rules ({out}/rules.rules)",
                              secs, bool(lib.rules)))

    # 2. verify
    header(2, "verify it, with one false rule added",
           f"superopt verify {out}/rules.json --jobs {jobs}")
    false_rule = parse_rules(FALSE_RULE)
    results, secs = _timed(lambda: superopt.verify([*lib.rules, *false_rule], jobs=jobs))
    states = [r.state for r in results[:-1]]
    proved = [rule for rule, res in zip(lib.rules, results, strict=False)
              if res.state == "proved"]
    refuted = results[-1]
    console.print(f"library: {states.count('proved')} proved, {states.count('refuted')} "
                  f"refuted, {len(states) - states.count('proved') - states.count('refuted')} "
                  "other")
    ce = refuted.counterexample or {}
    console.print(f"{FALSE_RULE}\n  -> [bold]{refuted.state.upper()}[/]: {refuted.reason}")
    if ce:
        console.print(f"  counterexample: inputs {ce.get('inputs')}: source gives "
                      f"{ce.get('source_value')}, target {ce.get('target_value')}")
    reports.append(StepReport(
        "verify", f"{len(proved)}/{len(states)} proved; false rule {refuted.state}", secs,
        refuted.state == "refuted" and len(proved) == len(states)))

    # 3. optimize
    header(3, f"optimize {model} with the proved rules and the starter library",
           f"superopt optimize {model} --rules RULES --out {out}/{model}.onnx")
    graph = superopt.load(model)
    result, secs = _timed(lambda: superopt.optimize(graph, rules=[*proved, *starter_rules()],
                                                    budget=50))
    check = check_values(graph, result.graph)
    applied = dict(result.applied)
    from_library = sum(n for rule, n in applied.items() if rule.startswith("taso"))
    console.print(f"flops {result.cost_before:.4g} -> {result.cost_after:.4g} "
                  f"({result.speedup:.3f}x); rules applied: {applied or 'none'}")
    console.print(check.summary())
    reports.append(StepReport(
        "optimize", f"{model}: {result.speedup:.3f}x fewer flops, {sum(applied.values())} "
                    f"sites ({from_library} by generated rules), values equal", secs, check.ok))

    # 4. export to ONNX and run in onnxruntime
    header(4, "export the optimized model as ONNX and run it in onnxruntime",
           f"superopt optimize {model} --out {out}/{model}.onnx")
    import onnxruntime as ort

    path, secs = _timed(lambda: superopt.export(result.graph, out / f"{model}.onnx"))
    feeds = random_feeds(graph, seed=1)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    cast = {k: np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f" else np.asarray(v)
            for k, v in feeds.items()}
    got = sess.run(None, cast)[0]
    want = np.asarray(interpret(graph, feeds)[0])  # the original model, float64
    rel = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    ok = rel <= 1e-4
    console.print(f"{path} ({path.stat().st_size / 1e6:.1f} MB): onnxruntime vs the reference "
                  f"interpreter on the original model: max relative error {rel:.2e}")
    reports.append(StepReport("export", f"{path.name}: onnxruntime = reference "
                                        f"(rel err {rel:.1e})", secs, ok))

    # 5. tune
    header(5, f"tune {tune_model} jointly on the TPU simulator",
           f"superopt tune {tune_model} --budget {tune_budget} --plot {out}/tune_curve.png")
    from superopt.xtat.command import tuning_curve_png

    tuned, secs = _timed(lambda: superopt.tune(tune_model, budget=tune_budget, seed=0))
    png = tuning_curve_png(tuned, str(out / "tune_curve.png"), tune_model)
    console.print(f"{tuned.evaluations} measurements: {tuned.default_time * 1e6:.1f} us -> "
                  f"{tuned.best_time * 1e6:.1f} us ({tuned.speedup:.3f}x over the default "
                  f"compiler); curve in {png}")
    reports.append(StepReport("tune", f"{tune_model}: {tuned.speedup:.3f}x simulated, "
                                      f"{Path(png).name}", secs, tuned.speedup >= 1.0))

    table = Table(title=f"superopt demo: {time.perf_counter() - t_start:.0f} s in all")
    for col in ("step", "produced", "s", "ok"):
        table.add_column(col, justify="right" if col == "s" else "left")
    for r in reports:
        table.add_row(r.step, r.produced, f"{r.seconds:.1f}",
                      "[green]yes[/]" if r.ok else "[red]NO[/]")
    console.print(table)
    return 0 if all(r.ok for r in reports) else 1
