"""End to end: generated libraries hold on fresh inputs, contain TASO's known rules, and
the pruning and renaming steps do what TASO's generator does."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from superopt.cli import main
from superopt.ir import TensorType
from superopt.substitutions import differs, format_rule, load_library, parse_rule
from superopt.substitutions.generator import (
    GenerateResult,
    _general_key,
    check_rule,
    generate,
    instance_rules,
)
from superopt.substitutions.presets import make_config
from superopt.substitutions.prune import SideInfo, canonical, common_subgraph, common_supergraph
from superopt.substitutions.readers import read_any


def _types(rule) -> dict[str, TensorType]:
    return {k: TensorType(tuple(v)) for k, v in rule.provenance["types"].items()}


def _fresh_ok(rule, seed: int = 424242) -> bool:
    return differs(rule, _types(rule), trials=2, seed=seed) is None


@pytest.fixture(scope="module")
def taso2() -> GenerateResult:
    """The size-two TASO library, with every stage (the test at other shapes included)."""
    return generate(make_config("taso", max_ops=2))


# The next libraries skip the test at other shapes (`sample_check=False`): the tests using
# them are about enumeration, pruning and renaming, and the test at other shapes only adds
# conditions (tested on `taso2` and in `test_a_rank_two_rule_is_strengthened_not_dropped`).

@pytest.fixture(scope="module")
def small3() -> GenerateResult:
    return generate(make_config("small", max_ops=3), sample_check=False)


@pytest.fixture(scope="module")
def conv3_pinned() -> GenerateResult:
    """Conv rules whose hidden channel counts pin some rules to the generator's shapes."""
    return generate(make_config("taso", max_ops=3, ops=[
        "conv2d", "conv2d_relu", "const_iconv", "pool2d_avg_3x3", "const_pool", "relu",
        "enlarge_3x3"], max_outputs=1), sample_check=False)


def _texts(res: GenerateResult) -> set[str]:
    return {format_rule(r).split(": ", 1)[1] for r in res.rules}


def test_every_rule_of_the_size_two_library_holds_on_fresh_inputs(taso2: GenerateResult) -> None:
    assert len(taso2.rules) >= 30
    bad = [r.name for r in taso2.rules if not _fresh_ok(r)]
    assert not bad
    # and under the float64 reference semantics
    assert all(check_rule(r, _types(r), seed=99) for r in taso2.rules)


def test_size_two_library_has_tasos_known_rules(taso2: GenerateResult) -> None:
    texts = _texts(taso2)
    assert "(transpose [1,0] (transpose [1,0] ?w1)) <=> ?w1" in texts
    # TASO's constants: identity conv, average pooling as a depthwise conv
    assert "(conv2d padding=same ?i1 (const_iconv {dim(?i1,1)} 3 3)) <=> ?i1" in texts
    assert ("(conv2d padding=same groups={dim(?i1,1)} ?i1 (const_pool {dim(?i1,1)} 3 3)) <=> "
            "(pool2d_avg kernel=[3,3] padding=same ?i1)") in texts
    assert any(t.startswith("(relu (conv2d padding=same") and "activation=relu" in t
               for t in texts)  # fusing relu into conv
    assert "(smul (matmul ?x1 ?w1) ?s0) <=> (matmul ?x1 (smul ?w1 ?s0))" in texts
    st = taso2.stages
    assert st["rules written"] == len(taso2.rules)
    assert (st["graphs enumerated (terms evaluated)"] >= st["distinct fingerprints"]
            >= st["candidate pairs (bucket hits)"] >= st["after common-subgraph pruning"]
            >= st["after common-supergraph pruning"])
    assert st["after renaming dedup"] >= st["after generalization dedup"] >= st["rules written"]


def test_generated_conv_rules_hold_at_other_shapes(taso2: GenerateResult) -> None:
    """Shape-dependent attributes are expressions, so rules generalize beyond the shapes
    they were found at (here: other channel counts, a grouped conv, another image size)."""
    texts = {format_rule(r).split(": ", 1)[1]: r for r in taso2.rules}
    pool = texts["(conv2d padding=same groups={dim(?i1,1)} ?i1 (const_pool {dim(?i1,1)} 3 3)) "
                 "<=> (pool2d_avg kernel=[3,3] padding=same ?i1)"]
    assert differs(pool, {"i1": TensorType((1, 3, 7, 6))}, seed=2) is None
    fuse = [r for t, r in texts.items() if t.startswith("(relu (conv2d") and "?w4" in t]
    assert fuse
    grouped = {"i1": TensorType((1, 6, 7, 7)), "w4": TensorType((4, 3, 3, 3))}  # groups = 2
    assert all(differs(r, grouped, seed=4) is None for r in fuse)


