"""Loading a benchmark script (benchmarks/ is not a package) as a module, for its tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/NAME.py, executed as the module NAME_bench."""
    spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    # Registered first: a dataclass looks its module up by name as it is made.
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
