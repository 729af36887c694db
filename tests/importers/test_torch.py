"""PyTorch importers: fx and export graphs compute what the torch module computes."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from superopt.importers.errors import ModelImportError, UnsupportedOpsError
from superopt.importers.torch import import_exported, import_fx
from superopt.ir import Graph, interpret

IMPORTERS = pytest.mark.parametrize("importer", [import_fx, import_exported], ids=["fx", "export"])


def reference(module: nn.Module, *inputs: torch.Tensor) -> list[np.ndarray]:
    """The module's outputs computed by torch in float64 (weights widened exactly)."""
    wide = copy.deepcopy(module).double().eval()
    args = [x.double() if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        out = wide(*args)
    outs = out if isinstance(out, tuple | list) else (out,)
    return [o.numpy() for o in outs]


def check(importer: Callable[..., Graph], module: nn.Module, feeds: dict[str, torch.Tensor],
          atol: float = 1e-7, **kwargs: object) -> Graph:
    module.eval()
    graph = importer(module, tuple(feeds.values()), **kwargs)
    got = interpret(graph, {k: v.numpy() for k, v in feeds.items()})
    want = reference(module, *feeds.values())
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=atol)
    return graph


def compute_ops(graph: Graph) -> dict[str, int]:
    return {op: n for op, n in graph.op_histogram().items() if op not in ("input", "weight")}


# ---- models --------------------------------------------------------------------------


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding="valid", bias=False)
        self.ap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)
        with torch.no_grad():  # non-trivial running statistics
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.pool(F.relu(self.bn(self.c1(x))))
        y = F.avg_pool2d(self.c2(y), 2) + 1.0
        y = self.ap(y).flatten(1)
        z = torch.cat([y, y * 2], dim=1)[:, :8]
        return self.fc(z).softmax(-1), F.silu(y)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Dropout(0.2), nn.Linear(10, 10),
                                 nn.GELU(approximate="tanh"), nn.Linear(10, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sigmoid(self.net(x * 0.5 - 1.0))
        return h.sum(-1, keepdim=True) - x.mean(1, keepdim=True) / 3


class Block(nn.Module):
    """A pre-norm transformer block with explicit attention and a causal-mask buffer."""

    def __init__(self, d: int = 16, heads: int = 2, seq: int = 8) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * d, d))
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape[0], x.shape[1], x.shape[2]
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(self.mask == 0, -1e9)
        y = torch.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(b, s, d)
        x = x + self.proj(y)
        return x + self.ff(self.ln2(x))


class CausalSdpa(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unflatten(-1, (3, 2, 8)).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class ConvVariants(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.same = nn.Conv2d(4, 4, 4, padding="same")  # even kernel: torch pads 1 before, 2 after
        self.dil = nn.Conv2d(4, 6, 3, padding=2, dilation=2, groups=2)
        self.bn = nn.BatchNorm2d(6, affine=False)
        self.mp = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
        self.ap = nn.AvgPool2d(2, stride=2, ceil_mode=True, count_include_pad=False)
        self.aap = nn.AdaptiveAvgPool2d((2, 2))
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.bn(self.dil(self.same(x)))
        a = self.aap(self.ap(self.mp(y)))
        return a, F.avg_pool2d(y, 3, 1, 1), F.conv2d(x[0], self.same.weight, stride=2)


class Functions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor([1.0, 2.0, 4.0, 8.0]))
        self.register_buffer("keep", torch.tensor([True, False, True, True]))
        self.v = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x @ self.v + (1 - x).sum(1)
        b = torch.stack(torch.chunk(x / self.scale, 2, dim=1), dim=0)
        c = torch.where(self.keep, x, 0.5) ** 2 - x.t().permute(1, 0)
        d = F.layer_norm(-x, (4,)) + torch.zeros_like(x)
        e = x.unsqueeze(1).squeeze(1).flatten() * 3
        return a, b, c, d, e


class Broadcasts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        e = x.expand(2, 3, 4)
        return e * self.w, e.reshape(2, 12), e + 1, F.pad(x, (1, 2)), x[..., 1:3], x[:, None, 0]


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids)).tanh()


