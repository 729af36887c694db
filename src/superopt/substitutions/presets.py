"""Generator settings: typed input tensors and operator templates, with named presets.

The `taso` preset reproduces the setting of TASO's public generator
(`src/generator/generator.cc` in jiazhihao/TASO): inputs x1..x3 [2,4], w1..w3 [4,4],
i1..i3 [2,4,5,5], w4..w6 [4,4,3,3], w7..w9 [4,4,1,3], w10..w12 [4,4,3,1], w13 [4,1,3,3] and a
scalar s0; templates matmul, ewadd, ewmul, conv2d (3x3, 1x1, 1x3, 3x1 kernels, stride 1, same
padding, with and without fused relu, grouped when channels allow), 3x3 avg and max pooling,
relu, scalar mul, concat and split on axes 0 and 1 of 2-D and 4-D tensors, 2-D transpose,
enlarge to 3x3 and the four constants. TASO's own restrictions are kept where they prune the
search without losing generality: a conv's input is never a weight variable, a matmul's
right operand never has the batch size (2) as its row count, enlarge only applies to graph
inputs, split only undoes a concatenation (it cuts at the last concat boundary on its axis).

The `modern` preset adds the operators of transformer-era models (`modern_templates`): every
element-wise unary op of the IR (neg, exp, log, sqrt, rsqrt, recip, erf, silu, sin, cos,
sigmoid, tanh, gelu, relu; pow with exponent 2, and 0.5 on request), the binary ones sub, div, maximum
and minimum beside ewadd and ewmul, 2-D matmul and transpose, reduce_max and reduce_sum
over the last axis, softmax over the last axis and rms_norm with a weight over the last axis (attention,
comparisons and where are left out: see `modern_templates`). Its inputs are drawn as small signed
integers (`input_bound`): exp is exact mod p only while its exponent's centred value does
not wrap (see `superopt.ir.modp`), which small inputs guarantee for the sums and
differences of a few-op graph, so exp(a + b) = exp(a) * exp(b) is found. Its common-supergraph
pruning is exact (`exact_supergraph`): many of its ops are not injective.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from superopt.ir.errors import IRError


class GeneratorConfigError(IRError):
    """A preset, op subset or input specification that cannot be used."""


@dataclass(frozen=True)
class InputSpec:
    """A typed input tensor. `role` is "data", "weight" or "scalar" (TASO's naming: weights
    start with "w"); a conv's data operand is never a weight variable."""

    name: str
    shape: tuple[int, ...]
    role: str = "data"


@dataclass(frozen=True)
class Template:
    """One operator with fixed attributes, applied to every shape-valid argument tuple.

    `kind` selects the shape filter and batched kernel (see `fingerprint.py`). Attributes
    that depend on shapes (conv groups, split sizes) are derived when the op is applied.
    """

    key: str
    kind: str
    op: str
    arity: int
    attrs: tuple[tuple[str, Any], ...] = ()
    commutative: bool = False
    kernels: tuple[tuple[int, int], ...] = ()  # conv2d: allowed weight kernel sizes
    axis: int = 0  # concat / split
    rank: int = 0  # concat / transpose: rank of the operands (0: any)
    const_shape: tuple[int, ...] = ()  # constants: their output shape

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)


