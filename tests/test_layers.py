"""The import contract (`superopt.layers`), read from the source with `ast`.

The rule, stated once here and in `superopt.layers`:

- Layer order: an import at module level or under `if TYPE_CHECKING:` (a type named in a
  module's interface is a dependency of it) goes to the importing module's own layer or
  a lower one. Function-level imports may point up (the CLI and the Python API load
  whole subsystems lazily), but:
- No cycle, counting every import: module level, `TYPE_CHECKING` and function level.
  (`KNOWN_LAZY_CYCLES` may list a loop left on purpose; it lists none, any cycle fails,
  and a listed loop that is gone fails too.)
- Every module is in a layer, so a new module has to be placed.

The layer diagram in docs/architecture.md is drawn from the same graph by
tools/layers_diagram.py; it must match what the script draws now.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from superopt import layers
from superopt.layers import KNOWN_LAZY_CYCLES, LAYERS, LAZY, TOP, TYPE_ONLY, Edge

ROOT = Path(__file__).resolve().parent.parent
EDGES = layers.imports(layers.package_root())


def _names(cycle: tuple[str, ...]) -> str:
    return " <-> ".join(m.removeprefix("superopt.") for m in cycle)


def test_the_graph_is_read_from_the_package_and_sees_all_three_kinds_of_import() -> None:
    kinds = {e.kind for e in EDGES}
    assert kinds == {TOP, TYPE_ONLY, LAZY}
    # Spot checks a change of the reader would break: an eager, a type-only and a lazy one.
    assert Edge("superopt.tpu_sim.simulator", "superopt.tpu_sim.pipeline", TOP,
                next(e.line for e in EDGES if e.source == "superopt.tpu_sim.simulator"
                     and e.target == "superopt.tpu_sim.pipeline")) in EDGES
    assert any(e.source == "superopt.tpu_sim.layout_pass"
               and e.target == "superopt.tpu_sim.kernel_costs"
               and e.kind == TYPE_ONLY for e in EDGES)
    assert any(e.source == "superopt.cli" and e.kind == LAZY for e in EDGES)


def test_every_module_is_in_a_layer() -> None:
    unplaced = [m for m in layers.modules(layers.package_root()) if layers.layer_of(m) < 0]
    assert not unplaced, f"modules in no layer of superopt.layers.LAYERS: {unplaced}"


def test_the_simulator_is_layered_as_declared() -> None:
    names = [layer.name for layer in LAYERS]
    order = ["tpu_sim.types", "tpu_sim.cost", "tpu_sim.passes", "tpu_sim.driver",
             "tpu_sim.entry"]
    assert [n for n in names if n.startswith("tpu_sim.")] == order
    where = {m: LAYERS[layers.layer_of(f"superopt.tpu_sim.{m}")].name
             for m in ("config", "hardware", "kernel_time", "op_costs", "tiling", "fusion",
                       "layout_pass", "flags", "kernel_costs", "compiler", "simulator",
                       "simulate", "replay", "calibration")}
    assert where == {
        "config": "tpu_sim.types", "hardware": "tpu_sim.types", "op_costs": "tpu_sim.types",
        "kernel_time": "tpu_sim.cost", "tiling": "tpu_sim.passes",
        "fusion": "tpu_sim.passes", "layout_pass": "tpu_sim.passes",
        "flags": "tpu_sim.passes", "kernel_costs": "tpu_sim.passes",
        "compiler": "tpu_sim.driver", "simulator": "tpu_sim.driver",
        "simulate": "tpu_sim.entry", "replay": "tpu_sim.entry",
        "calibration": "tpu_sim.entry"}


def test_no_module_level_import_points_to_a_higher_layer() -> None:
    bad = [f"{e.source}:{e.line} imports {e.target} ({e.kind}): "
           f"{LAYERS[layers.layer_of(e.source)].name} -> {LAYERS[layers.layer_of(e.target)].name}"
           for e in layers.upward(EDGES)]
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_import_cycle_at_module_level() -> None:
    found = layers.cycles(e for e in EDGES if e.kind != LAZY)
    assert not found, "module-level import cycles: " + "; ".join(map(_names, found))


def test_no_import_cycle_counting_lazy_imports() -> None:
    found = set(layers.cycles(EDGES))
    new = found - KNOWN_LAZY_CYCLES
    gone = KNOWN_LAZY_CYCLES - found
    assert not new, "new import cycles: " + "; ".join(map(_names, sorted(new)))
    assert not gone, ("these cycles are gone: drop them from KNOWN_LAZY_CYCLES: "
                      + "; ".join(map(_names, sorted(gone))))


def test_the_checker_catches_a_cycle_and_an_upward_arrow(tmp_path: Path) -> None:
    # A tiny package shaped like the old knot: config -> simulator only for a type,
    # simulator -> config at module level, and ir (foundation) importing xtat (above).
    pkg = tmp_path / "superopt"
    (pkg / "tpu_sim").mkdir(parents=True)
    (pkg / "ir").mkdir()
    (pkg / "xtat").mkdir()
    for init in (pkg, pkg / "tpu_sim", pkg / "ir", pkg / "xtat"):
        (init / "__init__.py").write_text('"""."""\n')
    (pkg / "tpu_sim" / "config.py").write_text(textwrap.dedent("""\
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from superopt.tpu_sim.simulator import Simulator
        """))
    (pkg / "tpu_sim" / "simulator.py").write_text("from superopt.tpu_sim.config import X\n")
    (pkg / "ir" / "graph.py").write_text("def f():\n    from ..xtat import tuner\n")
    (pkg / "xtat" / "tuner.py").write_text("from superopt.ir import graph\n")
    edges = layers.imports(pkg)
    assert layers.cycles(e for e in edges if e.kind != LAZY) == [
        ("superopt.tpu_sim.config", "superopt.tpu_sim.simulator")]
    assert ("superopt.ir.graph", "superopt.xtat.tuner") in layers.cycles(edges)
    up = {(e.source, e.target) for e in layers.upward(edges)}
    assert ("superopt.tpu_sim.config", "superopt.tpu_sim.simulator") in up
    assert ("superopt.ir.graph", "superopt.xtat.tuner") not in up  # lazy: order not checked


def _diagram_tool():
    path = ROOT / "tools" / "layers_diagram.py"
    spec = importlib.util.spec_from_file_location("layers_diagram", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("layers_diagram", mod)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_layer_diagram_is_what_the_imports_draw() -> None:
    tool = _diagram_tool()
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    committed = tool.between_markers(doc)
    assert committed is not None, "docs/architecture.md lacks the layer diagram's markers"
    assert committed == tool.render(EDGES), (
        "docs/architecture.md's layer diagram is stale: run tools/layers_diagram.py --write")


@pytest.mark.parametrize("moved", ["Simulator", "KernelCosts", "Compiled", "Simulation"])
def test_names_that_moved_keep_their_old_import_paths(moved: str) -> None:
    import importlib

    import superopt.tpu_sim as pkg

    # By module path: the package's `simulate` attribute is the function of that name.
    old = importlib.import_module({"Simulator": "superopt.tpu_sim.simulator",
                                   "KernelCosts": "superopt.tpu_sim.simulator",
                                   "Compiled": "superopt.tpu_sim.compiler",
                                   "Simulation": "superopt.tpu_sim.simulate"}[moved])
    assert getattr(old, moved) is getattr(pkg, moved)
