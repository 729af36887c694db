"""Inception-v3 for 299x299 images, laid out as torchvision builds it.

Szegedy et al., "Rethinking the Inception Architecture for Computer Vision", CVPR 2016
(arXiv:1512.00567). Every convolution is torchvision's BasicConv2d: conv without bias,
batch norm (eps 0.001), relu. Branch pooling uses zero-padded average pooling that counts
the padding (PyTorch's default). The auxiliary classifier is a training-time head and is
left out unless `aux_logits=True`; it is then a second output. Parameter names follow
torchvision's state_dict.
"""

from __future__ import annotations

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net, Padding, Pair, image_hw


def _conv(net: Net, x: Value, name: str, out: int, kernel: Pair, stride: Pair = 1,
          padding: Padding = 0) -> Value:
    y = net.conv(x, f"{name}.conv", out, kernel, stride=stride, padding=padding)
    return net.relu(net.bn(y, f"{name}.bn", eps=0.001))


def _pool_branch(net: Net, x: Value, name: str, out: int) -> Value:
    return _conv(net, net.avgpool(x, 3, 1, 1), name, out, 1)


def _inception_a(net: Net, x: Value, name: str, pool_features: int) -> Value:
    b1 = _conv(net, x, f"{name}.branch1x1", 64, 1)
    b5 = _conv(net, x, f"{name}.branch5x5_1", 48, 1)
    b5 = _conv(net, b5, f"{name}.branch5x5_2", 64, 5, padding=2)
    b3 = _conv(net, x, f"{name}.branch3x3dbl_1", 64, 1)
    b3 = _conv(net, b3, f"{name}.branch3x3dbl_2", 96, 3, padding=1)
    b3 = _conv(net, b3, f"{name}.branch3x3dbl_3", 96, 3, padding=1)
    bp = _pool_branch(net, x, f"{name}.branch_pool", pool_features)
    return net.concat([b1, b5, b3, bp])


def _inception_b(net: Net, x: Value, name: str) -> Value:
    b3 = _conv(net, x, f"{name}.branch3x3", 384, 3, stride=2)
    bd = _conv(net, x, f"{name}.branch3x3dbl_1", 64, 1)
    bd = _conv(net, bd, f"{name}.branch3x3dbl_2", 96, 3, padding=1)
    bd = _conv(net, bd, f"{name}.branch3x3dbl_3", 96, 3, stride=2)
    return net.concat([b3, bd, net.maxpool(x, 3, 2)])


def _inception_c(net: Net, x: Value, name: str, c7: int) -> Value:
    b1 = _conv(net, x, f"{name}.branch1x1", 192, 1)
    b7 = _conv(net, x, f"{name}.branch7x7_1", c7, 1)
    b7 = _conv(net, b7, f"{name}.branch7x7_2", c7, (1, 7), padding=(0, 3))
    b7 = _conv(net, b7, f"{name}.branch7x7_3", 192, (7, 1), padding=(3, 0))
    bd = _conv(net, x, f"{name}.branch7x7dbl_1", c7, 1)
    bd = _conv(net, bd, f"{name}.branch7x7dbl_2", c7, (7, 1), padding=(3, 0))
    bd = _conv(net, bd, f"{name}.branch7x7dbl_3", c7, (1, 7), padding=(0, 3))
    bd = _conv(net, bd, f"{name}.branch7x7dbl_4", c7, (7, 1), padding=(3, 0))
    bd = _conv(net, bd, f"{name}.branch7x7dbl_5", 192, (1, 7), padding=(0, 3))
    bp = _pool_branch(net, x, f"{name}.branch_pool", 192)
    return net.concat([b1, b7, bd, bp])


def _inception_d(net: Net, x: Value, name: str) -> Value:
    b3 = _conv(net, x, f"{name}.branch3x3_1", 192, 1)
    b3 = _conv(net, b3, f"{name}.branch3x3_2", 320, 3, stride=2)
    b7 = _conv(net, x, f"{name}.branch7x7x3_1", 192, 1)
    b7 = _conv(net, b7, f"{name}.branch7x7x3_2", 192, (1, 7), padding=(0, 3))
    b7 = _conv(net, b7, f"{name}.branch7x7x3_3", 192, (7, 1), padding=(3, 0))
    b7 = _conv(net, b7, f"{name}.branch7x7x3_4", 192, 3, stride=2)
    return net.concat([b3, b7, net.maxpool(x, 3, 2)])


def _inception_e(net: Net, x: Value, name: str) -> Value:
    b1 = _conv(net, x, f"{name}.branch1x1", 320, 1)
    b3 = _conv(net, x, f"{name}.branch3x3_1", 384, 1)
    b3 = net.concat([_conv(net, b3, f"{name}.branch3x3_2a", 384, (1, 3), padding=(0, 1)),
                     _conv(net, b3, f"{name}.branch3x3_2b", 384, (3, 1), padding=(1, 0))])
    bd = _conv(net, x, f"{name}.branch3x3dbl_1", 448, 1)
    bd = _conv(net, bd, f"{name}.branch3x3dbl_2", 384, 3, padding=1)
    bd = net.concat([_conv(net, bd, f"{name}.branch3x3dbl_3a", 384, (1, 3), padding=(0, 1)),
                     _conv(net, bd, f"{name}.branch3x3dbl_3b", 384, (3, 1), padding=(1, 0))])
    bp = _pool_branch(net, x, f"{name}.branch_pool", 192)
    return net.concat([b1, b3, bd, bp])


def _aux(net: Net, x: Value, num_classes: int) -> Value:
    y = net.avgpool(x, 5, 3)
    y = _conv(net, y, "AuxLogits.conv0", 128, 1)
    y = _conv(net, y, "AuxLogits.conv1", 768, 5)
    return net.linear(net.global_avgpool(y), "AuxLogits.fc", num_classes)


def inception_v3(batch: int = 1, image_size: int | tuple[int, int] = 299,
                 num_classes: int = 1000, aux_logits: bool = False) -> Graph:
    # 75 is the smallest input every stride-2 valid convolution and pooling accepts.
    h, w = image_hw("inception_v3", image_size, minimum=75)
    net = Net("inception_v3")
    x = net.input("image", (batch, 3, h, w))
    x = _conv(net, x, "Conv2d_1a_3x3", 32, 3, stride=2)
    x = _conv(net, x, "Conv2d_2a_3x3", 32, 3)
    x = _conv(net, x, "Conv2d_2b_3x3", 64, 3, padding=1)
    x = net.maxpool(x, 3, 2)
    x = _conv(net, x, "Conv2d_3b_1x1", 80, 1)
    x = _conv(net, x, "Conv2d_4a_3x3", 192, 3)
    x = net.maxpool(x, 3, 2)
    x = _inception_a(net, x, "Mixed_5b", 32)
    x = _inception_a(net, x, "Mixed_5c", 64)
    x = _inception_a(net, x, "Mixed_5d", 64)
    x = _inception_b(net, x, "Mixed_6a")
    x = _inception_c(net, x, "Mixed_6b", 128)
    x = _inception_c(net, x, "Mixed_6c", 160)
    x = _inception_c(net, x, "Mixed_6d", 160)
    x = _inception_c(net, x, "Mixed_6e", 192)
    aux = _aux(net, x, num_classes) if aux_logits else None
    x = _inception_d(net, x, "Mixed_7a")
    x = _inception_e(net, x, "Mixed_7b")
    x = _inception_e(net, x, "Mixed_7c")
    logits = net.linear(net.global_avgpool(x), "fc", num_classes)
    return net.build([logits] if aux is None else [logits, aux])
