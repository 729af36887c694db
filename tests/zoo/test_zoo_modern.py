"""Transformer-era and mobile zoo models: build at batch 1 and 16, lint, match published
parameter counts and multiply-adds, and (as tiny configurations) run on the reference
interpreter with the values of the transformers implementations given the same weights.

Expected figures are the published ones (cited next to each) or hand counts written out
below; transformers' own classes, instantiated on the meta device from the published
configurations, give a second count that does not go through the zoo's code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from superopt import zoo
from superopt.ir.analysis import stats
from superopt.ir.graph import Graph
from superopt.ir.interpret import interpret, random_feeds
from superopt.zoo.gpt2 import gpt2
from superopt.zoo.llama import LLAMA2_7B, LLAMA32_1B, LlamaConfig, llama
from superopt.zoo.t5 import relative_buckets, t5_encoder
from superopt.zoo.tiny import TINY, TINY_GPT2, TINY_LLAMA, TINY_T5, tiny

# Output shape per model at batch 1 (leading batch dim left out).
MODERN = {
    "llama3_2_1b": [(128, 128256)],
    "gpt2": [(128, 50257)],
    "t5_small_encoder": [(128, 512)],
    "vit_b16": [(1000,)],
    "mobilenet_v2": [(1000,)],
    "efficientnet_b0": [(1000,)],
    "llama2_7b": [(128, 32000)],
}

# Learned parameters, as published:
# - llama3_2_1b: 1,235,814,400 (meta-llama/Llama-3.2-1B on the HuggingFace hub, "1.24B";
#   the exact figure is its safetensors parameter count, embedding tied to the LM head).
# - llama2_7b: 6,738,415,616 (meta-llama/Llama-2-7b-hf safetensors count; paper: 7B).
# - gpt2: 124,439,808 (openai-community/gpt2 safetensors count, the "124M" model).
# - t5_small_encoder: 35,330,816 (T5EncoderModel of google-t5/t5-small; the full model's
#   60,506,624 is the paper's 60M, and the decoder holds the other 25,175,808).
# - vit_b16: 86,567,656, mobilenet_v2: 3,504,872, efficientnet_b0: 5,288,548
#   (torchvision's weights tables, `num_params`).
PUBLISHED_PARAMS = {
    "llama3_2_1b": 1_235_814_400,
    "llama2_7b": 6_738_415_616,
    "gpt2": 124_439_808,
    "t5_small_encoder": 35_330_816,
    "vit_b16": 86_567_656,
    "mobilenet_v2": 3_504_872,
    "efficientnet_b0": 5_288_548,
}

# Multiply-adds at 224x224, batch 1: torchvision's weights tables (the column labelled
# GFLOPS counts multiply-adds): vit_b_16 17.56 G, mobilenet_v2 0.30 G, efficientnet_b0
# 0.39 G; the papers give 300M (MobileNetV2, Table 4) and 0.39B (EfficientNet, Table 2).
PUBLISHED_MACS = {"vit_b16": 17.56e9, "mobilenet_v2": 0.30e9, "efficientnet_b0": 0.39e9}
MACS_TOLERANCE = 0.02  # the published figures carry 2-4 significant digits


def learned_params(graph: Graph) -> int:
    """stats().params less batch-norm statistics and scalar constants with data."""
    bn = sum(graph.type_of(n.inputs[i]).size
             for n in graph.nodes if n.op == "batch_norm" for i in (3, 4))
    return stats(graph).params - bn - sum(a.size for a in graph.weights.values())


@pytest.fixture(scope="module")
def graphs() -> dict[str, Graph]:
    return {name: zoo.build(name) for name in MODERN}


def test_registry() -> None:
    assert set(MODERN) <= set(zoo.names(scale=True))
    assert "llama2_7b" not in zoo.names() and zoo.get("llama2_7b").scale
    assert set(MODERN) - {"llama2_7b"} <= set(zoo.names())
    assert zoo.get("llama") is zoo.MODELS["llama3_2_1b"]
    assert zoo.get("ViT-B-16") is zoo.MODELS["vit_b16"]
    assert zoo.get("gpt2-small") is zoo.MODELS["gpt2"]


@pytest.mark.parametrize("name", MODERN)
@pytest.mark.parametrize("batch", [1, 16])
def test_builds_and_lints_at_batch_1_and_16(name: str, batch: int,
                                            graphs: dict[str, Graph]) -> None:
    g = graphs[name] if batch == 1 else zoo.build(name, batch=batch)
    g.lint()
    assert [g.type_of(v).shape for v in g.outputs] == [(batch, *s) for s in MODERN[name]]
    spec = zoo.MODELS[name]
    assert [(n.attr("name"), n.type.shape, n.type.dtype.value) for n in g.inputs] == [
        (i.name, (batch, *i.shape), i.dtype) for i in spec.inputs]
    # Weights are shapes only; the only data are scalar constants (bounds, scales).
    assert all(a.ndim == 0 for a in g.weights.values())
    if batch == 16:
        one = graphs[name]
        assert learned_params(g) == learned_params(one)
        assert stats(g).macs == 16 * stats(one).macs


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_count_is_published_figure(name: str, graphs: dict[str, Graph]) -> None:
    assert learned_params(graphs[name]) == PUBLISHED_PARAMS[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED_MACS))
def test_macs_match_published(name: str, graphs: dict[str, Graph]) -> None:
    macs = stats(graphs[name]).macs
    assert abs(macs - PUBLISHED_MACS[name]) / PUBLISHED_MACS[name] < MACS_TOLERANCE


def llama_macs(cfg: LlamaConfig, seq: int) -> int:
    """Hand count: projections and MLP per token, both attention matmuls over the full
    (not causally halved) score matrix, as the attention op's count prices it, LM head."""
    d, kv = cfg.hidden, cfg.kv_heads * cfg.head_dim
    per_token = 2 * d * d + 2 * d * kv + 3 * d * cfg.intermediate
    attention = 2 * cfg.heads * seq * seq * cfg.head_dim
    return cfg.layers * (seq * per_token + attention) + seq * d * cfg.vocab_size


