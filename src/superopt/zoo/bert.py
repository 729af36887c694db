"""BERT encoders (embeddings, transformer layers, optional pooler), as HuggingFace's BertModel.

Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", NAACL 2019 (arXiv:1810.04805): BERT-base has 12 layers, hidden size 768,
12 heads, feed-forward size 3072 (110M parameters). BERT-small is the 4-layer, 512-hidden,
8-head model of Turc et al., "Well-Read Students Learn Better: On the Importance of
Pre-training Compact Models", arXiv:1908.08962.

Per layer: Q, K, V projections (matmul + bias), heads split by reshape/transpose,
scores = Q K^T scaled by 1/sqrt(head size) (a scalar constant), softmax, context = P V,
output projection, residual add and layer norm; then a feed-forward block with exact
(erf) GELU, residual add and layer norm (eps 1e-12). Position embeddings are the first
`seq_len` rows of the table (BertModel's default position ids 0..seq_len-1). The pooler
(dense + tanh on the first token) is a second output. Dropout is the identity at
inference and is left out. Weight matrices are stored (in, out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net
from superopt.zoo.errors import BadOption


@dataclass(frozen=True)
class BertConfig:
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab_size: int = 30522  # the uncased WordPiece vocabulary
    max_position: int = 512
    type_vocab: int = 2
    eps: float = 1e-12


BERT_BASE = BertConfig(layers=12, hidden=768, heads=12, intermediate=3072)
BERT_SMALL = BertConfig(layers=4, hidden=512, heads=8, intermediate=2048)


def _layer_norm(net: Net, x: Value, name: str, eps: float) -> Value:
    d = net.shape(x)[-1]
    return net.b.layer_norm(x, net.param(f"{name}.weight", (d,), init="positive"),
                            net.param(f"{name}.bias", (d,), init="normal"), axis=-1, eps=eps)


def _heads(net: Net, x: Value, batch: int, seq: int, heads: int) -> Value:
    """(B, S, H) -> (B, heads, S, H / heads)."""
    y = net.b.reshape(x, shape=(batch, seq, heads, -1))
    return net.b.transpose(y, perm=(0, 2, 1, 3))


def _attention(net: Net, x: Value, name: str, cfg: BertConfig, batch: int, seq: int,
               scale: Value, mask: Value | None) -> Value:
    q = _heads(net, net.linear(x, f"{name}.self.query", cfg.hidden), batch, seq, cfg.heads)
    k = _heads(net, net.linear(x, f"{name}.self.key", cfg.hidden), batch, seq, cfg.heads)
    v = _heads(net, net.linear(x, f"{name}.self.value", cfg.hidden), batch, seq, cfg.heads)
    scores = net.b.smul(net.b.matmul(q, net.b.transpose(k, perm=(0, 1, 3, 2))), scale)
    if mask is not None:
        scores = net.add(scores, mask)
    ctx = net.b.matmul(net.b.softmax(scores, axis=-1), v)
    ctx = net.b.reshape(net.b.transpose(ctx, perm=(0, 2, 1, 3)), shape=(batch, seq, cfg.hidden))
    out = net.linear(ctx, f"{name}.output.dense", cfg.hidden)
    return _layer_norm(net, net.add(out, x), f"{name}.output.LayerNorm", cfg.eps)


def bert(cfg: BertConfig, name: str = "bert", batch: int = 1, seq_len: int = 128,
         pooler: bool = True, attention_mask: bool = False) -> Graph:
    """A BERT encoder on token ids (batch, seq_len).

    Inputs: `input_ids` and `token_type_ids` (int64), and with `attention_mask=True` an
    additive float mask `attention_mask` of shape (batch, 1, 1, seq_len) (0 to attend,
    a large negative number to mask), broadcast over heads and query positions.
    Outputs: the last hidden state (batch, seq_len, hidden) and, with `pooler`, the pooled
    first token (batch, hidden).
    """
    if not 1 <= seq_len <= cfg.max_position:
        raise BadOption(name, f"seq_len must be in [1, {cfg.max_position}], found {seq_len}")
    if cfg.hidden % cfg.heads:
        raise BadOption(name, f"hidden size {cfg.hidden} is not divisible by {cfg.heads} heads")
    net = Net(name)
    ids = net.input("input_ids", (batch, seq_len), "i64", high=cfg.vocab_size)
    types = net.input("token_type_ids", (batch, seq_len), "i64", high=cfg.type_vocab)
    mask = (net.input("attention_mask", (batch, 1, 1, seq_len)) if attention_mask else None)
    word = net.param("embeddings.word_embeddings.weight", (cfg.vocab_size, cfg.hidden),
                     init="normal")
    pos = net.param("embeddings.position_embeddings.weight", (cfg.max_position, cfg.hidden),
                    init="normal")
    tok = net.param("embeddings.token_type_embeddings.weight", (cfg.type_vocab, cfg.hidden),
                    init="normal")
    x = net.add(net.b.embedding(ids, word), net.b.embedding(types, tok))
    x = net.add(x, net.b.slice(pos, starts=(0, 0), ends=(seq_len, cfg.hidden)))
    x = _layer_norm(net, x, "embeddings.LayerNorm", cfg.eps)
    scale = net.const("attention_scale", np.array(1.0 / math.sqrt(cfg.hidden // cfg.heads)))
    for i in range(cfg.layers):
        layer = f"encoder.layer.{i}"
        x = _attention(net, x, f"{layer}.attention", cfg, batch, seq_len, scale, mask)
        hidden = net.b.gelu(net.linear(x, f"{layer}.intermediate.dense", cfg.intermediate))
        out = net.linear(hidden, f"{layer}.output.dense", cfg.hidden)
        x = _layer_norm(net, net.add(out, x), f"{layer}.output.LayerNorm", cfg.eps)
    if not pooler:
        return net.build(x)
    first = net.b.reshape(net.b.slice(x, starts=(0, 0, 0), ends=(batch, 1, cfg.hidden)),
                          shape=(batch, cfg.hidden))
    pooled = net.b.tanh(net.linear(first, "pooler.dense", cfg.hidden))
    return net.build([x, pooled])


def bert_base(batch: int = 1, seq_len: int = 128, pooler: bool = True,
              attention_mask: bool = False) -> Graph:
    return bert(BERT_BASE, "bert_base", batch, seq_len, pooler, attention_mask)


def bert_small(batch: int = 1, seq_len: int = 128, pooler: bool = True,
               attention_mask: bool = False) -> Graph:
    return bert(BERT_SMALL, "bert_small", batch, seq_len, pooler, attention_mask)
