"""CSRNet (configuration B) for crowd-density estimation.

Li, Zhang and Chen, "CSRNet: Dilated Convolutional Neural Networks for Understanding the
Highly Congested Scenes", CVPR 2018 (arXiv:1802.10062). The front end is the first ten
convolutions (and three max pools) of VGG-16; the back end of configuration B is six 3x3
convolutions with dilation 2 (512, 512, 512, 256, 128, 64 channels, padding 2 so the size
is kept), then a 1x1 convolution to a one-channel density map at 1/8 of the input size.
Every convolution has a bias; all but the last are followed by relu.
"""

from __future__ import annotations

from superopt.ir.graph import Graph
from superopt.zoo._layers import Net, image_hw
from superopt.zoo.vgg import POOL, features

FRONTEND = (64, 64, POOL, 128, 128, POOL, 256, 256, 256, POOL, 512, 512, 512)
BACKEND_B = (512, 512, 512, 256, 128, 64)


def csrnet(batch: int = 1, image_size: int | tuple[int, int] = 224,
           dilation: int = 2) -> Graph:
    """`dilation` 1, 2 or 4 gives the paper's configurations A, B (default) or D."""
    h, w = image_hw("csrnet", image_size, minimum=8)
    net = Net("csrnet")
    x = features(net, net.input("image", (batch, 3, h, w)), FRONTEND, prefix="frontend")
    for i, out in enumerate(BACKEND_B):
        x = net.relu(net.conv(x, f"backend.{2 * i}", out, 3, padding=dilation,
                              dilation=dilation, bias=True))
    return net.build(net.conv(x, "output_layer", 1, 1, bias=True))
