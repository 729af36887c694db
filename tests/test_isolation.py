"""Dependency direction: `superopt.ir` and the CLI's start-up import neither z3 nor torch."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_ir_imports_neither_z3_nor_torch() -> None:
    mods = _modules_after("import superopt.ir, superopt.ir.modp, superopt.ir.analysis")
    assert "superopt.ir.graph" in mods  # the check itself can see imports
    assert not {m for m in mods if m == "torch" or m.startswith(("torch.", "z3"))}


def test_cli_parser_is_light() -> None:
    mods = _modules_after("from superopt.cli import build_parser; build_parser()")
    heavy = {"torch", "z3", "onnx", "transformers", "numpy"}
    assert not heavy & mods
