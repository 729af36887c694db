"""JSON round-trip (with weight data), schema checks, and the text form."""

from __future__ import annotations

import json

import numpy as np
import pytest

from superopt.ir import GraphBuilder, GraphFileError, interpret, load, save, to_text
from superopt.ir.serialize import from_json, to_json


def _graph():
    b = GraphBuilder("demo")
    x = b.input("x", (1, 2, 4, 4))
    w = b.weight("w", (4, 2, 3, 3), data=np.arange(72.0).reshape(4, 2, 3, 3) / 100)
    y = b.conv2d(x, w, padding=(1, 1, 0, 2), stride=(1, 2), activation="relu")
    lo, hi = b.split(y, axis=1, sizes=(1, 3))
    return b.build([b.concat(hi, lo, axis=1), lo])


def test_round_trip_keeps_structure_weights_and_values(tmp_path) -> None:
    g = _graph()
    path = save(g, tmp_path / "g.json")
    assert (tmp_path / "g.weights.npz").exists()
    g2 = load(path)
    assert g2.structural_hash == g.structural_hash
    assert [n.key for n in g2.nodes] == [n.key for n in g.nodes]
    np.testing.assert_array_equal(g2.weights["w"], g.weights["w"])
    for a, b in zip(interpret(g), interpret(g2), strict=True):
        np.testing.assert_array_equal(a, b)
    doc = json.loads(path.read_text())
    assert doc["schema"] == "superopt.graph" and doc["version"] == 1


def test_bad_files_give_one_line_errors(tmp_path) -> None:
    with pytest.raises(GraphFileError, match="missing.json: cannot read"):
        load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "superopt.graph", "version": 1, "nodes": [')
    with pytest.raises(GraphFileError, match=r"bad.json:1:\d+: invalid JSON"):
        load(bad)
    doc = to_json(_graph())
    doc["version"] = 7
    with pytest.raises(GraphFileError, match="version 7"):
        from_json(doc, source="v.json")
    doc = to_json(_graph())
    doc["nodes"][2]["op"] = "conv3d"
    with pytest.raises(GraphFileError, match="node 2 .*unknown op 'conv3d'"):
        from_json(doc, source="x.json")
    doc = to_json(_graph())
    doc["nodes"][2]["inputs"] = [[0, 0]]
    with pytest.raises(GraphFileError, match="node 2 .*conv2d"):
        from_json(doc, source="x.json")
    doc = to_json(_graph())
    del doc["outputs"]
    with pytest.raises(GraphFileError, match="malformed"):
        from_json(doc)
    with pytest.raises(GraphFileError, match="not a superopt graph"):
        from_json([1, 2])


def test_text_form_shows_every_node() -> None:
    g = _graph()
    text = to_text(g)
    lines = text.splitlines()
    assert len(lines) == len(g) + 2
    assert "conv2d(%0, %1)" in text and "stride=(1,2)" in text and "activation=relu" in text
    assert "weight 'w' (data)" in text
    assert lines[-1].strip().startswith("return")


def test_a_graph_file_nested_10000_deep_is_a_positioned_one_line_error(tmp_path) -> None:
    p = tmp_path / "deep.json"
    p.write_text('{"schema": "superopt.graph",\n "nodes": ' + "[" * 10_000 + "]" * 10_000 + "}")
    with pytest.raises(GraphFileError, match=r"deep\.json:2:\d+: invalid JSON: nesting deeper"):
        load(p)