@dataclass(frozen=True)
class GeneratorConfig:
    """What to enumerate: inputs, templates, graph size and output count."""

    preset: str
    inputs: tuple[InputSpec, ...]
    templates: tuple[Template, ...]
    max_ops: int = 3
    max_outputs: int = 2
    seed: int = 0
    samples: int = 2  # independent input draws every term is evaluated on
    # > 0: inputs are drawn as integers in [-input_bound, input_bound] (as residues) instead
    # of uniform residues, so sums of a few of them never wrap around p (exp stays exact)
    input_bound: int = 0
    # True: common-supergraph pruning drops f(X) = f(Y) only where X = Y too (TASO drops it
    # always, losing rules of ops that are not injective, e.g. pow(-x, 2) = pow(x, 2))
    exact_supergraph: bool = False

    def __post_init__(self) -> None:
        names = [i.name for i in self.inputs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise GeneratorConfigError(f"input name {sorted(dup)[0]!r} used twice")
        keys = [t.key for t in self.templates]
        dupk = {k for k in keys if keys.count(k) > 1}
        if dupk:
            raise GeneratorConfigError(f"template {sorted(dupk)[0]!r} used twice")
        if not 1 <= self.max_ops <= 5:
            raise GeneratorConfigError(f"max_ops must be in 1..5, found {self.max_ops}")
        if self.max_outputs not in (1, 2):
            raise GeneratorConfigError(f"max_outputs must be 1 or 2, found {self.max_outputs}")
        if len(self.inputs) > 60:
            raise GeneratorConfigError(f"at most 60 inputs, found {len(self.inputs)}")
        if not self.templates:
            raise GeneratorConfigError("no operator templates selected")
        if not 1 <= self.samples <= 16:
            raise GeneratorConfigError(f"samples must be in 1..16, found {self.samples}")
        if not 0 <= self.input_bound < 2**20:
            raise GeneratorConfigError(f"input_bound must be in 0..2**20-1, found "
                                       f"{self.input_bound}")

    def key(self) -> dict[str, Any]:
        """A JSON-able description; a resumed run must match it exactly."""
        out: dict[str, Any] = {
            "preset": self.preset, "max_ops": self.max_ops, "max_outputs": self.max_outputs,
            "seed": self.seed, "samples": self.samples,
            "inputs": [[i.name, list(i.shape), i.role] for i in self.inputs],
            "templates": [t.key for t in self.templates],
        }
        if self.input_bound:  # absent when 0, so the existing presets' digests stay
            out["input_bound"] = self.input_bound
        if self.exact_supergraph:
            out["exact_supergraph"] = True
        return out


# ---- templates ----------------------------------------------------------------------

CONV_KERNELS = ((3, 3), (1, 1), (1, 3), (3, 1))


def _pool(kind: str) -> Template:
    op = "pool2d_avg" if kind == "avg" else "pool2d_max"
    return Template(f"{op}_3x3", "pool", op, 1,
                    (("kernel", (3, 3)), ("padding", "same"), ("stride", (1, 1))))


def standard_templates() -> dict[str, Template]:
    """Every template a preset may use, by key."""
    t: list[Template] = [
        Template("matmul", "matmul", "matmul", 2),
        Template("ewadd", "ew", "ewadd", 2, commutative=True),
        Template("ewmul", "ew", "ewmul", 2, commutative=True),
        Template("conv2d", "conv", "conv2d", 2, (("padding", "same"),), kernels=CONV_KERNELS),
        Template("conv2d_relu", "conv", "conv2d", 2,
                 (("activation", "relu"), ("padding", "same")), kernels=CONV_KERNELS),
        _pool("avg"),
        _pool("max"),
        Template("relu", "unary", "relu", 1),
        Template("smul", "smul", "smul", 2),
        Template("transpose", "transpose", "transpose", 1, (("perm", (1, 0)),), rank=2),
        Template("enlarge_3x3", "enlarge", "enlarge", 1, (("kh", 3), ("kw", 3))),
    ]
    for rank in (2, 4):
        for axis in (0, 1):
            t.append(Template(f"concat{rank}d_{axis}", "concat", "concat", 2, (("axis", axis),),
                              axis=axis, rank=rank))
    for axis in (0, 1):
        t.append(Template(f"split_{axis}", "split", "split", 1, (("axis", axis),), axis=axis))
    return {x.key: x for x in t}


def const_templates(pool: tuple[int, ...] = (4, 1, 3, 3), iconv: tuple[int, ...] = (4, 4, 3, 3),
                    imm: int = 4, one: tuple[int, ...] = (2, 4, 5, 5)) -> dict[str, Template]:
    """TASO's four constants with the shapes of its generator."""
    return {
        "const_pool": Template("const_pool", "const", "const_pool", 0,
                               (("channels", pool[0]), ("kh", pool[2]), ("kw", pool[3])),
                               const_shape=pool),
        "const_iconv": Template("const_iconv", "const", "const_iconv", 0,
                                (("channels", iconv[0]), ("kh", iconv[2]), ("kw", iconv[3])),
                                const_shape=iconv),
        "const_imm": Template("const_imm", "const", "const_imm", 0, (("n", imm),),
                              const_shape=(imm, imm)),
        "const_one": Template("const_one", "const", "const_one", 0, (("shape", one),),
                              const_shape=one),
    }


def _inputs(spec: Iterable[tuple[str, tuple[int, ...]]]) -> tuple[InputSpec, ...]:
    out = []
    for name, shape in spec:
        role = "scalar" if not shape else ("weight" if name.startswith("w") else "data")
        out.append(InputSpec(name, tuple(shape), role))
    return tuple(out)


TASO_INPUTS = _inputs(
    [(f"x{i}", (2, 4)) for i in (1, 2, 3)]
    + [(f"w{i}", (4, 4)) for i in (1, 2, 3)]
    + [(f"i{i}", (2, 4, 5, 5)) for i in (1, 2, 3)]
    + [(f"w{i}", (4, 4, 3, 3)) for i in (4, 5, 6)]
    + [(f"w{i}", (4, 4, 1, 3)) for i in (7, 8, 9)]
    + [(f"w{i}", (4, 4, 3, 1)) for i in (10, 11, 12)]
    + [("w13", (4, 1, 3, 3)), ("s0", ())])

# TASO names its inputs x1..s0 internally and input_1..input_20 in the files it writes
# (the tensor's opId is minus that number); Tensat's rule files use the same numbering.

_TASO_TEMPLATE_KEYS = (
    "matmul", "ewadd", "ewmul", "conv2d", "conv2d_relu", "pool2d_avg_3x3", "pool2d_max_3x3",
    "const_pool", "const_iconv", "const_imm", "const_one", "enlarge_3x3", "smul", "relu",
    "concat2d_0", "concat2d_1", "concat4d_0", "concat4d_1", "split_0", "split_1", "transpose",
)


def modern_templates() -> dict[str, Template]:
    """The transformer-era operators (see the module docstring), by key.

    Element-wise ops come from the IR's traits: every registered ELEMENTWISE op with one
    float input and no required attribute is a `unary` template, so an op added to the IR
    joins the preset without an edit here. Left out, with the reason:

    - comparisons (eq, lt, gt), where and cast: their results are bool, and the term table
      groups terms by shape only; a bool term would be fed to float ops (its own group by
      dtype is future work);
    - pow beyond exponents 2 and 0.5: each exponent is another template, and these two are
      the ones with exact counterparts (x * x, sqrt); the float-exponent case is a
      pseudo-random function mod p that no other op equals;
    - gather, expand, iota, tri_mask, embedding: index and constant ops whose identities
      need integer inputs or masks (future work with dtype groups);
    - attention (and where): three tensor operands, and a term records two (`a0`, `a1`
      through enumeration, bucket files and the term store); its identities (linear in v,
      softmax's) are those of its decomposition, which the preset's ops cover;
    - layer_norm, batch_norm, lrn, conv and pooling: kept to the `taso` and `conv` presets
      (layer_norm's identities are rms_norm's on a centred input, 4 ops here).
    """
    from superopt.ir.opdef import ELEMENTWISE, get_op, ops_with

    t: list[Template] = []
    for name in ops_with(ELEMENTWISE):
        op = get_op(name)
        if op.num_inputs != 1 or any(a.required for a in op.attrs):
            continue
        t.append(Template(name, "unary", name, 1))
    t += [
        Template("pow_2", "unary", "pow", 1, (("exponent", 2.0),)),
        Template("pow_0.5", "unary", "pow", 1, (("exponent", 0.5),)),
        Template("sub", "ew", "sub", 2),
        Template("div", "ew", "div", 2),
        Template("maximum", "ew", "maximum", 2, commutative=True),
        Template("minimum", "ew", "minimum", 2, commutative=True),
        Template("reduce_max_last", "op", "reduce_max", 1, (("axes", (-1,)),
                                                           ("keepdims", True)), rank=2),
        Template("reduce_sum_last", "op", "reduce_sum", 1, (("axes", (-1,)),
                                                           ("keepdims", True)), rank=2),
        Template("softmax_last", "op", "softmax", 1, (("axis", -1),), rank=2),
        Template("rms_norm_last", "op", "rms_norm", 2, (("axis", -1),), rank=2),
    ]
    return {x.key: x for x in t}


def _all_templates() -> dict[str, Template]:
    return {**standard_templates(), **const_templates(), **modern_templates()}


def _select(keys: Sequence[str], table: dict[str, Template] | None = None) -> tuple[Template, ...]:
    table = table or _all_templates()
    return tuple(table[k] for k in keys)


def _preset_taso() -> GeneratorConfig:
    return GeneratorConfig("taso", TASO_INPUTS, _select(_TASO_TEMPLATE_KEYS))


def _preset_linear() -> GeneratorConfig:
    inputs = tuple(i for i in TASO_INPUTS if len(i.shape) in (0, 2))
    keys = ("matmul", "ewadd", "ewmul", "smul", "relu", "transpose", "concat2d_0",
            "concat2d_1", "split_0", "split_1", "const_imm")
    return GeneratorConfig("linear", inputs, _select(keys))


def _preset_conv() -> GeneratorConfig:
    inputs = tuple(i for i in TASO_INPUTS if len(i.shape) in (0, 4))
    keys = ("conv2d", "conv2d_relu", "pool2d_avg_3x3", "pool2d_max_3x3", "relu", "ewadd",
            "ewmul", "smul", "concat4d_0", "concat4d_1", "split_0", "split_1", "enlarge_3x3",
            "const_pool", "const_iconv", "const_one")
    return GeneratorConfig("conv", inputs, _select(keys))


def _preset_small() -> GeneratorConfig:
    """A tiny setting for tests and demos: two 2x4 inputs, two 4x4 weights."""
    inputs = _inputs([("x1", (2, 4)), ("x2", (2, 4)), ("w1", (4, 4)), ("w2", (4, 4))])
    keys = ("matmul", "ewadd", "relu", "transpose", "concat2d_0", "concat2d_1", "split_0",
            "split_1", "const_imm")
    return GeneratorConfig("small", inputs, _select(keys))


MODERN_INPUTS = _inputs([("x1", (2, 4)), ("x2", (2, 4)), ("x3", (2, 4)), ("w1", (4, 4)),
                         ("w2", (4, 4)), ("g1", (4,)), ("s0", ())])
MODERN_INPUT_BOUND = 1024


def _preset_modern() -> GeneratorConfig:
    """Transformer-era ops (`modern_templates`) on 2x4 data, 4x4 weights, a 4-vector (the
    rms_norm weight) and a scalar; inputs drawn as small integers (`input_bound`)."""
    base = ("matmul", "ewadd", "ewmul", "smul", "transpose")
    # pow_0.5 is sqrt under another name (and mod p): with both, every rule about one has
    # a twin about the other (3 ops: 1,596 of 7,944 rules used it); `--ops ...,pow_0.5` adds it
    keys = tuple(k for k in dict.fromkeys((*base, *modern_templates())) if k != "pow_0.5")
    return GeneratorConfig("modern", MODERN_INPUTS, _select(keys),
                           input_bound=MODERN_INPUT_BOUND, exact_supergraph=True)


PRESETS = {"taso": _preset_taso, "modern": _preset_modern, "linear": _preset_linear, "conv": _preset_conv,
           "small": _preset_small}


_SHAPE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*):(?P<shape>\d+(?:x\d+)*|scalar)"
                    r"(?::(?P<role>data|weight|scalar))?$")


