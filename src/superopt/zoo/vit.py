"""ViT-B/16, laid out as torchvision's `vit_b_16`.

Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for Image Recognition at
Scale", ICLR 2021 (arXiv:2010.11929). ViT-Base: 12 layers, hidden 768, 12 heads, MLP 3072,
16x16 patches of a 224x224 image (196 tokens + a class token), learned position
embeddings, pre-norm layer_norm (eps 1e-6), exact (erf) GELU, and a linear head on the
final class token: 86,567,656 parameters and 17.56 G multiply-adds (torchvision's
weights table, which labels multiply-adds GFLOPS).

The patch embedding is a 16x16 stride-16 convolution with bias; its (B, 768, 14, 14)
output is flattened to (B, 196, 768), the class token (a (1, 1, 768) parameter) is
expanded over the batch and concatenated in front, and the position embedding is added.
Attention is the `attention` op (not causal); Q, K and V come from one in-projection
(torch's `nn.MultiheadAttention.in_proj_weight`), split in the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net, image_hw
from superopt.zoo._transformer import layer_norm, merge_heads, split_heads
from superopt.zoo.errors import BadOption


@dataclass(frozen=True)
class ViTConfig:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    mlp: int = 3072
    patch: int = 16
    eps: float = 1e-6


VIT_B16 = ViTConfig()


def _block(net: Net, x: Value, name: str, cfg: ViTConfig) -> Value:
    h = layer_norm(net, x, f"{name}.ln_1", cfg.eps)
    qkv = net.linear(h, f"{name}.self_attention.in_proj", 3 * cfg.hidden)
    q, k, v = (split_heads(net, t, cfg.heads)
               for t in net.b.split(qkv, axis=2, sizes=(cfg.hidden,) * 3))
    ctx = merge_heads(net, net.b.attention(q, k, v))
    x = net.add(x, net.linear(ctx, f"{name}.self_attention.out_proj", cfg.hidden))
    h = layer_norm(net, x, f"{name}.ln_2", cfg.eps)
    h = net.b.gelu(net.linear(h, f"{name}.mlp.0", cfg.mlp))
    return net.add(x, net.linear(h, f"{name}.mlp.3", cfg.hidden))


def vit(cfg: ViTConfig = VIT_B16, name: str = "vit", batch: int = 1,
        image_size: int | tuple[int, int] = 224, num_classes: int = 1000) -> Graph:
    """A ViT classifier on `image` (batch, 3, H, W) -> logits (batch, num_classes)."""
    h, w = image_hw(name, image_size, minimum=cfg.patch)
    if h % cfg.patch or w % cfg.patch:
        raise BadOption(name, f"image_size must be a multiple of the patch size {cfg.patch}, "
                        f"found {image_size!r}")
    if cfg.hidden % cfg.heads:
        raise BadOption(name, f"hidden size {cfg.hidden} is not divisible by {cfg.heads} heads")
    tokens = (h // cfg.patch) * (w // cfg.patch) + 1
    net = Net(name)
    x = net.input("image", (batch, 3, h, w))
    x = net.conv(x, "conv_proj", cfg.hidden, cfg.patch, stride=cfg.patch, bias=True)
    x = net.b.transpose(net.b.reshape(x, shape=(batch, cfg.hidden, tokens - 1)), perm=(0, 2, 1))
    cls = net.b.expand(net.param("class_token", (1, 1, cfg.hidden), init="normal"),
                       shape=(batch, 1, cfg.hidden))
    x = net.add(net.concat([cls, x], axis=1),
                net.param("encoder.pos_embedding", (1, tokens, cfg.hidden), init="normal"))
    for i in range(cfg.layers):
        x = _block(net, x, f"encoder.layers.encoder_layer_{i}", cfg)
    x = layer_norm(net, x, "encoder.ln", cfg.eps)
    first = net.b.reshape(net.b.slice(x, starts=(0, 0, 0), ends=(batch, 1, cfg.hidden)),
                          shape=(batch, cfg.hidden))
    return net.build(net.linear(first, "heads.head", num_classes))


def vit_b16(batch: int = 1, image_size: int | tuple[int, int] = 224,
            num_classes: int = 1000) -> Graph:
    return vit(VIT_B16, "vit_b16", batch, image_size, num_classes)
