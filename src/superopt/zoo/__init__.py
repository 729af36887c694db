"""The model zoo: published architectures built directly with the IR builder.

The models are the ones TASO, PET and Tensat evaluate, as plain inference graphs (no batch
norm folding or other rewriting): `build("resnet50", batch=8)` returns a linted `Graph`.
Weights carry no data; interpreters draw them deterministically from their names. Names
are case-insensitive and accept '-' or '.' for '_' ("bert-base", "squeezenet1.1").
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
from superopt.zoo.errors import BadOption, UnknownModel, ZooError
from superopt.zoo.inception import inception_v3
from superopt.zoo.nasnet import nasnet_a
from superopt.zoo.resnet import resnet18, resnet50, resnext50
from superopt.zoo.squeezenet import squeezenet1_0, squeezenet1_1
from superopt.zoo.vgg import vgg19

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
)

MODELS: Mapping[str, ModelSpec] = MappingProxyType({s.name: s for s in _SPECS})
_ALIASES = {alias: s.name for s in _SPECS for alias in s.aliases}


def names() -> list[str]:
    return list(MODELS)


def get(name: str) -> ModelSpec:
    """The spec of a model; `name` may use '-' or '.' for '_', any case, or an alias."""
    key = name.strip().lower().replace("-", "_").replace(".", "_")
    key = _ALIASES.get(key, key)
    try:
        return MODELS[key]
    except KeyError:
        raise UnknownModel(name, names()) from None


def build(name: str, batch: int = 1, **options: Any) -> Graph:
    """Build a zoo model at a batch size; options as listed by `get(name).options`."""
    return get(name).build(batch, **options)
