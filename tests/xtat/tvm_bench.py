"""The TVM benchmark script (`benchmarks/tvm_compare.py`) loaded as a module, for the
tests of its report and re-timing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any


def load_bench() -> Any:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "tvm_compare.py"
    spec = importlib.util.spec_from_file_location("tvm_compare_bench", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod
