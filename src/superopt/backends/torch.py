"""PyTorch backend: lower a graph to torch ops, run it, compare it with the reference, time it.

`LOWERING` (the "torch" rule table) maps each op to a rule `(node, ctx) -> kernel`; the
rule runs once at lowering time (resolving padding, building constants) and returns a
kernel that maps the node's input tensors to its output tensors. `lower(graph)` gives a
`TorchProgram`; `run`, `compare` and `benchmark` are the entry points.

Sources take the same values as in the reference interpreter: feeds first, then the
graph's weight data, then `REFERENCE.draw` keyed by (seed, name). So `compare` checks a
lowering against `superopt.ir.interpret` on identical inputs.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import superopt.backends as _backends
from superopt.ir import FeedError, Graph, IRError, Node, RuleTable, interpret
from superopt.ir.interpret import REFERENCE
from superopt.ir.kernels import resolve_pads
from superopt.ir.ops.constants import const_iconv_value, const_pool_value
from superopt.ir.ops.index import iota_value, tri_mask_value
from superopt.ir.ops.pool import avg_divisor, pool_geometry
from superopt.ir.types import DType, TensorType

Tensor = torch.Tensor
Kernel = Callable[[Sequence[Tensor]], tuple[Tensor, ...]]


class BackendError(IRError):
    """The torch backend cannot run a graph (no such device, a kernel failed)."""


@dataclass
class LowerContext:
    """What rules see while lowering one graph: target device and float dtype.

    `sources` holds the current call's input and weight tensors by name; the program
    fills it before each call and empties it afterwards.
    """

    graph: Graph
    device: torch.device
    dtype: torch.dtype
    seed: int = 0
    sources: dict[str, Tensor] = field(default_factory=dict)

    def in_type(self, node: Node, index: int) -> TensorType:
        return self.graph.type_of(node.inputs[index])

    def tensor(self, arr: np.ndarray, integer: bool = False) -> Tensor:
        """A host array as a tensor of the run's float dtype (or int64) on the device."""
        a = np.asarray(arr)
        if not a.flags.writeable or not a.flags.c_contiguous:
            a = np.array(a, order="C")  # a copy: torch refuses read-only numpy memory
        return torch.from_numpy(a).to(device=self.device,
                                      dtype=torch.int64 if integer else self.dtype)

    def typed(self, arr: np.ndarray, dtype: DType) -> Tensor:
        """A host array as a tensor holding IR values of `dtype` (see `torch_dtype`)."""
        return self.tensor(arr, integer=not dtype.is_float).to(torch_dtype(dtype, self.dtype))


def torch_dtype(dtype: DType, float_dtype: torch.dtype) -> torch.dtype:
    """How values of an IR dtype run: every float in the run's `float_dtype`, booleans as
    torch.bool (masks and `where` conditions need them), other integers as int64."""
    if dtype.is_float:
        return float_dtype
    return torch.bool if dtype == DType.BOOL else torch.int64


LowerRule = Callable[[Node, LowerContext], Kernel]

LOWERING: RuleTable[LowerRule] = RuleTable("torch")


def _rule(*ops: str) -> Callable[[LowerRule], LowerRule]:
    def deco(fn: LowerRule) -> LowerRule:
        for op in ops:
            LOWERING.register(op, fn)
        return fn
    return deco


# ---- sources and constants ----------------------------------------------------------

@_rule("input", "weight")
def _source(node: Node, ctx: LowerContext) -> Kernel:
    name = node.attr("name")
    return lambda args: (ctx.sources[name],)


def _constant(value: Callable[[Node], np.ndarray]) -> LowerRule:
    def rule(node: Node, ctx: LowerContext) -> Kernel:
        t = ctx.typed(value(node), node.type.dtype)
        return lambda args: (t,)
    return rule


LOWERING.register("const_pool", _constant(lambda n: const_pool_value(n.a)))
LOWERING.register("const_iconv", _constant(lambda n: const_iconv_value(n.a)))
LOWERING.register("const_imm", _constant(lambda n: np.eye(n.attr("n"))))
LOWERING.register("const_one", _constant(lambda n: np.ones(n.attr("shape"))))
LOWERING.register("iota", _constant(lambda n: iota_value(n.a)))
LOWERING.register("tri_mask", _constant(lambda n: tri_mask_value(n.a)))


