"""The `modern` preset: transformer-era ops in the generator.

Expectations are identities of real arithmetic written out by hand (sub is add of a
negation, div is multiplication by a reciprocal, exp turns sums into products), not copied
from a run: each must be found, up to renaming of variables, the order of a commutative
op's operands and the direction of the rule.
"""

from __future__ import annotations

import numpy as np
import pytest

from superopt.ir import GraphBuilder, interpret
from superopt.ir.kernels import P, centred
from superopt.ir.opdef import ELEMENTWISE, get_op, ops_with
from superopt.ir.types import TensorType
from superopt.substitutions import format_rule, parse_rule
from superopt.substitutions.enumerate import TermTable
from superopt.substitutions.fingerprint import random_inputs, resolve
from superopt.substitutions.generator import GenerateResult, check_rule, generate
from superopt.substitutions.pattern import Pattern, PNode, PVar
from superopt.substitutions.presets import make_config
from superopt.substitutions.strengthen import rank_free_ops

COMMUTATIVE = {"ewadd", "ewmul", "maximum", "minimum"}


def _match(want: Pattern, got: Pattern, bind: dict[str, str]) -> dict[str, str] | None:
    """Bind `want`'s variables one-to-one to `got`'s; None when the trees differ."""
    if isinstance(want, PVar):
        if not isinstance(got, PVar):
            return None
        if bind.get(want.name, got.name) != got.name:
            return None
        if want.name not in bind and got.name in bind.values():
            return None
        return {**bind, want.name: got.name}
    if not isinstance(got, PNode) or got.op != want.op or got.output != want.output \
            or len(got.children) != len(want.children) or dict(got.attrs) != dict(want.attrs):
        return None
    orders = [got.children]
    if want.op in COMMUTATIVE:
        orders.append(tuple(reversed(got.children)))
    for children in orders:
        b: dict[str, str] | None = dict(bind)
        for w, g in zip(want.children, children, strict=True):
            b = _match(w, g, b) if b is not None else None
        if b is not None:
            return b
    return None


def _found(equation: str, result: GenerateResult) -> bool:
    """Is `lhs = rhs` (text patterns) one of the rules, in either direction?"""
    lhs, rhs = equation.split(" = ")
    want = parse_rule(f"want: {lhs} <=> {rhs}")
    for rule in result.rules:
        if len(rule.source) != 1:
            continue
        for a, b in ((rule.source[0], rule.target[0]), (rule.target[0], rule.source[0])):
            bind = _match(want.source[0], a, {})
            if bind is not None and _match(want.target[0], b, bind) is not None:
                return True
    return False


@pytest.fixture(scope="module")
def modern2() -> GenerateResult:
    ops = ["ewadd", "ewmul", "sub", "neg", "div", "recip", "exp", "sigmoid", "silu", "tanh",
           "erf", "maximum", "relu", "pow_2", "cos", "sqrt", "rsqrt"]
    return generate(make_config("modern", max_ops=2, ops=ops, max_outputs=1))


@pytest.mark.parametrize("equation", [
    "(sub ?a ?b) = (ewadd ?a (neg ?b))",
    "(div ?a ?b) = (ewmul ?a (recip ?b))",
    "(neg (neg ?a)) = ?a",
    "(recip (recip ?a)) = ?a",
    "(neg (sub ?a ?b)) = (sub ?b ?a)",
    "(recip (exp ?a)) = (exp (neg ?a))",  # e^-a = 1 / e^a
    "(silu ?a) = (ewmul ?a (sigmoid ?a))",
    "(tanh (neg ?a)) = (neg (tanh ?a))",  # odd
    "(erf (neg ?a)) = (neg (erf ?a))",  # odd
    "(pow 2.0 (neg ?a)) = (pow 2.0 ?a)",  # (-a)^2 = a^2: f(X) = f(Y) with X != Y
    "(cos (neg ?a)) = (cos ?a)",  # even
    "(rsqrt ?a) = (recip (sqrt ?a))",
    "(div ?a (sqrt ?b)) = (ewmul ?a (rsqrt ?b))",
    "(relu (sub ?a ?b)) = (sub (maximum ?a ?b) ?b)",  # max(a - b, 0) = max(a, b) - b
])
def test_modern_preset_finds_known_identities_at_two_ops(modern2: GenerateResult,
                                                          equation: str) -> None:
    assert _found(equation, modern2), (equation, [format_rule(r) for r in modern2.rules])


def test_every_modern_rule_holds_in_floats_on_other_draws(modern2: GenerateResult) -> None:
    assert len(modern2.rules) >= 20
    for rule in modern2.rules:
        types = {k: TensorType(tuple(v)) for k, v in rule.provenance["types"].items()}
        assert check_rule(rule, types, seed=77, bound=1024), format_rule(rule)