def test_size_three_small_library_holds_and_has_two_output_rules(small3: GenerateResult) -> None:
    assert all(_fresh_ok(r) for r in small3.rules)
    two = [r for r in small3.rules if r.outputs == 2]
    assert two and small3.stages["two-output rules"] == len(two)
    merge = parse_rule("m: (split.0 1 {[dim(?w1,1), dim(?w2,1)]} (matmul ?x1 (concat 1 ?w1 ?w2))) ; "
                       "(split.1 1 {[dim(?w1,1), dim(?w2,1)]} (matmul ?x1 (concat 1 ?w1 ?w2))) <=> "
                       "(matmul ?x1 ?w1) ; (matmul ?x1 ?w2)")
    found = [r for r in two if (r.source, r.target) == (merge.source, merge.target)]
    assert found, "two matmuls of one input <=> one matmul on concatenated weights, split"
    # the rule is general: it holds at shapes other than the generator's
    other = {"x1": TensorType((3, 6)), "w1": TensorType((6, 2)), "w2": TensorType((6, 5))}
    assert differs(found[0], other, seed=5) is None


def test_instances_of_other_rules_are_counted_and_dropped_on_request(
        small3: GenerateResult) -> None:
    n = small3.stages["instances of another rule (kept unless drop_instances)"]
    assert n > 0
    lean = generate(make_config("small", max_ops=3), drop_instances=True, sample_check=False)
    assert len(lean.rules) == len(small3.rules) - n
    assert instance_rules(lean.rules) == set()
    # e.g. matmul associativity with a repeated operand is an instance of the general law
    def has(texts: set[str], a: str, b: str) -> bool:
        return f"{a} <=> {b}" in texts or f"{b} <=> {a}" in texts

    # (found at x1: 2x4 and at w1: 4x4, the general law is one rule once generalized)
    repeated = ("(matmul (matmul ?w1 ?w2) ?w1)", "(matmul ?w1 (matmul ?w2 ?w1))")
    general = ("(matmul (matmul ?x1 ?w1) ?w2)", "(matmul ?x1 (matmul ?w1 ?w2))")
    texts = _texts(small3)
    assert has(texts, *repeated) and has(texts, *general)
    lean_texts = _texts(lean)
    assert not has(lean_texts, *repeated) and has(lean_texts, *general)


def test_a_sample_of_a_size_three_library_holds() -> None:
    res = generate(make_config("linear", max_ops=3), sample_check=False)
    rng = random.Random(0)
    sample = rng.sample(res.rules, 60) + [r for r in res.rules if r.outputs == 2]
    assert all(_fresh_ok(r, seed=77) for r in sample)


@pytest.mark.slow
def test_taso_size_three_library_reaches_tasos_count_and_holds() -> None:
    from superopt.verifier.sampler import random_test

    res = generate(make_config("taso", max_ops=3), workers=2)
    assert len(res.rules) >= 619  # TASO's own generator writes 619 rules at this size
    assert res.stages["two-output rules"] > 0
    rng = random.Random(1)
    sample = rng.sample(res.rules, 200) + [r for r in res.rules if r.outputs == 2]
    assert all(_fresh_ok(r, seed=31) for r in sample)
    # what `superopt verify` runs first (its random tester, default options) refutes none
    refuted = [format_rule(r) for r in res.rules
               if random_test(r, samples=12, seed=0).counterexample is not None]
    assert not refuted


# ---- pruning ----------------------------------------------------------------------------

def _info(leaves: set[str], roots: list) -> SideInfo:
    return SideInfo(frozenset(leaves), tuple(roots))


def test_common_subgraph_and_supergraph() -> None:
    a = _info({"mm(x1,w1)"}, [(0, (("in", 0), ("op", 5)))])
    b = _info({"mm(x1,w1)", "relu(x2)"}, [(1, (("op", 7),))])
    assert common_subgraph(a, b)
    assert not common_subgraph(a, _info({"relu(x2)"}, [None]))
    # same op, same input in all but one position: a smaller rule under a common consumer
    c = _info(set(), [(0, (("in", 0), ("op", 9)))])
    assert common_supergraph(a, c)
    d = _info(set(), [(0, (("op", 3), ("op", 9)))])
    assert not common_supergraph(a, d)  # two operands differ
    assert not common_supergraph(a, _info(set(), [None]))  # a bare variable


