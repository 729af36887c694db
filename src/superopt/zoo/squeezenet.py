"""SqueezeNet v1.0 and v1.1, laid out as torchvision builds them.

Iandola et al., "SqueezeNet: AlexNet-level accuracy with 50x fewer parameters and <0.5MB
model size", arXiv:1602.07360, 2016. v1.1 (from the authors' SqueezeNet repository) uses a
3x3/64 first convolution and pools earlier, for 2.4x less computation at the same accuracy.
A fire module is a 1x1 "squeeze" convolution feeding parallel 1x1 and 3x3 "expand"
convolutions whose outputs are concatenated; every convolution has a bias and a relu. Max
pooling uses ceil mode, as in the Caffe original.
"""

from __future__ import annotations

from dataclasses import dataclass

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net, image_hw


def _conv_relu(net: Net, x: Value, name: str, out: int, kernel: int, stride: int = 1,
               padding: int = 0) -> Value:
    return net.relu(net.conv(x, name, out, kernel, stride=stride, padding=padding, bias=True))


def _fire(net: Net, x: Value, name: str, squeeze: int, expand1: int, expand3: int) -> Value:
    s = _conv_relu(net, x, f"{name}.squeeze", squeeze, 1)
    return net.concat([_conv_relu(net, s, f"{name}.expand1x1", expand1, 1),
                       _conv_relu(net, s, f"{name}.expand3x3", expand3, 3, padding=1)])


@dataclass(frozen=True)
class _Version:
    """Stem conv and the positions of pools and fire modules in torchvision's `features`.

    Positions (not just order) are kept so that parameter names match its state_dict.
    """

    stem_out: int
    stem_kernel: int
    pools: tuple[int, ...]
    fires: tuple[tuple[int, int, int], ...]  # (feature index, squeeze, expand) per module


_VERSIONS = {
    "1_0": _Version(96, 7, (2, 6, 11),
                    ((3, 16, 64), (4, 16, 64), (5, 32, 128), (7, 32, 128), (8, 48, 192),
                     (9, 48, 192), (10, 64, 256), (12, 64, 256))),
    "1_1": _Version(64, 3, (2, 5, 8),
                    ((3, 16, 64), (4, 16, 64), (6, 32, 128), (7, 32, 128), (9, 48, 192),
                     (10, 48, 192), (11, 64, 256), (12, 64, 256))),
}


def squeezenet(name: str, version: str, batch: int = 1,
               image_size: int | tuple[int, int] = 224, num_classes: int = 1000) -> Graph:
    cfg = _VERSIONS[version]
    h, w = image_hw(name, image_size)
    net = Net(name)
    x = net.input("image", (batch, 3, h, w))
    x = _conv_relu(net, x, "features.0", cfg.stem_out, cfg.stem_kernel, stride=2)
    fires = {i: (s, e) for i, s, e in cfg.fires}
    for i in range(cfg.pools[0], max(fires) + 1):
        if i in cfg.pools:
            x = net.maxpool_ceil(x, 3, 2)
        elif i in fires:
            s, e = fires[i]
            x = _fire(net, x, f"features.{i}", s, e, e)
    x = _conv_relu(net, x, "classifier.1", num_classes, 1)
    return net.build(net.global_avgpool(x))


def squeezenet1_1(batch: int = 1, image_size: int | tuple[int, int] = 224,
                  num_classes: int = 1000) -> Graph:
    return squeezenet("squeezenet", "1_1", batch, image_size, num_classes)


def squeezenet1_0(batch: int = 1, image_size: int | tuple[int, int] = 224,
                  num_classes: int = 1000) -> Graph:
    return squeezenet("squeezenet1_0", "1_0", batch, image_size, num_classes)
