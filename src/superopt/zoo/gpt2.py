"""GPT-2 small as HuggingFace's GPT2LMHeadModel on a prefill of `seq_len` tokens.

Radford et al., "Language Models are Unsupervised Multitask Learners", OpenAI 2019: the
smallest model has 12 layers, hidden 768, 12 heads, context 1024, vocabulary 50257, learned
position embeddings and a pre-norm block (layer_norm eps 1e-5) with a GELU (tanh
approximation) feed-forward of width 3072; the LM head is the token embedding, transposed.
124,439,808 parameters (the "124M" model; the paper's table rounds to 117M).

Per layer: h = x + c_proj(causal_attention(split(c_attn(ln_1(x))))); x' = h +
mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(h)))). c_attn is one (768, 2304) matrix producing Q, K
and V, split in the graph. HuggingFace's Conv1D stores its weights (in, out) as the zoo
does. Position embeddings are the first `seq_len` rows of `wpe` (position ids 0..seq_len-1).
"""

from __future__ import annotations

from dataclasses import dataclass

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net
from superopt.zoo._transformer import layer_norm, merge_heads, split_heads
from superopt.zoo.errors import BadOption


@dataclass(frozen=True)
class GPT2Config:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    vocab_size: int = 50257
    max_position: int = 1024
    eps: float = 1e-5

    @property
    def intermediate(self) -> int:
        return 4 * self.hidden


GPT2_SMALL = GPT2Config()


def _block(net: Net, x: Value, name: str, cfg: GPT2Config) -> Value:
    h = layer_norm(net, x, f"{name}.ln_1", cfg.eps)
    qkv = net.linear(h, f"{name}.attn.c_attn", 3 * cfg.hidden)
    q, k, v = (split_heads(net, t, cfg.heads)
               for t in net.b.split(qkv, axis=2, sizes=(cfg.hidden,) * 3))
    ctx = merge_heads(net, net.b.attention(q, k, v, causal=True))
    x = net.add(x, net.linear(ctx, f"{name}.attn.c_proj", cfg.hidden))
    h = layer_norm(net, x, f"{name}.ln_2", cfg.eps)
    h = net.b.gelu(net.linear(h, f"{name}.mlp.c_fc", cfg.intermediate), approximate="tanh")
    return net.add(x, net.linear(h, f"{name}.mlp.c_proj", cfg.hidden))


def gpt2(cfg: GPT2Config = GPT2_SMALL, name: str = "gpt2", batch: int = 1,
         seq_len: int = 128) -> Graph:
    """GPT-2 on token ids `input_ids` (batch, seq_len) -> logits (batch, seq_len, vocab)."""
    if not 1 <= seq_len <= cfg.max_position:
        raise BadOption(name, f"seq_len must be in [1, {cfg.max_position}], found {seq_len}")
    if cfg.hidden % cfg.heads:
        raise BadOption(name, f"hidden size {cfg.hidden} is not divisible by {cfg.heads} heads")
    net = Net(name)
    ids = net.input("input_ids", (batch, seq_len), "i64", high=cfg.vocab_size)
    wte = net.param("transformer.wte.weight", (cfg.vocab_size, cfg.hidden), init="normal")
    wpe = net.param("transformer.wpe.weight", (cfg.max_position, cfg.hidden), init="normal")
    x = net.add(net.b.embedding(ids, wte),
                net.b.slice(wpe, starts=(0, 0), ends=(seq_len, cfg.hidden)))
    for i in range(cfg.layers):
        x = _block(net, x, f"transformer.h.{i}", cfg)
    x = layer_norm(net, x, "transformer.ln_f", cfg.eps)
    return net.build(net.b.matmul(x, net.b.transpose(wte, perm=(1, 0))))


def gpt2_small(batch: int = 1, seq_len: int = 128) -> Graph:
    return gpt2(GPT2_SMALL, "gpt2", batch, seq_len)
