"""HuggingFace BERT captured with torch.export: same outputs and parameters as BertModel."""

from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("transformers")
import torch

from superopt.importers import HF_FAMILIES
from superopt.importers.errors import ModelImportError
from superopt.importers.hf import BERT_SIZES, bert_graph, bert_inputs, bert_model
from superopt.ir import Graph, interpret

# bert-base-uncased as published (Devlin et al. 2019): about 110M parameters; the exact
# BertModel count with its pooler is 109,482,240.
PUBLISHED_BASE_PARAMS = 109.5e6


@pytest.fixture(scope="module")
def tiny() -> Graph:
    return bert_graph("tiny", batch=1, seq=16)


def torch_outputs(size: str, ids: torch.Tensor, pooler: bool = True) -> list[np.ndarray]:
    """BertModel's outputs in float64, from a model with the same seed as the import."""
    model = copy.deepcopy(bert_model(size, pooler=pooler)).double()
    with torch.no_grad():
        out = model(input_ids=ids)
    outs = [out.last_hidden_state] + ([out.pooler_output] if pooler else [])
    return [o.numpy() for o in outs]


def param_count(size: str) -> int:
    """Parameters of the published-config BertModel, counted without allocating weights."""
    from transformers import BertConfig, BertModel

    s = BERT_SIZES[size]
    config = BertConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=s.layers,
                        num_attention_heads=s.heads, intermediate_size=s.intermediate,
                        max_position_embeddings=s.max_positions)
    with torch.device("meta"):
        model = BertModel(config)
    return sum(p.numel() for p in model.parameters())


def graph_param_count(g: Graph) -> int:
    """Elements of the weights that hold model parameters (not folded constants)."""
    return sum(a.size for name, a in g.weights.items() if not name.startswith("const."))