class Norms(nn.Module):
    """GroupNorm (as PoolFormer's one group and in groups of two channels) and ConvNeXt-V2's
    global response norm, a 2-norm over positions."""

    def __init__(self) -> None:
        super().__init__()
        self.one = nn.GroupNorm(1, 4)
        self.two = nn.GroupNorm(2, 4, eps=1e-3)
        self.gamma = nn.Parameter(torch.randn(1, 1, 1, 4))
        with torch.no_grad():  # weights other than the default ones and zeros
            for m in (self.one, self.two):
                m.weight.uniform_(0.5, 2)
                m.bias.uniform_(-1, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = self.one(x) + F.group_norm(x, 4)
        b = self.two(x)
        nhwc = x.permute(0, 2, 3, 1)
        gx = torch.linalg.vector_norm(nhwc, ord=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        c = self.gamma * (nhwc * nx) + nhwc
        d = torch.linalg.vector_norm(x, ord=1, dim=1) + torch.linalg.vector_norm(x, ord=math.inf,
                                                                                  dim=1)
        return a, b, c, d


class Resampling(nn.Module):
    """Every interpolation mode through F.interpolate and nn.Upsample (FPN-style nearest
    doubling, segmentation heads' bilinear, antialiased downscaling, 1-D linear)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.fit = nn.Upsample(size=(7, 5), mode="bilinear", align_corners=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (self.up(x), self.fit(x),
                F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=False),
                F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True),
                F.interpolate(x, scale_factor=1.5, mode="nearest-exact"),
                # torch 2.13 mishandles this on the probes' length-1 axes (read again)
                F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True),
                F.interpolate(x[:, :, 0], scale_factor=3, mode="linear"))


class UpConvolutions(nn.Module):
    """Transposed convolutions: kernel == stride (U-Net), padded with output padding,
    grouped and dilated, 1-D, cropping (padding past the kernel), functional."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 2, stride=2)
        self.pad = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.grouped = nn.ConvTranspose2d(4, 6, 3, stride=(2, 1), padding=(0, 2), groups=2,
                                          dilation=(2, 1), bias=False)
        self.line = nn.ConvTranspose1d(4, 5, 4, stride=2, padding=1)
        self.crop = nn.ConvTranspose2d(4, 6, 1, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (self.up(x), self.pad(x), self.grouped(x), self.line(x[:, :, 0]), self.crop(x),
                F.conv_transpose2d(x, self.up.weight, stride=2))


class Einsums(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 3))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.einsum("bij,jk->bik", x, self.w), torch.einsum("bij,bkj->bik", x, x),
                torch.einsum("...j,jk", x, self.w), torch.einsum("bij->j", x),
                x.repeat(1, 2, 3), x[0].repeat(2, 1, 1))  # tiling (SigLIP's pooling probe)


class Activations(nn.Module):
    """Activations and normalisers with no IR op of their own, as modules, functions and
    methods (each importer maps them through `superopt.importers.composite`)."""

    def __init__(self) -> None:
        super().__init__()
        self.acts = nn.ModuleList([nn.ELU(0.7), nn.SELU(), nn.CELU(1.5), nn.Softplus(), nn.Mish(),
                                   nn.LogSigmoid(), nn.LeakyReLU(0.1), nn.LogSoftmax(-1)])
        self.prelu = nn.PReLU(4, init=0.3)
        self.shuffle, self.unshuffle = nn.PixelShuffle(2), nn.PixelUnshuffle(2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = [a(x) for a in self.acts]
        return (*outs, self.prelu(x), self.unshuffle(self.shuffle(x)), self.shuffle(x),
                F.log_softmax(x, dim=1), F.softplus(x, beta=2.0), F.elu(x),
                x.var(dim=(2, 3)), x.std(dim=1, keepdim=True, correction=0))


class Patches(nn.Module):
    """MobileViT-V2's unfold into tiling patches, a per-patch map, and fold back."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cols = F.unfold(x, kernel_size=2, stride=2)  # (N, C*4, patches)
        return cols, F.fold(cols.tanh(), output_size=(6, 4), kernel_size=2, stride=2)


class Transcendentals(nn.Module):
    """The element-wise ops of transformer models, on computed tensors."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p = y.abs() + 0.5  # positive: the domain of log, sqrt, rsqrt and fractional powers
        a = torch.exp(x) - torch.log(p) * torch.sqrt(p) + torch.rsqrt(p) / (x - y).abs().add(1)
        b = torch.erf(x) + torch.sin(x) * torch.cos(y) + F.silu(x) - p.pow(1.5) + p.reciprocal()
        c = torch.maximum(x, y) - torch.minimum(x, y * 0.5) + x.clamp(-0.5, 0.5) + F.relu6(y * 4)
        d = torch.where(x > y, x, y * 2) + torch.where(x <= 0.1, 1.0, x) + (x != y).float()
        e = torch.where((x >= y) & (y < 0.3), x, -x) + torch.tril(x) + x.triu(1)
        return a, b, c, d, e


class Gathers(nn.Module):
    """Tensor indexing, index_select, casts, cumsum, reductions, pads and 1-D pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(10, 3))
        self.register_buffer("idx", torch.tensor([[1, 9, 4], [0, 0, 7]]))
        self.conv = nn.Conv1d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = self.table[self.idx] + self.table.index_select(0, ids)[:, None, :].sum(0)
        b = x[:, self.idx[0]] * 2 + torch.cumsum(ids, 0)[:, None].float()
        c = F.pad(x, (1, 2), value=-1.5) + 1
        d = F.adaptive_avg_pool1d(x.unsqueeze(0), 2) + x.amax(-1, keepdim=True).unsqueeze(0)
        e = torch.max(x, dim=1).values - x.min(0)[0].sum() + (ids * 3).float().mean()
        f = self.conv(x.unsqueeze(0))
        return a, b, c, d, e, f


class ArgExtremes(nn.Module):
    """argmax/argmin (with and without a dim), max/min indices, and the row picks of a
    decoder classifier (the last non-pad token) and of CLIP's text tower (the end token)."""

    def forward(self, h: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = ids.shape[-1]
        last = (torch.arange(n, dtype=torch.int32) * (ids != 0).to(torch.int32)).argmax(-1)
        pooled = h[torch.arange(h.shape[0]), last]
        end = h[torch.arange(h.shape[0]), (ids == 2).int().argmax(dim=-1)]
        # The first 1 sits at 0 on some rows: index -1, the last row.
        wrapped = h[torch.arange(h.shape[0]), (ids == 1).int().argmax(-1) - 1]
        picks = (h.argmax(1), h.argmin(-1, keepdim=True), h.argmax(), ids.argmax(-1),
                 torch.max(h, dim=2).indices, h.min(1)[1])
        return (pooled, end, wrapped, *picks)


class InPlace(nn.Module):
    """In-place ops whose mutation nothing else reads (a fresh sum, a slice of a fresh
    product), and repeat_interleave."""

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x + 1
        y.add_(z)
        w = (x * 2)[:, 1:]
        w.mul_(z[:, :3])
        top = torch.topk(x, 2).values
        top /= top.sum(-1, keepdim=True)  # the sum reads top before the division
        return (y.relu(), w, top, x.relu().repeat_interleave(2, dim=1),
                x.repeat_interleave(3))


class TracedInPlace(nn.Module):
    """What a symbolic trace keeps reading after an in-place op: the operand (`y` after
    `y.mul_(3)`, `z` after an in-place ReLU whose result is dropped)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.fc(x)
        before = out * 1
        out += x
        out = self.relu(out)
        y = out * 1
        y.mul_(3)
        z = x * 1
        self.relu(z)
        return y, before, z


class WriteThroughView(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y[:, :2].add_(1)  # writes y's memory through a slice
        return y


class SeenInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x + 1
        a[:, :2].mul_(2)  # a itself is read afterwards: the mutation is seen
        return a.sum(-1)


class SeenInPlaceStrided(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x + 1
        a[:, ::2].mul_(2)  # functionalised, a strided slice_scatter: not imported either
        return a.sum(-1)


class SeenThroughAView(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x + 1
        v = a.view(-1)  # taken before the mutation, read after it
        a.mul_(2)
        return v * 1


class Attentions(nn.Module):
    """SDPA with grouped-query heads, with an explicit boolean mask, and RMSNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(16, 16)
        self.kv = nn.Linear(16, 8)
        self.norm = nn.RMSNorm(16, eps=1e-5)
        self.register_buffer("causal", torch.ones(6, 6, dtype=torch.bool).tril())
        self.register_buffer("band", torch.ones(6, 6, dtype=torch.bool).triu(-1))
        additive = torch.zeros(1, 1, 6, 6).masked_fill(~self.causal, float("-inf"))
        self.register_buffer("additive", additive)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.norm(x)
        q = self.q(h).unflatten(-1, (4, 4)).transpose(1, 2)  # 4 query heads
        k = self.kv(h).unflatten(-1, (2, 4)).transpose(1, 2)  # 2 key/value heads
        gqa = F.scaled_dot_product_attention(q, k, k, attn_mask=self.causal, enable_gqa=True)
        band = F.scaled_dot_product_attention(q, q, q, attn_mask=self.band, scale=0.3)
        added = F.scaled_dot_product_attention(k, k, k, attn_mask=self.additive)
        return gqa, band, F.rms_norm(x, (16,)), added


class WrittenOut(nn.Module):
    """RMSNorm, GELU (tanh form) and grouped-query attention written out as transformers'
    modelling code does."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16))
        self.q = nn.Linear(16, 16)
        self.kv = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        h = self.w * (x * torch.rsqrt(var + 1e-6))
        # GPT-2's gelu_new: GELU's tanh form written out
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3.0))))
        q = self.q(h).unflatten(-1, (4, 4)).transpose(1, 2)
        k = self.kv(h).unflatten(-1, (2, 4)).transpose(1, 2)
        b, hkv, s, d = k.shape
        k = k[:, :, None, :, :].expand(b, hkv, 2, s, d).reshape(b, hkv * 2, s, d)
        return F.scaled_dot_product_attention(q, k, k, is_causal=True)


# ---- numerical agreement -------------------------------------------------------------


@IMPORTERS
def test_convnet_matches_torch(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(0)
    g = check(importer, ConvNet(), {"x": torch.randn(2, 3, 16, 16)})
    ops = compute_ops(g)
    assert ops["conv2d"] == 2 and ops["batch_norm"] == 1
    assert ops["pool2d_max"] == 1 and ops["pool2d_avg"] == 1 and ops["softmax"] == 1


@IMPORTERS
def test_mlp_matches_torch(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(1)
    g = check(importer, MLP(), {"x": torch.randn(5, 6)})
    assert compute_ops(g)["matmul"] == 3


@IMPORTERS
def test_transformer_block_matches_torch(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(2)
    g = check(importer, Block(), {"x": torch.randn(2, 8, 16)})
    ops = compute_ops(g)
    assert ops["softmax"] == 1 and ops["layer_norm"] == 2 and ops["gelu"] == 1
    # The mask arithmetic (mask == 0, masked_fill) is folded: every weight carries data.
    assert {n.attr("name") for n in g.weight_nodes} == set(g.weights)


@IMPORTERS
def test_scaled_dot_product_attention(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(3)
    g = check(importer, CausalSdpa(), {"x": torch.randn(2, 5, 16)})
    (att,) = [n for n in g.nodes if n.op == "attention"]
    assert att.attr("causal") is True and "softmax" not in compute_ops(g)
    assert att.attr("scale") == pytest.approx(1 / math.sqrt(8))


@IMPORTERS
def test_conv_and_pool_variants(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(4)
    g = check(importer, ConvVariants(), {"x": torch.randn(2, 4, 12, 12)})
    convs = [n for n in g.nodes if n.op == "conv2d"]
    assert {n.attr("padding") for n in convs} == {(1, 2, 1, 2), (2, 2, 2, 2), (0, 0, 0, 0)}
    assert {n.attr("groups") for n in convs} == {1, 2}


@IMPORTERS
def test_functions_and_methods(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(5)
    check(importer, Functions(), {"x": torch.randn(3, 4)})


@IMPORTERS
def test_expand_and_indexing(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(6)
    g = check(importer, Broadcasts(), {"x": torch.randn(2, 1, 4)})
    # e * w and e + 1 consume the broadcast directly: only the reshape reads x expanded,
    # and the output e + 1 is expanded once computed on the small shape.
    assert compute_ops(g)["expand"] == 2
    assert compute_ops(g)["ewadd"] == 1 and g.type_of(g.outputs[2]).shape == (2, 3, 4)


@IMPORTERS
def test_transformer_elementwise_ops(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(12)
    g = check(importer, Transcendentals(), {"x": torch.randn(3, 5), "y": torch.randn(3, 5)})
    ops = compute_ops(g)
    for op in ("exp", "log", "sqrt", "rsqrt", "erf", "sin", "cos", "silu", "sub", "div", "pow",
               "recip", "maximum", "minimum", "gt", "lt", "eq", "where", "cast"):
        assert op in ops, op


@IMPORTERS
def test_group_norms_and_vector_norms(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(14)
    g = check(importer, Norms(), {"x": torch.randn(2, 4, 3, 5)}, atol=1e-6)
    ops = compute_ops(g)
    # Three group norms (1, 4 and 2 groups), each a layer norm of the grouped view; the
    # 2-norm a square root of a sum, the inf-norm a maximum.
    assert ops["layer_norm"] == 3 and ops["sqrt"] == 1 and ops["reduce_max"] == 1, ops


@IMPORTERS
def test_transposed_convolutions(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(16)
    g = check(importer, UpConvolutions(), {"x": torch.randn(2, 4, 3, 5)}, atol=1e-6)
    ops = compute_ops(g)
    # The two kernel == stride ones are matmuls; the four others convolutions.
    assert ops["matmul"] == 2 and ops["conv2d"] == 4, ops


@IMPORTERS
def test_einsum_as_matmuls(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(17)
    g = check(importer, Einsums(), {"x": torch.randn(2, 4, 5)}, atol=1e-6)
    # "...j,jk" is "bij,jk->bik" again (one matmul for both); "bij->j" is sums alone.
    assert compute_ops(g)["matmul"] == 2


def test_weight_normalised_convolution() -> None:
    # wav2vec2's positional convolution: weight = g * v / ||v|| (over all dims but 2).
    torch.manual_seed(18)
    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 4, 3, padding=1, groups=2),
                                                 name="weight", dim=2)
    g = check(import_exported, conv, {"input": torch.randn(2, 4, 7)}, atol=1e-6)
    assert compute_ops(g)["sqrt"] == 1 and compute_ops(g)["conv2d"] == 1


@IMPORTERS
def test_activations_without_an_ir_op(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(19)
    g = check(importer, Activations(), {"x": torch.randn(2, 4, 6, 4)}, atol=1e-6)
    # The safe forms: inputs where a naive exp(x) overflows stay finite.
    big = torch.tensor([800.0, -800.0]).repeat(96).reshape(2, 4, 6, 4)  # exp(800) = inf
    assert all(np.all(np.isfinite(y)) for y in interpret(g, {"x": big.numpy()}))


@IMPORTERS
def test_unfold_and_fold_of_tiling_patches(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(20)
    g = check(importer, Patches(), {"x": torch.randn(2, 3, 6, 4)})
    assert set(compute_ops(g)) <= {"reshape", "transpose", "tanh"}, compute_ops(g)


def test_overlapping_unfold() -> None:
    class Overlap(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.unfold(x, kernel_size=3, stride=1)

    # torch.export writes it as index arithmetic the importer takes (gathers); the traced
    # call itself, overlapping, is refused with the reason rather than imported wrong.
    check(import_exported, Overlap(), {"x": torch.randn(1, 2, 5, 5)})
    with pytest.raises(UnsupportedOpsError, match="overlapping or padded patches"):
        import_fx(Overlap(), (torch.randn(1, 2, 5, 5),))


@IMPORTERS
def test_interpolation_as_gathers_and_weights(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(15)
    g = check(importer, Resampling(), {"x": torch.randn(2, 3, 6, 4)}, atol=1e-6)
    ops = compute_ops(g)
    assert ops["gather"] >= 14 and "matmul" not in ops, ops


@IMPORTERS
def test_gathers_casts_and_reductions(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(13)
    g = check(importer, Gathers(), {"x": torch.randn(3, 10), "ids": torch.randint(0, 10, (3,))})
    ops = compute_ops(g)
    assert ops["gather"] >= 3 and ops["reduce_max"] >= 2 and "pad" in ops
    assert any(n.op == "conv2d" and n.attr("padding") == (0, 0, 1, 1) for n in g.nodes)


@IMPORTERS
def test_argmax_and_computed_row_picks(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(21)
    # Ids in [0, 3): ties everywhere (the first extreme index must win), right padding (0)
    # after the last token, one end token (2) per row.
    ids = torch.tensor([[1, 2, 1, 0, 0], [1, 1, 1, 2, 0], [2, 1, 0, 0, 0]])
    h = torch.randn(3, 5, 4)
    h[0, 1] = h[0, 3]  # a tie of whole rows along dim 1
    g = check(importer, ArgExtremes(), {"h": h, "ids": ids})
    assert compute_ops(g)["argmax"] == 9 and compute_ops(g)["where"] == 1, compute_ops(g)
    # On other ids the picks move with them: the index is computed, not folded.
    other = torch.tensor([[1, 1, 1, 1, 2], [2, 0, 0, 0, 0], [1, 2, 1, 1, 0]])
    got = interpret(g, {"h": h.numpy(), "ids": other.numpy()})
    for y, w in zip(got, reference(ArgExtremes(), h, other), strict=True):
        np.testing.assert_allclose(y, w, rtol=1e-6, atol=1e-7)


def test_traced_in_place_ops_update_their_operand() -> None:
    torch.manual_seed(26)
    check(import_fx, TracedInPlace(), {"x": torch.randn(2, 4)})
    with pytest.raises(UnsupportedOpsError, match=r"Tensor.add_ \(in place through a view"):
        import_fx(WriteThroughView(), (torch.randn(2, 4),))


def test_in_place_ops_nobody_sees_and_repeat_interleave() -> None:
    torch.manual_seed(22)
    g = check(import_exported, InPlace(), {"x": torch.randn(2, 4), "z": torch.randn(2, 4)})
    assert compute_ops(g)["expand"] == 2
    with pytest.raises(UnsupportedOpsError, match=r"aten.mul_.Tensor \(its mutation is"):
        import_exported(SeenInPlaceStrided(), (torch.randn(2, 4),))
    # A mutation seen elsewhere is refused as it stands; the functionalised program (torch's
    # decompositions, the importer's fallback) then imports with the right values.
    check(import_exported, SeenInPlace(), {"x": torch.randn(2, 4)})
    check(import_exported, SeenThroughAView(), {"x": torch.randn(2, 4)})


class Routing(nn.Module):
    """A mixture of experts' bookkeeping (transformers' grouped_mm experts): each row's top-2
    of 4 experts sorted by expert, the rows gathered in that order (a floor division of the
    sort's indices), a histogram of the experts and its running sum, and the sort undone
    (an index_put at the permutation into an empty tensor)."""

    def forward(self, h: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ids = torch.topk(scores, 2, dim=-1).indices.reshape(-1)
        ids_sorted, perm = torch.sort(ids)
        rows = h[perm // 2]
        # The same division as torch's decompositions write it (and truncated: equal here).
        halves = torch.div(perm, 2, rounding_mode="floor") + torch.div(perm, 2,
                                                                         rounding_mode="trunc")
        counts = torch.histc(ids_sorted.float(), bins=4, min=0, max=3)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.shape[0])
        return (counts, torch.cumsum(counts, 0, dtype=torch.int32), rows, rows[inverse],
                halves)


class ScanPieces(nn.Module):
    """Mamba's full-sequence scan: tensor_split at the sequence's end (the second piece is
    empty and unread), and an in-place copy_ into a fresh tensor."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        head, _empty = torch.tensor_split(x, [x.shape[1]], dim=1)
        first, rest = torch.tensor_split(x, [2], dim=1)
        state = torch.zeros(2, 3)
        state.copy_(x[:, 0, :3] * 2)
        return head * 1, first, rest, state + 1


class Scatters(nn.Module):
    """masked_scatter of whole rows (a vision-language model's image features placed at its
    image tokens) and of single elements; a runtime check on the token count, which
    computes only a Python number, is dropped."""

    def forward(self, x: torch.Tensor, ids: torch.Tensor, feats: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        rows = (ids == 7).unsqueeze(-1).expand_as(x)
        torch._check((ids == 7).sum().item() <= feats.shape[0])
        both = (x > 0.5) * (x < 1.5)  # a product of masks: their conjunction
        return x.masked_scatter(rows, feats), x.masked_scatter(both, feats * 10)


class Writes(nn.Module):
    """Writes into slices and rows of a fresh tensor (functionalised by torch into
    slice_scatter and select_scatter), torch.gather of varying values and expm1."""

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 2
        y[:, 1:3] = x[:, :2] + 1
        y[0] = x[1] * 3
        shift = torch.gather(x, 1, idx)  # computed indices
        fixed = torch.gather(x, 0, torch.tensor([[1, 0, 1, 1], [0, 0, 1, 0]]))
        return y, shift, fixed, torch.expm1(x * 3), torch.expm1(x * 1e-7)


class TableRouting(nn.Module):
    """Hash routing (DeepSeek-V4): a buffer maps token ids to experts, whose known values
    bound the looked-up ids; an empty piece in a concatenation; view_as."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("to_expert", torch.tensor([3, 1, 0, 2, 2, 1, 0, 3, 1, 2]))

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        experts = self.to_expert[ids]
        pairs = experts // 2
        joined = torch.cat([x, x[:, :0]], dim=1)
        return pairs, joined.view_as(x.t()), torch.histc(experts.float(), 4, 0, 3)


class GroupRouting(nn.Module):
    """Group-limited routing (DeepSeek-V3, GLM-4-MoE): the top-2 of 4 groups marked by a
    scatter of ones, then the experts of other groups masked off; logsumexp (a router's
    z-loss, Granite-MoE)."""

    def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        groups = scores.view(5, 4, 2).amax(-1)
        top = torch.topk(groups, 2, dim=-1).indices
        mask = torch.zeros_like(groups)
        mask.scatter_(1, top, 1)
        keep = mask.unsqueeze(-1).expand(5, 4, 2).reshape(5, 8)
        # Expert ids put together from pieces (PhiMoE's two picks) keep their known range.
        ids = torch.concat([top[:, :1], torch.where(top[:, 1:] > 0, top[:, 1:], 3)], dim=1)
        return (scores.masked_fill(keep == 0, -1e4), torch.logsumexp(scores, -1),
                torch.logsumexp(scores, (0, 1), keepdim=True),
                torch.histc(ids.reshape(-1).float(), 4, 0, 3))


class Regions(nn.Module):
    """A region under no_grad (torch.export wraps it in a higher-order op running a
    submodule), any/all, and log1p."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.no_grad():
            y = torch.sigmoid(x * 2) + 1
        flags = x > 0.3
        return (y.relu(), flags.any(-1), flags.all(0, keepdim=True), torch.any(flags),
                torch.log1p(x.abs() * 1e-9), torch.log1p(x.abs() * 5))


class UnknownRange(nn.Module):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return ids // 2


class Sorts(nn.Module):
    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        v, i = torch.topk(x, 3, dim=-1)
        s = torch.sort(ids, dim=1, descending=True, stable=True)
        lo = x.topk(2, dim=0, largest=False)
        return v, i, s.values, s.indices, lo.values, lo.indices


def test_masked_scatter_of_rows_and_elements() -> None:
    torch.manual_seed(27)
    x, feats = torch.randn(2, 5, 3), torch.randn(6, 3)
    ids = torch.tensor([[1, 7, 7, 2, 0], [7, 0, 0, 7, 4]])
    g = check(import_exported, Scatters(), {"x": x, "ids": ids, "feats": feats})
    # Other token positions and values: the places move with them.
    ids2 = torch.tensor([[7, 7, 7, 7, 7], [0, 0, 0, 0, 7]])
    x2 = torch.randn(2, 5, 3)
    got = interpret(g, {"x": x2.numpy(), "ids": ids2.numpy(), "feats": feats.numpy()})
    for a, w in zip(got, reference(Scatters(), x2, ids2, feats), strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-6, atol=1e-6)


class MaskedPuts(nn.Module):
    """Writes at a boolean mask of one value for every masked place: Gemma-3 zeroing its
    image tokens' ids, a row of values at masked rows, and an accumulating put."""

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        text = ids.clone()
        text[ids == 7] = 0
        rows = x.clone()
        rows[ids > 3] = torch.arange(3.0, dtype=x.dtype)
        acc = x.index_put((ids < 2,), torch.tensor(0.5, dtype=x.dtype), accumulate=True)
        return text, rows, acc


def test_index_put_at_a_boolean_mask_is_a_select() -> None:
    torch.manual_seed(29)
    x, ids = torch.randn(2, 5, 3), torch.tensor([[1, 7, 7, 2, 0], [7, 0, 0, 7, 4]])
    g = check(import_exported, MaskedPuts(), {"x": x, "ids": ids})
    ids2, x2 = torch.tensor([[7, 7, 5, 7, 7], [0, 1, 3, 4, 7]]), torch.randn(2, 5, 3)
    got = interpret(g, {"x": x2.numpy(), "ids": ids2.numpy()})
    for a, w in zip(got, reference(MaskedPuts(), x2, ids2), strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-6, atol=1e-6)

    class PerPlace(nn.Module):  # one value per masked place: in the mask's order
        def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
            y = x.clone()
            y[ids == 7] = torch.ones(4, 3)
            return y

    with pytest.raises(UnsupportedOpsError, match="one value per masked place"):
        import_exported(PerPlace(), (x, ids))


class IntegerMasks(nn.Module):
    """CPM-Ant's attention mask: an integer context of ones or'd with a causal mask, and'd
    with an equality of spans (integers that hold only 0 and 1 are masks)."""

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        context = torch.full((1, n), 1, dtype=torch.int32)
        causal = torch.arange(n) <= torch.arange(n).view(-1, 1)
        keep = context[:, None, :] | (context[:, :, None] == 0) & causal.view(1, n, n)
        keep = keep & (ids[:, :, None] > ids[:, None, :])
        return x.masked_fill(keep == 0, -1.0) * keep


def test_and_or_of_integer_masks() -> None:
    x, ids = torch.randn(1, 5, 5), torch.tensor([[3, 1, 4, 1, 5]])
    g = check(import_exported, IntegerMasks(), {"x": x, "ids": ids})
    ids2 = torch.tensor([[2, 7, 1, 8, 2]])
    got = interpret(g, {"x": x.numpy(), "ids": ids2.numpy()})[0]
    np.testing.assert_allclose(got, reference(IntegerMasks(), x, ids2)[0], rtol=1e-6)

    class Bits(nn.Module):  # a bitwise and of integers of any value has no IR form
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return ids & (ids + 1)

    with pytest.raises(UnsupportedOpsError, match="not known to be 0 or 1"):
        import_exported(Bits(), (ids,))


class ComplexRotary(nn.Module):
    """A rotary embedding written with complex numbers (DeepSeek-V2, Llama-4): pairs of
    channels viewed as complex, times unit phasors (from live positions through
    torch.polar, and a folded constant one), viewed back as real pairs."""

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
        d = x.shape[-1]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        freqs = pos.float()[:, None] * inv[None, :]
        cis = torch.polar(torch.ones_like(freqs), freqs) * 0.5
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        turned = torch.view_as_real(xc * cis[None, None]).flatten(3)
        fixed = torch.polar(torch.ones(d // 2), torch.linspace(0.0, 3.0, d // 2))
        mixed = xc + xc * fixed - 2 * xc
        return turned.type_as(x), torch.view_as_real(mixed.transpose(1, 2)), mixed.imag


def test_complex_products_as_pairs_of_real_parts() -> None:
    torch.manual_seed(30)
    x, pos = torch.randn(1, 2, 5, 8), torch.tensor([0, 1, 2, 3, 4])
    g = check(import_exported, ComplexRotary(), {"x": x, "pos": pos}, atol=1e-6)
    pos2, x2 = torch.tensor([7, 3, 9, 0, 2]), torch.randn(1, 2, 5, 8)
    got = interpret(g, {"x": x2.numpy(), "pos": pos2.numpy()})
    for a, w in zip(got, reference(ComplexRotary(), x2, pos2), strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-6, atol=1e-6)

    class Modulus(nn.Module):  # |z| reads values beyond products and sums
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.view_as_complex(x.reshape(2, 4, 2)).abs()

    with pytest.raises(UnsupportedOpsError, match="abs of a complex tensor"):
        import_exported(Modulus(), (torch.randn(2, 8),))

    class Phasors(nn.Module):  # a complex result has no IR form
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.view_as_complex(x.reshape(2, 4, 2)) * 2

    with pytest.raises(ModelImportError, match="output 0 is a complex tensor"):
        import_exported(Phasors(), (torch.randn(2, 8),))


class WidePool(nn.Module):
    """EfficientNet's pooler: a kernel far wider than the map with ceil_mode (one window,
    divided by the cells inside)."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.AvgPool2d(1280, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wide(x)


@IMPORTERS
def test_a_pool_window_wider_than_the_map_is_a_mean(importer: Callable[..., Graph]) -> None:
    g = check(importer, WidePool(), {"x": torch.randn(2, 4, 3, 2)})
    assert g.op_histogram()["reduce_mean"] == 1 and "pool2d_avg" not in g.op_histogram()


class KnownMasks(nn.Module):
    """X-MOD's language adapters: rows picked by a mask computed from constants only (its
    count is known), transformed, and written back at those rows."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pick = torch.arange(4) % 3 != 1  # rows 0, 2, 3
        rows = x[pick]
        y = x.clone()
        y[pick] = rows * 2 + 1
        return rows, y, x[:, torch.arange(5) > 2]


def test_a_known_mask_picks_and_writes_rows() -> None:
    g = check(import_exported, KnownMasks(), {"x": torch.randn(4, 5)})
    assert "gather" in g.op_histogram()


class Fourier(nn.Module):
    """FNet's token mixing (the real part of a 2-D FFT over tokens and channels), a 1-D
    transform with orthonormal scaling, and an inverse of a transform (complex input)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mixed = torch.fft.fftn(x, dim=(1, 2)).real
        ortho = torch.view_as_real(torch.fft.fft(x, dim=-1, norm="ortho"))
        back = torch.fft.ifft(torch.fft.fft(x, dim=1), dim=1)
        return mixed, ortho, back.real, back.imag, torch.fft.fftn(x, norm="forward").imag


def test_fourier_transforms_as_products_with_cos_and_sin() -> None:
    torch.manual_seed(33)
    g = check(import_exported, Fourier(), {"x": torch.randn(2, 6, 5)}, atol=1e-5)
    other = torch.randn(2, 6, 5) * 3
    for a, w in zip(interpret(g, {"x": other.numpy()}), reference(Fourier(), other),
                    strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5 * float(other.abs().max()))


class TopScores(nn.Module):
    """Llama-4's router: the top-k scores scattered into a tensor of -inf at their experts."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        top, idx = torch.topk(logits, 2, dim=1)
        scores = torch.full_like(logits, float("-inf")).scatter_(1, idx, top)
        return torch.sigmoid(scores)


def test_scatter_of_top_k_values_at_their_indices() -> None:
    torch.manual_seed(31)
    g = check(import_exported, TopScores(), {"logits": torch.randn(6, 4)})
    other = torch.randn(6, 4)  # other experts chosen
    np.testing.assert_allclose(interpret(g, {"logits": other.numpy()})[0],
                               reference(TopScores(), other)[0], rtol=1e-6)

    class Anywhere(nn.Module):  # indices not known to be distinct
        def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            return torch.zeros_like(x).scatter(1, idx, x[:, :2])

    with pytest.raises(UnsupportedOpsError, match="only at a top-k's indices"):
        import_exported(Anywhere(), (torch.randn(3, 4), torch.tensor([[0, 1]] * 3)))


class ShiftedIds(nn.Module):
    """LongCat-Flash's routing arithmetic: top-k ids shifted and scaled below zero, floor
    and truncated division of them, a select between those and the ids, histograms of the
    result (bins that the range misses stay empty) and of one bin over the data's own
    range (a router of one expert)."""

    def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ids = torch.topk(scores, 2, dim=-1).indices
        shifted = (ids - 3) * 4
        floor = shifted // 3
        trunc = torch.div(shifted, 3, rounding_mode="trunc")
        picked = torch.where(ids >= 3, floor, ids)
        counts = torch.histc(picked.reshape(-1).float(), bins=6, min=-1, max=4)
        return floor, trunc, picked, counts, torch.histc(ids.float(), bins=1)


def test_integer_ranges_through_sums_products_and_selects() -> None:
    torch.manual_seed(32)
    g = check(import_exported, ShiftedIds(), {"scores": torch.randn(5, 6)})
    other = torch.randn(5, 6)  # other ids chosen
    for a, w in zip(interpret(g, {"scores": other.numpy()}), reference(ShiftedIds(), other),
                    strict=True):
        np.testing.assert_allclose(a, w)


class TimeShift(nn.Module):
    """RWKV's time shift: one step padded in front and one cropped at the end (a negative
    pad), and a crop and a pad on one axis with a fill value."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return F.pad(x, (0, 0, 1, -1)), F.pad(x, (-2, 1), value=0.5)


@IMPORTERS
def test_negative_pads_crop(importer: Callable[..., Graph]) -> None:
    check(importer, TimeShift(), {"x": torch.randn(2, 4, 5)})


class Rolls(nn.Module):
    """Swin's shifted windows roll the feature map by half a window and back; a roll of
    the flattened tensor and one by more than the axis."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        shifted = torch.roll(x, shifts=(-2, -2), dims=(1, 2))
        return shifted, shifted.roll((2, 2), (1, 2)), torch.roll(x, 3), x.roll(7, -1)


@IMPORTERS
def test_rolls(importer: Callable[..., Graph]) -> None:
    g = check(importer, Rolls(), {"x": torch.randn(2, 5, 6, 3)})
    assert "concat" in g.op_histogram()


def test_writes_into_slices_gathers_and_expm1() -> None:
    torch.manual_seed(28)
    x = torch.randn(2, 4)
    idx = torch.tensor([[3, 0, 3], [1, 1, 2]])
    g = check(import_exported, Writes(), {"x": x, "idx": idx})
    ops = compute_ops(g)
    assert ops["gather"] >= 2 and "concat" in ops, ops
    # expm1 keeps its digits near 0, where exp(x) - 1 in float32 would not.
    small = interpret(g, {"x": x.numpy(), "idx": idx.numpy()})[4]
    np.testing.assert_allclose(small, np.expm1(x.numpy().astype(np.float64) * float(np.float32(1e-7))),
                               rtol=1e-12)


def test_hash_routing_empty_concatenation_pieces_and_view_as() -> None:
    torch.manual_seed(29)
    ids = torch.tensor([0, 3, 9, 3, 5])
    g = check(import_exported, TableRouting(), {"x": torch.randn(3, 4), "ids": ids})
    other = torch.tensor([7, 7, 1, 2, 8])
    x = torch.randn(3, 4)
    for a, w in zip(interpret(g, {"x": x.numpy(), "ids": other.numpy()}),
                    reference(TableRouting(), x, other), strict=True):
        np.testing.assert_array_equal(a, w)


def test_group_routing_scatter_and_logsumexp() -> None:
    torch.manual_seed(30)
    g = check(import_exported, GroupRouting(), {"scores": torch.randn(5, 8)}, atol=1e-6)
    scores = torch.randn(5, 8) * 300  # logsumexp of large values: no overflow
    for a, w in zip(interpret(g, {"scores": scores.numpy()}),
                    reference(GroupRouting(), scores), strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-6)


def test_wrapped_regions_any_all_and_log1p() -> None:
    torch.manual_seed(31)
    x = torch.randn(3, 4)
    program = torch.export.export(Regions(), (x,))
    assert any("wrap_with_set_grad_enabled" in str(n.target) for n in program.graph.nodes)
    g = check(import_exported, Regions(), {"x": x})
    # log1p keeps its digits near 0 (log(1 + 1e-9 |x|) in floating point would not).
    got = interpret(g, {g.inputs[0].attr("name"): x.numpy()})[4]
    tiny = np.abs(x.numpy().astype(np.float64)) * float(np.float32(1e-9))
    np.testing.assert_allclose(got, np.log1p(tiny), rtol=1e-12)


def test_tensor_split_with_an_unread_empty_piece_and_copy() -> None:
    torch.manual_seed(25)
    g = check(import_exported, ScanPieces(), {"x": torch.randn(2, 5, 4)})
    assert "split" in compute_ops(g), compute_ops(g)


def test_expert_routing_bookkeeping() -> None:
    torch.manual_seed(24)
    h = torch.randn(5, 6)
    g = check(import_exported, Routing(), {"h": h, "scores": torch.randn(5, 4)})
    # Other scores route otherwise: counts, order and rows all move with them.
    for seed in (1, 2):
        scores = torch.randn(5, 4, generator=torch.Generator().manual_seed(seed))
        got = interpret(g, {"h": h.numpy(), "scores": scores.numpy()})
        for a, w in zip(got, reference(Routing(), h, scores), strict=True):
            np.testing.assert_allclose(a, w, rtol=1e-6, atol=1e-7)
    with pytest.raises(UnsupportedOpsError, match="floor division of an integer tensor whose "
                                                  "values are not known"):
        import_exported(UnknownRange(), (torch.randint(0, 9, (4,)),))


@IMPORTERS
def test_topk_and_sort(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(23)
    ids = torch.tensor([[2, 0, 2, 1, 0], [1, 1, 1, 1, 1], [0, 2, 1, 2, 0]])  # ties
    g = check(importer, Sorts(), {"x": torch.randn(3, 5), "ids": ids})
    assert compute_ops(g)["topk"] == 3


@IMPORTERS
def test_attention_with_grouped_heads_and_masks(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(14)
    g = check(importer, Attentions(), {"x": torch.randn(2, 6, 16)})
    # The causal masks (boolean, and additive 0/-inf) are recognised: attention ops, one of
    # them over 2 K/V heads for 4 query heads; the band mask is neither none nor causal, so
    # that attention is decomposed around a select.
    gqa, added = [n for n in g.nodes if n.op == "attention"]
    assert gqa.attr("causal") is True and added.attr("causal") is True
    assert g.type_of(gqa.inputs[0]).shape[1] == 4 and g.type_of(gqa.inputs[1]).shape[1] == 2
    ops = compute_ops(g)
    assert ops["softmax"] == 1 and ops["where"] == 1 and ops["rms_norm"] == 2


@IMPORTERS
def test_known_positions_and_masks_become_constant_ops(importer: Callable[..., Graph]) -> None:
    class Positions(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pos = nn.Embedding(8, 4)
            self.register_buffer("mask", torch.ones(1, 1, 5, 5).tril() == 0)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            p = self.pos(torch.arange(5))
            s = (x + p) @ (x + p).transpose(-1, -2)
            return s.unsqueeze(1).masked_fill(self.mask, -1e9)

    g = check(importer, Positions(), {"x": torch.randn(2, 5, 4)})
    (iota,) = [n for n in g.nodes if n.op == "iota"]
    (tri,) = [n for n in g.nodes if n.op == "tri_mask"]
    assert iota.attr("shape") == (5,) and iota.attr("dtype") == "i64"
    assert (tri.attr("rows"), tri.attr("cols"), tri.attr("diagonal"), tri.attr("lower")) == \
        (5, 5, 1, False)


@IMPORTERS
def test_written_out_rms_norm_and_repeated_heads_are_recognised(
        importer: Callable[..., Graph]) -> None:
    torch.manual_seed(15)
    g = check(importer, WrittenOut(), {"x": torch.randn(2, 5, 16)})
    ops = compute_ops(g)
    assert ops["rms_norm"] == 1 and ops["attention"] == 1 and ops["gelu"] == 1
    assert not {"pow", "rsqrt", "reduce_mean", "expand", "tanh", "smul"} & set(ops)
    (gelu,) = [n for n in g.nodes if n.op == "gelu"]
    assert gelu.attr("approximate") == "tanh"
    (norm,) = [n for n in g.nodes if n.op == "rms_norm"]
    assert norm.attr("eps") == pytest.approx(1e-6) and g.nodes[norm.inputs[1].node].attr("name") == "w"
    (att,) = [n for n in g.nodes if n.op == "attention"]
    assert g.type_of(att.inputs[1]).shape == (2, 2, 5, 4)  # the 2 key heads, not repeated


@IMPORTERS
def test_eager_attention_without_a_mask_is_attention(importer: Callable[..., Graph]) -> None:
    class Eager(nn.Module):
        """MobileViT's self-attention: matmul, divide by sqrt(d), softmax, matmul."""

        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(8, 24)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            q, k, v = self.qkv(x).unflatten(-1, (3, 2, 4)).permute(2, 0, 3, 1, 4)
            s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(4)
            plain = torch.softmax(s, dim=-1) @ v
            over_keys = torch.softmax(s, dim=-2) @ v  # not attention: softmax over queries
            return plain, over_keys

    torch.manual_seed(16)
    g = check(importer, Eager(), {"x": torch.randn(3, 5, 8)})
    (att,) = [n for n in g.nodes if n.op == "attention"]
    assert att.attr("scale") == pytest.approx(0.5) and att.attr("causal") is False
    assert compute_ops(g)["softmax"] == 1


@IMPORTERS
def test_embedding_input_is_integer_with_vocab_range(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(7)
    g = check(importer, Embed(), {"ids": torch.randint(0, 50, (3, 5))})
    (ids,) = g.inputs
    assert ids.type.dtype.value == "i64" and ids.type.shape == (3, 5)
    assert ids.attr("high") == 50


@IMPORTERS
def test_parameters_become_named_weights_with_data(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(8)
    model = ConvNet().eval()
    g = importer(model, (torch.randn(1, 3, 16, 16),))
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(g.weights[name], p.detach().numpy())
    np.testing.assert_array_equal(g.weights["bn.running_var"], model.bn.running_var.numpy())


@IMPORTERS
def test_constant_subgraphs_fold_into_weight_data(importer: Callable[..., Graph]) -> None:
    class Folds(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("buf", torch.tensor([1.0, 2.0, 3.0, 4.0]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * (self.buf * 2 + 1).sqrt() + torch.arange(4.0)

    g = check(importer, Folds(), {"x": torch.randn(2, 4)})
    # arange(4.0) is the IR's iota constant; the folded square roots are weight data.
    assert compute_ops(g) == {"ewmul": 1, "ewadd": 1, "iota": 1}
    (iota,) = [n for n in g.nodes if n.op == "iota"]
    assert iota.attr("shape") == (4,) and iota.attr("dtype") == "f32"
    (data,) = g.weights.values()
    np.testing.assert_allclose(data, np.sqrt([3.0, 5.0, 7.0, 9.0]), rtol=1e-6)


@IMPORTERS
def test_fold_parameters_pretransposes_weights(importer: Callable[..., Graph]) -> None:
    torch.manual_seed(9)
    plain = check(importer, MLP(), {"x": torch.randn(4, 6)})
    torch.manual_seed(9)
    folded = check(importer, MLP(), {"x": torch.randn(4, 6)}, fold_parameters=True)
    assert compute_ops(plain)["transpose"] == 3
    assert "transpose" not in compute_ops(folded)


def test_fx_and_export_build_the_same_graph() -> None:
    torch.manual_seed(10)
    model = ConvNet().eval()
    x = torch.randn(1, 3, 16, 16)
    assert import_fx(model, (x,)).structural_hash == import_exported(model, (x,)).structural_hash


def test_export_accepts_program_and_pair() -> None:
    torch.manual_seed(11)
    model = MLP().eval()
    x = torch.randn(2, 6)
    ep = torch.export.export(model, (x,))
    a = import_exported(ep)
    b = import_exported((model, (x,)))
    assert a.structural_hash == b.structural_hash
    assert a.name == "exported" and b.name == "MLP"


# ---- refusals ------------------------------------------------------------------------


class Unsupported(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(torch.atan(x), 1) + torch.flip(x, (0,)).relu()


@IMPORTERS
def test_unsupported_ops_are_all_reported_at_once(importer: Callable[..., Graph]) -> None:
    with pytest.raises(UnsupportedOpsError) as info:
        importer(Unsupported(), (torch.randn(2, 3),))
    err = info.value
    assert len(err.ops) == 3
    for name in ("cumprod", "atan", "flip"):
        assert any(name in op for op in err.ops), (name, err.ops)
        assert name in str(err)


@IMPORTERS
def test_unsupported_use_of_a_supported_op_names_the_reason(
        importer: Callable[..., Graph]) -> None:
    class Divide(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.div(x, y.relu() + 1, rounding_mode="floor")

    with pytest.raises(UnsupportedOpsError, match="rounding_mode='floor'"):
        importer(Divide(), (torch.randn(2, 3), torch.randn(2, 3)))


@IMPORTERS
def test_training_mode_batch_norm_is_refused(importer: Callable[..., Graph]) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    with pytest.raises(UnsupportedOpsError, match="training mode"):
        importer(model, (torch.randn(2, 3, 8, 8),))


@IMPORTERS
def test_batch_statistics_norm_without_running_statistics(
        importer: Callable[..., Graph]) -> None:
    """Batch norm in training mode with no running statistics updates nothing: each
    channel normalised by its own mean and biased variance (BiT's weight standardisation,
    and the same over an activation's batch and positions)."""

    class Standardised(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(6, 3, 3, 3) * 3 + 1)
            self.gamma = nn.Parameter(torch.rand(6) + 0.5)
            self.beta = nn.Parameter(torch.randn(6))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            w = F.batch_norm(self.weight.reshape(1, 6, -1), None, None, training=True,
                             momentum=0.0, eps=1e-6).reshape_as(self.weight)
            y = F.conv2d(x, w)
            return F.batch_norm(y, None, None, self.gamma, self.beta, training=True, eps=1e-5)

    torch.manual_seed(0)
    model = Standardised()
    graph = check(importer, model, {"x": torch.randn(2, 3, 7, 7) * 2 + 1}, atol=1e-6)
    other = torch.randn(3, 3, 7, 7)[:2] * 0.5 - 1  # the statistics move with the input
    got = interpret(graph, {"x": other.numpy()})[0]
    np.testing.assert_allclose(got, reference(model, other)[0], rtol=1e-6, atol=1e-6)


def test_untraceable_module_is_a_clear_error() -> None:
    class DataDependent(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.relu() if x.sum() > 0 else x

    with pytest.raises(ModelImportError, match="DataDependent: torch.fx.symbolic_trace failed"):
        import_fx(DataDependent(), (torch.randn(2),))


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ModelImportError, match="expected an ExportedProgram or a torch module"):
        import_exported(42)
    with pytest.raises(ModelImportError, match="needs example inputs"):
        import_exported(MLP())
    with pytest.raises(ModelImportError, match="torch.export failed"):
        import_exported(MLP(), (torch.randn(2, 7),))
    with pytest.raises(ModelImportError, match="example inputs failed"):
        import_fx(MLP(), (torch.randn(2, 7),))


def test_importing_superopt_importers_does_not_load_torch_importer() -> None:
    import subprocess
    import sys

    code = ("import sys, superopt.importers; "
            "print('superopt.importers.torch' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