def test_exp_of_a_sum_is_a_product_of_exps_at_three_ops() -> None:
    res = generate(make_config("modern", max_ops=3, ops=["ewadd", "ewmul", "sub", "div", "exp"],
                               inputs="x1:2x4,x2:2x4", max_outputs=1))
    assert _found("(exp (ewadd ?a ?b)) = (ewmul (exp ?a) (exp ?b))", res)
    assert _found("(exp (sub ?a ?b)) = (div (exp ?a) (exp ?b))", res)


def test_integer_only_identities_are_not_written() -> None:
    """Small integer inputs satisfy min(s, s*s) = s (no integer lies strictly between 0 and
    1), which is false at s = 0.5: the float check must leave it out."""
    res = generate(make_config("modern", max_ops=2, ops=["minimum", "maximum", "pow_2", "neg"],
                               inputs="s0:scalar,x1:2x4", max_outputs=1))
    assert not _found("(minimum ?a (pow 2.0 ?a)) = ?a", res)
    assert not _found("(maximum ?a (pow 2.0 ?a)) = (pow 2.0 ?a)", res)
    assert _found("(pow 2.0 (neg ?a)) = (pow 2.0 ?a)", res)


def _graph(table: TermTable, t: int):
    b = GraphBuilder(f"term{t}")
    memo: dict[int, object] = {}

    def build(u: int):
        if u not in memo:
            if u < table.n_inputs:
                spec = table.cfg.inputs[u]
                memo[u] = b.input(spec.name, spec.shape)
            else:
                tmpl = table.templates[table.tmpl[u]]
                args = [a for a in (table.a0[u], table.a1[u]) if a >= 0][:tmpl.arity]
                attrs, _ = resolve(tmpl, [table.shapes[table.group[a]] for a in args])
                memo[u] = b.add(tmpl.op, [build(a) for a in args], attrs)[table.out[u]]
        return memo[u]

    return b.build([build(t)])


def test_modern_kernels_agree_with_the_ir_modp_interpreter() -> None:
    tab = TermTable(make_config("modern", max_ops=3), 2)
    by_template: dict[int, list[int]] = {}
    for t in range(tab.n_inputs, len(tab)):
        by_template.setdefault(tab.tmpl[t], []).append(t)
    assert len(by_template) == len(tab.templates)  # every template applies somewhere
    rng = np.random.default_rng(3)
    for ts in by_template.values():
        for t in {ts[0], ts[-1], *(int(x) for x in rng.choice(ts, size=min(4, len(ts))))}:
            g = _graph(tab, t)
            names = {n.attr("name") for n in g.nodes if n.op == "input"}
            for s in range(tab.samples):
                feeds = {spec.name: tab.input_values[k][s]
                         for k, spec in enumerate(tab.cfg.inputs) if spec.name in names}
                (want,) = interpret(g, feeds, "modp")
                got = tab.values[tab.group[t]][tab.row[t]][s]
                assert np.array_equal(got, want), tab.templates[tab.tmpl[t]].key


def test_bounded_inputs_are_small_and_signed() -> None:
    xs = random_inputs([(2, 4), ()], seed=5, samples=2, bound=100)
    for v in xs:
        c = centred(v)
        assert np.all(np.abs(c) <= 100) and np.all((0 <= v) & (v < P))
    flat = centred(xs[0]).reshape(2, -1)
    assert flat[0, 0] < 0 < flat[1, 0]


def test_op_sets_come_from_traits() -> None:
    # every element-wise op holds at every rank; matmul and softmax do not
    free = rank_free_ops()
    assert set(ops_with(ELEMENTWISE)) <= free
    assert {"exp", "sub", "silu", "maximum", "copy"} <= free
    assert not {"matmul", "softmax", "transpose", "layout"} & free
    # the preset has a template for every one-input element-wise op needing no attribute
    keys = {t.key for t in make_config("modern").templates}
    unary = {n for n in ops_with(ELEMENTWISE) if get_op(n).num_inputs == 1
             and not any(a.required for a in get_op(n).attrs)}
    assert {"neg", "exp", "log", "sqrt", "rsqrt", "recip", "erf", "silu"} <= unary <= keys


def test_exact_supergraph_pruning_keeps_rules_of_ops_that_are_not_injective() -> None:
    from superopt.substitutions.prune import SideInfo, common_supergraph

    sq_neg = SideInfo(frozenset(), ((7, (("op", 10),)),))  # pow2(neg x): operand term 10
    sq = SideInfo(frozenset(), ((7, (("in", 0),)),))  # pow2(x)
    assert common_supergraph(sq_neg, sq)  # TASO: pruned
    assert not common_supergraph(sq_neg, sq, lambda a, b: False)  # neg x != x: kept
    assert common_supergraph(sq_neg, sq, lambda a, b: True)  # equal operands: derived


def test_taso_preset_is_unchanged_by_the_modern_one() -> None:
    cfg = make_config("taso")
    assert cfg.input_bound == 0 and "input_bound" not in cfg.key()
    assert not cfg.exact_supergraph and "exact_supergraph" not in cfg.key()
    assert not {"sub", "div", "exp", "neg"} & {t.op for t in cfg.templates}
