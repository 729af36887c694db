"""The rule model, the text format (exact round trip, located errors) and JSON libraries."""

from __future__ import annotations

import json

import pytest

from superopt.ir import TensorType
from superopt.substitutions import (
    AVar,
    LibraryError,
    PNode,
    ProofStatus,
    RuleSyntaxError,
    differs,
    format_rules,
    load_library,
    parse_rule,
    parse_rules,
    save_library,
)

T = TensorType

TEXT = """\
# a comment line
mm_concat: (matmul ?x (concat 1 ?y ?z)) => (concat 1 (matmul ?x ?y) (matmul ?x ?z))
comm: (ewadd ?x ?y) <=> (ewadd ?y ?x)  # trailing comment
fuse: (relu (conv2d ?s ?p ?x ?w)) => (conv2d stride=?s padding=?p activation=relu ?x ?w)
merge: (matmul ?x ?y) ; (matmul ?x ?z) => (split.0 1 {[dim(?y,1), dim(?z,1)]} (matmul ?x (concat 1 ?y ?z))) ; (split.1 1 {[dim(?y,1), dim(?z,1)]} (matmul ?x (concat 1 ?y ?z))) if rank(?x) == 2
tt: (transpose [1,0] (transpose [1,0] ?x)) => ?x
"""


def test_canonical_text_round_trips_exactly() -> None:
    rules = parse_rules(TEXT)
    assert [r.name for r in rules] == ["mm_concat", "comm", "fuse", "merge", "tt"]
    canonical = format_rules(rules)
    assert parse_rules(canonical) == rules
    assert format_rules(parse_rules(canonical)) == canonical
    body = [ln.split("#")[0].rstrip() for ln in TEXT.splitlines() if ln and not ln.startswith("#")]
    assert canonical.splitlines() == body  # the hand-written lines are already canonical


def test_structure_of_parsed_rules() -> None:
    rules = {r.name: r for r in parse_rules(TEXT)}
    fuse = rules["fuse"]
    conv = fuse.source[0].children[0]
    assert isinstance(conv, PNode) and conv.attr("stride") == AVar("s")
    assert set(fuse.attr_vars()) == {"s", "p"}
    assert rules["merge"].outputs == 2 and rules["merge"].condition == "rank(?x) == 2"
    assert rules["comm"].bidirectional
    assert rules["tt"].size == (2, 0)


def test_rules_hold_on_random_exact_inputs_and_false_ones_do_not() -> None:
    rules = {r.name: r for r in parse_rules(TEXT)}
    types = {"x": T((2, 4)), "y": T((4, 3)), "z": T((4, 5))}
    assert differs(rules["mm_concat"], types) is None
    assert differs(rules["merge"], types) is None
    assert differs(rules["tt"], {"x": T((3, 2))}) is None
    assert differs(rules["fuse"], {"x": T((1, 2, 5, 5)), "w": T((3, 2, 3, 3))},
                   {"s": (1, 1), "p": "same"}) is None
    wrong = parse_rule("bad: (matmul ?x (concat 1 ?y ?z)) => (concat 1 (matmul ?x ?z) (matmul ?x ?y))")
    assert differs(wrong, {"x": T((2, 4)), "y": T((4, 3)), "z": T((4, 3))}) is not None


@pytest.mark.parametrize("line,col,msg", [
    ("r: (matmul ?x ?y) => (matmal ?x ?y)", 23, "unknown op 'matmal'"),
    ("r: (matmul ?x ?y) => (matmul ?x", 23, "unclosed '(' of matmul"),
    ("r: (matmul ?x ?y) (relu ?x)", 3, "source => target"),
    ("r: (matmul ?x ?y) => (relu ?z)", 3, "does not bind"),
    ("r: (concat 1 ?x) => (concat axis=1 axis=2 ?x)", 36, "given twice"),
    ("r: (relu ?x) => (relu bogus=1 ?x)", 18, "no attribute 'bogus'"),
    ("r: (matmul swish ?x ?y) => (matmul ?x ?y)", 5, "activation"),
    ("r: (relu ?x) => (relu ?x) if import(os)", 30, "bad expression"),
    ("r: (relu ?x) => (relu ?x) $", 27, "unexpected character"),
])
def test_syntax_errors_name_line_and_column(line: str, col: int, msg: str) -> None:
    text = "ok: (relu ?x) => (relu ?x)\n" + line + "\n"
    with pytest.raises(RuleSyntaxError) as e:
        parse_rules(text, "lib.rules")
    assert e.value.line == 2, str(e.value)
    assert e.value.col == col, str(e.value)
    assert msg in str(e.value) and str(e.value).startswith("lib.rules:2:")


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(RuleSyntaxError, match="already used on line 1"):
        parse_rules("a: (relu ?x) => (relu ?x)\na: (tanh ?x) => (tanh ?x)\n")


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_library_round_trip_with_status_and_provenance(tmp_path, suffix: str) -> None:
    from dataclasses import replace

    rules = parse_rules(TEXT)
    rules[0] = replace(rules[0], provenance={"generator": "taso", "size": 3, "fingerprint": "ab"},
                       status=ProofStatus("proved", axioms=("mm_concat_axiom",), time_s=0.01))
    rules[1] = rules[1].with_status(ProofStatus("refuted", counterexample={"x": [1, 2]}))
    path = save_library(rules, tmp_path / f"lib{suffix}", meta={"preset": "test"})
    lib = load_library(path)
    assert list(lib.rules) == rules
    assert lib.meta["preset"] == "test"


def test_library_errors(tmp_path) -> None:
    path = save_library(parse_rules(TEXT), tmp_path / "lib.json")
    doc = json.loads(path.read_text())
    doc["rules"][2]["rule"] = "fuse: (relu (conv2d ?s ?p ?x ?w)) => (conv9 ?x)"
    path.write_text(json.dumps(doc))
    with pytest.raises(LibraryError, match="rule 2: .*unknown op 'conv9'"):
        load_library(path)
    doc["rules"] = doc["rules"][:2]
    path.write_text(json.dumps(doc))
    with pytest.raises(LibraryError, match="truncated"):
        load_library(path)
    path.write_text("{")
    with pytest.raises(LibraryError, match="lib.json:1:2: invalid JSON"):
        load_library(path)
