"""Regression tests for the failures listed in issue 16: each malformed file or option value
that once raised a traceback (or was accepted silently) now gives the one-line error, exit
status 2, naming the file and the problem, and leaves no output file behind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from superopt.cli import main
from superopt.ir import GraphBuilder, save

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture()
def graph_file(tmp_path: Path) -> Path:
    b = GraphBuilder("small")
    x = b.input("x", (2, 4))
    w = b.weight("w", (4, 4), data=np.arange(16.0).reshape(4, 4) / 10)
    return save(b.build([b.relu(b.matmul(x, w))]), tmp_path / "small.json")


def _edit(path: Path, name: str, change: dict[str, object] | None = None,
          text: str | None = None) -> Path:
    doc = json.loads(path.read_text())
    doc.update(change or {})
    out = path.with_name(name)
    out.write_text(text if text is not None else json.dumps(doc))
    return out


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("superopt"), err
    for needle in needles:
        assert needle in err[0], err
    return err[0]


def _with_shape(path: Path, name: str, shape: object) -> Path:
    doc = json.loads(path.read_text())
    doc["nodes"][0]["attrs"]["shape"] = shape
    out = path.with_name(name)
    out.write_text(json.dumps(doc).replace("Infinity", "1e400"))
    return out


def test_graph_files_that_raised_tracebacks(graph_file: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad = graph_file.with_name("latin1.json")
    bad.write_bytes(b'{"name": "caf\xe9"}')
    _one_line_error(["show", str(bad)], capsys, "latin1.json:1:14", "not UTF-8")
    out_index = _edit(graph_file, "out.json", {"outputs": [[3, 5]]})
    _one_line_error(["show", str(out_index)], capsys, "out.json", "outputs", "output 0")
    huge = _with_shape(graph_file, "huge.json", [float("inf"), 4])
    _one_line_error(["show", str(huge)], capsys, "huge.json", "node 0", "whole numbers")
    nan = graph_file.with_name("nan.json")
    nan.write_text(graph_file.read_text().replace('"shape": [\n     2', '"shape": [\n     NaN'))
    _one_line_error(["show", str(nan)], capsys, "nan.json", "NaN")
    up = _edit(graph_file, "up.json", {"weights_file": "../../../etc"})
    _one_line_error(["show", str(up)], capsys, "up.json", "same folder")
    absolute = _edit(graph_file, "abs.json", {"weights_file": "/etc/passwd"})
    _one_line_error(["show", str(absolute)], capsys, "abs.json", "same folder")
    none = _edit(graph_file, "none.json", {"outputs": []})
    _one_line_error(["run", str(none)], capsys, "none.json", "no outputs")


def test_fractional_zero_and_negative_dimensions_are_refused(
        graph_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, shape in (("frac", [2.5, 4]), ("zero", [0, 4]), ("neg", [-2, 4]),
                        ("bool", [True, 4]), ("text", "2x4")):
        path = _with_shape(graph_file, f"{name}.json", shape)
        _one_line_error(["show", str(path)], capsys, f"{name}.json", "node 0")


def test_corrupt_truncated_and_foreign_weight_files(graph_file: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = graph_file.with_name("small.weights.npz").read_bytes()
    folder = graph_file.parent
    (folder / "cut.npz").write_bytes(data[: len(data) // 2])
    (folder / "junk.npz").write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    np.savez(folder / "text.npz", w=np.array([["a"] * 4] * 4))
    np.save(folder / "plain.npy", np.zeros((4, 4)))
    # Flag bit 5 ("compressed patched data") in the central directory: zipfile raises
    # NotImplementedError, which escaped as a traceback (found by the -m slow fuzz run).
    central = data.index(b"PK\x01\x02") + 8
    (folder / "patched.npz").write_bytes(data[:central] + bytes([data[central] | 0x20])
                                          + data[central + 1:])
    for weights in ("cut.npz", "junk.npz", "text.npz", "plain.npy", "missing.npz",
                    "patched.npz"):
        path = _edit(graph_file, f"g_{weights}.json", {"weights_file": weights})
        _one_line_error(["run", str(path), "--backend", "reference"], capsys, weights)


def test_rule_files_that_raised_tracebacks(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           graph_file: Path) -> None:
    junk_json = tmp_path / "junk.json"
    junk_json.write_bytes(b"\xff\xfe\x00junk")
    _one_line_error(["verify", str(junk_json)], capsys, "junk.json", "not UTF-8")
    ok = tmp_path / "ok.rules"
    ok.write_text("c: (ewadd ?x ?y) => (ewadd ?y ?x)\n")
    _one_line_error(["verify", str(ok), "--axioms", str(junk_json)], capsys, "junk.json")
    _one_line_error(["optimize", str(graph_file), "--rules", str(junk_json)], capsys,
                    "junk.json")
    latin = tmp_path / "latin.rules"
    latin.write_bytes(b"r: (relu ?x) => ?x # caf\xe9\n")
    # Not "unsupported wire type": a .rules file is text, whatever its bytes.
    _one_line_error(["verify", str(latin)], capsys, "latin.rules:1:", "not UTF-8")
    deep = tmp_path / "deep.rules"
    deep.write_text("r: " + "(" * 200_000 + "relu ?x" + ")" * 200_000 + " => ?x\n")
    _one_line_error(["verify", str(deep)], capsys, "deep.rules:1:")
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000)
    _one_line_error(["verify", str(nested)], capsys, "nested.json")


def test_optimize_reads_taso_pb_rules(graph_file: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    pb = Path(__file__).parents[1] / "substitutions" / "fixtures" / "taso_graph_subst.pb"
    assert main(["optimize", str(graph_file), "--rules", str(pb), "--repeats", "0",
                 "--budget", "2"]) == 0
    assert "rules from" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["optimize", "G", "--threads", "-1"], "--threads must be >= 0"),
    (["run", "G", "--device", "tpu"], "--device"),
    (["verify", "R", "--timeout", "0"], "--timeout must be > 0"),
    (["verify", "R", "--timeout", "nan"], "finite"),
    (["run", "G", "--batch", "0"], "--batch must be >= 1"),
    (["show", "G", "--max-nodes", "-1"], "--max-nodes must be >= 0"),
    (["show", "G", "--max-nodes", "2.5"], "whole number"),
    (["optimize", "G", "--budget", "1" + "0" * 30], "--budget must be"),
    (["generate", "--workers", "100000"], "--workers must be"),
    (["mutants", "G", "--min-equal", "1.5"], "--min-equal must be"),
])
def test_bad_option_values_are_one_line_errors(argv: list[str], needle: str, graph_file: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(graph_file) if a == "G" else str(graph_file.with_name("r.rules")) if a == "R"
            else a for a in argv]
    _one_line_error(argv, capsys, needle)


def test_output_paths_are_checked_before_any_work(graph_file: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "no" / "such" / "x.json")
    rules = tmp_path / "ok.rules"
    rules.write_text("c: (ewadd ?x ?y) => (ewadd ?y ?x)\n")
    for argv in (["optimize", str(graph_file), "--out", missing],
                 ["generate", "--out", missing], ["generate", "--text", missing],
                 ["verify", str(rules), "--json", missing], ["verify", str(rules), "--save", missing],
                 ["show", str(graph_file), "--save", missing],
                 ["mutants", str(graph_file), "--out", missing],
                 ["mutants", str(graph_file), "--json", missing]):
        _one_line_error(argv, capsys, "no such folder")
    _one_line_error(["verify", str(rules), "--json", str(tmp_path)], capsys, "is a directory")
    _one_line_error(["generate", "--workdir", str(rules)], capsys, "is a file")
    assert not (tmp_path / "no").exists()


def test_a_graph_output_without_a_known_suffix_is_refused_before_the_run(
        graph_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The suffix picks the format: without one, a whole tuning run used to end in a
    # traceback at the save.
    for argv in (["optimize", str(graph_file), "--out", str(tmp_path / "tuned")],
                 ["tune", str(graph_file), "--out", str(tmp_path / "tuned.txt")]):
        _one_line_error(argv, capsys, "unknown graph format")
    assert not list(tmp_path.glob("tuned*"))


def test_a_graph_too_large_for_memory_is_refused_with_the_figure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = GraphBuilder("big")
    x = b.input("x", (100_000, 100_000, 1000))
    path = save(b.build([b.relu(x)]), tmp_path / "big.json")
    err = _one_line_error(["run", str(path), "--backend", "reference"], capsys, "TiB")
    assert "available" in err


def _nan_graph(tmp_path: Path) -> Path:
    b = GraphBuilder("nan")
    x = b.input("x", (2, 4))
    data = np.arange(16.0).reshape(4, 4)
    data[0, 0], data[1, 1] = np.nan, np.inf
    return save(b.build([b.matmul(x, b.weight("w", (4, 4), data=data))]), tmp_path / "nan.json")


def test_nan_outputs_are_not_a_clean_match(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(_nan_graph(tmp_path)), "--repeats", "1", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    assert "warning" in out and "NaN or inf" in out


def test_check_values_fails_on_nan_where_the_original_is_finite() -> None:
    from superopt.rewrite.check import check_values

    b = GraphBuilder("g")
    x = b.input("x", (2, 4))
    before = b.build([b.relu(x)])
    b2 = GraphBuilder("g")
    x2 = b2.input("x", (2, 4))
    bad = np.full((4, 4), np.nan)
    after = b2.build([b2.matmul(x2, b2.weight("w", (4, 4), data=bad))])
    check = check_values(before, after)
    assert not check.ok and "NaN/inf" in check.problem
    same = check_values(after, after)
    assert same.ok and "warning" in same.problem


def test_optimize_never_saves_a_result_whose_values_differ(
        graph_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = tmp_path / "wrong.rules"
    wrong.write_text("drop_relu: (relu ?x) => ?x\n")
    out, figures = tmp_path / "o.json", tmp_path / "f.json"
    argv = ["optimize", str(graph_file), "--rules", str(wrong), "--repeats", "0",
            "--cost", "flops", "--out", str(out), "--json", str(figures)]
    assert main(argv) == 1
    assert "VALUES DIFFER" in capsys.readouterr().out
    assert not out.exists() and json.loads(figures.read_text())["values"] == "differ"
    assert main([*argv, "--keep-different"]) == 1
    assert out.exists() and json.loads(figures.read_text())["kept_different"] is True


def test_an_op_of_neither_language_in_a_tensat_file_fails_verify(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A mutated 'matmul' read as an op superopt lacks gave an "unknown" verdict and exit 0.
    eqs = tmp_path / "eqs.txt"
    eqs.write_text("relu(relu(input_1))==relu(input_1)\nmadmul(input_1,input_2)==input_1\n")
    assert main(["verify", str(eqs), "--jobs", "1", "--samples", "2", "--timeout", "2"]) == 1
    assert "unknown op 'madmul'" in capsys.readouterr().out


def test_a_records_database_with_a_corrupt_header_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import random

    from fuzz_corpus import mutate, records_db

    # The -m slow fuzz case that raised UnicodeDecodeError from sqlite's first statement.
    db = records_db(tmp_path)
    db.write_bytes(mutate(db.read_bytes(), random.Random("records:slow:1298")))
    _one_line_error(["tune", "--replay", str(db)], capsys, db.name)
