"""Every zoo model runs on the torch backend (float32, CPU) with the values of the float64
reference interpreter, within rtol 1e-4 of each output's scale."""

from __future__ import annotations

import numpy as np
import pytest

from superopt import zoo
from superopt.backends import torch as tb
from superopt.ir import interpret


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_model_matches_reference_on_torch(name: str) -> None:
    graph = zoo.build(name, batch=1)
    want = interpret(graph)
    got = tb.run(graph, dtype="float32")
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        # The comparison is only meaningful if the outputs carry signal.
        assert np.isfinite(w).all() and w.std() > 0
        result = tb.compare_arrays(i, g, w, rtol=1e-4, atol=0.0)
        assert result.ok, f"{name} output {i}: rel err {result.rel_err:.2e} {result.problem}"
