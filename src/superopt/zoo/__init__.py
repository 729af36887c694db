"""The model zoo: published architectures built directly with the IR builder.

The models are the ones TASO, PET and Tensat evaluate, as plain inference graphs (no batch
norm folding or other rewriting): `build("resnet50", batch=8)` returns a linted `Graph`.
Weights carry no data; interpreters draw them deterministically from their names. Names
are case-insensitive and accept '-' or '.' for '_' ("bert-base", "squeezenet1.1").

Besides the TASO/PET/Tensat set, the zoo holds transformer-era models (a Llama 3.2 1B
decoder, GPT-2, the T5-small encoder, ViT-B/16) and mobile CNNs (MobileNetV2,
EfficientNet-B0). `llama2_7b` is a graph-scale model (32 layers, 6.7B parameters as
shapes): `names()` leaves it out, because the loops over every model (interpreting,
exporting, simulating each at batch 1) would materialise or time 27 GB of weights;
`names(scale=True)` lists it and `build`/`get` accept it like any other.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph
from superopt.zoo.bert import bert_base, bert_small
from superopt.zoo.csrnet import csrnet
from superopt.zoo.efficientnet import efficientnet_b0
from superopt.zoo.errors import BadOption, UnknownModel, ZooError
from superopt.zoo.gpt2 import gpt2_small
from superopt.zoo.inception import inception_v3
from superopt.zoo.llama import llama2_7b, llama3_2_1b
from superopt.zoo.mobilenet import mobilenet_v2
from superopt.zoo.nasnet import nasnet_a
from superopt.zoo.resnet import resnet18, resnet50, resnext50
from superopt.zoo.squeezenet import squeezenet1_0, squeezenet1_1
from superopt.zoo.t5 import t5_small_encoder
from superopt.zoo.vgg import vgg19
from superopt.zoo.vit import vit_b16

__all__ = ["MODELS", "BadOption", "InputSpec", "ModelSpec", "UnknownModel", "ZooError", "build",
           "get", "names"]


@dataclass(frozen=True)
class InputSpec:
    """One graph input at the default options; `shape` leaves out the leading batch dim."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "f32"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    builder: Callable[..., Graph]
    inputs: tuple[InputSpec, ...]
    citation: str
    aliases: tuple[str, ...] = ()
    scale: bool = False  # graph-scale: too big to materialise; left out of names()

    @property
    def options(self) -> dict[str, Any]:
        """Build options besides `batch`, with their defaults (from the builder's signature)."""
        params = inspect.signature(self.builder).parameters
        return {k: p.default for k, p in params.items() if k != "batch"}

    def build(self, batch: int = 1, **options: Any) -> Graph:
        _check_options(self, batch, options)
        try:
            graph = self.builder(batch=batch, **options)
        except ZooError:
            raise
        except IRError as e:  # e.g. an image too small for the network's strides
            shown = ", ".join(f"{k}={v!r}" for k, v in options.items()) or "default options"
            raise BadOption(self.name, f"cannot be built with batch={batch}, {shown}: {e}") from e
        return graph


def _check_options(spec: ModelSpec, batch: int, options: Mapping[str, Any]) -> None:
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise BadOption(spec.name, f"batch must be an int >= 1, found {batch!r}")
    known = spec.options
    for key, value in options.items():
        if key not in known:
            raise BadOption(spec.name, f"unknown option {key!r}; known options: "
                            f"batch, {', '.join(known)}")
        default = known[key]
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise BadOption(spec.name, f"option {key!r} must be a bool, found {value!r}")
        elif isinstance(default, int) and key != "image_size":  # image_size may be (h, w)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BadOption(spec.name, f"option {key!r} must be an int >= 1, found {value!r}")


def _image(size: int) -> tuple[InputSpec, ...]:
    return (InputSpec("image", (3, size, size)),)


_TOKENS = (InputSpec("input_ids", (128,), "i64"), InputSpec("token_type_ids", (128,), "i64"))
_IDS = (InputSpec("input_ids", (128,), "i64"),)

