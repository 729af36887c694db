"""Shape/attribute sampling and random testing of rules against the reference semantics.

The sampler proposes concrete shapes and attribute values for a rule's variables by asking
Z3 for models of the rule's *ground* shape constraints (the shape theory of `shapes.py`
instantiated on the rule's terms, its condition, small bounds on ranks, dims and
attributes), steered by random "pins" so that models differ; each proposal is then built
with the IR (`Rule.instantiate`), which has the final say on whether it type-checks.
Instances must stay in the verifier's domain: every value of both sides has positive dims.

The tester runs both sides on random inputs with the exact mod-p semantics and the float64
reference semantics. Only the reference semantics (or differing output shapes) refutes a
rule: a concrete counterexample that really separates the two sides.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import z3

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Value
from superopt.ir.interpret import interpret
from superopt.ir.kernels import P
from superopt.ir.opdef import get_op
from superopt.ir.types import DType, TensorType
from superopt.substitutions.pattern import AVar, Bindings, Pattern, PNode, PVar, resolve_attrs, walk
from superopt.substitutions.rule import Rule
from superopt.verifier.encoding import GroundRule, encode_rule
from superopt.verifier.shapes import env, general_ground, ground_facts, smooth_tables, subterms
from superopt.verifier.zvalues import AttrCodec

# Bounds of sampled attribute slots by attribute name: (low, high) inclusive.
ATTR_BOUNDS: dict[str, tuple[int, int]] = {
    "stride": (1, 2), "dilation": (1, 2), "kernel": (1, 3), "groups": (1, 3),
    "channels": (1, 4), "kh": (1, 5), "kw": (1, 5), "n": (1, 4), "size": (1, 5),
    "pads": (0, 2), "padding": (0, 2), "axis": (0, 5), "sizes": (1, 4), "shape": (1, 8),
    "perm": (0, 5), "axes": (0, 5), "starts": (-3, 5), "ends": (-3, 6), "steps": (1, 2),
    "minor_to_major": (0, 5),
}
DEFAULT_BOUNDS = (-2, 6)
FLOAT_CHOICES = (1e-5, 0.5, 2.0)


@dataclass(frozen=True)
class SamplerSpec:
    """How to sample a rule's instances: rank and dim ranges of tensor variables
    (per-variable overrides in `ranks`), attribute bounds overrides, and how many
    instances validation wants."""

    max_rank: int = 6  # the verifier's domain; ranks above 4 are drawn less often
    max_dim: int = 4
    ranks: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    dims: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    attrs: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # var -> allowed values
    min_samples: int = 6


@dataclass(frozen=True)
class Instance:
    types: Mapping[str, TensorType]
    attrs: Mapping[str, Any]

    def key(self) -> tuple[Any, ...]:
        return (tuple(sorted((k, t.shape, t.dtype.value) for k, t in self.types.items())),
                tuple(sorted((k, repr(v)) for k, v in self.attrs.items())))

    def describe(self) -> str:
        parts = [f"?{k}: {list(t.shape)}" for k, t in self.types.items()]
        parts += [f"?{k} = {v!r}" for k, v in self.attrs.items()]
        return ", ".join(parts)


def _int_vars(rule: Rule) -> dict[str, int]:
    """Tensor variables that index an embedding table (integer ids), -> table var."""
    out: dict[str, int] = {}
    for p in (*rule.source, *rule.target):
        for q in walk(p):
            if isinstance(q, PNode) and q.op == "embedding" and isinstance(q.children[0], PVar):
                out[q.children[0].name] = 1
    return out


class Sampler:
    """Random well-typed instances of a rule. `draw(target=False)` only asks the source
    to type-check (axiom validation and the target's shape check)."""

    def __init__(self, rule: Rule, spec: SamplerSpec | None = None, seed: int = 0) -> None:
        self.rule = rule
        self.spec = spec or SamplerSpec()
        self.e = env()
        self.rng = random.Random(seed)
        self.g: GroundRule = encode_rule(rule, self.e, prefix="smp:")
        self.int_vars = _int_vars(rule)
        s = z3.Solver()
        s.set("timeout", 300)
        s.set("random_seed", seed)
        e = self.e
        terms = subterms(e, [*self.g.sources, *self.g.targets])
        # Reshape's size constraint is non-linear: re-drawing conflicting pins works better
        # there than freeing them, and smaller tensors keep the products in the tables.
        self.nonlinear = any((e.key_of(t) or ("",))[0] == "reshape" for t in terms)
        if self.nonlinear:
            s.add(*smooth_tables(e))
            self.spec = replace(self.spec, max_rank=min(self.spec.max_rank, 4),
                                max_dim=min(self.spec.max_dim, 3))
        for t in terms:
            if e.key_of(t) is not None:
                s.add(*ground_facts(e, t, sampling=True))
            s.add(*general_ground(e, t))
        s.add(*self.g.premise(e, target=False))
        self.target_lit = z3.Bool("smp!target")
        s.add(z3.Implies(self.target_lit, z3.And(*[e.wt(t) for t in self.g.targets])))
        self.pins: list[tuple[z3.ExprRef, list[int]]] = []
        for name, x in self.g.tensors.items():
            lo, hi = self.spec.ranks.get(name, (0, self.spec.max_rank))
            r = e.rank(x)
            s.add(r >= lo, r <= hi)
            # Small ranks are where most rules live; ranks 5 and 6 still come up.
            self.pins.append((r, [k for k in range(lo, hi + 1) for _ in range(2 if k <= 4 else 1)]))
            dlo, dhi = self.spec.dims.get(name, (1, self.spec.max_dim))
            for k in range(hi):
                d = e.dim(x, k)
                s.add(z3.Implies(k < r, z3.And(d >= dlo, d <= dhi)))
                self.pins.append((d, list(range(dlo, dhi + 1))))
        for name, codec in self.g.codecs.items():
            self._bound_attr(s, name, codec, self.g.attr_consts[name])
        self.solver = s
        self._lits: dict[tuple[int, int], z3.BoolRef] = {}
        self.exhausted = False  # every instance within the bounds has been drawn

    def _bound_attr(self, s: z3.Solver, name: str, codec: AttrCodec,
                    consts: list[z3.ExprRef]) -> None:
        if name in self.spec.attrs:
            allowed = self.spec.attrs[name]
            s.add(z3.Or(*[z3.And(*[c == v for c, v in zip(consts, codec.encode(a), strict=True)])
                          for a in allowed]))
            for k, c in enumerate(consts):
                vals = sorted({z3.simplify(codec.encode(a)[k]).as_long() for a in allowed}) \
                    if codec.kind != "float" else []
                if vals:
                    self.pins.append((c, vals))
            return
        if codec.kind == "float":
            s.add(z3.Or(*[consts[0] == z3.RealVal(v) for v in FLOAT_CHOICES]))
            return
        if codec.kind in ("bool", "str"):
            hi = 1 if codec.kind == "bool" else len(codec.choices) - 1
            self.pins.append((consts[0], list(range(hi + 1))))
            return
        lo, hi = ATTR_BOUNDS.get(codec.name, DEFAULT_BOUNDS)
        if codec.kind == "padding":
            self.pins.append((consts[0], [0, 1, 2]))
            items = consts[1:]
        elif codec.kind == "tuple":
            self.pins.append((consts[0], list(range(0, self.spec.max_rank + 1))))
            items = consts[1:]
        else:
            items = consts
        for c in items:
            if codec.kind in ("tuple", "padding"):  # unused items are 0
                s.add(c >= min(lo, 0), c <= max(hi, 0))
            else:
                s.add(c >= lo, c <= hi)
            self.pins.append((c, list(range(lo, hi + 1))))

    def _lit(self, var: z3.ExprRef, value: int) -> z3.BoolRef:
        key = (var.get_id(), value)
        lit = self._lits.get(key)
        if lit is None:
            lit = z3.Bool(f"pin!{len(self._lits)}")
            self.solver.add(z3.Implies(lit, var == value))
            self._lits[key] = lit
        return lit

    def draw(self, target: bool = True) -> Instance | None:
        """One proposal from Z3 (None when the constraints have no model)."""
        fixed = [self.target_lit] if target else []
        # Pin most variables to random values; on a conflict, first re-draw the values in
        # the unsat core (keeps non-linear constraints ground and fast), then free them.
        share = 1.0 if self.nonlinear else 0.8
        chosen = {k: self.rng.choice(vals) for k, (_, vals) in enumerate(self.pins)
                  if self.rng.random() < share}
        redraws = 12 if self.nonlinear else 0
        for round_ in range(redraws + 6):
            lits = {self._lit(self.pins[k][0], v).get_id(): k for k, v in chosen.items()}
            pins = [self._lit(self.pins[k][0], v) for k, v in chosen.items()]
            r = self.solver.check(*fixed, *pins)
            if r == z3.sat:
                return self._decode(self.solver.model())
            if r == z3.unsat:
                core = [lits[c.get_id()] for c in self.solver.unsat_core() if c.get_id() in lits]
                if not core:
                    break
            else:  # a hard (non-linear) corner: move somewhere else
                core = list(chosen)
            for k in core:
                if round_ < redraws:
                    chosen[k] = self.rng.choice(self.pins[k][1])
                else:
                    chosen.pop(k, None)
        r = self.solver.check(*fixed)
        if r == z3.sat:
            return self._decode(self.solver.model())
        if r == z3.unsat and not fixed:
            self.exhausted = True
        elif r == z3.unsat and self.solver.check() == z3.unsat:
            self.exhausted = True
        return None

    def _decode(self, m: z3.ModelRef) -> Instance:
        e = self.e
        types: dict[str, TensorType] = {}
        same: list[z3.BoolRef] = []
        for name, x in self.g.tensors.items():
            r = m.eval(e.rank(x), model_completion=True).as_long()
            dims = tuple(m.eval(e.dim(x, k), model_completion=True).as_long() for k in range(r))
            dtype = DType.I64 if name in self.int_vars else DType.F32
            types[name] = TensorType(dims, dtype)
            same += [e.rank(x) == r, *[e.dim(x, k) == d for k, d in enumerate(dims)]]
        attrs: dict[str, Any] = {}
        for name, codec in self.g.codecs.items():
            vals = []
            for c in self.g.attr_consts[name]:
                v = m.eval(c, model_completion=True)
                vals.append(v.as_fraction() if z3.is_rational_value(v) else v.as_long())
                same.append(c == v)
            attrs[name] = codec.decode(vals)
        # Never propose the same instance twice; running out means the bounds are covered.
        self.solver.add(z3.Not(z3.And(*same)))
        return Instance(types, attrs)


# ---- building and running instances ---------------------------------------------------

@dataclass(frozen=True)
class Built:
    """An instance built with the IR: both sides, or why a side does not type-check."""

    source: Graph | None
    target: Graph | None
    problem: str = ""  # why the source or target could not be built
    outside: str = ""  # the instance leaves the verifier's domain (empty tensors)


def _empty_value(g: Graph) -> str:
    for n in g.nodes:
        for t in n.types:
            if t.size == 0:
                return f"{n.op} %{n.id} has an empty output {t}"
    return ""


def noncanonical_binding(rule: Rule, inst: Instance) -> str:
    """An attribute variable bound to a value no graph stores (graphs hold canonical
    attributes: non-negative axes, explicit permutations, ...), or ''."""
    b = GraphBuilder(rule.name)
    tensors = {v: b.input(v, t.shape, t.dtype) for v, t in inst.types.items()}
    bind = Bindings(tensors, dict(inst.attrs))
    problem = ""

    def walk(p: Pattern) -> Value:
        nonlocal problem
        if isinstance(p, PVar):
            return tensors[p.name]
        children = [walk(c) for c in p.children]
        raw = resolve_attrs(p, b, bind)
        outs = b.add(p.op, children, raw)
        node = b.nodes[outs[0].node]
        spec = {a.name: a for a in get_op(p.op).attrs}
        for name, a in p.attrs:
            if isinstance(a, AVar) and not problem and \
                    node.attr(name) != spec[name].validate(p.op, raw[name]):
                problem = f"?{a.name} = {raw[name]!r} is stored as {node.attr(name)!r}"
        return outs[p.output]

    for pat in rule.source:
        walk(pat)
    return problem


def build(rule: Rule, inst: Instance) -> Built:
    try:
        holds = rule.holds_condition(inst.types, inst.attrs)
    except IRError as err:
        holds, why = False, f": {err}"
    else:
        why = ""
    if not holds:
        return Built(None, None, problem=f"the condition does not hold{why}")
    try:
        src, tgt = rule.instantiate(inst.types, inst.attrs)
    except IRError as err:
        # Tell a source that does not type-check from a target that does not.
        src_only = replace(rule, target=rule.source, bidirectional=False)
        try:
            src, _ = src_only.instantiate(inst.types, inst.attrs)
        except IRError as src_err:
            return Built(None, None, problem=f"source: {src_err}")
        tgt, problem = None, f"target: {err}"
    else:
        problem = ""
    if any(isinstance(a, AVar) for p in rule.source for q in walk(p) if isinstance(q, PNode)
           for _, a in q.attrs):
        try:
            noncanonical = noncanonical_binding(rule, inst)
        except IRError as err:
            return Built(None, None, problem=f"source: {err}")
        if noncanonical:
            return Built(None, None, problem=f"not a canonical binding: {noncanonical}")
    outside = _empty_value(src) or (_empty_value(tgt) if tgt is not None else "")
    return Built(src, tgt, problem=problem, outside=outside)


def feeds_for(graphs: list[Graph], semantics: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs shared by both sides; integer ids stay inside their tables and
    batch-norm variances positive."""
    specs: dict[str, TensorType] = {}
    high: dict[str, int] = {}
    positive: set[str] = set()
    for g in graphs:
        for n in g.nodes:
            if n.op == "input":
                specs[n.attr("name")] = n.type
            elif n.op == "embedding":
                ids = g.nodes[n.inputs[0].node]
                if ids.op == "input":
                    rows = g.type_of(n.inputs[1]).shape[0]
                    high[ids.attr("name")] = min(high.get(ids.attr("name"), rows), rows)
            elif n.op == "batch_norm":
                var = g.nodes[n.inputs[4].node]
                if var.op == "input":
                    positive.add(var.attr("name"))
    out: dict[str, np.ndarray] = {}
    for name, t in specs.items():
        if not t.dtype.is_float:
            out[name] = rng.integers(0, max(high.get(name, 1), 1), size=t.shape, dtype=np.int64)
        elif semantics == "modp":
            out[name] = rng.integers(1, 64, size=t.shape, dtype=np.int64) if name in positive \
                else rng.integers(0, P, size=t.shape, dtype=np.int64)
        else:
            out[name] = rng.uniform(0.5, 1.5, size=t.shape) if name in positive \
                else rng.standard_normal(t.shape)
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return np.round(v.astype(np.float64), 6).tolist() if v.dtype.kind == "f" else v.tolist()
    if isinstance(v, tuple | list):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


@dataclass(frozen=True)
class Comparison:
    """Result of running both sides of one instance."""

    separates: bool  # the reference semantics (or the output shapes) tell the sides apart
    modp_differs: bool
    counterexample: dict[str, Any] | None = None


def compare(rule: Rule, inst: Instance, built: Built, seed: int) -> Comparison:
    assert built.source is not None and built.target is not None
    src, tgt = built.source, built.target
    base = {"shapes": {k: list(t.shape) for k, t in inst.types.items()},
            "attrs": {k: _jsonable(v) for k, v in inst.attrs.items()}}
    for i, (a, b) in enumerate(zip(src.outputs, tgt.outputs, strict=True)):
        sa, sb = src.type_of(a).shape, tgt.type_of(b).shape
        if sa != sb:
            return Comparison(True, True, {**base, "kind": "shape", "output": i,
                                           "source_shape": list(sa), "target_shape": list(sb)})
    rng = np.random.default_rng(seed)
    feeds_p = feeds_for([src, tgt], "modp", rng)
    out_s = interpret(src, feeds_p, "modp")
    out_t = interpret(tgt, feeds_p, "modp")
    modp_differs = any(not np.array_equal(x, y) for x, y in zip(out_s, out_t, strict=True))
    feeds_f = feeds_for([src, tgt], "reference", rng)
    with np.errstate(all="ignore"):  # NaN/inf (e.g. empty pooling windows) compare as values
        ref_s = interpret(src, feeds_f)
        ref_t = interpret(tgt, feeds_f)
    for i, (x, y) in enumerate(zip(ref_s, ref_t, strict=True)):
        if not np.allclose(x, y, rtol=1e-6, atol=1e-9, equal_nan=True):
            diff = float(np.nanmax(np.abs(x - y))) if x.size else 0.0
            return Comparison(True, modp_differs, {
                **base, "kind": "value", "output": i, "semantics": "reference (float64)",
                "inputs": {k: _jsonable(v) for k, v in feeds_f.items()},
                "source_value": _jsonable(x), "target_value": _jsonable(y),
                "max_abs_diff": diff})
    return Comparison(False, modp_differs)


@dataclass(frozen=True)
class SampleReport:
    """Random testing of one rule: valid instances run, instances whose target does not
    type-check, and a counterexample if one separates the sides."""

    instances: int = 0
    source_checked: int = 0  # instances drawn with only the source required to type-check
    source_only: int = 0  # ... of which the target does not type-check
    source_only_example: str = ""
    outside: int = 0
    proposals: int = 0
    counterexample: dict[str, Any] | None = None
    modp_only: str = ""
    error: str = ""
    time_s: float = 0.0


def instances(sampler: Sampler, want: int, max_proposals: int, deadline: float,
              target: bool = True) -> Iterator[tuple[Instance, Built]]:
    """Distinct proposals with their builds (any outcome), until `want` valid ones (with
    `target=False`: until `want` whose source type-checks)."""
    seen: set[tuple[Any, ...]] = set()
    valid = 0
    for _ in range(max_proposals):
        if valid >= want or time.perf_counter() > deadline:
            return
        inst = sampler.draw(target)
        if inst is None:
            if sampler.exhausted:
                return
            continue
        k = inst.key()
        if k in seen:
            continue
        seen.add(k)
        built = build(sampler.rule, inst)
        if target and built.target is not None and not built.outside:
            valid += 1
        elif not target and built.source is not None and not built.outside:
            valid += 1
        yield inst, built


def random_test(rule: Rule, samples: int = 12, seed: int = 0, budget_s: float = 5.0,
              spec: SamplerSpec | None = None,
              on_instance: Callable[[Instance, Built], None] | None = None) -> SampleReport:
    """Random testing of `rule`; stops at the first counterexample."""
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    counts = {"instances": 0, "source_checked": 0, "source_only": 0, "outside": 0,
              "proposals": 0}
    example, modp_only = "", ""
    try:
        sampler = Sampler(rule, spec, seed=seed)
    except IRError as err:
        return SampleReport(error=f"cannot sample: {err}", time_s=time.perf_counter() - t0)
    for target, want in ((True, samples), (False, max(2, samples // 3))):
        for k, (inst, built) in enumerate(instances(sampler, want, want * 8, deadline, target)):
            counts["proposals"] += 1
            if on_instance is not None:
                on_instance(inst, built)
            if built.source is None:
                continue
            if built.outside:
                counts["outside"] += 1
                continue
            if not target:
                counts["source_checked"] += 1
            if built.target is None:
                counts["source_only"] += 1
                example = example or f"{inst.describe()}: {built.problem}"
                continue
            try:
                cmp = compare(rule, inst, built, seed * 1000 + k)
            except IRError:  # e.g. a value the semantics rejects: not a valid input
                counts["outside"] += 1
                continue
            counts["instances"] += 1
            if cmp.separates:
                return SampleReport(**counts, source_only_example=example,
                                  counterexample=cmp.counterexample,
                                  time_s=time.perf_counter() - t0)
            if cmp.modp_differs and not modp_only:
                modp_only = f"mod-p values differ (reference values agree) at {inst.describe()}"
    return SampleReport(**counts, source_only_example=example, modp_only=modp_only,
                      time_s=time.perf_counter() - t0)
