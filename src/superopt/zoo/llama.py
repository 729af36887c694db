"""Llama-style decoders (pre-norm RMSNorm, rotary positions, grouped-query causal attention,
SwiGLU feed-forward), laid out as HuggingFace's LlamaForCausalLM on a prefill of `seq_len`
tokens.

Two published configurations:

- Llama 3.2 1B (Meta, "Llama 3.2" model card and config.json, 2024; the architecture is
  that of Grattafiori et al., "The Llama 3 Herd of Models", arXiv:2407.21783): 16 layers,
  hidden 2048, 32 query heads and 8 key/value heads of size 64, SwiGLU width 8192,
  vocabulary 128256, RMSNorm eps 1e-5, RoPE theta 500000 with Llama 3 frequency scaling
  (factor 32, low/high frequency factors 1 and 4, original context 8192), input embedding
  tied to the LM head: 1,235,814,400 parameters.
- Llama 2 7B (Touvron et al., "Llama 2: Open Foundation and Fine-Tuned Chat Models",
  arXiv:2307.09288): 32 layers, hidden 4096, 32 heads (no grouping), SwiGLU width 11008,
  vocabulary 32000, RoPE theta 10000, separate LM head: 6,738,415,616 parameters. This is
  the zoo's graph-scale model (weights are shapes only; no data is ever allocated).

Per layer: h = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n), causal))
with n = rms_norm(x); x' = h + down_proj(silu(gate_proj(m)) * up_proj(m)) with
m = rms_norm(h). The cos/sin tables are computed in the graph from `iota` (positions
0..seq_len-1), as transformers' rotary embedding computes them on the fly. Outputs the
logits (batch, seq_len, vocab) of every position.
"""

from __future__ import annotations

from dataclasses import dataclass

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net
from superopt.zoo._transformer import apply_rope, merge_heads, rms_norm, rope_tables, split_heads
from superopt.zoo.errors import BadOption


@dataclass(frozen=True)
class LlamaConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab_size: int
    rope_theta: float = 10000.0
    # (factor, low_freq_factor, high_freq_factor, original_max_position) or None
    rope_llama3: tuple[float, float, float, int] | None = None
    eps: float = 1e-5
    tie_embeddings: bool = False
    max_position: int = 4096

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


LLAMA32_1B = LlamaConfig(layers=16, hidden=2048, heads=32, kv_heads=8, intermediate=8192,
                         vocab_size=128256, rope_theta=500000.0,
                         rope_llama3=(32.0, 1.0, 4.0, 8192), tie_embeddings=True,
                         max_position=131072)
LLAMA2_7B = LlamaConfig(layers=32, hidden=4096, heads=32, kv_heads=32, intermediate=11008,
                        vocab_size=32000, max_position=4096)


def _attention(net: Net, x: Value, name: str, cfg: LlamaConfig, cos: Value,
               sin: Value) -> Value:
    hd = cfg.head_dim
    q = split_heads(net, net.linear(x, f"{name}.q_proj", cfg.heads * hd, bias=False), cfg.heads)
    k = split_heads(net, net.linear(x, f"{name}.k_proj", cfg.kv_heads * hd, bias=False),
                    cfg.kv_heads)
    v = split_heads(net, net.linear(x, f"{name}.v_proj", cfg.kv_heads * hd, bias=False),
                    cfg.kv_heads)
    q, k = apply_rope(net, q, cos, sin), apply_rope(net, k, cos, sin)
    ctx = net.b.attention(q, k, v, causal=True)  # scale 0: 1/sqrt(head_dim)
    return net.linear(merge_heads(net, ctx), f"{name}.o_proj", cfg.hidden, bias=False)


def _mlp(net: Net, x: Value, name: str, cfg: LlamaConfig) -> Value:
    gate = net.b.silu(net.linear(x, f"{name}.gate_proj", cfg.intermediate, bias=False))
    up = net.linear(x, f"{name}.up_proj", cfg.intermediate, bias=False)
    return net.linear(net.b.ewmul(gate, up), f"{name}.down_proj", cfg.hidden, bias=False)


def llama(cfg: LlamaConfig, name: str = "llama", batch: int = 1, seq_len: int = 128) -> Graph:
    """A Llama-style causal LM on token ids `input_ids` (batch, seq_len) -> logits."""
    if not 1 <= seq_len <= cfg.max_position:
        raise BadOption(name, f"seq_len must be in [1, {cfg.max_position}], found {seq_len}")
    if cfg.hidden % cfg.heads or cfg.heads % cfg.kv_heads or cfg.head_dim % 2:
        raise BadOption(name, f"hidden {cfg.hidden}, heads {cfg.heads}, kv heads "
                        f"{cfg.kv_heads}: need heads | hidden, kv_heads | heads, even head dim")
    net = Net(name)
    ids = net.input("input_ids", (batch, seq_len), "i64", high=cfg.vocab_size)
    table = net.param("model.embed_tokens.weight", (cfg.vocab_size, cfg.hidden), init="normal")
    x = net.b.embedding(ids, table)
    cos, sin = rope_tables(net, seq_len, cfg.head_dim, cfg.rope_theta, cfg.rope_llama3)
    for i in range(cfg.layers):
        layer = f"model.layers.{i}"
        h = rms_norm(net, x, f"{layer}.input_layernorm", cfg.eps)
        x = net.add(x, _attention(net, h, f"{layer}.self_attn", cfg, cos, sin))
        h = rms_norm(net, x, f"{layer}.post_attention_layernorm", cfg.eps)
        x = net.add(x, _mlp(net, h, f"{layer}.mlp", cfg))
    x = rms_norm(net, x, "model.norm", cfg.eps)
    if cfg.tie_embeddings:  # the LM head is the embedding table, read transposed
        logits = net.b.matmul(x, net.b.transpose(table, perm=(1, 0)))
    else:
        logits = net.linear(x, "lm_head", cfg.vocab_size, bias=False)
    return net.build(logits)


def llama3_2_1b(batch: int = 1, seq_len: int = 128) -> Graph:
    return llama(LLAMA32_1B, "llama3_2_1b", batch, seq_len)


def llama2_7b(batch: int = 1, seq_len: int = 128) -> Graph:
    return llama(LLAMA2_7B, "llama2_7b", batch, seq_len)