def test_canonical_key_is_invariant_under_renaming_and_commutation() -> None:
    ADD, MM = 0, 1

    def tkey(t: int) -> str:
        return ["ewadd", "matmul"][t]

    def comm(t: int) -> bool:
        return t == ADD

    groups = [0, 0, 0, 1, 1]  # x1 x2 x3 | w1 w2
    x = [("in", k) for k in range(5)]
    src = [(ADD, 0, ((MM, 0, (x[0], x[3])), (MM, 0, (x[1], x[3]))))]
    tgt = [(MM, 0, ((ADD, 0, (x[0], x[1])), x[3]))]
    key, mapping = canonical(src, tgt, groups, tkey, comm)
    renamed_src = [(ADD, 0, ((MM, 0, (x[1], x[4])), (MM, 0, (x[2], x[4]))))]
    renamed_tgt = [(MM, 0, ((ADD, 0, (x[2], x[1])), x[4]))]
    assert canonical(renamed_src, renamed_tgt, groups, tkey, comm)[0] == key
    assert canonical(renamed_tgt, renamed_src, groups, tkey, comm)[0] == key
    assert sorted(mapping.values()) == [0, 1, 3]
    wrong = [(MM, 0, ((ADD, 0, (x[0], x[1])), x[4]))]  # another weight: another rule
    assert canonical(src, wrong, groups, tkey, comm)[0] != key


def test_generalization_key_ignores_the_order_of_the_conditions_conjuncts() -> None:
    """The same rule found at different shapes: the shape solver lists its condition's
    equalities in an order that depends on those shapes (a 4-op run found this rule at
    2x4, at 4x4 and at 4x4x3x3 and kept it twice). One rule, one key."""
    body = "(ewadd (concat 0 ?{0} ?{1}) (concat 0 ?{2} ?{3})) <=> " \
           "(concat 0 (ewadd ?{0} ?{2}) (ewadd ?{1} ?{3}))"
    a = parse_rule(body.format("x1", "x2", "x3", "w1")
                   + " if dim(?x2,0) == dim(?w1,0) and dim(?x1,0) == dim(?x3,0)")
    b = parse_rule(body.format("w4", "w5", "w6", "w7")
                   + " if dim(?w4,0) == dim(?w6,0) and dim(?w5,0) == dim(?w7,0)")
    c = parse_rule(body.format("w4", "w5", "w6", "w7") + " if dim(?w4,0) == dim(?w6,0)")
    assert _general_key(a) == _general_key(b)
    assert _general_key(a) != _general_key(c)  # another condition is another rule
    # a conjunct with `and` inside brackets stays whole
    d = parse_rule(body.format("x1", "x2", "x3", "w1")
                   + " if dim(?x1,0) == dim(?x3,0) and (rank(?x1) == 2 and rank(?w1) == 2)")
    e = parse_rule(body.format("x1", "x2", "x3", "w1")
                   + " if (rank(?x1) == 2 and rank(?w1) == 2) and dim(?x1,0) == dim(?x3,0)")
    assert _general_key(d) == _general_key(e)
    assert _general_key(d) != _general_key(a)


def test_rules_found_only_at_the_generator_shapes_say_so(conv3_pinned: GenerateResult) -> None:
    """A hidden channel count (a constant kernel inside a conv chain) cannot be written over
    the variables; such rules are pinned to the shapes they were found and checked at."""
    pinned = [r for r in conv3_pinned.rules if r.condition and "shape(" in r.condition]
    assert pinned
    for r in pinned:
        # the condition pins the shapes the rule was found and checked at
        assert all(f"shape(?{v}) == {tuple(s)!r}" in r.condition
                   for v, s in r.provenance["types"].items())


# ---- command line -------------------------------------------------------------------------

