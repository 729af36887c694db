"""The Python API: the main jobs of the command line as six functions.

`superopt.load`, `optimize`, `verify`, `generate`, `tune` and `export` are re-exported at
the package top. Each imports its subsystem when called, so `import superopt` stays as
light as `superopt --help` (no torch, z3 or numpy). Every example below is run by the
test suite (tests/test_api.py runs this module's doctests).

>>> import superopt
>>> g = superopt.load("resnet18")
>>> result = superopt.optimize(g, budget=10)
>>> result.cost_after < result.cost_before
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from superopt.ir.graph import Graph
    from superopt.rewrite.optimizer import OptimizeResult
    from superopt.substitutions.generator import GenerateResult
    from superopt.substitutions.rule import Rule
    from superopt.verifier.prover import RuleResult
    from superopt.xtat.tuner import TuneResult

__all__ = ["export", "generate", "load", "optimize", "tune", "verify"]


def load(model_or_file: str, batch: int | None = None) -> Graph:
    """A graph from anything the command line takes as MODEL_OR_FILE: a zoo name, an ONNX
    light model (`onnx:light_resnet50`), `hf:bert-base`, an `.onnx` file, a `torch.export`
    program saved as `.pt2`, or a graph saved as `.json`.

    >>> g = load("resnet18", batch=2)
    >>> g.inputs[0].type.shape
    (2, 3, 224, 224)
    >>> g.op_histogram()["conv2d"]
    20
    """
    from superopt.importers import load_model

    return load_model(model_or_file, batch=batch)


def _rules(rules: str | Path | Iterable[Rule] | None) -> list[Rule]:
    """Rules from the starter library (None or "starter"), a rule file or library, rule
    text (a string holding "=>"), or Rule objects as they are."""
    if rules is None or isinstance(rules, str | Path):
        text = str(rules) if rules is not None else "starter"
        if "=>" in text:
            from superopt.substitutions.text import parse_rules

            return list(parse_rules(text))
        from superopt.rewrite import load_rules

        return load_rules(text)[0]
    return list(rules)


def optimize(graph: Graph, rules: str | Path | Iterable[Rule] | None = None,
             cost: str = "flops", budget: int = 100, fold: bool = True,
             seed: int = 0) -> OptimizeResult:
    """TASO's cost-based search over rewrites (`superopt optimize`): the cheapest graph
    reachable by `rules` (the starter library by default; rules a verifier refuted are left
    out) under `cost` ("flops", "tpu", "torch", ...), with weight-only computations folded
    into weights afterwards (`fold`; weights without data are drawn at `seed`).

    >>> from superopt.ir import GraphBuilder
    >>> b = GraphBuilder("two_relus")
    >>> x = b.input("x", (4, 4))
    >>> g = b.build(b.relu(b.relu(x)))
    >>> r = optimize(g, rules="relu_relu: (relu (relu ?x)) => (relu ?x)")
    >>> dict(r.applied), r.graph.op_histogram()["relu"]
    ({'relu_relu': 1}, 1)
    """
    from dataclasses import replace

    from superopt.rewrite import fold_weights
    from superopt.rewrite import optimize as _optimize

    result = _optimize(graph, _rules(rules), cost, budget=budget)
    if fold:
        result = replace(result, graph=fold_weights(result.graph, seed=seed).graph)
    return result


def verify(rules: str | Path | Iterable[Rule], jobs: int = 1, timeout_s: float = 10.0,
           seed: int = 0) -> list[RuleResult]:
    """Prove or refute each rule (`superopt verify`): PROVED with the axioms used, REFUTED
    with a concrete counterexample from random testing, or UNKNOWN. `rules` is a rule file
    or library, rule text, or Rule objects. The built-in axioms are used (each is checked
    against the reference semantics by `superopt verify --check-axioms` and the tests).

    >>> results = verify('''
    ... add_comm: (ewadd ?x ?y) => (ewadd ?y ?x)
    ... relu_add: (relu (ewadd ?x ?y)) => (ewadd (relu ?x) (relu ?y))
    ... ''')
    >>> [(r.name, r.state) for r in results]
    [('add_comm', 'proved'), ('relu_add', 'refuted')]
    >>> results[1].counterexample is not None
    True
    """
    from superopt.verifier import VerifyOptions, builtin_axioms, verify_rules

    options = VerifyOptions(timeout_s=timeout_s, seed=seed)
    return verify_rules(_rules(rules), builtin_axioms(), options, jobs=jobs)


def generate(preset: str = "taso", max_ops: int | None = None,
             ops: Sequence[str] | None = None, workers: int = 1,
             seed: int | None = None) -> GenerateResult:
    """TASO's generator (`superopt generate`): enumerate every graph of up to `max_ops` ops
    over the preset's inputs and ops, and keep the pairs that compute the same thing as
    rules, pruned. Presets: "taso", "modern", "linear", "conv", "small".

    >>> lib = generate("small", max_ops=2, ops=["matmul", "ewadd"])
    >>> len(lib.rules) > 0
    True
    >>> any("matmul" in r.name or "matmul" in str(r.source) for r in lib.rules)
    True
    """
    from superopt.substitutions.generator import generate as _generate
    from superopt.substitutions.presets import make_config

    cfg = make_config(preset, max_ops=max_ops, ops=ops, seed=seed)
    return _generate(cfg, workers=workers)


def tune(graph: Graph | str, passes: Sequence[str] | None = None, budget: int = 200,
         schedule: str = "joint", strategy: str = "sweep", seed: int = 0,
         hardware: str | None = None, default_tiling: str | None = None,
         plan_search: str = "backtracking") -> TuneResult:
    """XTAT's joint tuner (`superopt tune`) on the TPU simulator: rewrite, layout, fusion,
    tile and flag choices searched together for `budget` measurements. `graph` is a Graph
    or a MODEL_OR_FILE string; `passes` defaults to all six. `default_tiling` names the
    default compiler's tile heuristic that tuning starts from and its speedup is over
    ("xla", the default, or "legacy": `superopt.tpu_sim.tiling.DEFAULT_TILINGS`).
    `plan_search` searches the rewrite plan by TASO's "backtracking" (default), "eqsat"
    or "both" (`superopt tune --plan-search`).

    >>> r = tune("squeezenet", budget=8, seed=1)
    >>> r.evaluations, r.speedup >= 1.0
    (8, True)
    """
    from superopt.xtat import tune as _tune

    if isinstance(graph, str):
        return _tune(graph, budget=budget, schedule=schedule, passes=passes,
                     strategy=strategy, seed=seed, hardware=hardware,
                     default_tiling=default_tiling, plan_search=plan_search)
    return _tune(graph.name, budget=budget, schedule=schedule, passes=passes,
                 strategy=strategy, seed=seed, hardware=hardware, graph=graph,
                 default_tiling=default_tiling, plan_search=plan_search)


def export(graph: Graph, path: str | Path, opset: int | None = None, seed: int = 0) -> Path:
    """Write the graph as ONNX (`.onnx`, weights as initializers, opset 20 unless given),
    a torch fx GraphModule (`.pt`) or our JSON (`.json`), by the path's suffix.

    >>> import tempfile, onnx
    >>> g = load("squeezenet")
    >>> path = export(g, Path(tempfile.mkdtemp()) / "squeezenet.onnx")
    >>> onnx.checker.check_model(onnx.load(str(path)))
    >>> [i.name for i in onnx.load(str(path)).graph.input]
    ['image']
    """
    from superopt.exporters import export as _export

    return _export(graph, path, opset=opset, seed=seed)