# ---- element-wise ---------------------------------------------------------------------

_INPLACE_ACT: dict[str, Callable[[Tensor], Tensor] | None] = {
    "none": None, "relu": torch.relu_, "sigmoid": torch.sigmoid_, "tanh": torch.tanh_,
}


def _activation(node: Node) -> Callable[[Tensor], Tensor]:
    # In place: the fused op's own output is fresh, so no one else sees it.
    act = _INPLACE_ACT[node.attr("activation")]
    return act if act is not None else (lambda y: y)


def _unary(fn: Callable[[Tensor], Tensor]) -> LowerRule:
    return lambda node, ctx: lambda args: (fn(args[0]),)


def _binary(fn: Callable[[Tensor, Tensor], Tensor]) -> LowerRule:
    return lambda node, ctx: lambda args: (fn(args[0], args[1]),)


LOWERING.register("relu", _unary(torch.relu))
LOWERING.register("sigmoid", _unary(torch.sigmoid))
LOWERING.register("tanh", _unary(torch.tanh))
LOWERING.register("ewadd", _binary(torch.add))
LOWERING.register("ewmul", _binary(torch.mul))
LOWERING.register("smul", _binary(torch.mul))  # the scalar is a rank-0 tensor


@_rule("gelu")
def _gelu(node: Node, ctx: LowerContext) -> Kernel:
    approximate = node.attr("approximate")
    return lambda args: (F.gelu(args[0], approximate=approximate),)


for _op, _fn in (("neg", torch.neg), ("exp", torch.exp), ("log", torch.log),
                 ("sqrt", torch.sqrt), ("rsqrt", torch.rsqrt), ("recip", torch.reciprocal),
                 ("erf", torch.erf), ("silu", F.silu), ("sin", torch.sin), ("cos", torch.cos), ("acos", torch.acos)):
    LOWERING.register(_op, _unary(_fn))
for _op, _fn2 in (("sub", torch.sub), ("div", torch.div), ("maximum", torch.maximum),
                  ("minimum", torch.minimum), ("eq", torch.eq), ("lt", torch.lt),
                  ("gt", torch.gt)):
    LOWERING.register(_op, _binary(_fn2))


@_rule("pow")
def _pow(node: Node, ctx: LowerContext) -> Kernel:
    e = node.attr("exponent")
    # An integral exponent as an int: torch then multiplies, as the reference does, and a
    # negative base stays real.
    exponent: float | int = int(e) if float(e).is_integer() else e
    return lambda args: (torch.pow(args[0], exponent),)


@_rule("where")
def _where(node: Node, ctx: LowerContext) -> Kernel:
    return lambda args: (torch.where(args[0], args[1], args[2]),)


@_rule("cast")
def _cast(node: Node, ctx: LowerContext) -> Kernel:
    to = DType.parse(node.attr("to"))
    if to == DType.BOOL:
        return lambda args: (args[0] != 0,)
    # Every float runs in the run's dtype (as in the reference, where float casts are the
    # identity); to an integer, .to() truncates toward zero as ONNX and the reference do.
    target = torch_dtype(to, ctx.dtype)
    return lambda args: (args[0].to(target),)


# ---- linear -----------------------------------------------------------------------------

@_rule("matmul")
def _matmul(node: Node, ctx: LowerContext) -> Kernel:
    act = _activation(node)
    return lambda args: (act(torch.matmul(args[0], args[1])),)


@_rule("linear")
def _linear(node: Node, ctx: LowerContext) -> Kernel:
    act = _activation(node)
    return lambda args: (act(F.linear(args[0], args[1], args[2])),)


def _torch_pads(pads: tuple[int, int, int, int], kernel: tuple[int, int] | None = None
                ) -> tuple[tuple[int, int], tuple[int, int, int, int] | None]:
    """Split IR pads (top, bottom, left, right) into torch's symmetric `padding` argument
    and an explicit F.pad for what torch cannot express (asymmetric, or, for pooling,
    more than half the kernel)."""
    t, b, left, r = pads
    symmetric = t == b and left == r
    if kernel is not None:
        symmetric = symmetric and t <= kernel[0] // 2 and left <= kernel[1] // 2
    if symmetric:
        return (t, left), None
    return (0, 0), (left, r, t, b)


