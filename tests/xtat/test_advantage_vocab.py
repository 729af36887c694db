"""The advantage model's feature vocabulary is frozen with the shipped model, so adding an
op to the registry neither voids the model nor breaks feature extraction."""

from __future__ import annotations

import json

from superopt.ir.opdef import OPS, TRAITS, get_op
from superopt.xtat.advantage import FEATURES, SCHEMA, SHIPPED, VOCAB, _vocab


def test_shipped_model_matches_the_frozen_vocabulary() -> None:
    doc = json.loads(SHIPPED.read_text())
    assert doc["schema"] == SCHEMA
    assert doc["features"] == len(FEATURES)


def test_vocabulary_names_real_ops_and_traits() -> None:
    ops, traits = _vocab()
    assert set(ops) <= set(OPS), sorted(set(ops) - set(OPS))
    assert set(traits) <= TRAITS
    assert json.loads(VOCAB.read_text())["ops"] == list(ops)


def test_ops_outside_the_vocabulary_are_seen_through_their_traits() -> None:
    from superopt.xtat.advantage import FlipFeatures

    ops, traits = _vocab()
    outside = sorted(set(OPS) - set(ops))
    assert outside, "every op has a column: this test needs an op added after training"
    f = object.__new__(FlipFeatures)  # only the vocabulary part of the extractor
    f.ops, f.traits = ops, traits
    f.op_col = {o: i for i, o in enumerate(ops)}
    for name in outside:
        row = f._op_part(name)
        assert len(row) == len(ops) + len(traits) + 1
        assert not any(row[:len(ops)]), name  # no op column of its own
        want = [1.0 if get_op(name).has(t) else 0.0 for t in traits]
        assert row[len(ops):len(ops) + len(traits)] == want, name
    inside = f._op_part("relu")
    assert inside[ops.index("relu")] == 1.0
