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


def _masked_window_attention(windows: int = 4, heads: int = 2, tokens: int = 9, dim: int = 4):
    """Swin's shifted-window attention: logits of token pairs from different regions get
    -100 added, so softmax gives them subnormal probabilities in float32."""
    b = GraphBuilder("shifted_windows")
    q = b.input("q", (windows, heads, tokens, dim))
    k = b.input("k", (windows, heads, tokens, dim))
    v = b.input("v", (windows, heads, tokens, dim))
    region = np.arange(tokens) * 2 // tokens  # two regions per window
    mask = np.where(region[:, None] == region[None, :], 0.0, -100.0)
    mask = np.broadcast_to(mask, (windows, 1, tokens, tokens)).astype(np.float32)
    logits = b.ewadd(b.matmul(q, b.transpose(k, perm=(0, 1, 3, 2))),
                     b.weight("mask", mask.shape, data=mask))
    return b.build(b.matmul(b.softmax(logits, axis=-1), v))


def test_softmax_product_is_scaled_by_a_row_onnxruntime_does_not_fold(tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    from superopt.exporters.onnx import to_onnx
    from superopt.ir.types import ORT_DTYPES

    g = _masked_window_attention()
    m = Matcher(library_rules("runtime"))
    sites = [s for s in m.match(g).sites if s.rule == "scale_softmax_product"]
    assert len(sites) == 1
    new = apply_sites(g, sites, m).graph
    feeds = random_feeds(g, seed=5)
    for a, b in zip(interpret(g, feeds), interpret(new, feeds), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=0)
    # In onnxruntime (float32) the two compute the same values: scaling by powers of two
    # only moves exponents.
    outs = []
    for tag, graph in (("before", g), ("after", new)):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.optimized_model_filepath = str(tmp_path / f"{tag}.onnx")
        opts.log_severity_level = 3
        sess = ort.InferenceSession(to_onnx(graph, seed=0).SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        outs.append(sess.run(None, {i.name: np.asarray(feeds[i.name], ORT_DTYPES[i.type])
                                    for i in sess.get_inputs()})[0])
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-30)
    # The up-scale survives onnxruntime's optimizer as a Mul by a row of 2^32 ahead of the
    # product (a scalar factor would be folded into the MatMul, which then reads the
    # subnormal probabilities again).
    opt = onnx.load(tmp_path / "after.onnx").graph
    consts = {t.name: numpy_helper.to_array(t) for t in opt.initializer}
    feeds_matmul = {i for n in opt.node if "MatMul" in n.op_type for i in n.input}
    rows = [n for n in opt.node if n.op_type == "Mul" and n.output[0] in feeds_matmul
            and any(i in consts and consts[i].size > 1 for i in n.input)]
    assert len(rows) == 1
    row = next(consts[i] for i in rows[0].input if i in consts)
    assert row.shape[-1] == 9 and np.all(row == 2.0 ** 32)


def test_half_precision_probabilities_are_not_scaled() -> None:
    # 2^32 overflows float16 (largest 65504): the row of 2^32 is float32, so the scaled
    # product does not type-check in half precision and the rule has no site there.
    for dtype, sites in (("f32", 1), ("f16", 0), ("bf16", 0)):
        b = GraphBuilder("softmax_product")
        x, v = b.input("x", (2, 5, 5), dtype), b.input("v", (2, 5, 3), dtype)
        g = b.build(b.matmul(b.softmax(x, axis=-1), v))
        found = Matcher(library_rules("runtime")).match(g).sites
        assert sum(s.rule == "scale_softmax_product" for s in found) == sites, dtype


def test_unknown_library_name_is_one_clear_error() -> None:
    from superopt.ir.errors import IRError

    with pytest.raises(IRError, match="no shipped rule library 'bogus'"):
        library_rules("bogus")


def _fire_modules(pool: bool):
    """Two of SqueezeNet's fire modules (16-channel squeeze, two 32-channel expansions
    side by side, each conv with its bias and relu), the second's squeeze reading the
    first's concat directly or through a max pool."""
    b = GraphBuilder("fires")
    x = b.input("x", (1, 32, 14, 14))

    def conv(v, name: str, cin: int, cout: int, k: int):
        y = b.op("conv2d", v, b.weight(f"w{name}", (cout, cin, k, k)), padding="same")
        return b.op("relu", b.op("ewadd", y, b.weight(f"b{name}", (cout, 1, 1))))

    def fire(v, name: str, cin: int):
        s = conv(v, f"{name}s", cin, 16, 1)
        return b.op("concat", conv(s, f"{name}e1", 16, 32, 1),
                    conv(s, f"{name}e3", 16, 32, 3), axis=1)

    h = fire(x, "f1", 32)
    if pool:
        h = b.op("pool2d_max", h, kernel=(3, 3), stride=(2, 2))
    return b.build(conv(fire(h, "f2", 64), "out", 64, 16, 1))


@pytest.mark.parametrize("pool", [False, True], ids=["direct", "through_a_pool"])
def test_conv_over_a_concat_runs_without_the_copy(tmp_path: Path, pool: bool) -> None:
    g = _fire_modules(pool)
    before = _ops_after_optimization(g, tmp_path, "before")
    assert before.count("Concat") == 2
    m = Matcher(library_rules("runtime"))
    new = g
    for rule in ("maxpool_through_concat", "split_conv_concat_bias"):
        sites = m.match(new, [rule]).sites
        # Both concats are read by a conv (the first through the pool, once it has moved)
        assert len(sites) == ((1 if pool else 0) if rule == "maxpool_through_concat" else 2)
        if sites:
            new = apply_sites(new, sites, m).graph
    after = _ops_after_optimization(new, tmp_path, "after")
    # No copy left, and no add of its own: the bias rides on the first conv and the sum
    # (with the relu after it) on the second.
    assert "Concat" not in after
    assert "Add" not in after and "Sum" not in after
    feeds = random_feeds(g, seed=4)
    for a, b in zip(interpret(g, feeds), interpret(new, feeds), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(a).max()))


