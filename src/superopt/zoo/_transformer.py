"""Transformer pieces shared by the zoo's decoders and encoders: norms, head split/merge,
rotary position tables computed in the graph, and scaled dot-product attention.

Weight matrices are stored (in, out) as elsewhere in the zoo, the transpose of torch's
`nn.Linear` layout; parameter names follow the HuggingFace (or torchvision) state_dict so
that a test can load the same weights into both.
"""

from __future__ import annotations

import math

import numpy as np

from superopt.ir.graph import Value
from superopt.zoo._layers import Net


def layer_norm(net: Net, x: Value, name: str, eps: float, weight: str = "weight",
               bias: str = "bias") -> Value:
    d = net.shape(x)[-1]
    return net.b.layer_norm(x, net.param(f"{name}.{weight}", (d,), init="positive"),
                            net.param(f"{name}.{bias}", (d,), init="normal"), axis=-1, eps=eps)


def rms_norm(net: Net, x: Value, name: str, eps: float) -> Value:
    """x / sqrt(mean(x^2) + eps) * weight over the last dim (no mean subtraction, no bias)."""
    d = net.shape(x)[-1]
    return net.b.rms_norm(x, net.param(f"{name}.weight", (d,), init="positive"), axis=-1,
                          eps=eps)


def split_heads(net: Net, x: Value, heads: int) -> Value:
    """(B, S, heads * D) -> (B, heads, S, D)."""
    batch, seq, _ = net.shape(x)
    return net.b.transpose(net.b.reshape(x, shape=(batch, seq, heads, -1)), perm=(0, 2, 1, 3))


def merge_heads(net: Net, x: Value) -> Value:
    """(B, heads, S, D) -> (B, S, heads * D)."""
    batch, heads, seq, d = net.shape(x)
    return net.b.reshape(net.b.transpose(x, perm=(0, 2, 1, 3)), shape=(batch, seq, heads * d))


def scalar(net: Net, name: str, value: float) -> Value:
    """A rank-0 constant with data (a scale or a clamp bound), created once per graph."""
    return net.const(name, np.array(value))


def rope_inv_freq(net: Net, head_dim: int, theta: float,
                  llama3: tuple[float, float, float, int] | None = None) -> Value:
    """theta^(-2i/head_dim) for i < head_dim/2, as exp(iota * -2 ln(theta) / head_dim).

    `llama3` = (factor, low_freq_factor, high_freq_factor, original_max_position) applies
    Llama 3's frequency scaling (transformers' `_compute_llama3_parameters`): wavelengths
    longer than original_max / low_freq_factor are divided by `factor`, those shorter than
    original_max / high_freq_factor are kept, and the band between is interpolated.
    """
    half = head_dim // 2
    ramp = net.b.iota(shape=(half,), axis=0, dtype="f32")
    inv = net.b.exp(net.b.smul(ramp, scalar(net, "rope.log_step",
                                            -2.0 * math.log(theta) / head_dim)))
    if llama3 is None:
        return inv
    factor, low, high, original = llama3
    # wavelength 2 pi / inv compared through inv itself: wavelen > L  <=>  inv < 2 pi / L
    low_wavelen, high_wavelen = original / low, original / high
    scaled = net.b.smul(inv, scalar(net, "rope.inv_factor", 1.0 / factor))
    # smooth = (original / wavelen - low) / (high - low) = (original * inv / (2 pi) - low) / ...
    smooth = net.b.sub(net.b.smul(inv, scalar(net, "rope.smooth_slope",
                                              original / (2 * math.pi) / (high - low))),
                       scalar(net, "rope.smooth_offset", low / (high - low)))
    one_minus = net.b.sub(scalar(net, "rope.one", 1.0), smooth)
    blended = net.add(net.b.ewmul(one_minus, scaled), net.b.ewmul(smooth, inv))
    long_wave = net.b.lt(inv, scalar(net, "rope.low_bound", 2 * math.pi / low_wavelen))
    short_wave = net.b.gt(inv, scalar(net, "rope.high_bound", 2 * math.pi / high_wavelen))
    return net.b.where(long_wave, scaled, net.b.where(short_wave, inv, blended))


def rope_tables(net: Net, seq: int, head_dim: int, theta: float,
                llama3: tuple[float, float, float, int] | None = None) -> tuple[Value, Value]:
    """cos and sin tables (seq, head_dim) for positions 0..seq-1, computed from iota.

    Angles are position * inv_freq, repeated for both halves of the head (the
    rotate-half convention of GPT-NeoX and HuggingFace Llama).
    """
    inv = net.b.reshape(rope_inv_freq(net, head_dim, theta, llama3), shape=(1, head_dim // 2))
    pos = net.b.iota(shape=(seq, 1), axis=0, dtype="f32")
    angles = net.b.ewmul(pos, inv)
    angles = net.b.concat(angles, angles, axis=1)
    return net.b.cos(angles), net.b.sin(angles)


def apply_rope(net: Net, x: Value, cos: Value, sin: Value) -> Value:
    """x * cos + rotate_half(x) * sin on (B, H, S, D); rotate_half(x) = (-x2, x1)."""
    d = net.shape(x)[-1]
    x1, x2 = net.b.split(x, axis=-1, sizes=(d // 2, d // 2))
    rotated = net.b.concat(net.b.neg(x2), x1, axis=-1)
    return net.add(net.b.ewmul(x, cos), net.b.ewmul(rotated, sin))
