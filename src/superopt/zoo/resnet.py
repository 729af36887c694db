"""ResNet-18/50 and ResNeXt-50 (32x4d), laid out as torchvision builds them.

He et al., "Deep Residual Learning for Image Recognition", CVPR 2016 (arXiv:1512.03385);
Xie et al., "Aggregated Residual Transformations for Deep Neural Networks", CVPR 2017
(arXiv:1611.05431). As in torchvision ("ResNet v1.5"), a bottleneck block strides in its
3x3 convolution rather than its first 1x1, and projection shortcuts are 1x1 conv + BN used
only where the shape changes. Parameter names follow torchvision's state_dict.
"""

from __future__ import annotations

from collections.abc import Sequence

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net, image_hw


def _basic(net: Net, x: Value, name: str, planes: int, stride: int) -> Value:
    y = net.relu(net.bn(net.conv(x, f"{name}.conv1", planes, 3, stride=stride, padding=1),
                        f"{name}.bn1"))
    y = net.bn(net.conv(y, f"{name}.conv2", planes, 3, padding=1), f"{name}.bn2")
    return net.relu(net.add(y, _shortcut(net, x, name, planes, stride)))


def _bottleneck(net: Net, x: Value, name: str, planes: int, stride: int, groups: int,
                width_per_group: int) -> Value:
    width = planes * width_per_group // 64 * groups
    y = net.relu(net.bn(net.conv(x, f"{name}.conv1", width, 1), f"{name}.bn1"))
    y = net.relu(net.bn(net.conv(y, f"{name}.conv2", width, 3, stride=stride, padding=1,
                                 groups=groups), f"{name}.bn2"))
    y = net.bn(net.conv(y, f"{name}.conv3", planes * 4, 1), f"{name}.bn3")
    return net.relu(net.add(y, _shortcut(net, x, name, planes * 4, stride)))


def _shortcut(net: Net, x: Value, name: str, out: int, stride: int) -> Value:
    if stride == 1 and net.channels(x) == out:
        return x
    return net.bn(net.conv(x, f"{name}.downsample.0", out, 1, stride=stride),
                  f"{name}.downsample.1")


def resnet(name: str, blocks: Sequence[int], bottleneck: bool, batch: int = 1,
           image_size: int | tuple[int, int] = 224, num_classes: int = 1000, groups: int = 1,
           width_per_group: int = 64) -> Graph:
    """A ResNet/ResNeXt with `blocks[i]` blocks in stage i (64, 128, 256, 512 planes)."""
    h, w = image_hw(name, image_size)
    net = Net(name)
    x = net.input("image", (batch, 3, h, w))
    x = net.relu(net.bn(net.conv(x, "conv1", 64, 7, stride=2, padding=3), "bn1"))
    x = net.maxpool(x, 3, 2, 1)
    for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), blocks, strict=True)):
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            block = f"layer{stage + 1}.{i}"
            if bottleneck:
                x = _bottleneck(net, x, block, planes, stride, groups, width_per_group)
            else:
                x = _basic(net, x, block, planes, stride)
    logits = net.linear(net.global_avgpool(x), "fc", num_classes)
    return net.build(logits)


def resnet18(batch: int = 1, image_size: int | tuple[int, int] = 224,
             num_classes: int = 1000) -> Graph:
    return resnet("resnet18", (2, 2, 2, 2), False, batch, image_size, num_classes)


def resnet50(batch: int = 1, image_size: int | tuple[int, int] = 224,
             num_classes: int = 1000) -> Graph:
    return resnet("resnet50", (3, 4, 6, 3), True, batch, image_size, num_classes)


def resnext50(batch: int = 1, image_size: int | tuple[int, int] = 224,
              num_classes: int = 1000) -> Graph:
    """ResNeXt-50 32x4d: 32 groups of width 4 in the first stage's 3x3 convolutions."""
    return resnet("resnext50", (3, 4, 6, 3), True, batch, image_size, num_classes, groups=32,
                  width_per_group=4)
