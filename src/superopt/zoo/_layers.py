"""Layer helpers for the zoo's builders: named parameters and common layers over a GraphBuilder.

Every parameter is a weight node without data (interpreters draw it deterministically from
its name), so names must be unique: the builder would otherwise silently share one weight
between two layers, and `Net.param` refuses a name twice to catch that mistake.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from superopt.ir.graph import Graph, GraphBuilder, Value
from superopt.zoo.errors import BadOption

Pair = int | tuple[int, int]
Padding = int | tuple[int, int] | tuple[int, int, int, int] | str


def pair(v: Pair) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def pads4(p: Padding) -> tuple[int, int, int, int] | str:
    """PyTorch-style padding (int, or (h, w)) as the IR's (top, bottom, left, right)."""
    if isinstance(p, str):
        return p
    if isinstance(p, int):
        p = (p, p)
    if len(p) == 2:
        p = (p[0], p[0], p[1], p[1])
    t = tuple(int(x) for x in p)
    return "valid" if not any(t) else (t[0], t[1], t[2], t[3])


class Net:
    """A GraphBuilder plus the layers the zoo's models are made of."""

    def __init__(self, name: str) -> None:
        self.b = GraphBuilder(name)
        self._params: set[str] = set()

    # ---- sources ----------------------------------------------------------------------

    def input(self, name: str, shape: Sequence[int], dtype: str = "f32", high: int = 0) -> Value:
        return self.b.input(name, shape, dtype, high=high)

    def param(self, name: str, shape: Sequence[int], init: str = "fan_in") -> Value:
        if name in self._params:
            raise ValueError(f"zoo builder bug: parameter name {name!r} used twice")
        self._params.add(name)
        return self.b.weight(name, shape, init=init)

    def const(self, name: str, data: np.ndarray) -> Value:
        """A constant with data (e.g. the attention scale); counted as a weight by stats."""
        if name in self._params:
            raise ValueError(f"zoo builder bug: constant name {name!r} used twice")
        self._params.add(name)
        arr = np.asarray(data, dtype=np.float32)
        return self.b.weight(name, arr.shape, data=arr)

    def shape(self, v: Value) -> tuple[int, ...]:
        return self.b.shape(v)

    def channels(self, v: Value) -> int:
        return self.b.shape(v)[1]

    # ---- layers -----------------------------------------------------------------------

    def conv(self, x: Value, name: str, out: int, kernel: Pair, *, stride: Pair = 1,
             padding: Padding = 0, dilation: Pair = 1, groups: int = 1,
             bias: bool = False) -> Value:
        """Conv2d with an OIHW weight `name.weight` and, with bias, `name.bias` of shape (O,1,1).

        The bias is a separate ewadd (not a fused activation) so that a following relu
        sees the biased value, as in the published models.
        """
        kh, kw = pair(kernel)
        cin = self.channels(x)
        w = self.param(f"{name}.weight", (out, cin // groups, kh, kw))
        y = self.b.conv2d(x, w, stride=pair(stride), padding=pads4(padding),
                          dilation=pair(dilation), groups=groups)
        if bias:
            y = self.b.ewadd(y, self.param(f"{name}.bias", (out, 1, 1), init="normal"))
        return y

    def bn(self, x: Value, name: str, eps: float = 1e-5) -> Value:
        """Inference batch norm with its four per-channel tensors (two learned, two statistics)."""
        c = self.channels(x)
        return self.b.batch_norm(
            x,
            self.param(f"{name}.weight", (c,), init="positive"),
            self.param(f"{name}.bias", (c,), init="normal"),
            self.param(f"{name}.running_mean", (c,), init="normal"),
            self.param(f"{name}.running_var", (c,), init="positive"),
            eps=eps)

    def linear(self, x: Value, name: str, out: int, bias: bool = True) -> Value:
        """x (..., K) @ W (K, out) + b; W is stored (in, out), the transpose of torch's layout."""
        k = self.shape(x)[-1]
        y = self.b.matmul(x, self.param(f"{name}.weight", (k, out)))
        if bias:
            y = self.b.ewadd(y, self.param(f"{name}.bias", (out,), init="normal"))
        return y

    def relu(self, x: Value) -> Value:
        return self.b.relu(x)

    def add(self, a: Value, b: Value) -> Value:
        return self.b.ewadd(a, b)

    def concat(self, xs: Sequence[Value], axis: int = 1) -> Value:
        return self.b.concat(*xs, axis=axis)

    def maxpool(self, x: Value, kernel: Pair, stride: Pair, padding: Padding = 0) -> Value:
        return self.b.pool2d_max(x, kernel=pair(kernel), stride=pair(stride),
                                 padding=pads4(padding))

    def maxpool_ceil(self, x: Value, kernel: int, stride: int) -> Value:
        """PyTorch MaxPool2d(ceil_mode=True) without padding: extra bottom/right cells.

        The IR's max pooling never lets a padded cell win, so padding the end until the
        last (partial) window fits reproduces ceil mode exactly.
        """
        _, _, h, w = self.shape(x)
        extra = []
        for size in (h, w):
            out = -(-(size - kernel) // stride) + 1
            if (out - 1) * stride >= size:  # PyTorch drops a window that starts past the end
                out -= 1
            extra.append(max((out - 1) * stride + kernel - size, 0))
        return self.maxpool(x, kernel, stride, (0, extra[0], 0, extra[1]))

    def avgpool(self, x: Value, kernel: Pair, stride: Pair, padding: Padding = 0,
                count_include_pad: bool = True) -> Value:
        return self.b.pool2d_avg(x, kernel=pair(kernel), stride=pair(stride),
                                 padding=pads4(padding), count_include_pad=count_include_pad)

    def global_avgpool(self, x: Value) -> Value:
        """(N, C, H, W) -> (N, C): adaptive average pooling to 1x1 followed by flatten."""
        return self.b.reduce_mean(x, axes=(2, 3), keepdims=False)

    def flatten(self, x: Value) -> Value:
        return self.b.reshape(x, shape=(self.shape(x)[0], -1))

    def build(self, outputs: Value | Sequence[Value]) -> Graph:
        return self.b.build(outputs)


def image_hw(model: str, size: int | Sequence[int], minimum: int = 1) -> tuple[int, int]:
    """An `image_size` option (int or (height, width)) checked against the model's minimum."""
    hw = (size, size) if isinstance(size, int) else tuple(size)
    if (len(hw) != 2 or not all(isinstance(d, int) and not isinstance(d, bool) for d in hw)
            or min(hw) < minimum):
        raise BadOption(model, f"image_size must be an int or (height, width) of ints >= "
                        f"{minimum}, found {size!r}")
    return (int(hw[0]), int(hw[1]))
