"""Transposed convolution (ONNX ConvTranspose, torch's conv_transpose1d/2d) from the IR's
matmul, conv2d and movement ops, for both importers.

A transposed convolution scatters each input pixel through the kernel. Where the kernel
tiles the output exactly (kernel == stride, no padding, dilation 1, one group: U-Net's and
DPT's up-convolutions), each input pixel owns a disjoint kh x kw block: a matmul over the
channels and a pixel shuffle (reshape, transpose, reshape). Otherwise it is the ordinary
convolution, with the kernel flipped and its channel axes swapped (per group), of the input
with stride-1 zeros between its pixels (reshape, pad, reshape, slice) padded by
dilation * (kernel - 1) - padding on each side; negative padding crops the result instead.
Both are exact: the zeros add nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from superopt.ir.graph import GraphBuilder, Value


def conv_transpose2d(b: GraphBuilder, x: Value, w: np.ndarray,
                     weight: Callable[[np.ndarray, str], Value], stride: Sequence[int],
                     padding: Sequence[int], output_padding: Sequence[int],
                     dilation: Sequence[int], groups: int) -> Value:
    """x (N, Cin, H, W) through the transposed convolution with kernel w (Cin, Cout/groups,
    kh, kw); padding (top, bottom, left, right) as the IR's conv2d takes it. `weight(a,
    hint)` makes a constant the graph reads. No bias (the importers add it their way)."""
    n, cin, h, wd = b.shape(x)
    if w.ndim != 4 or w.shape[0] != cin or cin % groups:
        raise ValueError(f"kernel of shape {list(w.shape)} for {cin} input channels in "
                         f"{groups} groups")
    kh, kw = int(w.shape[2]), int(w.shape[3])
    cout = int(w.shape[1]) * groups
    sh, sw = (int(s) for s in stride)
    dh, dw = (int(d) for d in dilation)
    oph, opw = (int(p) for p in output_padding)
    top, bottom, left, right = (int(p) for p in padding)
    if min(sh, sw, dh, dw) < 1 or not (0 <= oph < max(sh, dh) and 0 <= opw < max(sw, dw)):
        raise ValueError(f"stride {list(stride)}, dilation {list(dilation)} and output "
                         f"padding {list(output_padding)}")
    out_h = (h - 1) * sh - top - bottom + dh * (kh - 1) + oph + 1
    out_w = (wd - 1) * sw - left - right + dw * (kw - 1) + opw + 1
    if out_h < 1 or out_w < 1:
        raise ValueError(f"an output of {out_h}x{out_w}")
    if (kh, kw) == (sh, sw) and (dh, dw) == (1, 1) and groups == 1 and \
            not any((top, bottom, left, right, oph, opw)):
        rows = b.op("transpose", x, perm=(0, 2, 3, 1))  # N, H, W, Cin
        y = b.op("matmul", rows, weight(np.ascontiguousarray(w.reshape(cin, cout * kh * kw)),
                                        "conv_transpose.blocks"))
        y = b.op("reshape", y, shape=(n, h, wd, cout, kh, kw))
        y = b.op("transpose", y, perm=(0, 3, 1, 4, 2, 5))  # N, Cout, H, kh, W, kw
        out = b.op("reshape", y, shape=(n, cout, h * kh, wd * kw))
        assert isinstance(out, Value)
        return out
    y = x
    if (sh, sw) != (1, 1):  # stride - 1 zeros after each pixel, none after the last
        y = b.op("reshape", y, shape=(n, cin, h, 1, wd, 1))
        y = b.op("pad", y, pads=(0, 0, 0, 0, 0, 0, 0, 0, 0, sh - 1, 0, sw - 1))
        y = b.op("reshape", y, shape=(n, cin, h * sh, wd * sw))
        y = b.op("slice", y, starts=(0, 0, 0, 0),
                 ends=(n, cin, (h - 1) * sh + 1, (wd - 1) * sw + 1))
    # Kernel (Cin, Cout/g, kh, kw) -> per group swapped and flipped -> (Cout, Cin/g, kh, kw).
    per = w.reshape(groups, cin // groups, cout // groups, kh, kw)
    flipped = np.ascontiguousarray(per.transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1].reshape(
        cout, cin // groups, kh, kw))
    full = (dh * (kh - 1) - top, dh * (kh - 1) - bottom + oph,
            dw * (kw - 1) - left, dw * (kw - 1) - right + opw)
    y = b.op("conv2d", y, weight(flipped, "conv_transpose.kernel"), stride=(1, 1),
             padding=tuple(max(p, 0) for p in full), dilation=(dh, dw), groups=groups)
    if min(full) < 0:  # padding past the kernel's reach crops the output
        ch, cw = b.shape(y)[2:]
        y = b.op("slice", y, starts=(0, 0, max(-full[0], 0), max(-full[2], 0)),
                 ends=(n, cout, ch - max(-full[1], 0), cw - max(-full[3], 0)))
    assert isinstance(y, Value) and tuple(b.shape(y)) == (n, cout, out_h, out_w)
    return y


__all__ = ["conv_transpose2d"]
