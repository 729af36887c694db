"""The Python API at the package top: its doctests run, and importing it stays light."""

from __future__ import annotations

import doctest
import subprocess
import sys

import pytest

import superopt
import superopt.api


def test_api_doctests_pass() -> None:
    pytest.importorskip("onnx")
    result = doctest.testmod(superopt.api, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 15
    assert result.failed == 0


def test_the_six_functions_are_at_the_top() -> None:
    for name in ("load", "optimize", "verify", "generate", "tune", "export"):
        assert getattr(superopt, name) is getattr(superopt.api, name)
        assert getattr(superopt, name).__doc__ and ">>>" in getattr(superopt, name).__doc__


def test_importing_the_api_loads_no_heavy_module() -> None:
    code = "import superopt, sys; print(' '.join(sys.modules))"
    mods = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True).stdout.split())
    assert not {"torch", "z3", "onnx", "numpy"} & mods


def test_tune_takes_the_plan_search() -> None:
    """`tune(plan_search="eqsat")` plans with equality saturation, as `superopt tune
    --plan-search eqsat` does; an unknown search is refused by name."""
    r = superopt.api.tune("squeezenet", budget=4, plan_search="eqsat")
    assert str(r.best.config("plan").choices.get("plan")).startswith("eqsat:")
    with pytest.raises(ValueError, match="unknown plan search 'nope'"):
        superopt.api.tune("squeezenet", budget=4, plan_search="nope")