_RESNET = ("He, Zhang, Ren, Sun. Deep Residual Learning for Image Recognition. CVPR 2016 "
           "(arXiv:1512.03385)")
_SQUEEZE = ("Iandola et al. SqueezeNet: AlexNet-level accuracy with 50x fewer parameters and "
            "<0.5MB model size. arXiv:1602.07360, 2016")
_BERT = ("Devlin, Chang, Lee, Toutanova. BERT: Pre-training of Deep Bidirectional Transformers "
         "for Language Understanding. NAACL 2019 (arXiv:1810.04805)")

_SPECS = (
    ModelSpec("resnet18", "ResNet-18 (basic blocks 2-2-2-2), 224x224, torchvision layout",
              resnet18, _image(224), _RESNET),
    ModelSpec("resnet50", "ResNet-50 (bottlenecks 3-4-6-3, stride in the 3x3 conv), 224x224",
              resnet50, _image(224), _RESNET),
    ModelSpec("resnext50", "ResNeXt-50 32x4d (grouped 3x3 convs, 32 groups), 224x224",
              resnext50, _image(224),
              "Xie, Girshick, Dollar, Tu, He. Aggregated Residual Transformations for Deep "
              "Neural Networks. CVPR 2017 (arXiv:1611.05431)", aliases=("resnext50_32x4d",)),
    ModelSpec("inception_v3", "Inception-v3, 299x299, no auxiliary head (aux_logits=True "
              "adds it as a second output)", inception_v3, _image(299),
              "Szegedy, Vanhoucke, Ioffe, Shlens, Wojna. Rethinking the Inception Architecture "
              "for Computer Vision. CVPR 2016 (arXiv:1512.00567)"),
    ModelSpec("squeezenet", "SqueezeNet v1.1 (fire modules), 224x224", squeezenet1_1,
              _image(224), _SQUEEZE + "; v1.1 from github.com/forresti/SqueezeNet",
              aliases=("squeezenet1_1",)),
    ModelSpec("squeezenet1_0", "SqueezeNet v1.0 (fire modules, 7x7 stem), 224x224",
              squeezenet1_0, _image(224), _SQUEEZE),
    ModelSpec("nasnet_a", "NASNet-A Mobile (4 @ 1056): normal and reduction cells with "
              "separable convs, 224x224", nasnet_a, _image(224),
              "Zoph, Vasudevan, Shlens, Le. Learning Transferable Architectures for Scalable "
              "Image Recognition. CVPR 2018 (arXiv:1707.07012)",
              aliases=("nasnet_a_mobile", "nasnet_mobile", "nasnet")),
    ModelSpec("bert_base", "BERT-base encoder (12 layers, hidden 768, 12 heads, FFN 3072) + "
              "pooler, seq 128", bert_base, _TOKENS, _BERT, aliases=("bert",)),
    ModelSpec("bert_small", "BERT-small encoder (4 layers, hidden 512, 8 heads, FFN 2048) + "
              "pooler, seq 128", bert_small, _TOKENS,
              "Turc, Chang, Lee, Toutanova. Well-Read Students Learn Better: On the Importance "
              "of Pre-training Compact Models. arXiv:1908.08962, 2019"),
    ModelSpec("csrnet", "CSRNet configuration B: VGG-16 front end + dilation-2 back end, "
              "density map at 1/8 size, 224x224", csrnet, _image(224),
              "Li, Zhang, Chen. CSRNet: Dilated Convolutional Neural Networks for "
              "Understanding the Highly Congested Scenes. CVPR 2018 (arXiv:1802.10062)"),
    ModelSpec("vgg19", "VGG-19 (configuration E, no batch norm), 224x224", vgg19, _image(224),
              "Simonyan, Zisserman. Very Deep Convolutional Networks for Large-Scale Image "
              "Recognition. ICLR 2015 (arXiv:1409.1556)"),
    ModelSpec("llama3_2_1b", "Llama 3.2 1B decoder (16 layers, hidden 2048, 32 query / 8 KV "
              "heads, SwiGLU 8192, RoPE with Llama 3 scaling, tied LM head), prefill of 128 "
              "tokens -> logits", llama3_2_1b, _IDS,
              "Meta. Llama 3.2 model card and config.json, 2024; architecture: Grattafiori et "
              "al. The Llama 3 Herd of Models. arXiv:2407.21783, 2024",
              aliases=("llama", "llama3_2", "llama_1b")),
    ModelSpec("gpt2", "GPT-2 small (12 layers, hidden 768, 12 heads, learned positions, "
              "GELU tanh, tied LM head), prefill of 128 tokens -> logits", gpt2_small, _IDS,
              "Radford, Wu, Child, Luan, Amodei, Sutskever. Language Models are Unsupervised "
              "Multitask Learners. OpenAI, 2019", aliases=("gpt2_small", "gpt2_124m")),
    ModelSpec("t5_small_encoder", "T5-small encoder (6 layers, d_model 512, 8 heads, "
              "bucketed relative position bias, ReLU FFN 2048), seq 128", t5_small_encoder,
              _IDS, "Raffel et al. Exploring the Limits of Transfer Learning with a Unified "
              "Text-to-Text Transformer. JMLR 2020 (arXiv:1910.10683)",
              aliases=("t5_encoder", "t5_small")),
    ModelSpec("vit_b16", "ViT-B/16 (12 layers, hidden 768, 16x16 patches, class token, exact "
              "GELU), 224x224, torchvision layout", vit_b16, _image(224),
              "Dosovitskiy et al. An Image is Worth 16x16 Words: Transformers for Image "
              "Recognition at Scale. ICLR 2021 (arXiv:2010.11929)", aliases=("vit", "vit_b_16")),
    ModelSpec("mobilenet_v2", "MobileNetV2 1.0 (inverted residuals, depthwise convs, ReLU6), "
              "224x224", mobilenet_v2, _image(224),
              "Sandler, Howard, Zhu, Zhmoginov, Chen. MobileNetV2: Inverted Residuals and "
              "Linear Bottlenecks. CVPR 2018 (arXiv:1801.04381)",
              aliases=("mobilenetv2", "mobilenet")),
    ModelSpec("efficientnet_b0", "EfficientNet-B0 (MBConv with squeeze-excite, SiLU), 224x224",
              efficientnet_b0, _image(224),
              "Tan, Le. EfficientNet: Rethinking Model Scaling for Convolutional Neural "
              "Networks. ICML 2019 (arXiv:1905.11946)", aliases=("efficientnet",)),
    ModelSpec("llama2_7b", "Llama 2 7B decoder at graph scale (32 layers, hidden 4096, 32 "
              "heads, SwiGLU 11008; weights as shapes only), prefill of 128 tokens -> logits",
              llama2_7b, _IDS,
              "Touvron et al. Llama 2: Open Foundation and Fine-Tuned Chat Models. "
              "arXiv:2307.09288, 2023", aliases=("llama_7b", "llama2"), scale=True),
)

MODELS: Mapping[str, ModelSpec] = MappingProxyType({s.name: s for s in _SPECS})
_ALIASES = {alias: s.name for s in _SPECS for alias in s.aliases}


def names(scale: bool = False) -> list[str]:
    """Model names; graph-scale models (`ModelSpec.scale`) only with `scale=True`."""
    return [k for k, s in MODELS.items() if scale or not s.scale]


def get(name: str) -> ModelSpec:
    """The spec of a model; `name` may use '-' or '.' for '_', any case, or an alias."""
    key = name.strip().lower().replace("-", "_").replace(".", "_")
    key = _ALIASES.get(key, key)
    try:
        return MODELS[key]
    except KeyError:
        raise UnknownModel(name, names(scale=True)) from None


def build(name: str, batch: int = 1, **options: Any) -> Graph:
    """Build a zoo model at a batch size; options as listed by `get(name).options`."""
    return get(name).build(batch, **options)
