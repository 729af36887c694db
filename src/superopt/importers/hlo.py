"""XLA HLO import: a decoded HLO module (JSON) into the IR, with its layouts and kernels.

The input is the JSON form of an `xla.HloModuleProto` used by the TpuGraphs samples (see
`shared/data/tpu_graphs_samples/README.md`): computations, each a list of instructions with
`id`, `name`, `opcode`, `shape` (`{type, dims, minor_to_major, tiles?}` or a tuple),
`operand_ids` and the opcode's fields (`dimensions`, `window`, `convolution_dimension_numbers`,
`dot_dimension_numbers`, `slice_dimensions`, `padding_config`, `literal`,
`called_computation_ids`, ...). A file, a module dict or one entry of `op_tuning_data.json`'s
`kernels` are all accepted.

What comes out (`HloImport`): an IR graph; the minor-to-major layout of every IR value (HLO
layouts are after layout assignment; they become the simulator's `Config.layouts`); the
kernel structure (each fusion, and each other instruction of the entry computation, is one
kernel: its members and output values); and, in cost mode, storage dtypes.

Mappings (exact: the IR graph computes what the HLO computes, up to float precision):

- parameter -> weight (HBM-resident, in the layout the program gives it); constant and iota
  -> weights with data (an iota is a rank-1 range broadcast along its dim);
- broadcast -> nothing: the operand is reshaped (and transposed) to the output's rank with
  size-1 dims, and numpy broadcasting in the element-wise consumers does the rest. Only a
  consumer that needs the whole array (a reduction, a kernel output) materialises it, by
  concatenating the value with itself (binary doubling along each broadcast dim);
- add -> ewadd; multiply -> ewmul; subtract -> ewadd(a, smul(b, -1)); negate -> smul(x, -1);
  maximum(a, b) -> b + relu(a - b) (relu(a) when b is zero); minimum(a, b) -> a - relu(a - b);
  abs(x) -> relu(x) + relu(-x); select(p, a, b) -> b + p * (a - b); clamp -> max and min;
  tanh -> tanh; logistic -> sigmoid;
- reshape -> reshape; transpose -> transpose; slice -> slice; pad with a zero value and no
  interior padding -> pad (then slice for negative padding); concatenate -> concat;
  copy -> layout (copy when the layout is kept); bitcast -> transpose to physical order,
  reshape, transpose to the new logical order (views under the layouts);
- dot -> matmul between operands transposed and reshaped to [batch..., M, K] @ [batch..., K, N];
- convolution with two spatial dims -> conv2d between operands transposed to NCHW and OIHW
  (views under the layouts), the result transposed back; one spatial dim gets a unit dim;
  three spatial dims -> a sum of conv2d over the taps of one spatial dim (each reading a
  strided slice of the input, output positions folded into the batch), or over its output
  positions (taps folded into the input features), whichever makes fewer slabs;
- reduce whose reducer is `add` with a zero init -> reduce_sum;
- tuple, get-tuple-element, fusion and call are structural (fused computations are inlined).

Every other opcode has no exact IR counterpart. By default the import then fails with one
`UnsupportedOpsError` naming every such opcode and where it occurs (never a partial graph).
With `proxies=True` (cost mode, for the simulator) element-wise ones are imported as *cost
proxies*: an IR op with the same operands, shape and cost class -- `copy` for conversions and
bit casts, `relu` for other one-VPU-op unary functions, `ewadd` for comparisons and bitwise
binary ops, `tanh` for transcendental unary ones, `tanh(ewmul)` for divide and power,
`reduce_sum` for reductions by max, min, or, and; `rng` becomes per-dim pseudo-random
constants added together. The values then differ from the program's (the import lists every
proxied instruction), but each kernel does the same amount of vector work on arrays of the
same sizes. Cost mode also computes every value in f32, as the IR's element-wise ops need one
dtype, and keeps each value's HLO element type as its storage dtype (`HloImport.dtypes`,
the simulator's `Config.dtypes`), so bytes and tiling follow the program.

Element types: f32, bf16, f16 as themselves; s32/u32 -> i32, s64/u64 -> i64, s16/u16 -> i16,
s8/u8/pred -> i8 (values keep their bits for the reference semantics' integer range).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from superopt.importers.errors import ModelImportError, UnsupportedOpsError
from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Value
from superopt.ir.types import DType

Layout = tuple[int, ...]
Instr = Mapping[str, Any]

ELEMENT_TYPES: Mapping[str, DType] = MappingProxyType({
    "f32": DType.F32, "bf16": DType.BF16, "f16": DType.F16, "s32": DType.I32,
    "u32": DType.I32, "s64": DType.I64, "u64": DType.I64, "s16": DType.I16, "u16": DType.I16,
    "s8": DType.I8, "u8": DType.I8, "pred": DType.I8})

# Cost classes of element-wise opcodes without an exact IR counterpart (cost mode only).
PROXY_CONVERT = frozenset({"convert", "bitcast-convert", "reduce-precision"})
PROXY_UNARY = frozenset({"not", "floor", "ceil", "round-nearest-afz", "round-nearest-even",
                         "sign", "count-leading-zeros", "popcnt", "is-finite", "real", "imag"})
PROXY_BINARY = frozenset({"compare", "and", "or", "xor", "shift-left", "shift-right-logical",
                          "shift-right-arithmetic", "remainder", "atan2", "complex"})
PROXY_TRANSCENDENTAL = frozenset({"exponential", "exponential-minus-one", "log",
                                  "log-plus-one", "sqrt", "rsqrt", "cbrt", "sine", "cosine",
                                  "tan", "erf"})
PROXY_TRANSCENDENTAL_BINARY = frozenset({"divide", "power"})
STRUCTURAL = frozenset({"parameter", "constant", "iota", "tuple", "get-tuple-element"})


# ---- the module ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Computation:
    id: int
    name: str
    root_id: int
    instructions: tuple[Instr, ...]
    by_id: Mapping[int, Instr]


@dataclass(frozen=True)
class HloModule:
    name: str
    computations: Mapping[int, Computation]
    entry: int
    source: str  # where it came from, for error messages

    @property
    def entry_computation(self) -> Computation:
        return self.computations[self.entry]

    def instruction(self, name: str) -> Instr:
        """An instruction of the entry computation by name."""
        for ins in self.entry_computation.instructions:
            if ins["name"] == name:
                return ins
        raise ModelImportError(f"{self.source}: no instruction {name!r} in the entry "
                               f"computation {self.entry_computation.name!r}")


def load_module(source: str | Path | Traversable | Mapping[str, Any], name: str | None = None
                ) -> HloModule:
    """Read a decoded HLO module: a JSON file or dict with `computations` and an entry
    computation id (`entry_computation_id`, at the top level or under `module`)."""
    where = str(source) if not isinstance(source, Mapping) else (name or "HLO module")
    if not isinstance(source, Mapping):
        # A str is a path; a Path or other Traversable (package data) reads itself.
        path = Path(source) if isinstance(source, str) else source
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ModelImportError(f"{where}: no such file") from None
        except (OSError, ValueError) as e:
            raise ModelImportError(f"{where}: not a JSON HLO module ({e})") from None
    else:
        data = source
    if not isinstance(data, Mapping) or not isinstance(data.get("computations"), list):
        raise ModelImportError(f"{where}: expected a decoded HLO module with a "
                               "'computations' list")
    meta = data.get("module") if isinstance(data.get("module"), Mapping) else {}
    entry = data.get("entry_computation_id", meta.get("entry_computation_id"))
    comps: dict[int, Computation] = {}
    try:
        for c in data["computations"]:
            ins = tuple(c["instructions"])
            comps[int(c["id"])] = Computation(int(c["id"]), str(c["name"]), int(c["root_id"]),
                                              ins, {int(i["id"]): i for i in ins})
    except (KeyError, TypeError, ValueError) as e:
        raise ModelImportError(f"{where}: malformed computation ({e!r})") from None
    if entry is None or int(entry) not in comps:
        raise ModelImportError(f"{where}: the entry computation id {entry!r} names no "
                               "computation")
    mname = name or data.get("name") or meta.get("name") or comps[int(entry)].name
    return HloModule(str(mname), MappingProxyType(comps), int(entry), where)


# ---- what comes out -------------------------------------------------------------------------

@dataclass(frozen=True)
class HloKernel:
    """One kernel of the program: an HLO fusion, or another entry-computation instruction."""

    name: str
    opcode: str
    nodes: tuple[int, ...]  # IR nodes computed by it (sources excluded)
    outputs: tuple[Value, ...]  # IR values it writes to HBM


@dataclass(frozen=True)
class HloImport:
    graph: Graph
    layouts: Mapping[Value, Layout]  # every value's minor-to-major order
    dtypes: Mapping[Value, DType]  # storage dtypes that differ from the IR dtype (cost mode)
    kernels: tuple[HloKernel, ...]
    values: Mapping[str, Value]  # HLO instruction name -> the IR value it became (arrays)
    proxies: tuple[str, ...] = ()  # "name (opcode)" of instructions imported as cost proxies
    exact: bool = True

    def kernel(self, name: str) -> HloKernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r}; kernels: {', '.join(k.name for k in self.kernels)}")


# ---- the importer --------------------------------------------------------------------------

@dataclass
class _Arr:
    """An HLO array as an IR value. The IR value has the HLO shape, or the same rank with
    size-1 dims where the HLO array is a broadcast (or rank 0 for a broadcast scalar)."""

    value: Value
    shape: tuple[int, ...]
    etype: str
    layout: Layout


Result = _Arr | tuple["Result", ...]


class _Placeholder(Exception):
    """An instruction that could not be imported (already recorded as unsupported)."""


def _default_layout(rank: int) -> Layout:
    return tuple(range(rank - 1, -1, -1))


def _shape_of(s: Mapping[str, Any]) -> tuple[tuple[int, ...], str, Layout]:
    dims = tuple(int(d) for d in s.get("dims", ()))
    lay = s.get("minor_to_major")
    layout = tuple(int(d) for d in lay) if lay is not None and len(lay) == len(dims) else (
        _default_layout(len(dims)))
    return dims, str(s.get("type")), layout


def _permute_layout(layout: Layout, perm: Sequence[int]) -> Layout:
    """Layout of transpose(x, perm) that keeps x's physical array (x in `layout`)."""
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return tuple(inverse[d] for d in layout)


