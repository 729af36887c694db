"""The `groups` library's channel padding does what it is for: it matches a depthwise conv
only where the channels are not a multiple of 4, and the padded graph runs in onnxruntime
in the blocked layout and computes the same values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from superopt.ir import GraphBuilder, interpret, random_feeds
from superopt.rewrite import Matcher, apply_sites, library_rules

ort = pytest.importorskip("onnxruntime")
PAD = [r for r in library_rules("groups") if r.name == "pad_depthwise4"]


def _separable(channels: int, batch: int = 1, size: int = 9):
    """NASNet-A's separable conv: relu, depthwise 5x5, pointwise 1x1."""
    b = GraphBuilder("separable")
    x = b.input("x", (batch, channels, size, size))
    h = b.conv2d(b.relu(x), b.weight("dw", (channels, 1, 5, 5)), padding="same",
                 groups=channels)
    return b.build(b.conv2d(h, b.weight("pw", (channels, channels, 1, 1))))


def _session(graph, tmp_path: Path, tag: str):
    import onnx

    from superopt.exporters.onnx import to_onnx

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.optimized_model_filepath = str(tmp_path / f"{tag}.onnx")
    opts.log_severity_level = 3
    model = to_onnx(graph, seed=0)
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess, onnx.load(opts.optimized_model_filepath)


@pytest.mark.parametrize(("channels", "sites"), [(22, 1), (11, 1), (24, 0), (44, 0), (1, 0)])
def test_only_depthwise_convs_off_a_multiple_of_four_are_padded(channels: int,
                                                                sites: int) -> None:
    g = _separable(channels)
    found = Matcher(PAD).match(g).sites
    assert len(found) == sites  # the pointwise conv (one group) never matches
    if sites:
        new = apply_sites(g, found, Matcher(PAD)).graph
        conv = next(n for n in new.nodes if n.op == "conv2d" and n.attr("groups") > 1)
        assert conv.attr("groups") == channels + 4 - channels % 4
        feeds = random_feeds(g, seed=1)
        for a, b in zip(interpret(g, feeds), interpret(new, feeds), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9)


def test_padded_depthwise_conv_runs_blocked_in_onnxruntime_with_equal_values(
        tmp_path: Path) -> None:
    g = _separable(22)
    new = apply_sites(g, Matcher(PAD).match(g).sites, Matcher(PAD)).graph
    before, opt_before = _session(g, tmp_path, "before")
    after, opt_after = _session(new, tmp_path, "after")

    def blocked_depthwise(model) -> int:
        # onnxruntime's blocked convs live in its nchwc domain; a depthwise one keeps its
        # group count as an attribute.
        return sum(1 for n in model.graph.node if n.domain == "com.microsoft.nchwc"
                   and n.op_type == "Conv"
                   and any(a.name == "group" and a.i > 1 for a in n.attribute))

    if blocked_depthwise(opt_before):
        pytest.skip("this onnxruntime blocks a depthwise conv on 22 channels as it is")
    if not any(n.domain == "com.microsoft.nchwc" for n in opt_after.graph.node):
        pytest.skip("this onnxruntime blocks no conv on this processor")
    assert blocked_depthwise(opt_after) == 1
    feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)
             for i in before.get_inputs()}
    np.testing.assert_allclose(after.run(None, feeds)[0], before.run(None, feeds)[0],
                               rtol=1e-4, atol=1e-4)
