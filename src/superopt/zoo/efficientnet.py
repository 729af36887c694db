"""EfficientNet-B0 (224x224), laid out as torchvision's `efficientnet_b0`.

Tan, Le. "EfficientNet: Rethinking Model Scaling for Convolutional Neural Networks", ICML
2019 (arXiv:1905.11946), Table 1: a 3x3 stride-2 stem of 32 channels, seven stages of
MBConv blocks (expansion, kernel, first stride, input and output channels, repeats)
given in `STAGES`, a 1x1 conv to 1280, global average pooling and a 1000-way classifier:
5.3M parameters and 0.39 B FLOPs (multiply-adds); torchvision: 5,288,548 and 0.39 G.

An MBConv block: a 1x1 expansion conv (left out for expansion 1), a depthwise kxk conv
(groups = channels) carrying the stride, each followed by batch norm and SiLU; a
squeeze-and-excitation gate (global average pool, 1x1 conv with bias to
max(1, input channels / 4), SiLU, 1x1 conv with bias back, sigmoid, multiply); a 1x1
projection with batch norm and no activation; the input is added back when the stride is
1 and the channel count is unchanged (stochastic depth is the identity at inference).
Batch norm eps is 1e-5 (torchvision's default for B0-B7).
"""

from __future__ import annotations

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net, image_hw

# (expansion, kernel, first stride, input channels, output channels, repeats): Table 1
STAGES = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
          (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
          (6, 3, 1, 192, 320, 1))


def _conv_bn_silu(net: Net, x: Value, name: str, out: int, kernel: int, stride: int = 1,
                  groups: int = 1) -> Value:
    y = net.conv(x, f"{name}.0", out, kernel, stride=stride, padding=(kernel - 1) // 2,
                 groups=groups)
    return net.b.silu(net.bn(y, f"{name}.1"))


def _squeeze_excite(net: Net, x: Value, name: str, squeeze: int) -> Value:
    c = net.channels(x)
    s = net.b.reduce_mean(x, axes=(2, 3), keepdims=True)
    s = net.b.silu(net.conv(s, f"{name}.fc1", squeeze, 1, bias=True))
    s = net.b.sigmoid(net.conv(s, f"{name}.fc2", c, 1, bias=True))
    return net.b.ewmul(x, s)


def _mbconv(net: Net, x: Value, name: str, expand: int, kernel: int, stride: int,
            out: int) -> Value:
    cin = net.channels(x)
    hidden = cin * expand
    y, j = x, 0
    if expand != 1:
        y = _conv_bn_silu(net, y, f"{name}.block.{j}", hidden, 1)
        j += 1
    y = _conv_bn_silu(net, y, f"{name}.block.{j}", hidden, kernel, stride=stride,
                      groups=hidden)
    y = _squeeze_excite(net, y, f"{name}.block.{j + 1}", max(1, cin // 4))
    y = net.bn(net.conv(y, f"{name}.block.{j + 2}.0", out, 1), f"{name}.block.{j + 2}.1")
    return net.add(x, y) if stride == 1 and cin == out else y


def efficientnet_b0(batch: int = 1, image_size: int | tuple[int, int] = 224,
                    num_classes: int = 1000) -> Graph:
    """EfficientNet-B0 on `image` (batch, 3, H, W) -> logits (batch, num_classes)."""
    h, w = image_hw("efficientnet_b0", image_size)
    net = Net("efficientnet_b0")
    x = net.input("image", (batch, 3, h, w))
    x = _conv_bn_silu(net, x, "features.0", 32, 3, stride=2)
    for stage, (expand, kernel, stride, _cin, out, repeats) in enumerate(STAGES, start=1):
        for i in range(repeats):
            x = _mbconv(net, x, f"features.{stage}.{i}", expand, kernel,
                        stride if i == 0 else 1, out)
    x = _conv_bn_silu(net, x, "features.8", 1280, 1)
    return net.build(net.linear(net.global_avgpool(x), "classifier.1", num_classes))
