"""Rules and axioms as Z3 formulas.

A rule to prove is encoded *ground*: its tensor variables and attribute variables become
fresh constants, its condition and the definedness of its computed attributes become a
premise, and each output pair becomes a goal. An axiom (or a library rule used as an
axiom) is encoded *quantified*, once per usable direction::

    forall vars. wt(lhs) and condition  ->  lhs == rhs        trigger: lhs

`wt(lhs)` restricts the axiom to well-typed instances, which is exactly what the sampler
validates: whenever the trigger side type-checks and the condition holds, the other side
type-checks and computes the same tensor. Attribute variables in a trigger match the
canonical attribute values stored in graphs, so trigger attributes are not normalised.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import z3

from superopt.ir.errors import IRError
from superopt.ir.opdef import VARIADIC, get_op
from superopt.ir.rules import MissingRule
from superopt.substitutions.pattern import AConst, AVar, Pattern, PNode, PVar, walk
from superopt.substitutions.rule import Rule
from superopt.verifier.shapes import TABLE, Call, FuncKey, Z3Env, make_call
from superopt.verifier.zvalues import AttrCodec, Translator, Unsupported, ZVal, codec_for, equal


def attr_var_codecs(rule: Rule) -> dict[str, AttrCodec]:
    """The slot layout of each attribute variable, from the attribute it stands for."""
    out: dict[str, AttrCodec] = {}
    for p in (*rule.source, *rule.target):
        for q in walk(p):
            if not isinstance(q, PNode):
                continue
            op = get_op(q.op)
            for name, a in q.attrs:
                if not isinstance(a, AVar):
                    continue
                codec = codec_for(q.op, op.attr_spec(name))
                prev = out.get(a.name)
                if prev is not None and (prev.kind, prev.choices, prev.cap) != (
                        codec.kind, codec.choices, codec.cap):
                    raise Unsupported(f"?{a.name} stands for attributes of different kinds "
                                      f"({prev.kind} and {codec.kind})")
                out[a.name] = codec
    tensors = set(rule.source_vars())
    for name in rule.attr_vars():  # also lists tensor variables used in expressions
        if name not in tensors:
            out.setdefault(name, AttrCodec(name, "int"))
    return out


@dataclass
class Scope:
    """Bindings while encoding: tensor terms, attribute values and collected side
    conditions (definedness of computed attributes)."""

    env: Z3Env
    tensors: dict[str, z3.ExprRef]
    attrs: dict[str, ZVal]
    side: list[z3.BoolRef] = field(default_factory=list)
    # In a trigger, a computed attribute becomes a fresh quantified variable (listed
    # here) that the guard equates with the expression; None: not allowed.
    lifted: list[z3.ExprRef] | None = None

    def translator(self) -> Translator:
        return Translator(self.tensors, self.attrs, self.env.rank, self.env.dim)


def encode_pattern(p: Pattern, scope: Scope, trigger: bool = False) -> z3.ExprRef:
    """The Z3 term of a pattern. `trigger`: a quantifier's pattern (see module doc).

    Attribute variables stand for canonical attribute values (what graphs store, which is
    what rules match), so they are used as they are; constants and computed attributes are
    normalised with the op's canonicalisation (e.g. axis -1 becomes rank - 1)."""
    if isinstance(p, PVar):
        try:
            return scope.tensors[p.name]
        except KeyError:
            raise Unsupported(f"tensor variable ?{p.name} is not bound") from None
    e = scope.env
    try:
        entry = TABLE.get(p.op)
    except MissingRule as err:
        raise Unsupported(str(err)) from None
    opdef = get_op(p.op)
    children = [encode_pattern(c, scope, trigger) for c in p.children]
    if opdef.num_inputs == VARIADIC and len(children) < opdef.min_inputs:
        raise Unsupported(f"{p.op} needs at least {opdef.min_inputs} inputs")
    vals: dict[str, ZVal] = {}
    kinds: dict[str, str] = {}
    for spec, codec in zip(opdef.attrs, e.codecs(p.op), strict=True):
        a = p.attr(spec.name)
        if a is None:
            if spec.required:
                raise Unsupported(f"{p.op}: required attribute {spec.name!r} is not given")
            a = AConst(spec.default)
        kinds[spec.name] = type(a).__name__
        if isinstance(a, AConst):
            value = spec.validate(p.op, a.value)
            vals[spec.name] = codec.to_val(codec.encode(value))
        elif isinstance(a, AVar):
            if a.name not in scope.attrs:
                raise Unsupported(f"attribute variable ?{a.name} is not bound")
            vals[spec.name] = scope.attrs[a.name]
        elif trigger:
            # A trigger matches the attribute graphs store, so it holds a variable; the
            # guard asks it to equal the computed value (e.g. conv2d groups={dim(?x,1)
            # // dim(?w,1)} in a generated rule). Graphs store canonical values, so an
            # expression with a non-canonical value (a negative axis) never fires: the
            # axiom is then weaker, never unsound.
            if scope.lifted is None:
                raise Unsupported(f"{p.op}: a computed attribute {{{a.text}}} cannot be part "
                                  "of a trigger")
            var, slots = codec.fresh(f"{{{a.text}}}#{len(scope.lifted)}")
            scope.lifted.extend(slots)
            v, ok = scope.translator().evaluate(a.text)
            scope.side += [ok, equal(var, v)]
            vals[spec.name] = var
            kinds[spec.name] = "AVar"
        else:
            v, ok = scope.translator().evaluate(a.text)
            scope.side.append(ok)
            vals[spec.name] = v
    if entry.canon is not None:
        # Attribute variables are bound to the canonical values graphs store, so only
        # constants and computed attributes are normalised.
        canon = entry.canon(Call(e, p.op, dict(vals), children, p.output))
        for spec, codec in zip(opdef.attrs, e.codecs(p.op), strict=True):
            if kinds[spec.name] == "AVar":
                continue
            if trigger:
                raw = [z3.simplify(x) for x in codec.slots(vals[spec.name])]
                norm = [z3.simplify(x) for x in codec.slots(canon[spec.name])]
                if any(not x.eq(y) for x, y in zip(raw, norm, strict=True)):
                    raise Unsupported(f"{p.op}: attribute {spec.name} must be written in "
                                      "canonical form in a trigger (e.g. non-negative axes)")
            else:
                vals[spec.name] = canon[spec.name]
    return make_call(e, p.op, vals, children, p.output, canonical=True)