@_rule("conv2d")
def _conv2d(node: Node, ctx: LowerContext) -> Kernel:
    a = node.a
    x_t, w_t = ctx.in_type(node, 0), ctx.in_type(node, 1)
    pads = resolve_pads(a["padding"], x_t.shape[2:], w_t.shape[2:], a["stride"], a["dilation"])
    padding, pre = _torch_pads(pads)
    stride, dilation, groups = a["stride"], a["dilation"], a["groups"]
    act = _activation(node)

    def kernel(args: Sequence[Tensor]) -> tuple[Tensor, ...]:
        x = args[0] if pre is None else F.pad(args[0], pre)
        return (act(F.conv2d(x, args[1], None, stride, padding, dilation, groups)),)
    return kernel


@_rule("embedding")
def _embedding(node: Node, ctx: LowerContext) -> Kernel:
    return lambda args: (F.embedding(args[0], args[1]),)


@_rule("attention")
def _attention(node: Node, ctx: LowerContext) -> Kernel:
    q_t, k_t = ctx.in_type(node, 0), ctx.in_type(node, 1)
    scale, causal = node.attr("scale"), node.attr("causal")
    gqa = q_t.shape[-3] != k_t.shape[-3]
    # K and V may broadcast over q's batch dims; SDPA wants them spelled out.
    kv_shape = (*q_t.shape[:-3], *k_t.shape[-3:])
    v_shape = (*q_t.shape[:-3], *ctx.in_type(node, 2).shape[-3:])
    widen = k_t.shape[:-3] != q_t.shape[:-3]

    def kernel(args: Sequence[Tensor]) -> tuple[Tensor, ...]:
        q, k, v = args
        if widen:
            k, v = k.expand(kv_shape), v.expand(v_shape)
        return (F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=causal,
                                               enable_gqa=gqa),)
    return kernel


# ---- movement ---------------------------------------------------------------------------

@_rule("transpose")
def _transpose(node: Node, ctx: LowerContext) -> Kernel:
    perm = node.attr("perm")
    return lambda args: (args[0].permute(perm),)


@_rule("reshape")
def _reshape(node: Node, ctx: LowerContext) -> Kernel:
    shape = node.attr("shape")
    return lambda args: (args[0].reshape(shape),)


@_rule("concat")
def _concat(node: Node, ctx: LowerContext) -> Kernel:
    axis = node.attr("axis")
    return lambda args: (torch.cat(tuple(args), dim=axis),)


@_rule("split")
def _split(node: Node, ctx: LowerContext) -> Kernel:
    axis, sizes = node.attr("axis"), list(node.attr("sizes"))

    def kernel(args: Sequence[Tensor]) -> tuple[Tensor, ...]:
        # Indexed, not iterated: an fx Proxy (superopt.exporters.torch) has no length.
        parts = torch.split(args[0], sizes, dim=axis)
        return tuple(parts[i] for i in range(len(sizes)))
    return kernel


@_rule("slice")
def _slice(node: Node, ctx: LowerContext) -> Kernel:
    index = tuple(slice(lo, hi, st) for lo, hi, st in
                  zip(node.attr("starts"), node.attr("ends"), node.attr("steps"), strict=True))
    return lambda args: (args[0][index],)


@_rule("pad")
def _pad(node: Node, ctx: LowerContext) -> Kernel:
    p = node.attr("pads")
    r = len(p) // 2
    # ONNX lists all begins then all ends, first dim first; F.pad wants (begin, end) pairs
    # starting from the last dim.
    torch_pads = tuple(v for i in reversed(range(r)) for v in (p[i], p[r + i]))
    if not any(torch_pads):
        return lambda args: (args[0],)
    return lambda args: (F.pad(args[0], torch_pads),)


@_rule("enlarge")
def _enlarge(node: Node, ctx: LowerContext) -> Kernel:
    w_t = ctx.in_type(node, 0)
    dh, dw = (node.attr("kh") - w_t.shape[2]) // 2, (node.attr("kw") - w_t.shape[3]) // 2
    return lambda args: (F.pad(args[0], (dw, dw, dh, dh)),)


@_rule("gather")
def _gather(node: Node, ctx: LowerContext) -> Kernel:
    # One index tensor among full slices: its dims replace dim `axis` (numpy take), and
    # negative indices count from the end, as in ONNX Gather.
    lead = (slice(None),) * node.attr("axis")
    return lambda args: (args[0][(*lead, args[1])],)


