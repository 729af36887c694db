"""NASNet-A Mobile (4 @ 1056): a stack of normal and reduction cells found by architecture search.

Zoph, Vasudevan, Shlens and Le, "Learning Transferable Architectures for Scalable Image
Recognition", CVPR 2018 (arXiv:1707.07012), Table 2: 5.3M parameters and 564M mult-adds
at 224x224. The layout follows the authors' TF-slim model as the Keras application
`NASNetMobile` reproduces it:

- stem: 3x3/2 valid conv (32 filters) + BN, then two reduction cells with 11 and 22 filters;
- three stacks of 4 normal cells (44, 88, 176 filters) with reduction cells (88, 176
  filters) between them; a normal cell outputs 6x its filters, a reduction cell 4x;
- every cell reads the two previous cell outputs; the older one is first adjusted to the
  newer one's shape (a factorised reduction of two offset 1x1/2 paths when the spatial
  size differs, else a 1x1 projection when the channel count differs);
- a separable convolution is relu, depthwise (grouped, one group per channel) then
  pointwise convolution, BN, applied twice (the first one strided in reduction cells);
- relu, global average pooling and a 1000-way fully connected layer (logits).

Padding follows TensorFlow: 'same' convolutions and average pools that do not count the
padding, and for stride 2 explicit zero padding with the extra row/column at the start
only for odd sizes (Keras' correct_pad). Batch norms use eps 0.001.
"""

from __future__ import annotations

from superopt.ir.graph import Graph, Value
from superopt.zoo._layers import Net, image_hw
from superopt.zoo.errors import BadOption

EPS = 1e-3


def _correct_pad(hw: tuple[int, ...], kernel: int) -> tuple[int, int, int, int]:
    """Zero padding before a stride-2 'valid' op so windows are centred as with 'same'."""
    h, w = hw
    k = kernel // 2
    return (k - (1 - h % 2), k, k - (1 - w % 2), k)


def _sep_conv(net: Net, x: Value, name: str, filters: int, kernel: int, stride: int) -> Value:
    c = net.channels(x)
    padding = _correct_pad(net.shape(x)[2:], kernel) if stride == 2 else "same"
    y = net.conv(x, f"{name}.depthwise", c, kernel, stride=stride, padding=padding, groups=c)
    return net.conv(y, f"{name}.pointwise", filters, 1)


def _sep_block(net: Net, x: Value, name: str, filters: int, kernel: int,
               stride: int = 1) -> Value:
    y = _sep_conv(net, net.relu(x), f"{name}.sep1", filters, kernel, stride)
    y = net.relu(net.bn(y, f"{name}.bn1", EPS))
    y = _sep_conv(net, y, f"{name}.sep2", filters, kernel, 1)
    return net.bn(y, f"{name}.bn2", EPS)


def _same_avgpool(net: Net, x: Value) -> Value:
    return net.avgpool(x, 3, 1, "same", count_include_pad=False)