def test_cli_generate_writes_library_and_text(tmp_path: Path, capsys) -> None:
    out, text = tmp_path / "lib.json", tmp_path / "lib.rules"
    code = main(["generate", "--preset", "small", "--max-ops", "2", "--out", str(out),
                 "--text", str(text), "--quiet", "--workers", "2"])
    assert code == 0
    shown = capsys.readouterr().out
    assert "graphs enumerated" in shown and "peak memory" in shown
    lib = load_library(out)
    assert len(lib) > 5 and lib.meta["stages"]["rules written"] == len(lib)
    assert lib.meta["config"]["preset"] == "small"
    assert [r.source for r in read_any(text)] == [r.source for r in lib.rules]
    assert all(_fresh_ok(r) for r in lib.rules)
    meta = json.loads(out.read_text())["meta"]
    assert meta["times_s"]["total"] > 0


def test_cli_generate_rejects_bad_options(tmp_path: Path, capsys) -> None:
    code = main(["generate", "--preset", "small", "--ops", "conv3d", "--out",
                 str(tmp_path / "x.json")])
    assert code == 2
    assert "unknown op or template 'conv3d'" in capsys.readouterr().err
    code = main(["generate", "--preset", "small", "--executor", "threads", "--out",
                 str(tmp_path / "x.json")])
    assert code == 2 and not (tmp_path / "x.json").exists()
    assert "unknown executor 'threads'" in capsys.readouterr().err


# ---- testing at other shapes ----------------------------------------------------------------

def test_generalised_rules_survive_the_verifiers_sampler_at_other_shapes(
        taso2: GenerateResult) -> None:
    """Every rule was random-tested at sampled shapes and, where refuted, strengthened;
    re-tested with another seed (other shapes), every rule still holds."""
    from superopt.verifier.sampler import random_test

    st = taso2.stages
    assert st["refuted at sampled shapes"] == sum(
        st[k] for k in st if k.startswith("strengthened:")) + st[
        "refuted even when pinned (left out)"]
    assert st["not tested at other shapes (none can refute them)"] >= 1
    # multiplying by ones of a 4-D shape is the identity only on 4-D tensors (at rank 5 the
    # product broadcasts to another shape), so the rule found at rank 4 is restricted to it
    ones = {format_rule(r).split(": ", 1)[1].split(" if ")[0]: r for r in taso2.rules}[
        "(ewmul ?i1 (const_one {[dim(?i1,0), dim(?i1,1), dim(?i1,2), dim(?i1,3)]})) <=> ?i1"]
    assert "rank(?i1) == 4" in (ones.condition or "")
    assert ones.provenance["strengthened"]["level"] == "rank"
    for r in taso2.rules:
        report = random_test(r, samples=6, seed=11, budget_s=3.0)
        assert report.counterexample is None, (format_rule(r), report.counterexample)


def test_rules_no_other_shapes_can_refute_are_recognised() -> None:
    from superopt.substitutions.strengthen import elementwise_everywhere, untested_reason

    t4 = TensorType((2, 4))
    dist = parse_rule("d: (ewmul (ewadd ?x1 ?x2) ?x3) <=> (ewadd (ewmul ?x1 ?x3) (ewmul ?x2 ?x3))")
    assert elementwise_everywhere(dist)
    assert untested_reason(dist, {"x1": t4, "x2": t4, "x3": t4})
    # a target reading fewer variables has another output shape once they broadcast
    fewer = parse_rule("f: (relu (ewadd ?x1 ?x2)) => (relu ?x1)")
    assert not elementwise_everywhere(fewer)
    # ... and each output's sides must read the same ones
    crossed = parse_rule("c: (relu ?x1) ; (relu ?x2) => (relu ?x2) ; (relu ?x1)")
    assert not elementwise_everywhere(crossed)
    matmul = parse_rule("m: (smul (matmul ?x1 ?w1) ?s0) <=> (matmul ?x1 (smul ?w1 ?s0))")
    assert not elementwise_everywhere(matmul)
    assert not untested_reason(matmul, {"x1": t4, "w1": TensorType((4, 4)),
                                        "s0": TensorType(())})
    # pinned: every source variable to the shape it was checked at, as a top-level conjunct
    pin = "shape(?x1) == (2, 4) and shape(?w1) == (4, 4) and shape(?s0) == ()"
    found = {"x1": t4, "w1": TensorType((4, 4)), "s0": TensorType(())}
    assert untested_reason(replace(matmul, condition=pin), found)
    assert not untested_reason(replace(matmul, condition=pin.rsplit(" and ", 1)[0]), found)
    assert not untested_reason(replace(matmul, condition=pin), {**found, "x1": TensorType((3, 4))})
    assert not untested_reason(replace(matmul, condition=pin.replace(" and ", " or ")), found)