@_rule("expand")
def _expand(node: Node, ctx: LowerContext) -> Kernel:
    shape = node.attr("shape")
    return lambda args: (args[0].expand(shape),)


@_rule("copy", "layout")
def _copy(node: Node, ctx: LowerContext) -> Kernel:
    # Layouts are physical; torch values are logical, so both are a materialised copy.
    return lambda args: (args[0].clone(memory_format=torch.contiguous_format),)


# ---- pooling ----------------------------------------------------------------------------

@_rule("pool2d_avg")
def _pool2d_avg(node: Node, ctx: LowerContext) -> Kernel:
    a = node.a
    x_shape = ctx.in_type(node, 0).shape
    kernel, stride, include = a["kernel"], a["stride"], a["count_include_pad"]
    pads, _, _ = pool_geometry(x_shape, a)
    padding, pre = _torch_pads(pads, kernel)
    act = _activation(node)
    if pre is None:
        # Without ceil mode every window lies inside the padded input, so torch's divisor
        # is the full window with count_include_pad and the valid cells without: as the IR.
        return lambda args: (act(F.avg_pool2d(args[0], kernel, stride, padding,
                                              count_include_pad=include)),)
    if include:
        return lambda args: (act(F.avg_pool2d(F.pad(args[0], pre), kernel, stride)),)
    divisor = ctx.tensor(avg_divisor(x_shape, a))

    def sums(args: Sequence[Tensor]) -> tuple[Tensor, ...]:
        total = F.avg_pool2d(F.pad(args[0], pre), kernel, stride, divisor_override=1)
        return (act(total / divisor),)
    return sums


@_rule("pool2d_max")
def _pool2d_max(node: Node, ctx: LowerContext) -> Kernel:
    a = node.a
    kernel, stride = a["kernel"], a["stride"]
    pads, _, _ = pool_geometry(ctx.in_type(node, 0).shape, a)
    padding, pre = _torch_pads(pads, kernel)
    act = _activation(node)
    if pre is None:  # torch's implicit padding never wins a max
        return lambda args: (act(F.max_pool2d(args[0], kernel, stride, padding)),)
    return lambda args: (act(F.max_pool2d(F.pad(args[0], pre, value=-np.inf), kernel, stride)),)


# ---- reductions and normalisations ------------------------------------------------------

def _reduce(fn: Callable[..., Tensor]) -> LowerRule:
    def rule(node: Node, ctx: LowerContext) -> Kernel:
        axes, keep = node.attr("axes"), node.attr("keepdims")
        if not axes:  # only a rank-0 input canonicalises to no axes: numpy returns it as is
            return lambda args: (args[0],)
        return lambda args: (fn(args[0], dim=axes, keepdim=keep),)
    return rule


LOWERING.register("reduce_sum", _reduce(torch.sum))
LOWERING.register("reduce_mean", _reduce(torch.mean))
LOWERING.register("reduce_max", _reduce(torch.amax))