def test_decoder_macs_by_hand(graphs: dict[str, Graph]) -> None:
    assert stats(graphs["llama3_2_1b"]).macs == llama_macs(LLAMA32_1B, 128)
    assert stats(graphs["llama2_7b"]).macs == llama_macs(LLAMA2_7B, 128)
    # GPT-2: QKV, output projection and MLP per token (12 d^2), attention, tied LM head.
    d, seq = 768, 128
    gpt = 12 * (seq * 12 * d * d + 2 * seq * seq * d) + seq * d * 50257
    assert stats(graphs["gpt2"]).macs == gpt
    # T5 encoder: Q, K, V, O (4 d^2) and FFN (2 * 512 * 2048) per token, attention.
    t5 = 6 * (seq * (4 * 512 * 512 + 2 * 512 * 2048) + 2 * seq * seq * 512)
    assert stats(graphs["t5_small_encoder"]).macs == t5


def _meta_count(model_cls: str, **config: object) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg_cls = getattr(transformers, model_cls.replace("ForCausalLM", "").replace(
        "LMHeadModel", "").replace("EncoderModel", "") + "Config")
    with torch.device("meta"):
        model = getattr(transformers, model_cls)(cfg_cls(**config))
    return sum(p.numel() for p in model.parameters())  # tied weights are counted once


def test_parameter_counts_agree_with_transformers_classes(graphs: dict[str, Graph]) -> None:
    """The published configurations instantiated (without memory) in transformers."""
    rope3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 8192}
    assert learned_params(graphs["llama3_2_1b"]) == _meta_count(
        "LlamaForCausalLM", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
        num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        tie_word_embeddings=True, rope_parameters=rope3, max_position_embeddings=131072)
    assert learned_params(graphs["llama2_7b"]) == _meta_count(
        "LlamaForCausalLM", vocab_size=32000, hidden_size=4096, intermediate_size=11008,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
        tie_word_embeddings=False)
    assert learned_params(graphs["gpt2"]) == _meta_count("GPT2LMHeadModel")
    assert learned_params(graphs["t5_small_encoder"]) == _meta_count(
        "T5EncoderModel", vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6,
        num_heads=8)