# Near misses of the concat rules, each false: the weight's halves swapped, the bias added
# to both convs, a relu fused into each conv (a relu of the sum is not the sum of relus),
# one half pooled by averaging.
FALSE_CONCAT_RULES = [
    "swapped_split: (conv2d ?s ?p ?d 1 none (concat 1 ?x ?y) ?w) => (ewadd (conv2d ?s ?p ?d 1 "
    "none ?x (split.1 1 {[dim(?y,1), dim(?x,1)]} ?w)) (conv2d ?s ?p ?d 1 none ?y (split.0 1 "
    "{[dim(?y,1), dim(?x,1)]} ?w)))",
    "bias_twice: (ewadd (conv2d ?s ?p ?d 1 none (concat 1 ?x ?y) ?w) ?b) => (ewadd (ewadd "
    "(conv2d ?s ?p ?d 1 none ?x (split.0 1 {[dim(?x,1), dim(?y,1)]} ?w)) ?b) (ewadd (conv2d "
    "?s ?p ?d 1 none ?y (split.1 1 {[dim(?x,1), dim(?y,1)]} ?w)) ?b))",
    "relu_split: (conv2d ?s ?p ?d 1 relu (concat 1 ?x ?y) ?w) => (ewadd (conv2d ?s ?p ?d 1 "
    "relu ?x (split.0 1 {[dim(?x,1), dim(?y,1)]} ?w)) (conv2d ?s ?p ?d 1 relu ?y (split.1 1 "
    "{[dim(?x,1), dim(?y,1)]} ?w)))",
    "avg_through: (pool2d_max ?k ?s ?p ?a (concat 1 ?x ?y)) => (concat 1 (pool2d_avg ?k ?s ?p "
    "?a true ?x) (pool2d_max ?k ?s ?p ?a ?y))",
]


def test_the_concat_rules_are_proved_and_their_near_misses_refuted() -> None:
    from superopt.substitutions import parse_rule
    from superopt.verifier.axioms import builtin_axioms
    from superopt.verifier.prover import PROVED, REFUTED, VerifyOptions, verify_rules

    true = [r for r in library_rules("runtime") if "concat" in r.name]
    assert len(true) == 3
    false = [parse_rule(t) for t in FALSE_CONCAT_RULES]
    got = verify_rules([*true, *false], builtin_axioms(), VerifyOptions(timeout_s=10))
    assert [g.state for g in got] == [PROVED] * 3 + [REFUTED] * 4, [g.reason for g in got]