@_rule("topk")
def _topk(node: Node, ctx: LowerContext) -> Kernel:
    # A stable sort keeps equal values in index order, the IR's tie rule (torch.topk does
    # not promise one).
    k, axis, largest = node.attr("k"), node.attr("axis"), node.attr("largest")

    def run(args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        vals, idx = torch.sort(args[0], dim=axis, descending=largest, stable=True)
        return vals.narrow(axis, 0, k), idx.narrow(axis, 0, k)
    return run


@_rule("argmax")
def _argmax(node: Node, ctx: LowerContext) -> Kernel:
    # torch.argmax returns the first maximal index, the IR's tie rule.
    (axis,), keep = node.attr("axes"), node.attr("keepdims")
    return lambda args: (torch.argmax(args[0], dim=axis, keepdim=keep),)


@_rule("softmax")
def _softmax(node: Node, ctx: LowerContext) -> Kernel:
    axis = node.attr("axis")
    return lambda args: (torch.softmax(args[0], dim=axis),)


@_rule("layer_norm")
def _layer_norm(node: Node, ctx: LowerContext) -> Kernel:
    x_shape = ctx.in_type(node, 0).shape
    norm, eps = x_shape[node.attr("axis"):], node.attr("eps")
    return lambda args: (F.layer_norm(args[0], norm, args[1], args[2], eps),)


@_rule("rms_norm")
def _rms_norm(node: Node, ctx: LowerContext) -> Kernel:
    x_shape = ctx.in_type(node, 0).shape
    norm, eps = x_shape[node.attr("axis"):], node.attr("eps")
    return lambda args: (F.rms_norm(args[0], norm, args[1], eps),)


@_rule("batch_norm")
def _batch_norm(node: Node, ctx: LowerContext) -> Kernel:
    eps = node.attr("eps")

    def kernel(args: Sequence[Tensor]) -> tuple[Tensor, ...]:
        x, scale, bias, mean, var = args
        return (F.batch_norm(x, mean, var, scale, bias, training=False, eps=eps),)
    return kernel


@_rule("lrn")
def _lrn(node: Node, ctx: LowerContext) -> Kernel:
    size, alpha, beta, bias = (node.attr(k) for k in ("size", "alpha", "beta", "bias"))
    # For an even size ONNX's window reaches one channel further up than down;
    # F.local_response_norm's reaches further down, so the window is built here.
    lo, hi = (size - 1) // 2, size // 2
    # Static shapes (the IR's), so that the kernel also traces into an fx graph.
    n, c, h, w = ctx.in_type(node, 0).shape

    def kernel(args: Sequence[Tensor]) -> tuple[Tensor, ...]:
        x = args[0]
        sq = F.pad((x * x).reshape(n, 1, c, h * w), (0, 0, lo, hi))
        mean = F.avg_pool2d(sq, (size, 1), stride=1).reshape(n, c, h, w)
        return (x / (bias + alpha * mean).pow(beta),)
    return kernel


# ---- programs ---------------------------------------------------------------------------

def _device(device: str | torch.device) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BackendError(f"device {str(device)!r} requested but torch.cuda.is_available() "
                           "is False")
    return dev


_DTYPES = {"f32": torch.float32, "float32": torch.float32, "f64": torch.float64,
           "float64": torch.float64, "f16": torch.float16, "float16": torch.float16,
           "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


def _dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise BackendError(f"run dtype must be a float dtype, found {dtype}")
        return dtype
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise BackendError(f"unknown run dtype {dtype!r}; expected one of "
                           f"{', '.join(sorted(_DTYPES))}") from None


@dataclass(frozen=True)
class _Step:
    node: Node
    kernel: Kernel
    free: tuple[int, ...]  # node ids whose values are dead after this step


class TorchProgram:
    """A lowered graph: call it with feeds to get the output tensors.

    Float values run in `dtype` on `device` (whatever float type the graph names: a cast
    between floats is the identity here, as in the reference); booleans are torch.bool and
    other integers int64. Intermediate tensors are dropped after their last use.
    """

    def __init__(self, graph: Graph, device: torch.device, dtype: torch.dtype, seed: int
                 ) -> None:
        self.graph, self.device, self.dtype, self.seed = graph, device, dtype, seed
        self.ctx = LowerContext(graph, device, dtype, seed)
        self._sources = {n.attr("name"): n for n in graph.nodes if n.is_named_source}
        last_use: dict[int, int] = {}
        for n in graph.nodes:
            for v in n.inputs:
                last_use[v.node] = n.id
        pinned = {v.node for v in graph.outputs}
        dead: dict[int, list[int]] = {}
        for producer, consumer in last_use.items():
            if producer not in pinned:
                dead.setdefault(consumer, []).append(producer)
        self._steps = tuple(_Step(n, LOWERING.get(n.op)(n, self.ctx), tuple(dead.get(n.id, ())))
                            for n in graph.nodes)
        # Weights are converted once; feeds may still override them per call.
        self._weights = {name: self._default(n) for name, n in self._sources.items()
                         if n.op == "weight"}

    @property
    def kernels(self) -> tuple[tuple[Node, Kernel], ...]:
        """Each node with its lowered kernel, in graph order (sources' kernels read the
        call's `sources`; superopt.exporters.torch binds sources itself)."""
        return tuple((s.node, s.kernel) for s in self._steps)

    def _default(self, node: Node) -> Tensor:
        name = node.attr("name")
        if name in self.graph.weights and node.op == "weight":
            return self.ctx.typed(self.graph.weights[name], node.type.dtype)
        return self.ctx.typed(REFERENCE.draw(node, self.seed), node.type.dtype)

    def prepare(self, feeds: Mapping[str, Any] | None = None) -> dict[str, Tensor]:
        """Every source's tensor: checked feeds, else weight data, else the reference draw."""
        feeds = dict(feeds or {})
        unknown = sorted(set(feeds) - set(self._sources))
        if unknown:
            raise FeedError(f"graph {self.graph.name!r} has no input or weight named "
                            f"{unknown[0]!r}")
        out: dict[str, Tensor] = {}
        for name, node in self._sources.items():
            if name in feeds:
                value = feeds[name]
                if isinstance(value, Tensor):
                    if tuple(value.shape) != node.type.shape:
                        raise FeedError(f"graph {self.graph.name!r}: {node.op} {name!r} expects "
                                        f"{node.type}, fed shape {list(value.shape)}")
                    out[name] = value.to(device=self.device,
                                         dtype=torch_dtype(node.type.dtype, self.dtype))
                else:
                    out[name] = self.ctx.typed(REFERENCE.accept(node, value, self.graph),
                                               node.type.dtype)
            elif node.op == "weight":
                out[name] = self._weights[name]
            else:
                out[name] = self._default(node)
        return out

    def execute(self, sources: dict[str, Tensor]) -> tuple[Tensor, ...]:
        """Run on prepared sources (see `prepare`); timing loops call this directly."""
        env: dict[int, tuple[Tensor, ...]] = {}
        self.ctx.sources = sources
        step: _Step | None = None
        try:
            with torch.inference_mode():
                for step in self._steps:
                    args = [env[v.node][v.index] for v in step.node.inputs]
                    env[step.node.id] = step.kernel(args)
                    del args
                    for i in step.free:
                        del env[i]
        except IRError:
            raise
        except Exception as e:
            where = f"{step.node.op} %{step.node.id}" if step is not None else "setup"
            raise BackendError(f"torch evaluation of {where} in graph {self.graph.name!r} "
                               f"failed: {type(e).__name__}: {e}") from e
        finally:
            self.ctx.sources = {}
        return tuple(env[v.node][v.index] for v in self.graph.outputs)

    def __call__(self, feeds: Mapping[str, Any] | None = None) -> tuple[Tensor, ...]:
        return self.execute(self.prepare(feeds))


def lower(graph: Graph, device: str | torch.device = "cpu",
          dtype: torch.dtype | str = torch.float32, seed: int = 0) -> TorchProgram:
    """Check the graph and lower every node; raises `MissingRule` for an op without a rule."""
    graph.lint()
    return TorchProgram(graph, _device(device), _dtype(dtype), seed)


def to_numpy(t: Tensor) -> np.ndarray:
    t = t.detach().to("cpu")
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()  # numpy has no bfloat16; float32 holds both exactly
    elif t.dtype == torch.bool:
        t = t.long()  # booleans are 0/1 int64 in the reference semantics
    return t.numpy().copy()


def run(graph: Graph, feeds: Mapping[str, Any] | None = None, device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Run the graph with torch; outputs as numpy arrays (float in `dtype`, ints and
    booleans as int64)."""
    return tuple(to_numpy(t) for t in lower(graph, device, dtype, seed)(feeds))


# ---- comparison with the reference --------------------------------------------------------

@dataclass(frozen=True)
class OutputComparison:
    """One output. Errors are relative to the output's scale (max |reference|), since
    element-wise relative error is meaningless near zeros."""

    index: int
    shape: tuple[int, ...]
    max_abs_err: float
    scale: float
    rel_err: float
    ok: bool
    problem: str = ""
    nonfinite: int = 0  # NaN/inf reference values (matched on the torch side when ok)


@dataclass(frozen=True)
class Comparison:
    """Torch against the reference over every output; the errors are the worst output's."""

    ok: bool
    max_abs_err: float
    max_rel_err: float
    outputs: tuple[OutputComparison, ...]
    rtol: float
    atol: float
    dtype: str
    device: str

    @property
    def nonfinite(self) -> int:
        """NaN/inf values in the reference outputs: a match there says little."""
        return sum(o.nonfinite for o in self.outputs)

    @property
    def size(self) -> int:
        return sum(math.prod(o.shape) for o in self.outputs)

    def summary(self) -> str:
        bad = [o for o in self.outputs if not o.ok]
        head = "ok" if self.ok else f"MISMATCH in outputs {[o.index for o in bad]}"
        text = (f"{head}: max abs error {self.max_abs_err:.3g}, max rel error "
                f"{self.max_rel_err:.3g} ({self.dtype} on {self.device}, rtol {self.rtol:g}, "
                f"atol {self.atol:g})")
        problems = [f"output {o.index}: {o.problem}" for o in bad if o.problem]
        if self.nonfinite:
            problems.append(f"warning: {self.nonfinite} of {self.size} reference values are "
                            "NaN or inf")
        return "; ".join([text, *problems])


def compare_arrays(index: int, got: np.ndarray, want: np.ndarray, rtol: float, atol: float
                   ) -> OutputComparison:
    got, want = np.asarray(got), np.asarray(want)
    shape = tuple(want.shape)
    if tuple(got.shape) != shape:
        return OutputComparison(index, shape, np.inf, np.inf, np.inf, False,
                                f"shape {list(got.shape)}, reference {list(shape)}")
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    # Non-finite reference values (e.g. -inf from an all-padding max window) must match.
    special = ~finite & ~((g == w) | (np.isnan(g) & np.isnan(w)))
    if special.any():
        return OutputComparison(index, shape, np.inf, np.inf, np.inf, False,
                                f"{int(special.sum())} non-finite reference values differ")
    if not np.isfinite(g[finite]).all():
        return OutputComparison(index, shape, np.inf, np.inf, np.inf, False,
                                "non-finite values where the reference is finite")
    err = float(np.max(np.abs(g[finite] - w[finite]), initial=0.0))
    scale = float(np.max(np.abs(w[finite]), initial=0.0))
    rel = err / scale if scale > 0 else (0.0 if err == 0 else np.inf)
    return OutputComparison(index, shape, err, scale, rel, err <= atol + rtol * scale,
                            nonfinite=int((~finite).sum()))


def compare(graph: Graph, feeds: Mapping[str, Any] | None = None,
            dtype: torch.dtype | str = torch.float64, rtol: float = 1e-4, atol: float = 1e-8,
            seed: int = 0, device: str | torch.device = "cpu") -> Comparison:
    """Run with torch and with the reference interpreter on the same sources and compare.

    An output passes when max |torch - reference| <= atol + rtol * max |reference|.
    """
    want = interpret(graph, feeds, seed=seed)
    assert isinstance(want, tuple)
    got = run(graph, feeds, device, dtype, seed)
    outs = tuple(compare_arrays(i, g, w, rtol, atol)
                 for i, (g, w) in enumerate(zip(got, want, strict=True)))
    return Comparison(ok=all(o.ok for o in outs),
                      max_abs_err=max((o.max_abs_err for o in outs), default=0.0),
                      max_rel_err=max((o.rel_err for o in outs), default=0.0),
                      outputs=outs, rtol=rtol, atol=atol, dtype=str(_dtype(dtype)),
                      device=str(_device(device)))


# ---- timing -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds per run of the whole graph (sources prepared beforehand):
    the median and the minimum of `times`, one entry per timed repeat."""

    median: float
    min: float
    times: tuple[float, ...]
    device: str
    dtype: str
    threads: int
    omp_wait_policy: str | None
    torch_preloaded: bool  # torch was loaded before superopt.backends set the wait policy


def benchmark(graph: Graph, feeds: Mapping[str, Any] | None = None,
              device: str | torch.device = "cpu", dtype: torch.dtype | str = torch.float32,
              warmup: int = 3, repeats: int = 10, seed: int = 0) -> Timing:
    """Time the lowered graph: `warmup` untimed runs, then the median of `repeats`."""
    if repeats < 1 or warmup < 0:
        raise BackendError(f"benchmark needs repeats >= 1 and warmup >= 0, found "
                           f"repeats={repeats}, warmup={warmup}")
    program = lower(graph, device, dtype, seed)
    sources = program.prepare(feeds)
    cuda = program.device.type == "cuda"

    def once() -> float:
        start = time.perf_counter()
        out = program.execute(sources)
        if cuda:
            torch.cuda.synchronize(program.device)
        elapsed = time.perf_counter() - start
        del out
        return elapsed

    for _ in range(warmup):
        once()
    times = tuple(once() for _ in range(repeats))
    return Timing(median=statistics.median(times), min=min(times), times=times,
                  device=str(program.device), dtype=str(program.dtype),
                  threads=torch.get_num_threads(),
                  omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
                  torch_preloaded=_backends.TORCH_PRELOADED)