def function_keys(e: Z3Env, terms: Iterable[z3.ExprRef]) -> set[FuncKey]:
    keys: set[FuncKey] = set()
    seen: set[int] = set()
    stack = list(terms)
    while stack:
        t = stack.pop()
        if t.get_id() in seen or not z3.is_app(t):
            continue
        seen.add(t.get_id())
        k = e.key_of(t)
        if k is not None:
            keys.add(k)
        stack.extend(t.arg(i) for i in range(t.num_args()))
    return keys


# ---- ground encoding of a rule to prove ---------------------------------------------

@dataclass
class GroundRule:
    rule: Rule
    tensors: dict[str, z3.ExprRef]
    attrs: dict[str, ZVal]
    attr_consts: dict[str, list[z3.ExprRef]]
    codecs: dict[str, AttrCodec]
    sources: list[z3.ExprRef]
    targets: list[z3.ExprRef]
    condition: z3.BoolRef
    side: list[z3.BoolRef]

    def keys(self, e: Z3Env) -> set[FuncKey]:
        return function_keys(e, [*self.sources, *self.targets])

    def premise(self, e: Z3Env, target: bool = True) -> list[z3.BoolRef]:
        """What an instance of the rule satisfies: tensors and both sides well typed,
        the condition holds, computed attributes are defined."""
        facts = [e.wt(t) for t in self.tensors.values()]
        facts += [e.wt(s) for s in self.sources]
        if target:
            facts += [e.wt(t) for t in self.targets]
        return [*facts, self.condition, *self.side]


