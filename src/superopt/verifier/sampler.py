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

A rule whose condition forces the shape of every variable (`shape(?x) == (2, 4, 5, 5)`
conjuncts, as rules read at TASO's input shapes have) and that has no attribute variable
has exactly one instance; it is built directly (`unique_instance`) instead of being found
by Z3, which would propose it and then nothing else.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from superopt.substitutions.conditions import pinned_shapes
from superopt.substitutions.pattern import AVar, Bindings, Pattern, PNode, PVar, resolve_attrs, walk
from superopt.substitutions.rule import Rule
from superopt.verifier.encoding import GroundRule, attr_var_codecs, encode_rule
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
    # Positive integer attributes (groups, channels, kernel sizes, ...) and dims up to
    # WIDE: the bounds a sampler falls back to when its own admit no instance at all.
    wide: bool = False


# The upper bound of dims and positive attributes in a wide spec: merging 4 of 8 groups
# needs 8 groups and channels (`group_conv_merge4`, in groups.rules).
WIDE = 16


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


_PINNED = re.compile(r"shape\(\?(\w+)\)\s*==\s*\(([-\d,\s]*)\)")


def pinned_spec(rule: Rule) -> SamplerSpec | None:
    """A spec whose bounds admit the shapes a rule's condition pins its variables to
    (`shape(?x) == (2, 4, 5, 5)`: TASO's images have dims above the default bound)."""
    pins = {m.group(1): tuple(int(x) for x in m.group(2).replace(",", " ").split())
            for m in _PINNED.finditer(rule.condition or "")}
    if not pins:
        return None
    return SamplerSpec(ranks={v: (len(sh), len(sh)) for v, sh in pins.items()},
                       dims={v: (min(sh, default=1), max(sh, default=1))
                             for v, sh in pins.items()})


def unique_instance(rule: Rule) -> Instance | None:
    """The one instance of a rule whose condition forces every variable's shape and which
    has no attribute variable; None for any other rule. Whether the condition holds and
    both sides type-check there is `build`'s to say, as for any proposal."""
    if attr_var_codecs(rule):
        return None
    shapes = pinned_shapes(rule)
    if not shapes or set(rule.source_vars()) - set(shapes):
        return None
    dtypes = var_dtypes(rule)
    return Instance({v: TensorType(shapes[v], dtypes.get(v, DType.F32))
                     for v in rule.source_vars()}, {})


def var_dtypes(rule: Rule) -> dict[str, DType]:
    """Tensor variables that are not float: the ids of an embedding and the indices of a
    gather (int64), the condition of a where (bool). Every other variable is float."""
    out: dict[str, DType] = {}
    for p in (*rule.source, *rule.target):
        for q in walk(p):
            if not isinstance(q, PNode):
                continue
            slot = {"embedding": (0, DType.I64), "gather": (1, DType.I64),
                    "where": (0, DType.BOOL)}.get(q.op)
            if slot is not None and isinstance(q.children[slot[0]], PVar):
                out.setdefault(q.children[slot[0]].name, slot[1])
    return out


@dataclass(frozen=True)
class _Prepared:
    """The seed-independent part of a rule's sampler: its encoding, every constraint given
    to the solver (in order), the pins and the terms read back from models."""

    g: GroundRule
    spec: SamplerSpec
    nonlinear: bool
    facts: tuple[z3.BoolRef, ...]
    pins: tuple[tuple[z3.ExprRef, list[int]], ...]
    target_lit: z3.BoolRef
    n_theory: int  # facts[:n_theory]: the shape theory and premise, before any bound
    pin_ids: tuple[int, ...]
    shape_terms: Mapping[str, tuple[z3.ArithRef, list[z3.ArithRef]]]


# Rules are usually tested with a few seeds in a row (the generator's check), so the last
# few preparations are kept; building them is a large part of a short test.
_PREPARED: dict[tuple[Any, ...], _Prepared] = {}
_PREPARED_KEEP = 8


def _prepare(rule: Rule, spec: SamplerSpec, narrow: bool = True) -> _Prepared:
    try:
        key: tuple[Any, ...] | None = (rule.source, rule.target, rule.condition, repr(spec),
                                       narrow)
        hash(key)
    except TypeError:  # an unhashable attribute value: prepare afresh
        key = None
    got = _PREPARED.get(key) if key is not None else None
    if got is None:
        got = _build_prepared(rule, spec, narrow)
        if key is not None:
            if len(_PREPARED) >= _PREPARED_KEEP:
                del _PREPARED[next(iter(_PREPARED))]
            _PREPARED[key] = got
    return got


def _build_prepared(rule: Rule, spec: SamplerSpec, narrow: bool = True) -> _Prepared:
    e = env()
    g = encode_rule(rule, e, prefix="smp:")
    facts: list[z3.BoolRef] = []
    terms = subterms(e, [*g.sources, *g.targets])
    # Reshape's size constraint is non-linear: re-drawing conflicting pins works better
    # there than freeing them, and smaller tensors keep the products in the tables.
    nonlinear = any((e.key_of(t) or ("",))[0] == "reshape" for t in terms)
    if nonlinear:
        facts += smooth_tables(e)
        if narrow:
            spec = replace(spec, max_rank=min(spec.max_rank, 4), max_dim=min(spec.max_dim, 3))
    for t in terms:
        if e.key_of(t) is not None:
            facts += ground_facts(e, t, sampling=True)
        facts += general_ground(e, t)
    facts += g.premise(e, target=False)
    target_lit = z3.Bool("smp!target")
    facts.append(z3.Implies(target_lit, z3.And(*[e.wt(t) for t in g.targets])))
    n_theory = len(facts)
    pins: list[tuple[z3.ExprRef, list[int]]] = []
    for name, x in g.tensors.items():
        lo, hi = spec.ranks.get(name, (0, spec.max_rank))
        r = e.rank(x)
        facts += [r >= lo, r <= hi]
        # Small ranks are where most rules live; ranks 5 and 6 still come up.
        pins.append((r, [k for k in range(lo, hi + 1) for _ in range(2 if k <= 4 else 1)]))
        dlo, dhi = spec.dims.get(name, (1, spec.max_dim))
        for k in range(hi):
            d = e.dim(x, k)
            facts.append(z3.Implies(k < r, z3.And(d >= dlo, d <= dhi)))
            pins.append((d, list(range(dlo, dhi + 1))))
    for name, codec in g.codecs.items():
        _bound_attr(spec, facts, pins, name, codec, g.attr_consts[name])
    # Every draw reads the same terms back from the model and looks pins up by AST id;
    # building them once instead of at every draw is most of the Python time of a draw.
    shape_terms = {name: (e.rank(x), [e.dim(x, k) for k in range(
                       spec.ranks.get(name, (0, spec.max_rank))[1])])
                   for name, x in g.tensors.items()}
    return _Prepared(g, spec, nonlinear, tuple(facts), tuple(pins), target_lit, n_theory,
                     tuple(v.get_id() for v, _ in pins), shape_terms)


def premise_model(rule: Rule, spec: SamplerSpec | None = None, timeout_s: float = 5.0
                  ) -> tuple[z3.CheckSatResult, str]:
    """Z3 on the rule's premise (its condition, both sides well typed, computed attributes
    defined) in the quantifier-free shape theory the sampler solves, without the sampler's
    bounds; with the shapes of a model where it is satisfiable. Reuses the terms the
    tester built for the same rule (building them is most of a short verification)."""
    prep = _prepare(rule, spec or pinned_spec(rule) or SamplerSpec())
    s = z3.Solver()
    s.set("timeout", max(1, int(timeout_s * 1000)))
    assert_all(s, [*prep.facts[:prep.n_theory], prep.target_lit])
    r = s.check()
    if r != z3.sat:
        return r, s.reason_unknown() if r == z3.unknown else ""
    m = s.model()
    parts = []
    for name, (rank, dims) in prep.shape_terms.items():
        k = m.eval(rank, model_completion=True)
        if z3.is_int_value(k):
            parts.append(f"?{name}: {[_eval_int(m, d) for d in dims[:k.as_long()]]}")
    return r, ", ".join(parts)


def _bound_attr(spec: SamplerSpec, facts: list[z3.BoolRef],
                pins: list[tuple[z3.ExprRef, list[int]]], name: str, codec: AttrCodec,
                consts: list[z3.ExprRef]) -> None:
    if name in spec.attrs:
        allowed = spec.attrs[name]
        facts.append(z3.Or(*[z3.And(*[c == v for c, v in zip(consts, codec.encode(a),
                                                                strict=True)])
                             for a in allowed]))
        for k, c in enumerate(consts):
            vals = sorted({z3.simplify(codec.encode(a)[k]).as_long() for a in allowed}) \
                if codec.kind != "float" else []
            if vals:
                pins.append((c, vals))
        return
    if codec.kind == "float":
        facts.append(z3.Or(*[consts[0] == z3.RealVal(v) for v in FLOAT_CHOICES]))
        return
    if codec.kind in ("bool", "str"):
        hi = 1 if codec.kind == "bool" else len(codec.choices) - 1
        pins.append((consts[0], list(range(hi + 1))))
        return
    lo, hi = ATTR_BOUNDS.get(codec.name, DEFAULT_BOUNDS)
    if spec.wide and lo >= 1:
        hi = max(hi, WIDE)
    if codec.kind == "padding":
        pins.append((consts[0], [0, 1, 2]))
        items = consts[1:]
    elif codec.kind == "tuple":
        pins.append((consts[0], list(range(0, spec.max_rank + 1))))
        items = consts[1:]
    else:
        items = consts
    for c in items:
        if codec.kind in ("tuple", "padding"):  # unused items are 0
            facts += [c >= min(lo, 0), c <= max(hi, 0)]
        else:
            facts += [c >= lo, c <= hi]
        pins.append((c, list(range(lo, hi + 1))))


class Sampler:
    """Random well-typed instances of a rule. `draw(target=False)` only asks the source
    to type-check (axiom validation and the target's shape check)."""

    def __init__(self, rule: Rule, spec: SamplerSpec | None = None, seed: int = 0) -> None:
        self.rule = rule
        self.seed = seed
        self.given = spec or SamplerSpec()
        self.drawn = 0
        self._setup(narrow=True)

    def _setup(self, narrow: bool) -> None:
        rule, seed = self.rule, self.seed
        self.e = env()
        self.rng = random.Random(seed)
        self.narrowed = narrow
        prep = _prepare(rule, self.given, narrow)
        self.spec = prep.spec
        self.g: GroundRule = prep.g
        self.dtypes = var_dtypes(rule)
        self.nonlinear = prep.nonlinear
        # A fresh Z3 context per sampler: Z3's choices depend on the AST ids of what it
        # solves, and ids in the shared context depend on everything the process built
        # before. Translated into a context of its own, a rule's constraints get the same
        # ids in every process, so a seed draws the same instances in a fresh `verify` as
        # in a worker that checked other rules first.
        ctx = z3.Context()
        terms = z3.AstVector(ctx=prep.target_lit.ctx)
        for t in (*prep.facts, prep.target_lit, *(v for v, _ in prep.pins),
                  *(x for r, ds in prep.shape_terms.values() for x in (r, *ds)),
                  *(c for cs in self.g.attr_consts.values() for c in cs)):
            terms.push(t)
        moved = iter(terms.translate(ctx))
        facts = [next(moved) for _ in prep.facts]
        self.target_lit = next(moved)
        self.pins = [(next(moved), vals) for _, vals in prep.pins]
        self._shape_terms = {name: (next(moved), [next(moved) for _ in ds])
                             for name, (_, ds) in prep.shape_terms.items()}
        self._attr_consts = {name: [next(moved) for _ in cs]
                             for name, cs in self.g.attr_consts.items()}
        s = z3.Solver(ctx=ctx)
        s.set("timeout", 300)
        s.set("random_seed", seed)
        assert_all(s, facts)
        self.solver = s
        self._lits: dict[tuple[int, int], tuple[z3.BoolRef, int, Any]] = {}
        self._pin_ids = prep.pin_ids
        self._nums: dict[int, z3.ArithRef] = {}
        self.exhausted = False  # every instance within the bounds has been drawn

    def _lit(self, k: int, value: int) -> tuple[z3.BoolRef, int, Any]:
        """The literal pinning pin k's variable to `value`, its AST id and its raw AST
        (one literal per variable and value, shared by pins of the same variable); its
        definition is asserted in this solver the first time it is used."""
        key = (self._pin_ids[k], value)
        got = self._lits.get(key)
        if got is None:
            var = self.pins[k][0]
            lit = z3.Bool(f"pin!{k}={value}", var.ctx)  # named by pin, not by AST id
            assert_all(self.solver, [z3.Implies(lit, var == value)])
            got = self._lits[key] = (lit, lit.get_id(), lit.as_ast())
        return got

    def _check(self, assumptions: list[Any]) -> z3.CheckSatResult:
        """`solver.check(*assumptions)` for raw ASTs of Boolean literals made here: the
        same call without z3's per-call sort checks of every assumption (a draw makes
        several checks with dozens of pins each)."""
        arr = (z3.Ast * len(assumptions))(*assumptions)
        ctx = self.solver.ctx
        return z3.CheckSatResult(z3.Z3_solver_check_assumptions(
            ctx.ref(), self.solver.solver, len(assumptions), arr))

    def _eq(self, term: z3.ArithRef, value: int) -> z3.BoolRef:
        """`term == value` for an integer term, without z3's Python-side coercions
        (the same AST: Z3 hash-conses terms)."""
        num = self._nums.get(value)
        if num is None:
            num = self._nums[value] = z3.IntVal(value, term.ctx)
        ctx = term.ctx
        return z3.BoolRef(z3.Z3_mk_eq(ctx.ref(), term.as_ast(), num.as_ast()), ctx)

    def draw(self, target: bool = True) -> Instance | None:
        """One proposal from Z3 (None when the constraints have no model)."""
        got = self._draw(target)
        if got is None and self.exhausted and not self.drawn and self.nonlinear \
                and self.narrowed and self.spec != self.given:
            # The bounds narrowed for reshape's products admit no instance (a grouped
            # conv with two channels per group needs four channels): the spec's own bounds.
            self._setup(narrow=False)
            got = self._draw(target)
        if got is None and self.exhausted and not self.drawn and not self.given.wide:
            # Nothing within the bounds at all (8 groups merged 4 at a time): wider ones.
            self.given = replace(self.given, wide=True,
                                 max_dim=max(self.given.max_dim, WIDE))
            self._setup(narrow=False)
            got = self._draw(target)
        if got is not None:
            self.drawn += 1
        return got

    def _draw(self, target: bool) -> Instance | None:
        fixed = [self.target_lit.as_ast()] if target else []
        # Pin most variables to random values; on a conflict, first re-draw the values in
        # the unsat core (keeps non-linear constraints ground and fast), then free them.
        share = 1.0 if self.nonlinear else 0.8
        chosen = {k: self.rng.choice(vals) for k, (_, vals) in enumerate(self.pins)
                  if self.rng.random() < share}
        redraws = 12 if self.nonlinear else 0
        for round_ in range(redraws + 6):
            got = [self._lit(k, v) for k, v in chosen.items()]
            lits = {i: k for (_, i, _), k in zip(got, chosen, strict=True)}
            r = self._check([*fixed, *(a for _, _, a in got)])
            if r == z3.sat:
                return self._decode(self.solver.model())
            if r == z3.unsat:
                ids = (c.get_id() for c in self.solver.unsat_core())
                core = [lits[i] for i in ids if i in lits]
                if not core:
                    break
            else:  # a hard (non-linear) corner: move somewhere else
                core = list(chosen)
            for k in core:
                if round_ < redraws:
                    chosen[k] = self.rng.choice(self.pins[k][1])
                else:
                    chosen.pop(k, None)
        r = self._check(fixed)
        if r == z3.sat:
            return self._decode(self.solver.model())
        if r == z3.unsat and not fixed:
            self.exhausted = True
        elif r == z3.unsat and self.solver.check() == z3.unsat:
            self.exhausted = True
        return None

    def _decode(self, m: z3.ModelRef) -> Instance:
        types: dict[str, TensorType] = {}
        same: list[z3.BoolRef] = []
        for name, (rank, dim) in self._shape_terms.items():
            r = _eval_int(m, rank)
            dims = tuple(_eval_int(m, dim[k]) for k in range(r))
            dtype = self.dtypes.get(name, DType.F32)
            types[name] = TensorType(dims, dtype)
            same += [self._eq(rank, r), *[self._eq(dim[k], d) for k, d in enumerate(dims)]]
        attrs: dict[str, Any] = {}
        for name, codec in self.g.codecs.items():
            vals = []
            for c in self._attr_consts[name]:
                v = m.eval(c, model_completion=True)
                # An irrational attribute (rsqrt(2)): its value to ~1e-40, read as a float.
                w = v.approx(40) if z3.is_algebraic_value(v) else v
                vals.append(w.as_fraction() if z3.is_rational_value(w) else w.as_long())
                same.append(c == v)
            attrs[name] = codec.decode(vals)
        # Never propose the same instance twice; running out means the bounds are covered.
        ctx = self.solver.ctx
        both = (z3.Ast * len(same))(*[x.as_ast() for x in same])
        block = z3.BoolRef(z3.Z3_mk_not(ctx.ref(), z3.Z3_mk_and(ctx.ref(), len(same), both)), ctx)
        assert_all(self.solver, [block])
        return Instance(types, attrs)


def assert_all(s: z3.Solver, facts: Sequence[z3.BoolRef]) -> None:
    """`s.add(*facts)` for Boolean terms of the solver's context, without z3's per-term
    sort checks (a sampler asserts hundreds of shape facts, and every draw a blocking
    clause; the prover asserts the shape theory of every rule)."""
    ref = s.ctx.ref()
    for f in facts:
        if isinstance(f, z3.BoolRef) and f.ctx is s.ctx:
            z3.Z3_solver_assert(ref, s.solver, f.as_ast())
        else:  # a Python bool or another context: z3's own conversion
            s.add(f)


def _eval_int(m: z3.ModelRef, term: z3.ArithRef) -> int:
    """`m.eval(term, model_completion=True).as_long()` for an integer term, without
    wrapping the numeral in a Python object first (a draw reads dozens of them)."""
    ctx = m.ctx.ref()
    out = (z3.Ast * 1)()
    if not z3.Z3_model_eval(ctx, m.model, term.as_ast(), True, out):
        raise z3.Z3Exception("failed to evaluate expression in the model")
    z3.Z3_inc_ref(ctx, out[0])
    try:
        return int(z3.Z3_get_numeral_string(ctx, out[0]))
    finally:
        z3.Z3_dec_ref(ctx, out[0])


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
    """Random inputs shared by both sides; integer ids stay inside their tables (gather's
    indices inside [-n, n) of their axis), booleans are 0/1 and batch-norm variances
    positive."""
    specs: dict[str, TensorType] = {}
    high: dict[str, int] = {}
    signed: set[str] = set()
    positive: set[str] = set()

    def bound(g: Graph, v: Value, n: int, negative: bool = False) -> None:
        node = g.nodes[v.node]
        if node.op == "input":
            name = node.attr("name")
            high[name] = min(high.get(name, n), n)
            if negative:
                signed.add(name)

    for g in graphs:
        for n in g.nodes:
            if n.op == "input":
                specs[n.attr("name")] = n.type
            elif n.op == "embedding":
                bound(g, n.inputs[0], g.type_of(n.inputs[1]).shape[0])
            elif n.op == "gather":
                bound(g, n.inputs[1], g.type_of(n.inputs[0]).shape[n.attr("axis")], True)
            elif n.op == "batch_norm":
                var = g.nodes[n.inputs[4].node]
                if var.op == "input":
                    positive.add(var.attr("name"))
    out: dict[str, np.ndarray] = {}
    for name, t in specs.items():
        if t.dtype == DType.BOOL:
            out[name] = rng.integers(0, 2, size=t.shape, dtype=np.int64)
        elif not t.dtype.is_float:
            hi = max(high.get(name, 1), 1)
            lo = -hi if name in signed else 0
            out[name] = rng.integers(lo, hi, size=t.shape, dtype=np.int64)
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
            # NaN on one side only (sqrt of a negative in a false rule): the largest
            # finite difference, NaN when there is none.
            finite = np.abs(x - y)[np.isfinite(x - y)]
            diff = float(finite.max()) if finite.size else float("nan")
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

    def run(inst: Instance, built: Built, target: bool, k: int) -> SampleReport | None:
        """Count one proposal; the report when it separates the sides."""
        nonlocal example, modp_only
        counts["proposals"] += 1
        if on_instance is not None:
            on_instance(inst, built)
        if built.source is None:
            return None
        if built.outside:
            counts["outside"] += 1
            return None
        if not target:
            counts["source_checked"] += 1
        if built.target is None:
            counts["source_only"] += 1
            example = example or f"{inst.describe()}: {built.problem}"
            return None
        try:
            cmp = compare(rule, inst, built, seed * 1000 + k)
        except IRError:  # e.g. a value the semantics rejects: not a valid input
            counts["outside"] += 1
            return None
        counts["instances"] += 1
        if cmp.separates:
            return SampleReport(**counts, source_only_example=example,
                                counterexample=cmp.counterexample,
                                time_s=time.perf_counter() - t0)
        if cmp.modp_differs and not modp_only:
            modp_only = f"mod-p values differ (reference values agree) at {inst.describe()}"
        return None

    only = unique_instance(rule) if spec is None else None
    if only is not None:
        # The sampler would propose this instance (as a source-only proposal where the
        # target does not type-check there) and then report the space exhausted.
        built = build(rule, only)
        got = run(only, built, built.source is None or built.target is not None, 0)
        if got is not None:
            return got
        return SampleReport(**counts, source_only_example=example, modp_only=modp_only,
                            time_s=time.perf_counter() - t0)
    try:
        sampler = Sampler(rule, spec or pinned_spec(rule), seed=seed)
    except IRError as err:
        return SampleReport(error=f"cannot sample: {err}", time_s=time.perf_counter() - t0)
    for target, want in ((True, samples), (False, max(2, samples // 3))):
        for k, (inst, built) in enumerate(instances(sampler, want, want * 8, deadline, target)):
            got = run(inst, built, target, k)
            if got is not None:
                return got
    return SampleReport(**counts, source_only_example=example, modp_only=modp_only,
                        time_s=time.perf_counter() - t0)