def _adjust(net: Net, p: Value | None, ip: Value, filters: int, name: str) -> Value:
    """Bring the older input `p` to the spatial size and width of `ip`."""
    if p is None:
        return ip
    n, c, h, w = net.shape(p)
    if w != net.shape(ip)[3]:
        p = net.relu(p)
        p1 = net.conv(net.avgpool(p, 1, 2), f"{name}.adjust.path1", filters // 2, 1)
        # The second path sees the map shifted by one pixel (pad bottom/right, crop top/left),
        # so the two 1x1/2 samplings together cover the odd and even positions.
        shifted = net.b.pad(p, pads=(0, 0, 0, 0, 0, 0, 1, 1))
        shifted = net.b.slice(shifted, starts=(0, 0, 1, 1), ends=(n, c, h + 1, w + 1))
        p2 = net.conv(net.avgpool(shifted, 1, 2), f"{name}.adjust.path2", filters // 2, 1)
        return net.bn(net.concat([p1, p2]), f"{name}.adjust.bn", EPS)
    if c != filters:
        p = net.conv(net.relu(p), f"{name}.adjust.projection", filters, 1)
        return net.bn(p, f"{name}.adjust.bn", EPS)
    return p


def _squeeze(net: Net, ip: Value, filters: int, name: str) -> Value:
    return net.bn(net.conv(net.relu(ip), f"{name}.conv1x1", filters, 1), f"{name}.bn1x1", EPS)


def _normal_cell(net: Net, ip: Value, p: Value | None, filters: int, name: str
                 ) -> tuple[Value, Value]:
    p = _adjust(net, p, ip, filters, name)
    h = _squeeze(net, ip, filters, name)
    x1 = net.add(_sep_block(net, h, f"{name}.left1", filters, 5),
                 _sep_block(net, p, f"{name}.right1", filters, 3))
    x2 = net.add(_sep_block(net, p, f"{name}.left2", filters, 5),
                 _sep_block(net, p, f"{name}.right2", filters, 3))
    x3 = net.add(_same_avgpool(net, h), p)
    # Both operands are the same pooling of p; the builder keeps one pooling node.
    x4 = net.add(_same_avgpool(net, p), _same_avgpool(net, p))
    x5 = net.add(_sep_block(net, h, f"{name}.left5", filters, 3), h)
    return net.concat([p, x1, x2, x3, x4, x5]), ip


def _reduction_cell(net: Net, ip: Value, p: Value | None, filters: int, name: str
                    ) -> tuple[Value, Value]:
    p = _adjust(net, p, ip, filters, name)
    h = _squeeze(net, ip, filters, name)
    pads = _correct_pad(net.shape(h)[2:], 3)
    # Pools read an explicitly zero-padded map (zeros can win the max and count in the mean).
    h3 = net.b.pad(h, pads=(0, 0, pads[0], pads[2], 0, 0, pads[1], pads[3]))
    x1 = net.add(_sep_block(net, h, f"{name}.left1", filters, 5, stride=2),
                 _sep_block(net, p, f"{name}.right1", filters, 7, stride=2))
    x2 = net.add(net.maxpool(h3, 3, 2),
                 _sep_block(net, p, f"{name}.right2", filters, 7, stride=2))
    x3 = net.add(net.avgpool(h3, 3, 2),
                 _sep_block(net, p, f"{name}.right3", filters, 5, stride=2))
    x4 = net.add(_same_avgpool(net, x1), x2)
    x5 = net.add(_sep_block(net, x1, f"{name}.left5", filters, 3), net.maxpool(h3, 3, 2))
    return net.concat([x2, x3, x4, x5]), ip


def nasnet_a(batch: int = 1, image_size: int | tuple[int, int] = 224,
             num_classes: int = 1000, num_blocks: int = 4, penultimate_filters: int = 1056,
             stem_filters: int = 32, skip_reduction: bool = False) -> Graph:
    """NASNet-A; the defaults give the Mobile model (N=4 normal cells per stack, 1056).

    NASNet-A Large (6 @ 4032) is `image_size=331, num_blocks=6, penultimate_filters=4032,
    stem_filters=96, skip_reduction=True`.
    """
    hh, ww = image_hw("nasnet_a", image_size, minimum=32)
    if penultimate_filters % 96:
        # 24 cell outputs' worth of filters, and the stem cells use a quarter of those.
        raise BadOption("nasnet_a", "penultimate_filters must be a multiple of 96, found "
                        f"{penultimate_filters}")
    net = Net("nasnet_a")
    filters = penultimate_filters // 24
    x = net.input("image", (batch, 3, hh, ww))
    x = net.bn(net.conv(x, "stem.conv", stem_filters, 3, stride=2), "stem.bn", EPS)
    p: Value | None = None
    x, p = _reduction_cell(net, x, p, filters // 4, "stem1")
    x, p = _reduction_cell(net, x, p, filters // 2, "stem2")
    cell = 0
    for stack in range(3):
        if stack > 0:
            x, reduced_input = _reduction_cell(net, x, p, filters * 2**stack, f"reduce{stack}")
            # Mobile gives the next cell the reduction cell's input as its older input;
            # Large (skip_reduction) skips over it to the input of the cell before.
            p = p if skip_reduction else reduced_input
        for _ in range(num_blocks):
            x, p = _normal_cell(net, x, p, filters * 2**stack, f"cell{cell}")
            cell += 1
    x = net.global_avgpool(net.relu(x))
    return net.build(net.linear(x, "fc", num_classes))