def parse_inputs(text: str) -> tuple[InputSpec, ...]:
    """`x1:2x4,w1:4x4,s0:scalar` (an optional `:data|weight|scalar` sets the role)."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        m = _SHAPE.match(item)
        if not m:
            raise GeneratorConfigError(f"bad input spec {item!r}; expected NAME:2x4[:role] "
                                       "or NAME:scalar")
        shape = () if m.group("shape") == "scalar" else tuple(
            int(d) for d in m.group("shape").split("x"))
        role = m.group("role") or ("scalar" if not shape else
                                   "weight" if m.group("name").startswith("w") else "data")
        out.append(InputSpec(m.group("name"), shape, role))
    if not out:
        raise GeneratorConfigError(f"no inputs in {text!r}")
    return tuple(out)


def make_config(preset: str = "taso", max_ops: int | None = None, ops: Sequence[str] | None = None,
                inputs: str | Sequence[InputSpec] | None = None, max_outputs: int | None = None,
                seed: int | None = None) -> GeneratorConfig:
    """A preset, optionally narrowed to some templates (by key or op name) or with other
    inputs, graph size or output count."""
    try:
        cfg = PRESETS[preset]()
    except KeyError:
        raise GeneratorConfigError(f"unknown preset {preset!r}; known: "
                                   f"{', '.join(sorted(PRESETS))}") from None
    changes: dict[str, Any] = {}
    if ops:
        table = _all_templates()
        chosen: list[Template] = []
        for name in ops:
            hits = [t for t in cfg.templates if name in (t.key, t.op)]
            if not hits:
                hits = [t for t in table.values() if name in (t.key, t.op)]
            if not hits:
                raise GeneratorConfigError(
                    f"unknown op or template {name!r}; known: "
                    f"{', '.join(sorted({*table, *(t.op for t in table.values())}))}")
            chosen.extend(h for h in hits if h not in chosen)
        changes["templates"] = tuple(chosen)
    if inputs is not None:
        changes["inputs"] = parse_inputs(inputs) if isinstance(inputs, str) else tuple(inputs)
    if max_ops is not None:
        changes["max_ops"] = max_ops
    if max_outputs is not None:
        changes["max_outputs"] = max_outputs
    if seed is not None:
        changes["seed"] = seed
    return replace(cfg, **changes) if changes else cfg