def test_elementwise_rules_hold_at_every_shape() -> None:
    """The claim that lets the generator skip them: elementwise rules reading the same
    variables on both sides are not refuted at other (broadcast) shapes."""
    from superopt.substitutions.strengthen import elementwise_everywhere
    from superopt.verifier.sampler import random_test

    res = generate(make_config("linear", max_ops=3, ops=["ewadd", "ewmul", "relu", "smul"]),
                   sample_check=False)
    rules = [r for r in res.rules if elementwise_everywhere(r)]
    assert len(rules) >= 20
    shapes: set[tuple[int, ...]] = set()
    for r in random.Random(5).sample(rules, 16):
        report = random_test(r, samples=6, seed=7, budget_s=3.0,
                             on_instance=lambda inst, _: shapes.update(
                                 t.shape for t in inst.types.values()))
        assert report.counterexample is None, format_rule(r)
        assert report.instances > 0
    assert any(len(s) != 2 for s in shapes)  # not only the generator's 2-D shapes


def test_pinned_rules_are_sampled_only_at_their_pins(conv3_pinned: GenerateResult) -> None:
    """The claim that lets the generator skip them: the tester draws no other shapes."""
    from superopt.substitutions.strengthen import untested_reason
    from superopt.verifier.sampler import random_test

    def drawn(rule) -> list[dict[str, tuple[int, ...]]]:
        seen: list[dict[str, tuple[int, ...]]] = []
        report = random_test(rule, samples=4, seed=1, budget_s=3.0,
                             on_instance=lambda inst, _: seen.append(
                                 {k: t.shape for k, t in inst.types.items()}))
        assert report.counterexample is None
        return seen

    pinned = [r for r in conv3_pinned.rules if untested_reason(r, _types(r)).startswith("pin")]
    assert pinned
    for r in pinned[:3]:  # (their 5x5 images are beyond the sampler's dims: it draws none)
        assert all(s == {k: t.shape for k, t in _types(r).items()} for s in drawn(r))
    rule = parse_rule("m: (smul (matmul ?x1 ?w1) ?s0) => (matmul ?x1 (smul ?w1 ?s0)) if "
                      "shape(?x1) == (2, 4) and shape(?w1) == (4, 3) and shape(?s0) == ()")
    seen = drawn(rule)
    assert seen and all(s == {"x1": (2, 4), "w1": (4, 3), "s0": ()} for s in seen)


def test_a_rank_two_rule_is_strengthened_not_dropped() -> None:
    from superopt.substitutions.strengthen import counterexample, strengthen

    rule = parse_rule("r: (split.0 1 {[dim(?w2,1), dim(?w3,1)]} (matmul ?w1 (concat 1 ?w2 ?w3)))"
                      " => (matmul ?w1 ?w2)")
    found = {v: TensorType((4, 4)) for v in ("w1", "w2", "w3")}
    assert check_rule(rule, found)  # holds where it was found ...
    assert counterexample(rule)  # ... not for batched matmul (concat axis 1 is not the last)
    out = strengthen(rule, found)
    assert out.level == "rank" and out.rule is not None
    assert "rank(?w1) == 2" in (out.rule.condition or "")
    assert not counterexample(out.rule, seeds=(5,))


def test_a_rule_only_its_source_types_at_other_ranks_gets_its_ranks_and_is_proved() -> None:
    # Found on 2-D weights; stated for every rank, it matches batched matmuls where its
    # target cannot be built. No shapes refute it: it gets the ranks it was found at.
    from superopt.substitutions.strengthen import TYPING, strengthen
    from superopt.verifier.axioms import builtin_axioms
    from superopt.verifier.prover import PROVED, Prover, VerifyOptions
    from superopt.verifier.sampler import random_test

    rule = parse_rule("r: (concat 0 (matmul ?w1 (matmul ?w2 ?w1)) (matmul ?w2 ?w1)) <=> "
                      "(matmul (concat 0 (matmul ?w1 ?w2) ?w2) ?w1)")
    found = {"w1": TensorType((4, 4)), "w2": TensorType((4, 4))}
    prover = Prover(builtin_axioms(), VerifyOptions(timeout_s=10, samples=6))
    assert any(random_test(rule, seed=s).source_only for s in (0, 1))  # the gap exists
    out = strengthen(rule, found)
    assert out.level == TYPING and out.rule is not None
    assert "rank(?w1) == 2" in (out.rule.condition or "") and "target does" in out.counterexample
    assert not any(random_test(out.rule, seed=s).source_only for s in (0, 1, 2))
    assert prover.verify(out.rule).state == PROVED
    # A gap the ranks do not close (a kernel larger than the 3 x 3 it is enlarged to) is
    # the target's typing alone: the rule stays as general as it was, not pinned.
    enl = parse_rule("e: (relu (conv2d [1,1] same [1,1] 1 none ?x (relu ?w))) <=> "
                     "(conv2d [1,1] same [1,1] 1 relu ?x (relu (enlarge 3 3 ?w)))")
    out = strengthen(enl, {"x": TensorType((2, 4, 5, 5)), "w": TensorType((4, 4, 3, 1))})
    assert out.level == "" and out.rule == enl