def test_bert_tiny_matches_bertmodel(tiny: Graph) -> None:
    ids = bert_inputs("tiny", 1, 16, seed=7)  # other ids than the capture's
    got = interpret(tiny, {"input_ids": ids.numpy()})
    want = torch_outputs("tiny", ids)
    assert [g.shape for g in got] == [(1, 16, 128), (1, 128)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_bert_tiny_graph_shape(tiny: Graph) -> None:
    (ids,) = tiny.inputs
    assert ids.attr("name") == "input_ids"
    assert ids.type.dtype.value == "i64" and ids.type.shape == (1, 16)
    assert ids.attr("high") == 30522
    hist = tiny.op_histogram()
    # 2 layers x (q, k, v, out, ffn in, ffn out) + pooler. Without an input mask the
    # additive mask is all zeros and is dropped, so eager attention (matmul, scale,
    # softmax, matmul) is one attention op per layer.
    assert hist["matmul"] == 2 * 6 + 1 and hist["attention"] == 2 and "softmax" not in hist
    assert hist["gelu"] == 2 and hist["layer_norm"] == 1 + 2 * 2
    assert hist["embedding"] == 3
    model = bert_model("tiny")
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(tiny.weights[name], p.detach().numpy())
    assert graph_param_count(tiny) == param_count("tiny")


def test_bert_tiny_batched_without_pooler() -> None:
    g = bert_graph("tiny", batch=2, seq=8, pooler=False)
    ids = bert_inputs("tiny", 2, 8, seed=3)
    (got,) = interpret(g, {"input_ids": ids.numpy()})
    (want,) = torch_outputs("tiny", ids, pooler=False)
    assert got.shape == (2, 8, 128)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_bert_base_parameter_count() -> None:
    g = bert_graph("base", batch=1, seq=128)
    reference = param_count("base")
    assert graph_param_count(g) == reference
    assert abs(reference - PUBLISHED_BASE_PARAMS) < 0.1e6
    assert [g.type_of(v).shape for v in g.outputs] == [(1, 128, 768), (1, 768)]
    hist = g.op_histogram()
    assert hist["attention"] == 12 and hist["gelu"] == 12 and hist["layer_norm"] == 25
    assert hist["matmul"] == 12 * 6 + 1


@pytest.mark.slow
def test_bert_base_matches_bertmodel() -> None:
    g = bert_graph("base", batch=1, seq=32)
    ids = bert_inputs("base", 1, 32, seed=11)
    got = interpret(g, {"input_ids": ids.numpy()})
    for a, b in zip(got, torch_outputs("base", ids), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_bert_small_matches_bertmodel() -> None:
    g = bert_graph("small", batch=2, seq=64)
    ids = bert_inputs("small", 2, 64, seed=12)
    got = interpret(g, {"input_ids": ids.numpy()})
    for a, b in zip(got, torch_outputs("small", ids), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert graph_param_count(g) == param_count("small")


def test_bad_sizes_are_clear_errors() -> None:
    with pytest.raises(ModelImportError, match="unknown BERT size 'huge'"):
        bert_graph("huge")
    with pytest.raises(ModelImportError, match="seq <= 512"):
        bert_graph("tiny", seq=513)


# ---- small-config families (hf:NAME) ----------------------------------------------------


def family_matches_torch(name: str) -> Graph:
    """Import `hf:NAME` and check it against the module in float64 on other inputs."""
    from superopt.importers.hf import hf_graph, hf_inputs, hf_module

    g = hf_graph(name)
    x = hf_inputs(name, 1, seed=9)
    model = copy.deepcopy(hf_module(name)).double()
    with torch.no_grad():
        out = model(*[t.double() if t.is_floating_point() else t for t in x])
    want = out if isinstance(out, tuple) else (out,)
    got = interpret(g, {g.inputs[0].attr("name"): x[0].numpy()})
    assert len(got) == len(want)
    for a, w in zip(got, want, strict=True):
        # The capture folds rotary tables and masks in float32: errors near 1e-7 relative.
        np.testing.assert_allclose(a, w.numpy(), rtol=1e-5, atol=1e-5 * float(w.abs().max()))
    return g


@pytest.mark.slow
@pytest.mark.parametrize("name", HF_FAMILIES)
def test_every_family_matches_torch(name: str) -> None:
    g = family_matches_torch(name)
    assert len(g) > 20


def test_family_names_are_listed_without_transformers() -> None:
    from superopt.importers import HF_FAMILIES
    from superopt.importers.hf import FAMILIES

    assert tuple(FAMILIES) == HF_FAMILIES and len(FAMILIES) >= 14


def test_llama_family_grouped_query_attention_and_rms_norm() -> None:
    g = family_matches_torch("llama")
    hist = g.op_histogram()
    # 2 layers: 2 norms each and the final one; transformers' repeat_kv is undone, so the
    # one attention op per layer reads 2 key/value heads for 4 query heads, causal.
    assert hist["rms_norm"] == 5 and hist["attention"] == 2 and hist["silu"] == 2
    assert "expand" not in hist and "pow" not in hist and "rsqrt" not in hist
    for n in g.nodes:
        if n.op == "attention":
            assert n.attr("causal") is True
            assert g.type_of(n.inputs[0]).shape[1] == 4 and g.type_of(n.inputs[1]).shape[1] == 2


@pytest.mark.parametrize("name,special", [("llama-classifier", 0), ("clip-text", 127)])
def test_families_that_pick_a_row_by_argmax(name: str, special: int) -> None:
    # The classifier scores the last token before right padding (0); CLIP pools the row of
    # the end token (127). Both positions are found by an argmax at run time, so ids with
    # the special token elsewhere move the picked row.
    from superopt.importers.hf import hf_graph, hf_module

    g = hf_graph(name, batch=3)
    assert g.op_histogram()["argmax"] == 1
    ids = torch.randint(2, 120, (3, 8), generator=torch.Generator().manual_seed(4))
    if special == 0:  # right padding after 3 and 6 tokens; none on the last sequence
        ids[0, 3:], ids[1, 6:] = 0, 0
    else:  # end tokens at 2 and 5; none on the last sequence (the argmax is then 0)
        ids[0, 2], ids[1, 5] = special, special
    model = copy.deepcopy(hf_module(name)).double()
    with torch.no_grad():
        out = model(ids)
    want = out if isinstance(out, tuple) else (out,)
    got = interpret(g, {g.inputs[0].attr("name"): ids.numpy()})
    for a, w in zip(got, want, strict=True):
        np.testing.assert_allclose(a, w.numpy(), rtol=1e-5, atol=1e-5 * float(w.abs().max()))


@pytest.mark.parametrize("experts", ["grouped_mm", "batched_mm"])
def test_mixture_of_experts_routes_tokens_at_run_time(experts: str) -> None:
    # The router's top-2 is computed in the graph: ids other than the capture's pick other
    # experts (and, with grouped_mm, other sort orders and counts per expert), and the
    # values still match the model's. grouped_mm is what torch.export gets by default;
    # batched_mm is the form transformers' ExecuTorch exporter picks.
    from superopt.importers.hf import hf_module
    from superopt.importers.torch import import_exported

    model = hf_module("mixtral")
    model.inner.set_experts_implementation(experts)
    ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(4))
    g = import_exported(torch.export.export(model, (ids,)), name="mixtral")
    hist = g.op_histogram()
    assert hist["topk"] == (6 if experts == "grouped_mm" else 2), hist
    wide = copy.deepcopy(model).double()
    wide.inner.set_experts_implementation("batched_mm")  # grouped_mm takes no float64
    routes = set()
    for seed in (5, 6):
        ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            want = wide(ids)
            router = wide.inner.layers[0].mlp.gate
            h = wide.inner.embed_tokens(ids).reshape(-1, 32)
            routes.add(tuple(torch.topk(router(wide.inner.layers[0].input_layernorm(h))[0],
                                        2, -1).indices.reshape(-1).tolist()))
        got = interpret(g, {g.inputs[0].attr("name"): ids.numpy()})[0]
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5,
                                   atol=1e-5 * float(want.abs().max()))
    assert len(routes) == 2  # the two inputs are routed differently


@pytest.mark.parametrize("name", ["deepseek-v3", "llama4"])
def test_latent_attention_and_complex_rotary_families_route_at_run_time(name: str) -> None:
    # DeepSeek-V3 (latent attention, grouped sigmoid routing) and Llama-4 (complex rotary
    # products, a router's top score scattered among -inf): ids other than the capture's
    # route otherwise, and the values follow the model's in float64.
    from superopt.importers.hf import hf_module
    from superopt.importers.torch import import_exported

    model = hf_module(name)
    ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(4))
    g = import_exported(torch.export.export(model, (ids,)), name=name)
    assert g.op_histogram()["topk"] >= 2
    wide = copy.deepcopy(model).double()
    for seed in (5, 6):
        ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            want = wide(ids)
        got = interpret(g, {g.inputs[0].attr("name"): ids.numpy()})[0]
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5,
                                   atol=1e-5 * float(want.abs().max()))


