"""The PET pipeline on a small model and the `superopt mutants` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superopt.cli import main
from superopt.ir import Graph, GraphBuilder, save
from superopt.mutants.boxtest import exhaustive_equal
from superopt.mutants.search import Settings, search_model
from superopt.substitutions.library import load_library


@pytest.fixture()
def model() -> Graph:
    b = GraphBuilder("tiny")
    x = b.input("image", (1, 4, 12, 12))
    y = b.conv2d(x, b.weight("c1", (4, 4, 3, 3)), padding=(2, 2, 2, 2), dilation=(2, 2))
    y = b.relu(b.ewadd(y, b.weight("b1", (1, 4, 1, 1))))
    a = b.relu(b.conv2d(y, b.weight("c2", (4, 4, 3, 3)), padding=(1, 1, 1, 1)))
    c = b.relu(b.conv2d(y, b.weight("c3", (2, 4, 1, 1))))
    return b.build([a, c])


FAST = Settings(dfs_states=300, dfs_seconds=1.0, max_box_tests=25)


def test_search_model_keeps_exactly_corrected_mutants(model: Graph) -> None:
    report = search_model(model, FAST, use_sim=True)
    kinds = sorted(s.sub.kind for s in report.subprograms)
    assert kinds.count("merged") == 1 and len(kinds) == 4
    kept = [r for s in report.subprograms for r in s.results]
    assert kept and any(not r.fully_equivalent for r in kept)
    for r in kept:
        assert r.equal_fraction >= FAST.min_equal
        assert r.corrected.check.fully_equivalent
        assert all(e.all() for e in exhaustive_equal(r.corrected.original,
                                                     r.corrected.corrected, draws=1))
        assert r.rule.kind == "pet"
        if report.simulator:
            assert r.sim_original is not None and r.sim_corrected is not None
    dilated = next(s for s in report.subprograms if any(
        n.op == "conv2d" and n.attr("dilation") == (2, 2) for n in s.sub.graph.nodes))
    assert "dilated_to_regular" in {r.family for r in dilated.results}
    summary = report.summary()
    assert summary["mutants"] == len(kept)
    json.dumps(summary, default=str)


def test_cli_mutants_writes_rules_and_report(model: Graph, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = save(model, tmp_path / "tiny.json")
    out, rep = tmp_path / "pet_rules.json", tmp_path / "report.json"
    rc = main(["mutants", str(path), "--dfs-states", "200", "--dfs-seconds", "1", "--limit", "2",
               "--out", str(out), "--json", str(rep)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "PET mutants of tiny" in text and "partially equivalent" in text
    lib = load_library(out)
    assert len(lib) > 0 and all(r.kind == "pet" for r in lib.rules)
    doc = json.loads(rep.read_text())
    assert doc["reports"][0]["subprograms"] == 2
    assert doc["reports"][0]["totals"]["mutants"] == len(lib)


def test_cli_mutants_help_and_bad_model() -> None:
    with pytest.raises(SystemExit) as e:
        main(["mutants", "--help"])
    assert e.value.code == 0
    assert main(["mutants", "no_such_model"]) == 2


@pytest.mark.slow
def test_csrnet_dilated_backend_gets_corrected_deinterleaving_mutants() -> None:
    from superopt.importers import load_model

    g = load_model("csrnet", 1)
    report = search_model(g, Settings(dfs_states=500, dfs_seconds=1.0, max_box_tests=20))
    dilated = [s for s in report.subprograms if any(
        n.op == "conv2d" and n.attr("dilation") == (2, 2) for n in s.sub.graph.nodes)]
    assert len(dilated) == 4  # back end: 512->512 (x2 sites), 512->256, 256->128, 128->64
    for s in dilated:
        fams = {r.family: r for r in s.results}
        assert "dilated_to_regular" in fams and "dilated_to_batch" in fams
        r = fams["dilated_to_regular"]
        # 28x28 maps: rows and columns 1 and 26 are wrong (as {1, 12} on 14x14)
        assert r.equal_fraction == pytest.approx(1 - (4 * 28 - 4) / 784)
        assert r.corrected.check.fully_equivalent
        assert fams["dilated_to_batch"].fully_equivalent