def test_structure(graphs: dict[str, Graph]) -> None:
    hist = graphs["llama3_2_1b"].op_histogram()
    assert hist["attention"] == 16 and hist["rms_norm"] == 2 * 16 + 1 and hist["silu"] == 16
    att = [n for n in graphs["llama3_2_1b"].nodes if n.op == "attention"]
    assert all(n.attr("causal") for n in att)
    g = graphs["llama3_2_1b"]
    assert {(g.type_of(n.inputs[0]).shape[1], g.type_of(n.inputs[1]).shape[1])
            for n in att} == {(32, 8)}  # grouped-query: 32 query heads share 8 KV heads
    assert all(n.attr("scale") == pytest.approx(1 / 8) for n in att)
    gelu = [n for n in graphs["gpt2"].nodes if n.op == "gelu"]
    assert len(gelu) == 12 and {n.attr("approximate") for n in gelu} == {"tanh"}
    assert all(n.attr("causal") for n in graphs["gpt2"].nodes if n.op == "attention")
    assert {n.attr("approximate") for n in graphs["vit_b16"].nodes if n.op == "gelu"} == {"none"}
    assert not any(n.attr("causal") for n in graphs["vit_b16"].nodes if n.op == "attention")
    assert graphs["t5_small_encoder"].op_histogram()["gather"] == 1
    assert graphs["t5_small_encoder"].op_histogram()["rms_norm"] == 13
    for name, dw in (("mobilenet_v2", 17), ("efficientnet_b0", 16)):
        g = graphs[name]
        depthwise = [n for n in g.nodes if n.op == "conv2d" and n.attr("groups") > 1]
        assert len(depthwise) == dw  # one per block
        assert all(n.attr("groups") == g.type_of(n.inputs[0]).shape[1] for n in depthwise)
    assert graphs["mobilenet_v2"].op_histogram()["minimum"] == 35  # relu6: 2 per block + 1
    assert graphs["efficientnet_b0"].op_histogram()["sigmoid"] == 16  # one SE gate per block


# ---- tiny configurations on the reference interpreter -----------------------------------------

@pytest.mark.parametrize("name", TINY)
def test_tiny_variants_run_on_the_reference_interpreter(name: str) -> None:
    g = tiny(name)
    g.lint()
    (out,) = interpret(g, random_feeds(g))
    assert np.isfinite(out).all() and out.std() > 0
    assert not np.allclose(out[0], out[1])  # the two batch items differ


def _hf_feeds(graph: Graph, model: object, transpose: bool) -> dict[str, np.ndarray]:
    """Our weight feeds from a transformers state_dict; nn.Linear weights are (out, in)."""
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}  # type: ignore[attr-defined]
    feeds = {}
    for node in graph.weight_nodes:
        name = node.attr("name")
        if name in graph.weights:
            continue
        value = state[name]
        linear = value.ndim == 2 and "embed" not in name and "shared" not in name and (
            "wte" not in name and "wpe" not in name and "relative_attention_bias" not in name)
        feeds[name] = value.T if transpose and linear else value
    return feeds


def _randomise(model: object) -> None:
    """Norm weights start at one in transformers; random ones make the check meaningful."""
    import torch

    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():  # type: ignore[attr-defined]
            p.copy_(torch.randn_like(p) * (0.2 if p.ndim > 1 else 0.5) + (p.ndim == 1))


def test_llama_matches_transformers() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    c = TINY_LLAMA
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden, intermediate_size=c.intermediate,
        num_hidden_layers=c.layers, num_attention_heads=c.heads,
        num_key_value_heads=c.kv_heads, rms_norm_eps=c.eps, tie_word_embeddings=True,
        max_position_embeddings=16384, attn_implementation="eager",
        rope_parameters={"rope_type": "llama3", "rope_theta": c.rope_theta, "factor": 32.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192})).eval().double()
    _randomise(hf)
    g = llama(c, batch=2, seq_len=12)
    assert learned_params(g) == sum(p.numel() for p in hf.parameters())
    feeds = _hf_feeds(g, hf, transpose=True)
    feeds["input_ids"] = np.random.default_rng(0).integers(0, c.vocab_size, (2, 12))
    (logits,) = interpret(g, feeds)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(feeds["input_ids"])).logits.numpy()
    # transformers computes the rotary angles in float32 even in a float64 model (about
    # 1e-7 relative); a wrong frequency or rotation would be off by order one.
    assert np.abs(logits - ref).max() < 1e-5 * np.abs(ref).max()


def test_gpt2_matches_transformers() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    c = TINY_GPT2
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.max_position, n_embd=c.hidden,
        n_layer=c.layers, n_head=c.heads, attn_implementation="eager")).eval().double()
    _randomise(hf)
    g = gpt2(c, batch=2, seq_len=12)
    assert learned_params(g) == sum(p.numel() for p in hf.parameters())
    feeds = _hf_feeds(g, hf, transpose=False)  # Conv1D stores (in, out), as the zoo does
    feeds["input_ids"] = np.random.default_rng(0).integers(0, c.vocab_size, (2, 12))
    (logits,) = interpret(g, feeds)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(feeds["input_ids"])).logits.numpy()
    assert np.abs(logits - ref).max() < 1e-9 * np.abs(ref).max()