def test_vision_language_model_places_image_features_at_run_time() -> None:
    # LLaVA: a CLIP vision tower's patch features, projected, replace the embeddings of
    # the image tokens (masked_scatter); transformers checks the counts match (a runtime
    # assertion on Python numbers, dropped on import). Other ids put the image elsewhere.
    import transformers as tf

    from superopt.importers.torch import import_exported

    torch.manual_seed(0)
    small = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
             "intermediate_size": 64}
    config = tf.LlavaConfig(vision_config=tf.CLIPVisionConfig(image_size=32, patch_size=8,
                                                              **small),
                            text_config=tf.LlamaConfig(vocab_size=128, num_key_value_heads=2,
                                                       **small),
                            image_token_index=100, vision_feature_layer=-1)
    model = tf.LlavaModel(config).eval()

    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, ids: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=ids, pixel_values=pixels, use_cache=False)[0]

    def inputs(start: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 99, (1, 24), generator=gen)
        ids[0, start:start + 16] = 100  # (32 / 8)^2 patches
        return ids, torch.randn(1, 3, 32, 32, generator=gen)

    g = import_exported(torch.export.export(Plain(), inputs(2, 0)), name="llava")
    assert g.op_histogram()["where"] >= 1
    wide = copy.deepcopy(Plain()).double()
    for start, seed in ((0, 1), (7, 2)):
        ids, pixels = inputs(start, seed)
        with torch.no_grad():
            want = wide(ids, pixels.double()).numpy()
        got = interpret(g, {"ids": ids.numpy(), "pixels": pixels.numpy()})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_swin_family_gathers_relative_position_bias() -> None:
    g = family_matches_torch("swin")
    hist = g.op_histogram()
    assert hist["gather"] == 2  # one relative-position-bias lookup per block
    assert hist["softmax"] == 2  # attention with a bias is decomposed