class _Importer:
    def __init__(self, module: HloModule, proxies: bool, name: str) -> None:
        self.m = module
        self.proxies = proxies
        self.b = GraphBuilder(name)
        self.layouts: dict[Value, Layout] = {}
        self.stored: dict[Value, DType] = {}
        self.unsupported: list[tuple[str, str]] = []
        self.proxied: list[str] = []
        self.values: dict[str, Value] = {}
        self.scalars: dict[Value, float] = {}  # scalar constants, for relu and pad checks
        self.kernel: str | None = None
        self.members: dict[str, list[int]] = {}
        self.kernel_ops: dict[str, str] = {}
        self.kernel_outs: dict[str, list[Value]] = {}
        self.computing: list[str] = []  # computation names being inlined (for messages)
        self.scanned: set[int] = set()

    # ---- emitting ---------------------------------------------------------------------

    def dtype(self, etype: str) -> DType:
        dt = ELEMENT_TYPES.get(etype)
        if dt is None:
            raise ValueError(f"element type {etype}")
        return DType.F32 if self.proxies else dt

    def note(self, v: Value, layout: Layout | None, etype: str) -> Value:
        rank = self.b.type_of(v).rank
        if layout is None or len(layout) != rank:
            layout = self.layouts.get(v) or _default_layout(rank)
        self.layouts.setdefault(v, tuple(layout))
        if self.proxies:
            dt = ELEMENT_TYPES.get(etype, DType.F32)
            if dt != DType.F32:
                self.stored.setdefault(v, dt)
        node = self.b.nodes[v.node]
        if self.kernel is not None and not node.is_source:
            members = self.members.setdefault(self.kernel, [])
            if v.node not in members:
                members.append(v.node)
        return v

    def op(self, op: str, inputs: Sequence[Value], layout: Layout | None, etype: str,
           **attrs: Any) -> Value:
        values = self.b.add(op, tuple(inputs), attrs)
        return self.note(values[0], layout, etype)

    def weight(self, name: str, shape: Sequence[int], etype: str, layout: Layout | None,
               data: np.ndarray | None = None, init: str = "normal") -> Value:
        dt = self.dtype(etype)
        if data is not None:
            data = np.asarray(data, dtype=np.float64 if dt.is_float else np.int64)
        v = self.b.weight(name, tuple(shape), dt, data=data, init=init)
        return self.note(v, layout, etype)

    def scalar(self, value: float, etype: str) -> Value:
        dt = self.dtype(etype)
        name = f"const({value:g}:{dt.value})"
        v = self.weight(name, (), etype, (), data=np.array(value))
        self.scalars[v] = float(value)
        return v

    # ---- arrays -------------------------------------------------------------------------

    def ir_shape(self, a: _Arr) -> tuple[int, ...]:
        return self.b.type_of(a.value).shape

    def materialize(self, a: _Arr) -> Value:
        """The whole array: broadcast dims made real by doubling concatenation."""
        have = self.ir_shape(a)
        if have == a.shape:
            return a.value
        v = a.value
        rank = len(a.shape)
        if len(have) != rank:
            v = self.op("reshape", [v], a.layout, a.etype, shape=(1,) * rank)
            have = (1,) * rank
        for axis in range(rank):
            want = a.shape[axis]
            if have[axis] == want:
                continue
            powers = [v]
            while 2 ** len(powers) <= want:
                last = powers[-1]
                powers.append(self.op("concat", [last, last], a.layout, a.etype, axis=axis))
            parts = [powers[k] for k in range(len(powers) - 1, -1, -1) if want >> k & 1]
            v = parts[0] if len(parts) == 1 else self.op("concat", parts, a.layout, a.etype,
                                                          axis=axis)
            have = self.b.type_of(v).shape
        return v

    def neg(self, v: Value, layout: Layout, etype: str) -> Value:
        return self.op("smul", [v, self.scalar(-1.0, etype)], layout, etype)

    def is_zero(self, a: _Arr) -> bool:
        return self.scalars.get(a.value) == 0.0

    # ---- traversal -----------------------------------------------------------------------

    def run_entry(self, roots: Sequence[str] | None) -> list[_Arr]:
        comp = self.m.entry_computation
        if roots is None:
            env = self.computation(comp, None, top=True)
            out = env[comp.root_id]
            return _flatten(out)
        outs = []
        env: dict[int, Result] = {}
        for name in roots:
            ins = self.m.instruction(name)
            for oid in ins.get("operand_ids", ()):
                if oid not in env:
                    op_ins = comp.by_id[oid]
                    env[oid] = self.parameter_like(op_ins)
            env[ins["id"]] = self.top_level(ins, env, comp)
            outs.extend(_flatten(env[ins["id"]]))
        return outs

    def parameter_like(self, ins: Instr) -> Result:
        """An operand outside the imported instructions: a parameter of its shape."""
        s = ins["shape"]
        if s.get("type") == "tuple":
            return tuple(self.parameter_like({**ins, "name": f"{ins['name']}.{k}", "shape": t})
                         for k, t in enumerate(s["tuple"]))
        shape, etype, layout = _shape_of(s)
        return _Arr(self.weight(ins["name"], shape, etype, layout), shape, etype, layout)

    def computation(self, comp: Computation, args: Sequence[Result] | None, top: bool = False
                    ) -> dict[int, Result]:
        self.computing.append(comp.name)
        env: dict[int, Result] = {}
        for ins in _topological(comp):
            if ins["opcode"] == "parameter":
                k = int(ins.get("parameter_number", 0))
                if args is None:
                    env[ins["id"]] = self.parameter_like(ins)
                elif k < len(args):
                    env[ins["id"]] = args[k]
                else:
                    self.fail(ins, "parameter number beyond the call's operands")
                    env[ins["id"]] = self.placeholder(ins)
                continue
            env[ins["id"]] = self.top_level(ins, env, comp) if top else self.instruction(
                ins, env)
        self.computing.pop()
        return env

    def top_level(self, ins: Instr, env: Mapping[int, Result], comp: Computation) -> Result:
        """An instruction of the entry computation: a kernel of its own (unless structural),
        whose outputs are materialised."""
        if ins["opcode"] in STRUCTURAL or ins["opcode"] == "bitcast":
            return self.instruction(ins, env)
        self.kernel = ins["name"]
        self.kernel_ops[ins["name"]] = ins["opcode"]
        self.members.setdefault(ins["name"], [])
        try:
            out = self.instruction(ins, env)
            mats = []
            for a in _flatten(out):
                v = self.materialize(a)
                mats.append(v)
            self.kernel_outs[ins["name"]] = mats
            return _rebuild(out, iter(mats))
        finally:
            self.kernel = None

    def fail(self, ins: Instr, why: str) -> None:
        where = ins["name"] if len(self.computing) <= 1 else (
            f"{ins['name']} in {self.computing[-1]}")
        self.unsupported.append((f"{ins['opcode']}{f' ({why})' if why else ''}", where))
        for cid in ins.get("called_computation_ids", ()):
            self.scan(cid)

    def scan(self, cid: int) -> None:
        """Report the unsupported opcodes of a computation that an unsupported instruction
        calls (a while body, a sort comparator), so one error lists them all."""
        comp = self.m.computations.get(cid)
        if comp is None or cid in self.scanned:
            return
        self.scanned.add(cid)
        for ins in comp.instructions:
            op = ins["opcode"]
            known = hasattr(self, "op_" + op.replace("-", "_"))
            if not known and not (self.proxies and op in _PROXY_OPCODES):
                self.unsupported.append((op + _why_missing(op), f"{ins['name']} in {comp.name}"))
            for sub in ins.get("called_computation_ids", ()):
                self.scan(sub)

    def placeholder(self, ins: Instr) -> Result:
        s = ins["shape"]
        if s.get("type") == "tuple":
            return tuple(self.placeholder({**ins, "name": f"{ins['name']}.{k}", "shape": t})
                         for k, t in enumerate(s["tuple"]))
        shape, etype, layout = _shape_of(s)
        if etype not in ELEMENT_TYPES:
            etype = "f32"
        return _Arr(self.weight(f"unsupported:{ins['name']}", shape, etype, layout), shape,
                    etype, layout)

    def instruction(self, ins: Instr, env: Mapping[int, Result]) -> Result:
        opcode = ins["opcode"]
        try:
            operands = [env[i] for i in ins.get("operand_ids", ())]
        except KeyError as e:
            self.fail(ins, f"operand {e.args[0]} is not an earlier instruction")
            return self.placeholder(ins)
        s = ins["shape"]
        if s.get("type") != "tuple" and s.get("type") not in ELEMENT_TYPES:
            self.fail(ins, f"element type {s.get('type')}")
            return self.placeholder(ins)
        handler = getattr(self, "op_" + opcode.replace("-", "_"), None)
        try:
            if handler is not None:
                out = handler(ins, operands)
            elif self.proxies and opcode in _PROXY_OPCODES:
                out = self.proxy(ins, operands)
            else:
                self.fail(ins, _why_missing(opcode)[2:-1])
                return self.placeholder(ins)
        except _Placeholder:
            return self.placeholder(ins)
        except IRError as e:
            self.fail(ins, str(e))
            return self.placeholder(ins)
        for a in _flatten(out):
            dt = self.b.type_of(a.value).dtype
            if dt != self.dtype(a.etype):
                self.fail(ins, f"it yields {a.etype} from {dt.value} values: the IR has no "
                               "dtype conversion; proxies=True imports a cost proxy")
                return self.placeholder(ins)
        if isinstance(out, _Arr):
            self.values.setdefault(ins["name"], out.value)
        return out

    # ---- opcodes: structure ---------------------------------------------------------------

    def out(self, ins: Instr) -> tuple[tuple[int, ...], str, Layout]:
        return _shape_of(ins["shape"])

    def op_constant(self, ins: Instr, ops: list[Result]) -> Result:
        shape, etype, layout = self.out(ins)
        lit = ins.get("literal")
        data = None
        if lit is not None and len(lit) == int(np.prod(shape, dtype=np.int64)):
            data = np.array([float(x) for x in lit], dtype=np.float64).reshape(shape)
        if shape == () and data is not None:
            v = self.scalar(float(data), etype)
        else:
            v = self.weight(ins["name"], shape, etype, layout, data=data)
        return _Arr(v, shape, etype, layout)

    def op_iota(self, ins: Instr, ops: list[Result]) -> Result:
        shape, etype, layout = self.out(ins)
        (dim,) = ins.get("dimensions", [0])
        small = [1] * len(shape)
        small[dim] = shape[dim]
        data = np.arange(shape[dim], dtype=np.float64).reshape(small)
        v = self.weight(ins["name"], small, etype, layout, data=data)
        return _Arr(v, shape, etype, layout)

    def op_tuple(self, ins: Instr, ops: list[Result]) -> Result:
        return tuple(ops)

    def op_get_tuple_element(self, ins: Instr, ops: list[Result]) -> Result:
        (t,) = ops
        if not isinstance(t, tuple):
            self.fail(ins, "operand is not a tuple")
            raise _Placeholder
        return t[int(ins.get("tuple_index", 0))]

    def op_fusion(self, ins: Instr, ops: list[Result]) -> Result:
        return self.call(ins, ops)

    def op_call(self, ins: Instr, ops: list[Result]) -> Result:
        return self.call(ins, ops)

    def call(self, ins: Instr, ops: list[Result]) -> Result:
        (cid,) = ins.get("called_computation_ids", [None])
        comp = self.m.computations.get(cid)
        if comp is None:
            self.fail(ins, f"calls computation {cid}, which the module lacks")
            raise _Placeholder
        env = self.computation(comp, ops)
        return env[comp.root_id]

    # ---- opcodes: element-wise ------------------------------------------------------------

    def arrays(self, ins: Instr, ops: list[Result]) -> list[_Arr]:
        out = []
        for o in ops:
            if not isinstance(o, _Arr):
                self.fail(ins, "tuple operand")
                raise _Placeholder
            out.append(o)
        return out

    def result(self, ins: Instr, v: Value) -> _Arr:
        shape, etype, layout = self.out(ins)
        self.note(v, layout, etype)
        return _Arr(v, shape, etype, layout)

    def op_add(self, ins: Instr, ops: list[Result]) -> Result:
        a, b = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        return self.result(ins, self.op("ewadd", [a.value, b.value], layout, etype))

    def op_multiply(self, ins: Instr, ops: list[Result]) -> Result:
        a, b = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        return self.result(ins, self.op("ewmul", [a.value, b.value], layout, etype))

    def op_subtract(self, ins: Instr, ops: list[Result]) -> Result:
        a, b = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        return self.result(ins, self.op("ewadd", [a.value, self.neg(b.value, layout, etype)],
                                        layout, etype))

    def op_negate(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        return self.result(ins, self.neg(a.value, layout, etype))

    def _max(self, a: _Arr, b: _Arr, layout: Layout, etype: str) -> Value:
        if self.is_zero(b):
            return self.op("relu", [a.value], layout, etype)
        if self.is_zero(a):
            return self.op("relu", [b.value], layout, etype)
        diff = self.op("ewadd", [a.value, self.neg(b.value, layout, etype)], layout, etype)
        return self.op("ewadd", [self.op("relu", [diff], layout, etype), b.value], layout,
                       etype)

    def _min(self, a: _Arr, b: _Arr, layout: Layout, etype: str) -> Value:
        diff = self.op("ewadd", [a.value, self.neg(b.value, layout, etype)], layout, etype)
        excess = self.neg(self.op("relu", [diff], layout, etype), layout, etype)
        return self.op("ewadd", [a.value, excess], layout, etype)

    def op_maximum(self, ins: Instr, ops: list[Result]) -> Result:
        a, b = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        return self.result(ins, self._max(a, b, layout, etype))

    def op_minimum(self, ins: Instr, ops: list[Result]) -> Result:
        a, b = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        return self.result(ins, self._min(a, b, layout, etype))

    def op_clamp(self, ins: Instr, ops: list[Result]) -> Result:
        lo, x, hi = self.arrays(ins, ops)
        shape, etype, layout = self.out(ins)
        low = _Arr(self._max(x, lo, layout, etype), shape, etype, layout)
        return self.result(ins, self._min(low, hi, layout, etype))

    def op_abs(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        pos = self.op("relu", [a.value], layout, etype)
        neg = self.op("relu", [self.neg(a.value, layout, etype)], layout, etype)
        return self.result(ins, self.op("ewadd", [pos, neg], layout, etype))

    def op_select(self, ins: Instr, ops: list[Result]) -> Result:
        p, a, b = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        if self.is_zero(b):
            return self.result(ins, self.op("ewmul", [p.value, a.value], layout, etype))
        diff = self.op("ewadd", [a.value, self.neg(b.value, layout, etype)], layout, etype)
        picked = self.op("ewmul", [p.value, diff], layout, etype)
        return self.result(ins, self.op("ewadd", [b.value, picked], layout, etype))

    def op_tanh(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        return self.result(ins, self.op("tanh", [a.value], layout, etype))

    def op_logistic(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        return self.result(ins, self.op("sigmoid", [a.value], layout, etype))

    def op_convert(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        shape, etype, layout = self.out(ins)
        if self.dtype(a.etype) == self.dtype(etype) and (
                not self.proxies or ELEMENT_TYPES[a.etype] == ELEMENT_TYPES[etype]):
            return _Arr(a.value, shape, etype, layout)  # same IR dtype: the identity
        if not self.proxies:
            self.fail(ins, f"{a.etype} to {etype}: the IR has no dtype conversion; "
                           "proxies=True imports a cost proxy")
            raise _Placeholder
        return self.proxy(ins, ops)

    def proxy(self, ins: Instr, ops: list[Result]) -> Result:
        """A cost proxy (cost mode): same operands, shape and cost class (module docstring)."""
        opcode = ins["opcode"]
        _, etype, layout = self.out(ins)
        self.proxied.append(f"{ins['name']} ({opcode})")
        if opcode == "rng":
            return self.rng(ins, ops)
        if opcode == "reduce":
            return self.reduce_as_sum(ins, ops)
        xs = self.arrays(ins, ops)
        if opcode in PROXY_CONVERT:
            v = self.op("copy", [xs[0].value], layout, etype)
        elif opcode in PROXY_UNARY:
            v = self.op("relu", [xs[0].value], layout, etype)
        elif opcode in PROXY_TRANSCENDENTAL:
            v = self.op("tanh", [xs[0].value], layout, etype)
        elif opcode in PROXY_TRANSCENDENTAL_BINARY:
            v = self.op("tanh", [self.op("ewmul", [xs[0].value, xs[1].value], layout, etype)],
                        layout, etype)
        else:  # binary comparisons and bit operations
            v = xs[0].value
            for other in xs[1:]:
                v = self.op("ewadd", [v, other.value], layout, etype)
        return self.result(ins, v)

    def rng(self, ins: Instr, ops: list[Result]) -> Result:
        shape, etype, layout = self.out(ins)
        xs = self.arrays(ins, ops)
        rng = np.random.default_rng(len(self.proxied))
        u: Value | None = None
        for d, n in enumerate(shape):
            if n == 1:
                continue
            small = [1] * len(shape)
            small[d] = n
            c = self.weight(f"{ins['name']}.u{d}", small, etype, layout,
                            data=rng.random(small) / max(1, len(shape)))
            u = c if u is None else self.op("ewadd", [u, c], layout, etype)
        if u is None:
            u = self.scalar(0.5, etype)
        if len(xs) >= 2:
            span = self.op("ewadd", [xs[1].value, self.neg(xs[0].value, layout, etype)],
                           layout, etype)
            u = self.op("ewadd", [self.op("ewmul", [u, span], layout, etype), xs[0].value],
                        layout, etype)
        return self.result(ins, u)

    # ---- opcodes: movement ----------------------------------------------------------------

    def op_broadcast(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        shape, etype, layout = self.out(ins)
        have = self.ir_shape(a)
        if not have:
            return _Arr(a.value, shape, etype, layout)
        dims = [int(d) for d in ins.get("dimensions", range(len(have)))]
        v = a.value
        if dims != sorted(dims):
            perm = sorted(range(len(dims)), key=lambda k: dims[k])
            v = self.op("transpose", [v], _permute_layout(self.layouts[v], perm), etype,
                        perm=tuple(perm))
            have = self.b.type_of(v).shape
            dims = sorted(dims)
        small = [1] * len(shape)
        for k, d in enumerate(dims):
            small[d] = have[k]
        if tuple(small) != have:
            v = self.op("reshape", [v], layout, etype, shape=tuple(small))
        return _Arr(v, shape, etype, layout)

    def op_reshape(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        shape, etype, layout = self.out(ins)
        v = self.materialize(a)
        if self.b.type_of(v).shape != shape:
            v = self.op("reshape", [v], layout, etype, shape=shape)
        elif self.layouts.get(v) != layout:
            v = self.op("layout", [v], layout, etype, minor_to_major=layout)
        return self.result(ins, v)

    def op_transpose(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        perm = tuple(int(d) for d in ins["dimensions"])
        return self.result(ins, self.op("transpose", [self.materialize(a)], layout, etype,
                                        perm=perm))

    def op_copy(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        v = self.materialize(a)
        if self.layouts.get(v) != layout:
            return self.result(ins, self.op("layout", [v], layout, etype,
                                            minor_to_major=layout))
        return self.result(ins, self.op("copy", [v], layout, etype))

    def op_bitcast(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        shape, etype, layout = self.out(ins)
        v = self.materialize(a)
        if a.shape == shape and a.layout == layout:
            return _Arr(v, shape, etype, layout)
        if int(np.prod(a.shape, dtype=np.int64)) != int(np.prod(shape, dtype=np.int64)):
            self.fail(ins, f"bitcast of {list(a.shape)} to {list(shape)} changes the size")
            raise _Placeholder
        # Logical -> physical order, reshape the physical array, physical -> new logical.
        p_in = list(reversed(a.layout))
        if p_in != list(range(len(p_in))):
            v = self.op("transpose", [v], _default_layout(len(p_in)), etype, perm=tuple(p_in))
        phys = tuple(shape[d] for d in reversed(layout))
        if self.b.type_of(v).shape != phys:
            v = self.op("reshape", [v], _default_layout(len(phys)), etype, shape=phys)
        p_out = list(reversed(layout))
        if p_out != list(range(len(p_out))):
            inverse = [0] * len(p_out)
            for i, p in enumerate(p_out):
                inverse[p] = i
            v = self.op("transpose", [v], layout, etype, perm=tuple(inverse))
        return self.result(ins, v)

    def op_slice(self, ins: Instr, ops: list[Result]) -> Result:
        (a,) = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        dims = ins["slice_dimensions"]
        return self.result(ins, self.op(
            "slice", [self.materialize(a)], layout, etype, starts=tuple(int(d[0]) for d in dims),
            ends=tuple(int(d[1]) for d in dims), steps=tuple(int(d[2]) for d in dims)))

    def op_concatenate(self, ins: Instr, ops: list[Result]) -> Result:
        xs = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        (axis,) = ins["dimensions"]
        return self.result(ins, self.op("concat", [self.materialize(x) for x in xs], layout,
                                        etype, axis=int(axis)))

    def op_pad(self, ins: Instr, ops: list[Result]) -> Result:
        a, fill = self.arrays(ins, ops)
        _, etype, layout = self.out(ins)
        cfg = [tuple(int(x) for x in d) for d in ins["padding_config"]]
        if any(d[2] for d in cfg):
            self.fail(ins, "interior padding")
            raise _Placeholder
        if not self.is_zero(fill):
            if not self.proxies:
                self.fail(ins, "a non-zero padding value; proxies=True imports a cost proxy")
                raise _Placeholder
            self.proxied.append(f"{ins['name']} (pad)")
        v = self.materialize(a)
        lo = [max(0, d[0]) for d in cfg]
        hi = [max(0, d[1]) for d in cfg]
        if any(lo) or any(hi):
            v = self.op("pad", [v], layout, etype, pads=tuple(lo + hi))
        if any(d[0] < 0 or d[1] < 0 for d in cfg):
            cur = self.b.type_of(v).shape
            starts = tuple(-min(0, d[0]) for d in cfg)
            ends = tuple(n + min(0, d[1]) for n, d in zip(cur, cfg, strict=True))
            v = self.op("slice", [v], layout, etype, starts=starts, ends=ends)
        return self.result(ins, v)

    # ---- opcodes: reductions and products -------------------------------------------------

    def reducer(self, ins: Instr) -> str:
        ids = ins.get("called_computation_ids") or [None]
        comp = self.m.computations.get(ids[0])
        if comp is None:
            return "?"
        return str(comp.by_id[comp.root_id]["opcode"])

    def op_reduce(self, ins: Instr, ops: list[Result]) -> Result:
        xs = self.arrays(ins, ops)
        if len(xs) != 2:
            self.fail(ins, f"a variadic reduce of {len(xs) // 2} arrays")
            raise _Placeholder
        kind = self.reducer(ins)
        if kind == "add" and self.is_zero(xs[1]):
            return self.reduce_as_sum(ins, ops)
        if not self.proxies:
            self.fail(ins, f"reducer {kind!r}; proxies=True imports a cost proxy")
            raise _Placeholder
        return self.proxy(ins, ops)

    def reduce_as_sum(self, ins: Instr, ops: list[Result]) -> Result:
        x = self.arrays(ins, ops)[0]
        _, etype, layout = self.out(ins)
        axes = tuple(int(d) for d in ins.get("dimensions", ()))
        v = self.materialize(x)
        if axes:
            v = self.op("reduce_sum", [v], layout, etype, axes=axes, keepdims=False)
        return self.result(ins, v)

    def op_dot(self, ins: Instr, ops: list[Result]) -> Result:
        a, b = self.arrays(ins, ops)
        shape, etype, layout = self.out(ins)
        dn = ins.get("dot_dimension_numbers", {})
        lb = [int(d) for d in dn.get("lhs_batch_dimensions", [])]
        rb = [int(d) for d in dn.get("rhs_batch_dimensions", [])]
        lc = [int(d) for d in dn.get("lhs_contracting_dimensions", [])]
        rc = [int(d) for d in dn.get("rhs_contracting_dimensions", [])]
        lf = [d for d in range(len(a.shape)) if d not in lb and d not in lc]
        rf = [d for d in range(len(b.shape)) if d not in rb and d not in rc]
        batch = [a.shape[d] for d in lb]
        m = int(np.prod([a.shape[d] for d in lf], dtype=np.int64))
        k = int(np.prod([a.shape[d] for d in lc], dtype=np.int64))
        n = int(np.prod([b.shape[d] for d in rf], dtype=np.int64))
        lhs = self.arrange(self.materialize(a), a, lb + lf + lc, (*batch, m, k), a.etype)
        rhs = self.arrange(self.materialize(b), b, rb + rc + rf, (*batch, k, n), b.etype)
        prod_layout = _default_layout(len(batch) + 2)
        v = self.op("matmul", [lhs, rhs], prod_layout, etype)
        if self.b.type_of(v).shape != shape:
            v = self.op("reshape", [v], layout, etype, shape=shape)
        return self.result(ins, v)

    def arrange(self, v: Value, a: _Arr, perm: list[int], shape: tuple[int, ...], etype: str
                ) -> Value:
        """Transpose `v` by `perm` (a view under the permuted layout), then reshape."""
        if perm != list(range(len(perm))):
            v = self.op("transpose", [v], _permute_layout(self.layouts[v], perm), etype,
                        perm=tuple(perm))
        if self.b.type_of(v).shape != shape:
            v = self.op("reshape", [v], _default_layout(len(shape)), etype, shape=shape)
        return v

    def op_convolution(self, ins: Instr, ops: list[Result]) -> Result:
        x, w = self.arrays(ins, ops)
        shape, etype, layout = self.out(ins)
        dn = ins.get("convolution_dimension_numbers", {})
        window = ins.get("window", [])
        nsp = len(dn.get("input_spatial_dimensions", []))
        if int(ins.get("batch_group_count", 1)) != 1 and (
                dn.get("input_spatial_dimensions") or window):
            self.fail(ins, "batch_group_count > 1 with spatial dims")
            raise _Placeholder
        for wd in window:
            if int(wd.get("padding_low", 0)) < 0 or int(wd.get("padding_high", 0)) < 0:
                self.fail(ins, "negative padding")
                raise _Placeholder
        if nsp not in (0, 1, 2, 3) or len(window) != nsp:
            self.fail(ins, f"{nsp} spatial dims with a window of {len(window)}")
            raise _Placeholder
        conv = _ConvDims(dn, window, int(ins.get("feature_group_count", 1)),
                         batch_groups=int(ins.get("batch_group_count", 1)))
        if nsp == 0:
            return self.result(ins, self.dense(conv, x, w, shape, etype, layout))
        xv, wv = self.materialize(x), self.materialize(w)
        # Window reversal flips the kernel; base (lhs) dilation spreads the input with zeros.
        for k, wd in enumerate(window):
            if wd.get("window_reversal"):
                wv = self.reverse(wv, w.etype, int(dn["kernel_spatial_dimensions"][k]))
            if int(wd.get("base_dilation", 1)) > 1:
                xv = self.dilate(xv, x.etype, int(dn["input_spatial_dimensions"][k]),
                                 int(wd["base_dilation"]))
        x = _Arr(xv, self.b.type_of(xv).shape, x.etype, self.layouts[xv])
        if nsp == 3:
            v = self.conv3d(conv, xv, x, wv, w, shape, etype, layout)
        else:
            v = self.conv2d(conv, xv, x, wv, w, shape, etype, layout)
        return self.result(ins, v)

    def dense(self, c: _ConvDims, x: _Arr, w: _Arr, shape: tuple[int, ...], etype: str,
              layout: Layout) -> Value:
        """A convolution without spatial dims (XLA's form of a dense layer): a matmul of
        x [batch, features] by w [features, out features], the dims wherever the dimension
        numbers put them. Feature groups contract each group of input features with its
        group of output features; batch groups (a dense layer's weight gradient split per
        group) give each group of output features its own group of batch rows. Both are a
        batched matmul over the groups (group-major, as XLA's evaluator indexes them)."""
        fg, bg = c.groups, c.batch_groups
        nb, ni = x.shape[c.ib], x.shape[c.if_]
        nk, no = w.shape[c.ki], w.shape[c.ko]
        ng = max(fg, bg)
        if fg > 1 and bg > 1:
            raise IRError("feature and batch groups together (XLA allows one or the other)")
        if ni != fg * nk or no % ng or nb % bg:
            raise IRError(f"dense convolution of {list(x.shape)} by {list(w.shape)}: features "
                          f"{ni} != {fg} groups x {nk}, or {no} output features / {nb} batch "
                          f"rows not divisible by {ng} groups")
        lhs = self.arrange(self.materialize(x), x, [c.ib, c.if_], (nb, ni), x.etype)
        rhs = self.arrange(self.materialize(w), w, [c.ki, c.ko], (nk, no), w.etype)
        if ng > 1:
            swap = (1, 0, 2)
            if fg > 1:  # [nb, ng, nk] -> [ng, nb, nk]
                lhs = self.op("reshape", [lhs], None, x.etype, shape=(nb, ng, nk))
                lhs = self.op("transpose", [lhs], None, x.etype, perm=swap)
            else:  # [ng, nb/ng, ni]
                lhs = self.op("reshape", [lhs], None, x.etype, shape=(ng, nb // ng, ni))
            rhs = self.op("reshape", [rhs], None, w.etype, shape=(nk, ng, no // ng))
            rhs = self.op("transpose", [rhs], None, w.etype, perm=swap)
            y = self.op("matmul", [lhs, rhs], None, etype)  # [ng, rows, no / ng]
            y = self.op("transpose", [y], None, etype, perm=swap)
            y = self.op("reshape", [y], None, etype, shape=(nb // bg, no))
            if (c.ob, c.of) != (0, 1):
                y = self.op("transpose", [y], layout, etype, perm=(1, 0))
        elif (c.ob, c.of) != (0, 1):
            # The product in the physical array the program writes: the transpose is a view.
            y = self.op("matmul", [lhs, rhs], _permute_layout(layout, (1, 0)), etype)
            y = self.op("transpose", [y], layout, etype, perm=(1, 0))
        else:
            y = self.op("matmul", [lhs, rhs], layout, etype)
        if self.b.type_of(y).shape != shape:
            raise IRError(f"dense convolution yields {list(self.b.type_of(y).shape)}, the "
                          f"instruction says {list(shape)}")
        return y

    def reverse(self, v: Value, etype: str, dim: int) -> Value:
        """v reversed along `dim`: a product with the exchange matrix (exact, and cheap on
        the kernels it is used for)."""
        shape = self.b.type_of(v).shape
        k = shape[dim]
        if k == 1:
            return v
        rank = len(shape)
        perm = [d for d in range(rank) if d != dim] + [dim]
        t = self.op("transpose", [v], _permute_layout(self.layouts[v], perm), etype,
                    perm=tuple(perm))
        swap = self.weight(f"exchange({k})", (k, k), etype, (1, 0),
                           data=np.eye(k)[::-1].copy())
        r = self.op("matmul", [t, swap], _default_layout(rank), etype)
        inverse = [0] * rank
        for i, p in enumerate(perm):
            inverse[p] = i
        return self.op("transpose", [r], None, etype, perm=tuple(inverse))

    def dilate(self, v: Value, etype: str, dim: int, d: int) -> Value:
        """v with d - 1 zeros between neighbours along `dim` (XLA's base dilation)."""
        shape = self.b.type_of(v).shape
        n = shape[dim]
        rank = len(shape)
        unit = self.op("reshape", [v], None, etype, shape=(*shape[:dim + 1], 1,
                                                           *shape[dim + 1:]))
        pads = [0] * (2 * (rank + 1))
        pads[rank + 1 + dim + 1] = d - 1
        spread = self.op("pad", [unit], None, etype, pads=tuple(pads))
        flat = self.op("reshape", [spread], None, etype,
                       shape=(*shape[:dim], n * d, *shape[dim + 1:]))
        ends = list(shape)
        ends[dim] = (n - 1) * d + 1
        return self.op("slice", [flat], None, etype, starts=(0,) * rank, ends=tuple(ends))

    def conv2d(self, c: _ConvDims, xv: Value, x: _Arr, wv: Value, w: _Arr,
               shape: tuple[int, ...], etype: str, layout: Layout) -> Value:
        """A convolution with one or two spatial dims as conv2d (NCHW x OIHW)."""
        xi = self.arrange(xv, x, [c.ib, c.if_, *c.isp], _take(x.shape, [c.ib, c.if_, *c.isp]),
                          x.etype)
        wi = self.arrange(wv, w, [c.ko, c.ki, *c.ksp], _take(w.shape, [c.ko, c.ki, *c.ksp]),
                          w.etype)
        pads = [p for wd in c.window for p in (int(wd.get("padding_low", 0)),
                                               int(wd.get("padding_high", 0)))]
        stride = [int(wd.get("stride", 1)) for wd in c.window]
        dil = [int(wd.get("window_dilation", 1)) for wd in c.window]
        if len(c.isp) == 1:  # a unit spatial dim makes it 2-D
            xi = self.op("reshape", [xi], None, x.etype,
                         shape=(*self.b.type_of(xi).shape, 1))
            wi = self.op("reshape", [wi], None, w.etype,
                         shape=(*self.b.type_of(wi).shape, 1))
            pads, stride, dil = [*pads, 0, 0], [*stride, 1], [*dil, 1]
        order = [c.ob, c.of, *c.osp]
        out_layout = _permute_layout(layout, order) if len(c.osp) == 2 else None
        y = self.op("conv2d", [xi, wi], out_layout, etype, stride=tuple(stride),
                    padding=(pads[0], pads[1], pads[2], pads[3]), dilation=tuple(dil),
                    groups=c.groups)
        if len(c.osp) == 1:
            y = self.op("reshape", [y], None, etype, shape=self.b.type_of(y).shape[:3])
        inverse = [0] * len(order)
        for i, p in enumerate(order):
            inverse[p] = i
        if inverse != list(range(len(order))):
            y = self.op("transpose", [y], layout, etype, perm=tuple(inverse))
        if self.b.type_of(y).shape != shape:
            y = self.op("reshape", [y], layout, etype, shape=shape)
        return y

    def conv3d(self, c: _ConvDims, xv: Value, x: _Arr, wv: Value, w: _Arr,
               shape: tuple[int, ...], etype: str, layout: Layout) -> Value:
        """A convolution with three spatial dims as 2-D slabs over its first spatial dim s:
        summed per tap of s (output positions of s folded into the batch), or concatenated
        per output position of s (taps of s folded into the input features), whichever gives
        fewer slabs (a forward 3x3x3 conv: 3 tap slabs; a weight gradient, whose window is
        the whole activation: one slab per output position)."""
        s = 0
        wd = c.window[s]
        taps, stride, dil = int(wd["size"]), int(wd.get("stride", 1)), int(
            wd.get("window_dilation", 1))
        lo, hi = int(wd.get("padding_low", 0)), int(wd.get("padding_high", 0))
        xs_dim, ks_dim, os_dim = c.isp[s], c.ksp[s], c.osp[s]
        n_out = shape[os_dim]
        if lo or hi:
            pads = [0] * (2 * len(x.shape))
            pads[xs_dim], pads[len(x.shape) + xs_dim] = lo, hi
            xv = self.op("pad", [xv], x.layout, x.etype, pads=tuple(pads))
        rest = _ConvDims.dropping(c, s)
        x_shape = self.b.type_of(xv).shape
        partials: list[Value] = []
        if taps <= n_out:
            # Per tap t: out[.., o, ..] += conv2d(x[.., o*stride + t*dil, ..], w[.., t, ..]).
            for t in range(taps):
                start = t * dil
                sl = self.slice_dim(xv, x, xs_dim, start, start + (n_out - 1) * stride + 1,
                                    stride, x_shape)
                xt = self.fold(sl, x, xs_dim, c.ib, before=True)
                wt = self.slice_dim(wv, w, ks_dim, t, t + 1, 1, w.shape)
                wt = self.squeeze(wt, w, ks_dim)
                y = self.conv2d(rest, xt, self.arr(xt, x.etype), wt, self.arr(wt, w.etype),
                                _unfolded_out(shape, os_dim, c.ob), etype,
                                _drop_layout(layout, os_dim))
                partials.append(y)
        else:
            # Per output position o: fold the taps of s into the input features.
            for o in range(n_out):
                start = o * stride
                sl = self.slice_dim(xv, x, xs_dim, start, start + (taps - 1) * dil + 1, dil,
                                    x_shape)
                xt = self.fold(sl, x, xs_dim, c.if_, before=False)
                wt = self.fold(wv, w, ks_dim, c.ki, before=False)
                y = self.conv2d(rest, xt, self.arr(xt, x.etype), wt, self.arr(wt, w.etype),
                                tuple(d for i, d in enumerate(shape) if i != os_dim), etype,
                                _drop_layout(layout, os_dim))
                partials.append(y)
        if taps <= n_out:
            total = partials[0]
            for p in partials[1:]:
                total = self.op("ewadd", [total, p], None, etype)
            return self.unfold(total, shape, os_dim, c.ob, etype, layout)
        expanded = [self.op("reshape", [p], layout, etype,
                            shape=tuple(1 if i == os_dim else d for i, d in enumerate(shape)))
                    for p in partials]
        return expanded[0] if len(expanded) == 1 else self.op("concat", expanded, layout, etype,
                                                               axis=os_dim)

    def arr(self, v: Value, etype: str) -> _Arr:
        """A materialised IR value as an array."""
        return _Arr(v, self.b.type_of(v).shape, etype, self.layouts[v])

    def slice_dim(self, v: Value, a: _Arr, dim: int, start: int, end: int, step: int,
                  full: tuple[int, ...]) -> Value:
        starts = [0] * len(full)
        ends = list(full)
        steps = [1] * len(full)
        starts[dim], ends[dim], steps[dim] = start, end, step
        if starts == [0] * len(full) and ends == list(full) and step == 1:
            return v
        return self.op("slice", [v], self.layouts[v], a.etype, starts=tuple(starts),
                       ends=tuple(ends), steps=tuple(steps))

    def squeeze(self, v: Value, a: _Arr, dim: int) -> Value:
        shape = self.b.type_of(v).shape
        new = tuple(d for i, d in enumerate(shape) if i != dim)
        return self.op("reshape", [v], _drop_layout(self.layouts[v], dim), a.etype, shape=new)

    def fold(self, v: Value, a: _Arr, dim: int, into: int, before: bool) -> Value:
        """Merge dim `dim` into dim `into` (as its major part when `before`, else minor):
        a transpose that puts them side by side, then a reshape."""
        shape = self.b.type_of(v).shape
        rank = len(shape)
        order = [d for d in range(rank) if d != dim]
        pos = order.index(into)
        order.insert(pos if before else pos + 1, dim)
        v2 = v
        if order != list(range(rank)):
            v2 = self.op("transpose", [v], _permute_layout(self.layouts[v], order), a.etype,
                         perm=tuple(order))
        tshape = self.b.type_of(v2).shape
        i = order.index(dim)
        j = i + 1 if before else i - 1
        lo_, hi_ = min(i, j), max(i, j)
        new = (*tshape[:lo_], tshape[lo_] * tshape[hi_], *tshape[hi_ + 1:])
        merged_layout = _merge_layout(self.layouts[v2], lo_)
        return self.op("reshape", [v2], merged_layout, a.etype, shape=new)

    def unfold(self, v: Value, shape: tuple[int, ...], os_dim: int, ob: int, etype: str,
               layout: Layout) -> Value:
        """Split the output positions of dim `os_dim` back out of the batch dim `ob`."""
        cur = self.b.type_of(v).shape
        ob_pos = ob if ob < os_dim else ob - 1
        split = (*cur[:ob_pos], shape[os_dim], cur[ob_pos] // shape[os_dim], *cur[ob_pos + 1:])
        v = self.op("reshape", [v], None, etype, shape=split)
        rank = len(split)
        # split has the position dim at ob_pos, the batch at ob_pos + 1: move it to os_dim.
        dims = list(range(rank))
        pos_dim = dims.pop(ob_pos)
        target = [d for d in dims]
        target.insert(os_dim, pos_dim)
        if target != list(range(rank)):
            v = self.op("transpose", [v], layout, etype, perm=tuple(target))
        return v

    # ---- finishing -------------------------------------------------------------------------

    def kernels(self) -> tuple[HloKernel, ...]:
        out = []
        for name, members in self.members.items():
            outs = tuple(self.kernel_outs.get(name, ()))
            nodes = tuple(sorted(set(members) | {v.node for v in outs
                                                 if not self.b.nodes[v.node].is_source}))
            if nodes:
                out.append(HloKernel(name, self.kernel_ops[name], nodes, outs))
        return tuple(out)


_PROXY_OPCODES = (PROXY_CONVERT | PROXY_UNARY | PROXY_BINARY | PROXY_TRANSCENDENTAL
                  | PROXY_TRANSCENDENTAL_BINARY | {"rng", "reduce"})


def _why_missing(opcode: str) -> str:
    """The note an unsupported opcode gets in the error (with its leading space)."""
    if opcode in _PROXY_OPCODES:
        return " (no exact IR counterpart; proxies=True imports a cost proxy)"
    return ""


@dataclass(frozen=True)
class _ConvDims:
    """HLO convolution dimension numbers (input, kernel, output) and the window."""

    dn: Mapping[str, Any]
    window: Sequence[Mapping[str, Any]]
    groups: int
    drop: tuple[int, ...] = field(default=())  # spatial dims already unrolled
    batch_groups: int = 1

    @property
    def ib(self) -> int:
        return self._shift("input", int(self.dn["input_batch_dimension"]))

    @property
    def if_(self) -> int:
        return self._shift("input", int(self.dn["input_feature_dimension"]))

    @property
    def isp(self) -> list[int]:
        return [self._shift("input", int(d)) for k, d in
                enumerate(self.dn["input_spatial_dimensions"]) if k not in self.drop]

    @property
    def ki(self) -> int:
        return self._shift("kernel", int(self.dn["kernel_input_feature_dimension"]))

    @property
    def ko(self) -> int:
        return self._shift("kernel", int(self.dn["kernel_output_feature_dimension"]))

    @property
    def ksp(self) -> list[int]:
        return [self._shift("kernel", int(d)) for k, d in
                enumerate(self.dn["kernel_spatial_dimensions"]) if k not in self.drop]

    @property
    def ob(self) -> int:
        return self._shift("output", int(self.dn["output_batch_dimension"]))

    @property
    def of(self) -> int:
        return self._shift("output", int(self.dn["output_feature_dimension"]))

    @property
    def osp(self) -> list[int]:
        return [self._shift("output", int(d)) for k, d in
                enumerate(self.dn["output_spatial_dimensions"]) if k not in self.drop]

    def _shift(self, which: str, d: int) -> int:
        """Dim index once the unrolled spatial dims are removed."""
        gone = [int(self.dn[f"{which}_spatial_dimensions"][k]) for k in self.drop]
        return d - sum(1 for g in gone if g < d)

    @staticmethod
    def dropping(c: _ConvDims, s: int) -> _ConvDims:
        return _ConvDims(c.dn, [wd for k, wd in enumerate(c.window) if k != s], c.groups,
                         (*c.drop, s))


def _take(shape: Sequence[int], dims: Sequence[int]) -> tuple[int, ...]:
    return tuple(shape[d] for d in dims)


def _drop_layout(layout: Layout, dim: int) -> Layout:
    return tuple(d - (d > dim) for d in layout if d != dim)


def _merge_layout(layout: Layout, lo: int) -> Layout:
    """Layout after merging dims lo and lo + 1 (keeps the others' order)."""
    out = []
    for d in layout:
        if d == lo + 1:
            continue
        out.append(d if d <= lo else d - 1)
    return tuple(out)


def _unfolded_out(shape: tuple[int, ...], os_dim: int, ob: int) -> tuple[int, ...]:
    """Output shape of one tap slab: dim os_dim folded into the batch dim ob."""
    rest = [d for i, d in enumerate(shape) if i != os_dim]
    ob_pos = ob if ob < os_dim else ob - 1
    rest[ob_pos] *= shape[os_dim]
    return tuple(rest)


def _flatten(r: Result) -> list[_Arr]:
    if isinstance(r, _Arr):
        return [r]
    return [a for x in r for a in _flatten(x)]


def _rebuild(r: Result, vals: Iterable[Value]) -> Result:
    it = iter(vals)

    def go(x: Result) -> Result:
        if isinstance(x, _Arr):
            return _Arr(next(it), x.shape, x.etype, x.layout)
        return tuple(go(y) for y in x)

    return go(r)


def _topological(comp: Computation) -> list[Instr]:
    """Instructions reachable from the root, operands first (HLO lists them so already, but
    a decoded file need not)."""
    order: list[Instr] = []
    seen: set[int] = set()
    stack: list[tuple[int, bool]] = [(comp.root_id, False)]
    while stack:
        i, done = stack.pop()
        if done:
            order.append(comp.by_id[i])
            continue
        if i in seen or i not in comp.by_id:
            continue
        seen.add(i)
        stack.append((i, True))
        for o in reversed(comp.by_id[i].get("operand_ids", ())):
            if o not in seen:
                stack.append((int(o), False))
    return order


def import_hlo(source: str | Path | Mapping[str, Any] | HloModule, *, proxies: bool = False,
               roots: Sequence[str] | None = None, name: str | None = None) -> HloImport:
    """Import a decoded HLO module (see the module docstring).

    `roots`: import only these entry-computation instructions, each reading its operands as
    parameters (named after the operand instructions), e.g. one convolution of a program.
    `proxies`: import element-wise opcodes without an exact IR counterpart as cost proxies
    (for the simulator) instead of failing.
    """
    module = source if isinstance(source, HloModule) else load_module(source, name)
    imp = _Importer(module, proxies, name or module.name)
    outs = imp.run_entry(roots)
    if imp.unsupported:
        raise UnsupportedOpsError(module.source, imp.unsupported)
    values = []
    for a in outs:
        values.append(imp.materialize(a))
    try:
        graph, remap = imp.b.build_with_map(values)
    except IRError as e:
        raise ModelImportError(f"{module.source}: {e}") from None

    def moved(v: Value) -> Value | None:
        n = remap.get(v.node)
        return None if n is None else Value(n, v.index)

    def moved_map(m: Mapping[Value, Any]) -> Mapping[Value, Any]:
        return MappingProxyType({mv: x for v, x in m.items() if (mv := moved(v)) is not None})

    kernels = []
    for k in imp.kernels():
        nodes = tuple(sorted(remap[n] for n in k.nodes if n in remap))
        outs = tuple(mv for v in k.outputs if (mv := moved(v)) is not None)
        if nodes:
            kernels.append(HloKernel(k.name, k.opcode, nodes, outs))
    names = MappingProxyType({k: mv for k, v in imp.values.items()
                              if (mv := moved(v)) is not None})
    return HloImport(graph, moved_map(imp.layouts), moved_map(imp.stored), tuple(kernels),
                     names, tuple(imp.proxied), not imp.proxied)


__all__ = ["ELEMENT_TYPES", "HloImport", "HloKernel", "HloModule", "import_hlo", "load_module"]
