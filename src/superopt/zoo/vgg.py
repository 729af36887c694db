"""VGG-19 (configuration E), laid out as torchvision builds it (no batch norm).

Simonyan and Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
Recognition", ICLR 2015 (arXiv:1409.1556). Sixteen 3x3 convolutions with bias and relu in
five stages separated by 2x2 max pools, then three fully connected layers (dropout is the
identity at inference and is left out). The VGG-16 front end of CSRNet reuses `features`.
"""

from __future__ import annotations

from collections.abc import Sequence

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net, image_hw
from superopt.zoo.errors import BadOption

POOL = "M"
# Output channels of each 3x3 convolution, with "M" for a 2x2 max pool (paper, Table 1).
VGG16 = (64, 64, POOL, 128, 128, POOL, 256, 256, 256, POOL, 512, 512, 512, POOL,
         512, 512, 512, POOL)
VGG19 = (64, 64, POOL, 128, 128, POOL, 256, 256, 256, 256, POOL, 512, 512, 512, 512, POOL,
         512, 512, 512, 512, POOL)


def features(net: Net, x: Value, cfg: Sequence[int | str], prefix: str = "features") -> Value:
    """3x3/pad-1 conv + relu per int and a 2x2/2 max pool per "M", named like torchvision."""
    index = 0
    for item in cfg:
        if item == POOL:
            x = net.maxpool(x, 2, 2)
            index += 1
        else:
            assert isinstance(item, int)
            x = net.relu(net.conv(x, f"{prefix}.{index}", item, 3, padding=1, bias=True))
            index += 2
    return x


def vgg19(batch: int = 1, image_size: int | tuple[int, int] = 224,
          num_classes: int = 1000) -> Graph:
    h, w = image_hw("vgg19", image_size, minimum=32)
    net = Net("vgg19")
    x = features(net, net.input("image", (batch, 3, h, w)), VGG19)
    # torchvision's AdaptiveAvgPool2d((7, 7)): the identity at 224x224, an exact average
    # pool when the feature map is a multiple of 7; other sizes would need uneven windows.
    fh, fw = net.shape(x)[2:]
    if fh % 7 or fw % 7:
        raise BadOption("vgg19", f"image_size {image_size!r} gives a {fh}x{fw} feature map; "
                        "use a multiple of 224 (a multiple of 7 after five 2x pools)")
    if (fh, fw) != (7, 7):
        x = net.avgpool(x, (fh // 7, fw // 7), (fh // 7, fw // 7))
    x = net.flatten(x)
    x = net.relu(net.linear(x, "classifier.0", 4096))
    x = net.relu(net.linear(x, "classifier.3", 4096))
    return net.build(net.linear(x, "classifier.6", num_classes))
