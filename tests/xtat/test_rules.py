"""The rewrite pass's rule sources: only proved or exactly corrected rules unless asked,
the shipped verified starter library in step with starter.rules, certificates, and the
per-decision explanation."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from superopt.ir.errors import IRError
from superopt.rewrite import (
    GROUPS,
    RUNTIME,
    STARTER,
    group_rules,
    library_rules,
    starter_rules,
    verified_group_rules,
    verified_starter_rules,
)
from superopt.substitutions.library import save_library
from superopt.substitutions.rule import ProofStatus
from superopt.substitutions.text import format_rule
from superopt.xtat import explain
from superopt.xtat.rules import certificate, rule_set, unusable
from superopt.xtat.session import open_session
from superopt.xtat.space import PassConfig


@pytest.mark.parametrize(("source", "written", "shipped"), [
    (STARTER, starter_rules, verified_starter_rules),
    (GROUPS, group_rules, verified_group_rules),
    (RUNTIME, lambda: library_rules("runtime"), lambda: library_rules("runtime", True))],
    ids=["starter", "groups", "runtime"])
def test_verified_library_is_in_step_with_its_rules(source: Path, written: Any,
                                                    shipped: Any) -> None:
    # Editing a .rules file without re-running `superopt verify ... --save` must fail here.
    text = {r.name: format_rule(r) for r in written()}
    verified = {r.name: r for r in shipped()}
    assert set(text) == set(verified), f"re-verify {source}"
    for name, r in verified.items():
        assert format_rule(r) == text[name], f"{name} changed since it was verified"
        assert r.status.state == "proved" and r.status.axioms


def test_onnxruntime_targets_add_the_group_merges_and_the_runtime_rules() -> None:
    from superopt.xtat.targets import TARGETS

    assert TARGETS["cpu"].rules == ("starter", "groups", "runtime") == TARGETS["cuda"].rules
    assert TARGETS["tpu-v4"].rules == ("starter",) == TARGETS["torch-cpu"].rules
    merges = {r.name for r in rule_set(list(TARGETS["cpu"].rules)).rules}
    assert {"group_conv_merge2", "group_conv_merge4", "flatten_layer_norm3",
            "fold_conv_bn"} <= merges
    assert not {"group_conv_merge2", "group_conv_merge4", "flatten_layer_norm3"} & {
        r.name for r in rule_set(None).rules}


def _library(tmp_path: Path) -> Path:
    base = starter_rules()[:4]
    rules = [replace(base[0], status=ProofStatus("proved", axioms=("a",))),
             replace(base[1], status=ProofStatus("unverified")),
             replace(base[2], status=ProofStatus("refuted", counterexample={"x": 1})),
             replace(base[3], status=ProofStatus("unknown", reason="timeout", timeout_s=1.0))]
    path = tmp_path / "lib.json"
    save_library(rules, path)
    return path


def test_only_proved_rules_unless_allowed(tmp_path: Path) -> None:
    path = str(_library(tmp_path))
    strict = rule_set([path])
    assert len(strict.rules) == 1 and strict.rules[0].status.state == "proved"
    assert strict.excluded == {"unverified": 1, "refuted": 1, "unknown": 1}
    loose = rule_set([path], allow_unproved=True)
    assert {r.status.state for r in loose.rules} == {"proved", "unverified", "unknown"}
    assert loose.excluded == {"refuted": 1}  # never a refuted rule


def test_exactly_corrected_pet_rules_are_usable() -> None:
    r = starter_rules()[0]
    pet = replace(r, kind="pet", status=ProofStatus("unverified"),
                  provenance={"corrected_check": {"fully_equivalent": True}})
    assert unusable(pet) is None
    wrong = replace(pet, provenance={"corrected_check": {"fully_equivalent": False}})
    assert unusable(wrong) == "unverified"


def test_missing_rule_source_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(IRError, match="no such rule file"):
        rule_set([str(tmp_path / "none.rules")])
    # A mistyped library name is told the names there are.
    with pytest.raises(IRError, match="nor a shipped library: starter, groups, runtime"):
        rule_set(["runtimee"])
    with pytest.raises(IRError, match="is a directory"):
        rule_set([str(tmp_path)])


def test_certificate_names_status_and_axioms() -> None:
    rules = verified_starter_rules()
    name = rules[0].name
    cert = certificate(rules, [name, f"{name}~rev", "no_such_rule"])
    assert cert[0]["status"] == "proved" and cert[0]["axioms"] == list(rules[0].status.axioms)
    assert cert[1]["rule"] == f"{name}~rev" and cert[1]["status"] == "proved"
    assert cert[2]["status"] == "unknown rule"


def test_decision_gains_are_single_reverts() -> None:
    from superopt.xtat.tuner import Tuner, make_schedule

    s = open_session({"model": "squeezenet"})
    r = Tuner(s.pipeline, s.runner, s.default, seed=2).run(make_schedule("joint"), 60)
    items = explain.decisions(s.pipeline, s.runner, r.best)
    assert len(items) == sum(len(c) for c in r.best.configs)
    base = s.runner.time(r.best)
    for d in items[:6]:
        j = r.best.names.index(d.pass_name)
        configs = list(r.best.configs)
        configs[j] = PassConfig.of({k: v for k, v in configs[j].items() if k != d.key})
        again = s.pipeline.build(r.best, configs)
        assert math.isclose(s.runner.time(again) - base, d.gain_s, rel_tol=1e-9, abs_tol=1e-15)
    per_pass = explain.passes(s.pipeline, s.runner, r.best)
    assert {k: v[0] for k, v in per_pass.items()} == r.best.changed()
