"""`reform_kernels` equals `form_kernels` after random flips of fusion decisions, chained
(each re-formed partition is the base of the next), on zoo models with duplication,
MXU-op conflicts and repairs."""

from __future__ import annotations

import random

import pytest

from superopt import zoo
from superopt.tpu_sim import Simulator, form_kernels
from superopt.tpu_sim.incremental import reform_kernels


@pytest.mark.parametrize("model", ["resnet18", "bert-small", "inception_v3", "nasnet_a"])
def test_reform_equals_form_on_random_flips(model: str) -> None:
    sim = Simulator()
    laid = sim.lay_out(zoo.build(model))
    default = sim.fusion_default(laid)
    args = (laid.bitcasts, laid.consumers)
    prev_f = dict(default)
    prev_p = form_kernels(laid.graph, laid.laid_layouts, prev_f, *args)
    rng = random.Random(model)
    nodes = sorted(prev_f)
    for _ in range(60):
        f = dict(prev_f)
        flips = rng.sample(nodes, rng.randint(1, 8))
        for k in flips:
            f[k] = not f[k]
        full = form_kernels(laid.graph, laid.laid_layouts, f, *args)
        inc = reform_kernels(laid.graph, prev_p, prev_f, f, flips, *args)
        assert inc.kernels == full.kernels
        assert inc.kernel_of == full.kernel_of
        assert inc.repaired == full.repaired
        prev_f, prev_p = f, inc


def test_unchanged_decisions_return_the_same_partition() -> None:
    sim = Simulator()
    laid = sim.lay_out(zoo.build("squeezenet"))
    f = sim.fusion_default(laid)
    p = form_kernels(laid.graph, laid.laid_layouts, f, laid.bitcasts, laid.consumers)
    assert reform_kernels(laid.graph, p, f, f, [], laid.bitcasts, laid.consumers) is p
