"""Ground shape facts made from a per-op template (tensor arguments substituted into the
facts of the op applied to placeholders) are the very terms a direct build makes, for
every op application in the built-in axioms, the starter library, taso_like and a sample
of Tensat's TASO equations at TASO's shapes."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from superopt.rewrite import starter_rules
from superopt.substitutions.readers import read_any
from superopt.substitutions.text import read_rules
from superopt.verifier.axioms import builtin_axioms
from superopt.verifier.encoding import encode_rule
from superopt.verifier.prover import at_source_shapes
from superopt.verifier.shapes import (
    _from_template,
    _general_ground,
    _ground_facts,
    env,
    general_ground,
    subterms,
)
from superopt.verifier.zvalues import Unsupported

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def _rules() -> list:
    rules = [a.rule for a in builtin_axioms()] + list(starter_rules())
    rules += read_rules(DATA / "taso_like.rules")
    tensat = read_any(DATA / "tensat_taso_rules.txt", [])
    rules += [at_source_shapes(r)[0] for r in tensat[::7]] + tensat[::29]
    return rules


@lru_cache(maxsize=2)
def _terms(per_key: int | None) -> list:
    """Op applications of those rules, at most `per_key` of each function symbol."""
    e = env()
    seen: dict[int, object] = {}
    count: dict[object, int] = {}
    for k, rule in enumerate(_rules()):
        try:
            g = encode_rule(rule, e, prefix=f"tmpl{k}:")
        except Unsupported:
            continue
        for t in subterms(e, [*g.sources, *g.targets]):
            key = e.key_of(t)
            if key is None or t.get_id() in seen:
                continue
            if per_key is None or count.get(key, 0) < per_key:
                count[key] = count.get(key, 0) + 1
                seen[t.get_id()] = t
    return list(seen.values())


@pytest.mark.parametrize("sampling", [False, True])
@pytest.mark.parametrize("per_key", [
    3, pytest.param(None, marks=pytest.mark.slow)])  # every term: 80 s
def test_template_facts_are_the_direct_facts(sampling: bool, per_key: int | None) -> None:
    e = env()
    terms = _terms(per_key)
    ops = {e.key_of(t)[0] for t in terms}
    assert len(terms) > 100 and {"conv2d", "matmul", "concat", "const_iconv"} <= ops
    for t in terms:
        direct = _ground_facts(e, t, sampling)
        made = _from_template(e, t, sampling)
        assert len(made) == len(direct), t
        for a, b in zip(made, direct, strict=True):
            assert a.eq(b), (t, a, b)


def test_general_facts_are_the_direct_facts() -> None:
    e = env()
    for t in _terms(3):
        made, direct = general_ground(e, t), _general_ground(e, t)
        assert len(made) == len(direct) and all(a.eq(b) for a, b in zip(made, direct,
                                                                          strict=True))
