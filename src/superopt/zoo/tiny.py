"""Tiny configurations of the transformer-era and mobile zoo models, for value checks.

The full models hold 3.5M-1.2G parameters; these keep every structural feature (grouped
query heads, Llama 3 rope scaling with all three frequency bands, relative buckets that
reach the logarithmic range, class token, depthwise convs, squeeze-excite) at sizes the
float64 reference interpreter runs in well under a second. `tiny(name)` builds one at
batch 2; the CNNs keep their full width on a 32x32 image.
"""

from __future__ import annotations

from collections.abc import Callable

from superopt.ir.graph import Graph
from superopt.zoo.efficientnet import efficientnet_b0
from superopt.zoo.errors import UnknownModel
from superopt.zoo.gpt2 import GPT2Config, gpt2
from superopt.zoo.llama import LlamaConfig, llama
from superopt.zoo.mobilenet import mobilenet_v2
from superopt.zoo.t5 import T5Config, t5_encoder
from superopt.zoo.vit import ViTConfig, vit

# head_dim 16 under theta 500000: wavelengths 6 to 1.5e6, so the scaling's kept, blended
# and divided bands are all present.
TINY_LLAMA = LlamaConfig(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=96,
                         vocab_size=101, rope_theta=500000.0,
                         rope_llama3=(32.0, 1.0, 4.0, 8192), tie_embeddings=True,
                         max_position=64)
TINY_GPT2 = GPT2Config(layers=2, hidden=64, heads=4, vocab_size=101, max_position=32)
# 8 buckets, max distance 12: at seq 20 distances 2..11 are logarithmic, 12+ capped.
TINY_T5 = T5Config(layers=2, d_model=64, heads=4, d_kv=16, d_ff=96, vocab_size=101,
                   buckets=8, max_distance=12)
TINY_VIT = ViTConfig(layers=2, hidden=64, heads=4, mlp=96, patch=8)

TINY: dict[str, Callable[[], Graph]] = {
    "llama": lambda: llama(TINY_LLAMA, "llama_tiny", batch=2, seq_len=12),
    "gpt2": lambda: gpt2(TINY_GPT2, "gpt2_tiny", batch=2, seq_len=12),
    "t5": lambda: t5_encoder(TINY_T5, "t5_tiny", batch=2, seq_len=20),
    "vit": lambda: vit(TINY_VIT, "vit_tiny", batch=2, image_size=32, num_classes=10),
    "mobilenet_v2": lambda: mobilenet_v2(batch=2, image_size=32),
    "efficientnet_b0": lambda: efficientnet_b0(batch=2, image_size=32),
}


def tiny(name: str) -> Graph:
    try:
        return TINY[name]()
    except KeyError:
        raise UnknownModel(name, list(TINY)) from None