def test_t5_encoder_matches_transformers() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    c = TINY_T5
    hf = transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=c.vocab_size, d_model=c.d_model, d_kv=c.d_kv, d_ff=c.d_ff,
        num_layers=c.layers, num_heads=c.heads, relative_attention_num_buckets=c.buckets,
        relative_attention_max_distance=c.max_distance, dropout_rate=0.0,
        attn_implementation="eager")).eval().double()
    _randomise(hf)
    g = t5_encoder(c, batch=2, seq_len=20)  # distances up to 19 reach the log buckets
    assert learned_params(g) == sum(p.numel() for p in hf.parameters())
    feeds = _hf_feeds(g, hf, transpose=True)
    feeds["input_ids"] = np.random.default_rng(0).integers(0, c.vocab_size, (2, 20))
    (out,) = interpret(g, feeds)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(feeds["input_ids"])).last_hidden_state.numpy()
    # T5LayerNorm takes the variance in float32 even in a float64 model (about 1e-7
    # relative); a wrong bucket or a missing bias would be off by order one.
    assert np.abs(out - ref).max() < 1e-5 * np.abs(ref).max()


def test_t5_buckets_match_transformers_at_t5_small_settings() -> None:
    torch = pytest.importorskip("torch")
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    from superopt.zoo._layers import Net

    seq = 300  # distances past max_distance 128 land in the last bucket
    net = Net("buckets")
    g = net.build(relative_buckets(net, seq, 32, 128))
    (ours,) = interpret(g, {})
    pos = torch.arange(seq)
    ref = t5.T5Attention._relative_position_bucket(pos[None, :] - pos[:, None],
                                                   bidirectional=True, num_buckets=32,
                                                   max_distance=128).numpy()
    assert (ours == ref).all()
    assert set(np.unique(ours)) == set(range(32)) - {16}  # n = 0 is bucket 0, not 16


def test_rope_tables_have_the_llama3_frequencies() -> None:
    """inv_freq against the Llama 3 scaling written out from its definition."""
    from superopt.zoo._layers import Net
    from superopt.zoo._transformer import rope_inv_freq

    net = Net("rope")
    g = net.build(rope_inv_freq(net, 64, 500000.0, (32.0, 1.0, 4.0, 8192)))
    (ours,) = interpret(g, {})
    expected = []
    for i in range(32):
        f = 500000.0 ** (-2 * i / 64)
        wavelen = 2 * math.pi / f
        if wavelen < 8192 / 4:
            expected.append(f)
        elif wavelen > 8192 / 1:
            expected.append(f / 32)
        else:
            s = (8192 / wavelen - 1) / (4 - 1)
            expected.append((1 - s) * f / 32 + s * f)
    assert np.allclose(ours, expected, rtol=1e-12)
    assert (ours < np.array([500000.0 ** (-2 * i / 64) for i in range(32)])).sum() >= 10


@pytest.mark.parametrize("name, options, match", [
    ("llama3_2_1b", {"seq_len": 131073}, "seq_len must be in"),
    ("gpt2", {"seq_len": 1025}, "seq_len must be in"),
    ("t5_small_encoder", {"seq_len": 0}, "must be an int >= 1"),
    ("vit_b16", {"image_size": 200}, "multiple of the patch size"),
    ("mobilenet_v2", {"depth": 2}, "unknown option 'depth'"),
])
def test_bad_options_raise_one_line_errors(name: str, options: dict[str, object],
                                           match: str) -> None:
    with pytest.raises(zoo.BadOption, match=match) as info:
        zoo.build(name, **options)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_options_change_the_graph() -> None:
    g = zoo.build("llama3_2_1b", batch=2, seq_len=32)
    assert g.type_of(g.outputs[0]).shape == (2, 32, 128256)
    g = zoo.build("vit_b16", image_size=(224, 160), num_classes=10)
    assert g.type_of(g.outputs[0]).shape == (1, 10)
    # 14 x 10 patches + the class token
    assert learned_params(g) == 86_567_656 - (197 - 141) * 768 - 990 * 769