def test_hf_name_loads_a_family_and_bad_names_are_clear() -> None:
    from superopt.importers import load_model

    g = load_model("hf:resnet", batch=2)
    assert g.inputs[0].type.shape == (2, 3, 32, 32)
    with pytest.raises(ModelImportError, match="unknown HuggingFace model 'hf:nope'.*hf:llama"):
        load_model("hf:nope")


def test_hf_onnx_writes_the_family_for_onnxruntime(tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    from superopt.importers.hf import hf_inputs, hf_module, hf_onnx

    path = hf_onnx("convnext", tmp_path / "convnext.onnx")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["x"]
    (x,) = hf_inputs("convnext", 1, seed=2)
    got = sess.run(None, {"x": x.numpy()})
    with torch.no_grad():
        want = hf_module("convnext")(x)
    for a, w in zip(got, want, strict=True):
        np.testing.assert_allclose(a, w.numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(ModelImportError, match="unknown HuggingFace family 'nope'"):
        hf_onnx("nope", tmp_path / "nope.onnx")
    # torch.onnx.export's default exporter: the same values, the weights beside the file.
    path = hf_onnx("convnext", tmp_path / "dyn.onnx", dynamo=True)
    assert (tmp_path / "dyn.onnx.data").exists()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for a, w in zip(sess.run(None, {"x": x.numpy()}), want, strict=True):
        np.testing.assert_allclose(a, w.numpy(), rtol=1e-4, atol=1e-4)


def test_published_families_names_those_without_a_published_size() -> None:
    from superopt.importers.hf import PUBLISHED, published_families

    assert published_families("published") == list(PUBLISHED)
    assert published_families("bert,gpt2") == ["bert", "gpt2"]
    with pytest.raises(ValueError, match="no published size for 'nosuch'"):
        published_families("bert,nosuch")
    with pytest.raises(ValueError, match="no family named"):
        published_families(",")


def test_a_published_onnx_file_is_made_once_and_never_left_half_written(monkeypatch,
                                                                        tmp_path) -> None:
    from superopt.importers import hf

    made: list[tuple[str, bool]] = []
    files = tmp_path / "files"

    def export(name, path, batch=1, published=False, dynamo=False):
        assert published and path.parent != files  # written aside, then moved in
        made.append((name, dynamo))
        path.write_bytes(b"onnx")
        if dynamo:  # the default exporter's weights, beside the file
            path.with_name(path.name + ".data").write_bytes(b"weights")
        return path

    monkeypatch.setattr(hf, "hf_onnx", export)
    first = hf.published_onnx("bert", files, batch=16)
    again = hf.published_onnx("bert", files, batch=16)
    assert first == again == files / "bert_b16.onnx" and first.exists()
    dyn = hf.published_onnx("bert", files, batch=16, dynamo=True)
    assert dyn == files / "bert_b16_dynamo.onnx" and dyn.read_bytes() == b"onnx"
    assert (files / "bert_b16_dynamo.onnx.data").read_bytes() == b"weights"
    assert made == [("bert", False), ("bert", True)]  # the second call reused the file
    assert sorted(p.name for p in files.iterdir()) == [
        "bert_b16.onnx", "bert_b16_dynamo.onnx", "bert_b16_dynamo.onnx.data"]

    def dies(name, path, batch=1, published=False, dynamo=False):
        path.write_bytes(b"half")
        raise RuntimeError("killed while exporting")

    monkeypatch.setattr(hf, "hf_onnx", dies)
    with pytest.raises(RuntimeError):
        hf.published_onnx("gpt2", files)
    assert not (files / "gpt2_b1.onnx").exists()  # no file that looks whole
    assert len(list(files.iterdir())) == 3  # nor any half file or folder left behind