def encode_rule(rule: Rule, e: Z3Env, prefix: str = "") -> GroundRule:
    """Encode a rule with fresh constants (raises Unsupported when it cannot be)."""
    try:
        codecs = attr_var_codecs(rule)
        tensors = {v: z3.Const(f"{prefix}?{v}", e.T) for v in rule.source_vars()}
        attrs: dict[str, ZVal] = {}
        consts: dict[str, list[z3.ExprRef]] = {}
        for name, codec in codecs.items():
            attrs[name], consts[name] = codec.fresh(f"{prefix}?{name}")
        scope = Scope(e, tensors, attrs)
        # The condition is evaluated before the sides are built (as Rule.instantiate's
        # users do), but definedness of every part is required either way.
        cond = scope.translator().condition(rule.condition) if rule.condition else z3.BoolVal(True)
        sources = [encode_pattern(p, scope) for p in rule.source]
        targets = [encode_pattern(p, scope) for p in rule.target]
    except IRError as err:
        if isinstance(err, Unsupported):
            raise
        raise Unsupported(str(err)) from None
    return GroundRule(rule, tensors, attrs, consts, codecs, sources, targets, cond, scope.side)


# ---- quantified encoding of an axiom --------------------------------------------------

@dataclass(frozen=True)
class QAxiom:
    """One direction of an axiom as a quantified formula with a trigger."""

    name: str  # the axiom's name (both directions share it)
    direction: str  # "=>" (source to target) or "<=" (target to source)
    formula: z3.BoolRef
    trigger_keys: frozenset[FuncKey]
    keys: frozenset[FuncKey]  # every function symbol the formula mentions


def _lhs_attr_vars(pats: Sequence[Pattern]) -> set[str]:
    return {a.name for p in pats for q in walk(p) if isinstance(q, PNode)
            for _, a in q.attrs if isinstance(a, AVar)}


def quantify(rule: Rule, e: Z3Env, name: str, direction: str = "=>",
             guard_target: bool = False) -> QAxiom:
    """`rule` (already oriented) as a guarded quantified equality triggered on its source.

    With `guard_target` the guard also asks the target to be well typed (for rules that
    are only partial: their target does not always type-check when their source does)."""
    if any(isinstance(p, PVar) for p in rule.source):
        raise Unsupported("a bare variable cannot be a trigger")
    codecs = attr_var_codecs(rule)
    unbound = set(codecs) - _lhs_attr_vars(rule.source)
    if unbound:
        raise Unsupported(f"attribute variable ?{sorted(unbound)[0]} is not bound by the trigger")
    tag = f"{name}{'<' if direction == '<=' else ''}"
    tensors = {v: z3.Const(f"{tag}:?{v}", e.T) for v in rule.source_vars()}
    attrs: dict[str, ZVal] = {}
    bound: list[z3.ExprRef] = list(tensors.values())
    for var, codec in codecs.items():
        attrs[var], consts = codec.fresh(f"{tag}:?{var}")
        bound += consts
    scope = Scope(e, tensors, attrs, lifted=[])
    try:
        lhs = [encode_pattern(p, scope, trigger=True) for p in rule.source]
        cond = scope.translator().condition(rule.condition) if rule.condition else z3.BoolVal(True)
        rhs = [encode_pattern(p, scope) for p in rule.target]
    except IRError as err:
        if isinstance(err, Unsupported):
            raise
        raise Unsupported(str(err)) from None
    bound += scope.lifted or []
    guard = z3.And(*[e.wt(t) for t in lhs], cond, *scope.side,
                   *([e.wt(t) for t in rhs] if guard_target else []))
    body = z3.Implies(guard, z3.And(*[a == b for a, b in zip(lhs, rhs, strict=True)]))
    pattern = lhs[0] if len(lhs) == 1 else z3.MultiPattern(*lhs)
    formula = z3.ForAll(bound, body, patterns=[pattern])
    return QAxiom(name, direction, formula, frozenset(function_keys(e, lhs)),
                  frozenset(function_keys(e, [*lhs, *rhs])))


def directions(rule: Rule) -> list[tuple[str, Rule]]:
    """The orientations of a rule usable as axioms: its own, and the reverse for '<=>'."""
    out = [("=>", rule)]
    if rule.bidirectional:
        out.append(("<=", rule.reversed()))
    return out


def quantify_all(rule: Rule, e: Z3Env, name: str | None = None
                 ) -> tuple[list[QAxiom], list[tuple[str, str]]]:
    """Every usable direction, and (direction, reason) for those that cannot be used."""
    good, bad = [], []
    for d, r in directions(rule):
        try:
            good.append(quantify(r, e, name or rule.name, d))
        except Unsupported as err:
            bad.append((d, str(err)))
    return good, bad

