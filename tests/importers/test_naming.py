"""Unique source names shared by the ONNX and torch importers."""

from __future__ import annotations

from superopt.importers.naming import UniqueNames


def test_claim_numbers_repeats_and_respects_reserved_names() -> None:
    names = UniqueNames()
    names.reserve("x")
    assert "x" in names and "w" not in names
    assert [names.claim("w"), names.claim("w"), names.claim("x"), names.claim("w")] == \
        ["w", "w#2", "x#2", "w#3"]
    names.reserve("b#2")
    assert names.claim("b") == "b" and names.claim("b") == "b#3"