# ---- pruning by derivation (generate --prune-derived) ------------------------------------

_PRUNE_OPS = ["ewadd", "ewmul", "concat2d_0", "concat2d_1", "split_0", "split_1"]
_DERIVED = "3-op rules derived by smaller ones (pruned before their test)"


def test_prune_derived_leaves_out_only_rules_the_kept_smaller_ones_derive(tmp_path: Path) -> None:
    from superopt.substitutions.covers import Budget, check, compile_library

    cfg = make_config("taso", max_ops=3, ops=_PRUNE_OPS, max_outputs=1)
    full = generate(cfg)
    pruned = generate(cfg, prune_derived=True, workdir=tmp_path / "wd")
    n = pruned.stages[_DERIVED]
    assert n > 0
    # The same rules with the same tested conditions, less exactly the derived ones.
    kept, every = _texts(pruned), _texts(full)
    assert kept <= every and len(every) - len(kept) == n
    # Each rule left out is derived, at the shapes it was found at, by the kept rules of
    # fewer ops (with ewadd/ewmul commutativity, which the generator never states).
    smaller = compile_library([r for r in pruned.rules if max(r.size) < 3], commutative=True)
    dropped = [r for r in full.rules if format_rule(r).split(": ", 1)[1] not in kept]
    assert len(dropped) == n
    assert all(check(smaller, r, Budget(2000, 5.0, 12), count=1).verdict == "covered"
               for r in dropped)
    # Resumed from its work directory (a verdict line cut short by a kill is ignored), the
    # run checks nothing again and writes the same library.
    log = tmp_path / "wd" / "derived.jsonl"
    lines = log.read_text().splitlines()
    assert len(lines) == sum(1 for r in full.rules if max(r.size) >= 3)
    log.write_text("\n".join(lines) + '\n{"k": 3, "verd')
    again = generate(cfg, prune_derived=True, workdir=tmp_path / "wd")
    assert _texts(again) == kept and again.stages[_DERIVED] == n
    assert log.read_text().count("\n") == len(lines) + 1  # nothing appended but a newline


def test_cli_generate_prune_derived(tmp_path: Path, capsys) -> None:
    out = tmp_path / "lib.json"
    assert main(["generate", "--preset", "taso", "--max-ops", "2", "--prune-derived",
                 "--out", str(out), "--quiet"]) == 0
    lib = load_library(out)
    assert lib and json.loads(out.read_text())["meta"]["stages"].get(
        "2-op rules derived by smaller ones (pruned before their test)") is not None
    # Without the test at other shapes there is nothing to prune by: refused, nothing written.
    other = tmp_path / "other.json"
    assert main(["generate", "--max-ops", "2", "--prune-derived", "--no-verify",
                 "--out", str(other), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--no-verify" in err[0] and not other.exists()


def test_prune_derived_is_on_by_default_from_four_ops() -> None:
    from superopt.cli import PRUNE_DERIVED_FROM, prune_derived_default
    from superopt.ir.errors import IRError

    assert PRUNE_DERIVED_FROM == 4
    assert prune_derived_default(4, False, None) and not prune_derived_default(3, False, None)
    assert not prune_derived_default(4, True, None)  # --no-verify: nothing to prune by
    assert not prune_derived_default(4, False, False)  # --no-prune-derived
    assert prune_derived_default(2, False, True)
    with pytest.raises(IRError, match="--no-verify"):
        prune_derived_default(4, True, True)
