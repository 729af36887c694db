"""MobileNetV2 (width 1.0, 224x224), laid out as torchvision's `mobilenet_v2`.

Sandler, Howard, Zhu, Zhmoginov, Chen. "MobileNetV2: Inverted Residuals and Linear
Bottlenecks", CVPR 2018 (arXiv:1801.04381), Table 2: a 3x3 stride-2 stem of 32 channels,
then inverted residual blocks (expansion t, output channels c, repeats n, first stride s)
(1,16,1,1), (6,24,2,2), (6,32,3,2), (6,64,4,2), (6,96,3,1), (6,160,3,2), (6,320,1,1), a 1x1
conv to 1280, global average pooling and a 1000-way linear classifier: 3.4M parameters
(torchvision: 3,504,872) and 300M multiply-adds (torchvision: 0.30 G).

A block is a 1x1 expansion conv (left out when t = 1), a 3x3 depthwise conv (groups =
channels) carrying the stride, each followed by batch norm and ReLU6, then a linear 1x1
projection with batch norm; the input is added back when the stride is 1 and the channel
count is unchanged. ReLU6 is minimum(relu(x), 6) with one rank-0 constant 6.
"""

from __future__ import annotations

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net, image_hw
from superopt.zoo._transformer import scalar

# (expansion t, output channels c, repeats n, first stride s): the paper's Table 2
INVERTED_RESIDUALS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                      (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _relu6(net: Net, x: Value, six: Value) -> Value:
    return net.b.minimum(net.relu(x), six)


def _conv_bn_relu6(net: Net, x: Value, name: str, out: int, kernel: int, six: Value,
                   stride: int = 1, groups: int = 1) -> Value:
    y = net.conv(x, f"{name}.0", out, kernel, stride=stride, padding=(kernel - 1) // 2,
                 groups=groups)
    return _relu6(net, net.bn(y, f"{name}.1"), six)


def _block(net: Net, x: Value, name: str, t: int, out: int, stride: int, six: Value) -> Value:
    cin = net.channels(x)
    hidden = cin * t
    y, j = x, 0
    if t != 1:
        y = _conv_bn_relu6(net, y, f"{name}.conv.{j}", hidden, 1, six)
        j += 1
    y = _conv_bn_relu6(net, y, f"{name}.conv.{j}", hidden, 3, six, stride=stride,
                       groups=hidden)
    y = net.bn(net.conv(y, f"{name}.conv.{j + 1}", out, 1), f"{name}.conv.{j + 2}")
    return net.add(x, y) if stride == 1 and cin == out else y


def mobilenet_v2(batch: int = 1, image_size: int | tuple[int, int] = 224,
                 num_classes: int = 1000) -> Graph:
    """MobileNetV2 on `image` (batch, 3, H, W) -> logits (batch, num_classes)."""
    h, w = image_hw("mobilenet_v2", image_size)
    net = Net("mobilenet_v2")
    six = scalar(net, "relu6.bound", 6.0)
    x = net.input("image", (batch, 3, h, w))
    x = _conv_bn_relu6(net, x, "features.0", 32, 3, six, stride=2)
    index = 1
    for t, c, n, s in INVERTED_RESIDUALS:
        for i in range(n):
            x = _block(net, x, f"features.{index}", t, c, s if i == 0 else 1, six)
            index += 1
    x = _conv_bn_relu6(net, x, f"features.{index}", 1280, 1, six)
    return net.build(net.linear(net.global_avgpool(x), "classifier.1", num_classes))
