"""The T5 encoder (T5-small) as HuggingFace's T5EncoderModel.

Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer", JMLR 2020 (arXiv:1910.10683). T5-small: 6 encoder layers, d_model 512, 8
heads of size 64, ReLU feed-forward of width 2048, vocabulary 32128, layer norm without
mean subtraction or bias (rms_norm, eps 1e-6), no 1/sqrt(d) attention scaling, and a
learned relative position bias (32 buckets, max distance 128) owned by the first layer
and added to every layer's scores. The encoder alone has 35,330,816 parameters (the
whole encoder-decoder model, 60,506,624, is the paper's "60M").

The relative position bucket of each (query i, key j) pair is computed in the graph from
`iota`, as transformers' `_relative_position_bucket` computes it: n = j - i; half the
buckets for n > 0; |n| < 8 is its own bucket; larger distances go to
8 + trunc(log(|n| / 8) / log(128 / 8) * 8), capped at 15 (bucket 16, the first of the
positive half, is never used: n = 0 falls in bucket 0). The bias is a `gather` of the
(32, heads) table on that bucket index. Attention is decomposed (matmul, add bias,
softmax, matmul) because the `attention` op has no bias input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net
from superopt.zoo._transformer import merge_heads, rms_norm, scalar, split_heads
from superopt.zoo.errors import BadOption


@dataclass(frozen=True)
class T5Config:
    layers: int = 6
    d_model: int = 512
    heads: int = 8
    d_kv: int = 64
    d_ff: int = 2048
    vocab_size: int = 32128
    buckets: int = 32
    max_distance: int = 128
    eps: float = 1e-6


T5_SMALL = T5Config()


def relative_buckets(net: Net, seq: int, buckets: int, max_distance: int) -> Value:
    """Bidirectional bucket index (seq, seq) int64 of key position - query position."""
    half = buckets // 2
    exact = half // 2
    b = net.b
    rel = b.sub(b.iota(shape=(seq, seq), axis=1, dtype="f32"),
                b.iota(shape=(seq, seq), axis=0, dtype="f32"))
    zero = scalar(net, "t5.zero", 0.0)
    positive = b.cast(b.gt(rel, zero), to="f32")
    dist = b.maximum(rel, b.neg(rel))
    # log is only used where dist >= exact; clamping below keeps it finite elsewhere
    scaled = b.smul(b.log(b.smul(b.maximum(dist, scalar(net, "t5.exact", float(exact))),
                                 scalar(net, "t5.inv_exact", 1.0 / exact))),
                    scalar(net, "t5.log_scale", (half - exact) / math.log(max_distance / exact)))
    # At distances 16, 32, 64 the exact value is an integer that float64 rounds to just
    # below it (1.9999999999999998); a nudge far smaller than the gap of any other
    # integer distance to the next integer (> 1e-3) truncates it as the real number would.
    scaled = b.ewadd(scaled, scalar(net, "t5.round_nudge", 1e-6))
    large = b.ewadd(b.cast(b.cast(scaled, to="i64"), to="f32"), scalar(net, "t5.exact_base",
                                                                       float(exact)))
    large = b.minimum(large, scalar(net, "t5.last_bucket", float(half - 1)))
    bucket = b.where(b.lt(dist, scalar(net, "t5.exact_bound", float(exact))), dist, large)
    bucket = b.ewadd(bucket, b.smul(positive, scalar(net, "t5.half", float(half))))
    return b.cast(bucket, to="i64")


def _attention(net: Net, x: Value, name: str, cfg: T5Config, bias: Value) -> Value:
    inner = cfg.heads * cfg.d_kv
    q, k, v = (split_heads(net, net.linear(x, f"{name}.{p}", inner, bias=False), cfg.heads)
               for p in ("q", "k", "v"))
    scores = net.add(net.b.matmul(q, net.b.transpose(k, perm=(0, 1, 3, 2))), bias)
    ctx = net.b.matmul(net.b.softmax(scores, axis=-1), v)
    return net.linear(merge_heads(net, ctx), f"{name}.o", cfg.d_model, bias=False)


def t5_encoder(cfg: T5Config = T5_SMALL, name: str = "t5_encoder", batch: int = 1,
               seq_len: int = 128) -> Graph:
    """The encoder on token ids `input_ids` (batch, seq_len) -> (batch, seq_len, d_model)."""
    if seq_len < 1:
        raise BadOption(name, f"seq_len must be >= 1, found {seq_len}")
    net = Net(name)
    ids = net.input("input_ids", (batch, seq_len), "i64", high=cfg.vocab_size)
    x = net.b.embedding(ids, net.param("shared.weight", (cfg.vocab_size, cfg.d_model),
                                       init="normal"))
    table = net.param("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                      (cfg.buckets, cfg.heads), init="normal")
    bias = net.b.gather(table, relative_buckets(net, seq_len, cfg.buckets, cfg.max_distance),
                        axis=0)  # (seq, seq, heads)
    bias = net.b.reshape(net.b.transpose(bias, perm=(2, 0, 1)),
                         shape=(1, cfg.heads, seq_len, seq_len))
    for i in range(cfg.layers):
        block = f"encoder.block.{i}"
        h = rms_norm(net, x, f"{block}.layer.0.layer_norm", cfg.eps)
        x = net.add(x, _attention(net, h, f"{block}.layer.0.SelfAttention", cfg, bias))
        h = rms_norm(net, x, f"{block}.layer.1.layer_norm", cfg.eps)
        h = net.relu(net.linear(h, f"{block}.layer.1.DenseReluDense.wi", cfg.d_ff, bias=False))
        x = net.add(x, net.linear(h, f"{block}.layer.1.DenseReluDense.wo", cfg.d_model,
                                  bias=False))
    return net.build(rms_norm(net, x, "encoder.final_layer_norm", cfg.eps))


def t5_small_encoder(batch: int = 1, seq_len: int = 128) -> Graph:
    return t5_encoder(T5_SMALL, "t5_small_encoder", batch, seq_len)
