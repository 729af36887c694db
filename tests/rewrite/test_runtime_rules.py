"""The `runtime` library's rules do what they are for: a graph rewritten by them runs in
onnxruntime without the fused kernel they dodge, and computes the same values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from superopt.ir import GraphBuilder, interpret, random_feeds
from superopt.rewrite import LIBRARIES, Matcher, apply_sites, library_rules, load_rules

ort = pytest.importorskip("onnxruntime")


def _post_norm_block(batch: int = 2, tokens: int = 5, width: int = 8):
    """BERT's residual: the sublayer's output added to its input, then a layer norm."""
    b = GraphBuilder("post_norm")
    x = b.input("x", (batch, tokens, width))
    h = b.matmul(x, b.weight("w", (width, width)))
    s = b.ewadd(x, h)
    out = b.layer_norm(s, b.weight("g", (width,), init="positive"), b.weight("c", (width,)),
                       axis=-1, eps=1e-12)
    return b.build(out)


def _ops_after_optimization(graph, tmp_path: Path, tag: str) -> list[str]:
    import onnx

    from superopt.exporters.onnx import to_onnx

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.optimized_model_filepath = str(tmp_path / f"{tag}.onnx")
    opts.log_severity_level = 3
    ort.InferenceSession(to_onnx(graph, seed=0).SerializeToString(), opts,
                         providers=["CPUExecutionProvider"])
    return [n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node]


def test_runtime_library_is_shipped_and_loads_by_name() -> None:
    assert "runtime" in LIBRARIES
    assert [r.name for r in load_rules("runtime")[0]] == [r.name for r in
                                                         library_rules("runtime")]
    assert all(r.status.state == "proved" for r in library_rules("runtime", verified=True))


def test_flattened_norm_is_not_fused_into_skip_layer_norm(tmp_path: Path) -> None:
    g = _post_norm_block()
    before = _ops_after_optimization(g, tmp_path, "before")
    if "SkipLayerNormalization" not in before:
        pytest.skip("this onnxruntime does not fuse the residual add into the norm")
    m = Matcher(library_rules("runtime"))
    sites = [s for s in m.match(g).sites if s.rule == "flatten_layer_norm3"]
    assert len(sites) == 1
    new = apply_sites(g, sites, m).graph
    after = _ops_after_optimization(new, tmp_path, "after")
    assert "SkipLayerNormalization" not in after
    assert "LayerNormalization" in after
    feeds = random_feeds(g, seed=3)
    for a, b in zip(interpret(g, feeds), interpret(new, feeds), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9)


def test_unknown_library_name_is_one_clear_error() -> None:
    from superopt.ir.errors import IRError

    with pytest.raises(IRError, match="no shipped rule library 'bogus'"):
        library_rules("bogus")
