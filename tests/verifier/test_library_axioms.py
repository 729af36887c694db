"""Library rules as axioms: computed attributes on the matched side are usable, and a
direction that cannot be used is reported, never dropped silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superopt.cli import main
from superopt.substitutions import parse_rules
from superopt.verifier.axioms import axioms_from_rules, compile_axioms

# A generated rule as the generator writes it: conv2d's groups is computed from the
# operand shapes on both sides, so either side used as a trigger holds a computed value.
RELU_CONV = ("relu_conv: (relu (conv2d padding=same groups={dim(?i,1) // dim(?w,1)} ?i ?w)) "
             "<=> (conv2d padding=same groups={dim(?i,1) // dim(?w,1)} activation=relu ?i ?w)")
# Its instance at TASO's shapes (groups = 1, the default, written as a constant here).
FUSED = ("fused: (relu (conv2d padding=same ?x ?k)) => (conv2d padding=same activation=relu "
         "?x ?k) if shape(?x) == (2, 4, 5, 5) and shape(?k) == (4, 4, 3, 3)")
UNFUSED = ("unfused: (conv2d padding=same activation=relu ?x ?k) => (relu (conv2d "
           "padding=same ?x ?k)) if shape(?x) == (2, 4, 5, 5) and shape(?k) == (4, 4, 3, 3)")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPEROPT_CACHE_DIR", str(tmp_path / "cache"))


def test_computed_attribute_in_a_trigger_compiles_both_directions() -> None:
    compiled, skipped = compile_axioms(axioms_from_rules(parse_rules(RELU_CONV), "lib"))
    assert skipped == []
    assert sorted(q.direction for q in compiled) == ["<=", "=>"]


def test_a_bare_variable_trigger_is_still_skipped() -> None:
    rules = parse_rules("tt: (transpose [1,0] (transpose [1,0] ?x)) <=> ?x")
    _, skipped = compile_axioms(axioms_from_rules(rules, "lib"))
    assert [(name, d) for name, d, _ in skipped] == [("tt", "<=")]


def test_library_rule_with_computed_groups_proves_its_instances(tmp_path: Path) -> None:
    lib = tmp_path / "lib.rules"
    lib.write_text(RELU_CONV + "\n")
    rules = tmp_path / "r.rules"
    rules.write_text(FUSED + "\n" + UNFUSED + "\n")
    out = tmp_path / "out.json"
    main(["verify", "--no-builtin-axioms", "--axioms", str(lib), "--jobs", "1",
          "--samples", "3", "--axiom-samples", "3", "--json", str(out), str(rules)])
    doc = json.loads(out.read_text())
    states = {r["name"]: (r["state"], r["axioms"]) for r in doc["rules"]}
    assert states == {"fused": ("proved", ["relu_conv"]), "unfused": ("proved", ["relu_conv"])}


def test_an_unusable_direction_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lib = tmp_path / "lib.rules"
    lib.write_text(RELU_CONV + "\ntt: (transpose [1,0] (transpose [1,0] ?x)) <=> ?x\n")
    rules = tmp_path / "r.rules"
    rules.write_text(FUSED + "\n")
    out = tmp_path / "out.json"
    main(["verify", "--no-builtin-axioms", "--axioms", str(lib), "--jobs", "1",
          "--samples", "3", "--axiom-samples", "3", "--json", str(out), str(rules)])
    text = " ".join(capsys.readouterr().out.split())
    assert "tt (<=): not used as an axiom" in text
    assert any("tt (<=)" in n for n in json.loads(out.read_text())["axioms"]["notes"])
