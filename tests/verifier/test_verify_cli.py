"""`superopt verify`: exit statuses, JSON and library output, axiom libraries, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superopt.cli import main
from superopt.substitutions import load_library, parse_rules, save_library
from superopt.verifier.axioms import builtin_axioms

LIB = """\
a_comm: (ewadd ?x ?y) => (ewadd ?y ?x)
a_assoc: (ewadd ?x (ewadd ?y ?z)) <=> (ewadd (ewadd ?x ?y) ?z)
m_comm: (ewmul ?x ?y) => (ewmul ?y ?x)
"""
TRUE = """\
rot: (ewadd ?x (ewadd ?y ?z)) => (ewadd ?z (ewadd ?x ?y))
pair: (ewadd (ewadd ?x ?y) ?z) => (ewadd ?y (ewadd ?x ?z))
"""
FALSE = "wrong: (ewadd (ewmul ?x ?y) ?z) => (ewmul (ewadd ?x ?y) ?z)\n"
NOT_IMPLIED = "fac: (ewadd (ewmul ?x ?y) (ewmul ?x ?z)) => (ewmul ?x (ewadd ?y ?z))\n"


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPEROPT_CACHE_DIR", str(tmp_path / "cache"))


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _verify(tmp_path: Path, *args: str) -> int:
    lib = _write(tmp_path, "lib.rules", LIB)
    return main(["verify", "--no-builtin-axioms", "--axioms", lib, "--jobs", "1",
                 "--samples", "6", "--axiom-samples", "3", *args])


def test_proves_true_rules_and_writes_json(tmp_path: Path, capsys) -> None:
    rules = _write(tmp_path, "true.rules", TRUE)
    out = tmp_path / "out.json"
    assert _verify(tmp_path, rules, "--json", str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["summary"]["proved"] == 2 and doc["summary"]["refuted"] == 0
    assert {r["name"]: r["state"] for r in doc["rules"]} == {"rot": "proved", "pair": "proved"}
    assert set(doc["rules"][0]["axioms"]) <= {"a_comm", "a_assoc"}
    assert doc["readers"] in (["text"], ["readers.read_any"])
    text = capsys.readouterr().out
    assert "superopt verify" in text and "slowest" in text


def test_refuted_rule_fails_the_run(tmp_path: Path, capsys) -> None:
    rules = _write(tmp_path, "mixed.rules", TRUE + FALSE)
    out = tmp_path / "out.json"
    assert _verify(tmp_path, rules, "--json", str(out)) == 1
    doc = json.loads(out.read_text())
    wrong = next(r for r in doc["rules"] if r["name"] == "wrong")
    assert wrong["state"] == "refuted" and wrong["counterexample"]["shapes"]
    assert "REFUTED" in capsys.readouterr().out


def test_unknown_fails_only_with_strict(tmp_path: Path) -> None:
    rules = _write(tmp_path, "unknown.rules", NOT_IMPLIED)
    assert _verify(tmp_path, rules) == 0
    assert _verify(tmp_path, rules, "--strict") == 1


def test_malformed_file_names_line_and_column_and_reports_nothing(tmp_path: Path,
                                                                   capsys) -> None:
    good = _write(tmp_path, "good.rules", TRUE)
    bad = _write(tmp_path, "bad.rules", "ok: (relu ?x) => (relu ?x)\nr: (matmul ?x ?y) => "
                                        "(matmal ?x ?y)\n")
    out = tmp_path / "out.json"
    assert _verify(tmp_path, good, bad, "--json", str(out)) == 2
    captured = capsys.readouterr()
    assert f"{bad}:2:23" in captured.err and "unknown op 'matmal'" in captured.err
    assert not out.exists() and "proved" not in captured.out


def test_missing_file_is_an_input_error(tmp_path: Path, capsys) -> None:
    assert _verify(tmp_path, str(tmp_path / "nope.rules")) == 2
    assert "nope.rules" in capsys.readouterr().err


def test_check_axioms_prints_a_table_and_stops_on_an_unsound_axiom(tmp_path: Path,
                                                                    capsys) -> None:
    assert _verify(tmp_path, "--check-axioms") == 0
    assert "a_assoc" in capsys.readouterr().out
    bad = _write(tmp_path, "bad_lib.rules", "additive_relu: (relu (ewadd ?x ?y)) => "
                                            "(ewadd (relu ?x) (relu ?y))\n")
    rules = _write(tmp_path, "true.rules", TRUE)
    out = tmp_path / "out.json"
    code = main(["verify", "--axioms", bad, "--no-builtin-axioms", "--jobs", "1",
                 "--axiom-samples", "3", rules, "--json", str(out)])
    assert code == 3 and not out.exists()
    assert "FAILED" in capsys.readouterr().out


def test_partial_library_rules_are_used_only_where_both_sides_type_check(tmp_path: Path,
                                                                         capsys) -> None:
    lib = _write(tmp_path, "partial.rules", LIB + "tt: (matmul ?x ?y) => (transpose [1,0] "
                 "(matmul (transpose [1,0] ?y) (transpose [1,0] ?x)))\n")
    rules = _write(tmp_path, "true.rules", TRUE)
    assert main(["verify", "--axioms", lib, "--no-builtin-axioms", "--jobs", "1",
                 "--axiom-samples", "3", "--samples", "4", rules]) == 0
    assert "partial" in capsys.readouterr().out


def test_json_library_in_library_with_status_out(tmp_path: Path) -> None:
    src = save_library(parse_rules(TRUE + NOT_IMPLIED), tmp_path / "in.json")
    out = tmp_path / "verified.json"
    assert _verify(tmp_path, str(src), "--save", str(out)) == 0
    lib = load_library(out).by_name()
    assert lib["rot"].status.state == "proved" and lib["rot"].status.axioms
    assert lib["fac"].status.state == "unknown" and lib["fac"].status.reason


def test_a_library_rule_is_not_its_own_proof(tmp_path: Path) -> None:
    # m_comm is in the library; checking the library against itself asks whether the
    # *other* rules imply it (TASO's redundancy check): they do not.
    rules = _write(tmp_path, "lib_again.rules", LIB)
    out = tmp_path / "out.json"
    assert _verify(tmp_path, rules, "--json", str(out)) == 0
    states = {r["name"]: r["state"] for r in json.loads(out.read_text())["rules"]}
    assert states == {"a_comm": "unknown", "a_assoc": "unknown", "m_comm": "unknown"}


def test_list_axioms_prints_the_builtin_library(capsys) -> None:
    assert main(["verify", "--list-axioms"]) == 0
    printed = parse_rules(capsys.readouterr().out)
    assert [r.name for r in printed] == [a.name for a in builtin_axioms()]


def test_no_files_is_an_input_error(capsys) -> None:
    assert main(["verify"]) == 2


def test_restarts_must_be_positive_and_stop_at_saturation(tmp_path: Path, capsys) -> None:
    rules = _write(tmp_path, "unknown.rules", NOT_IMPLIED)
    assert _verify(tmp_path, rules, "--restarts", "0") == 2
    assert "--restarts must be >= 1" in capsys.readouterr().err
    out = tmp_path / "out.json"
    assert _verify(tmp_path, rules, "--restarts", "3", "--json", str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["options"]["restarts"] == 3
    # Saturated E-matching is not a timeout: another seed would not change the answer.
    assert "not implied" in doc["rules"][0]["reason"]


@pytest.mark.slow
def test_taso_like_library_with_builtin_axioms(tmp_path: Path) -> None:
    rules = Path(__file__).parents[2] / "benchmarks" / "data" / "taso_like.rules"
    out = tmp_path / "out.json"
    assert main(["verify", str(rules), "--jobs", "2", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["summary"]["proved"] == doc["summary"]["rules"]


def test_dask_executor_gives_the_same_outcomes_as_the_process_pool(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    rules = _write(tmp_path, "mixed.rules", TRUE + FALSE)
    outcomes = []
    for executor in ("process", "dask"):
        out = tmp_path / f"{executor}.json"
        lib = _write(tmp_path, "lib.rules", LIB)
        code = main(["verify", "--no-builtin-axioms", "--axioms", lib, "--jobs", "2",
                     "--samples", "6", "--axiom-samples", "3", "--no-cache",
                     "--executor", executor, rules, "--json", str(out)])
        assert code == 1  # `wrong` is refuted either way
        doc = json.loads(out.read_text())
        outcomes.append({r["name"]: r["state"] for r in doc["rules"]})
    assert outcomes[0] == outcomes[1] == {"rot": "proved", "pair": "proved", "wrong": "refuted"}


def test_unknown_executor_is_an_input_error(tmp_path: Path, capsys) -> None:
    rules = _write(tmp_path, "true.rules", TRUE)
    assert _verify(tmp_path, rules, "--executor", "threads") == 2
    err = capsys.readouterr().err
    assert "unknown executor 'threads'" in err and err.count("\n") == 1


# About two minutes (Z3 at symbolic shapes, twice): slow. The prover's generalisation is
# in the default run (test_soundness: TASO's true rules proved and generalised).
@pytest.mark.slow
def test_generalise_reports_the_shapes_a_verdict_holds_for(tmp_path: Path) -> None:
    eqs = _write(tmp_path, "eqs.txt", "ewadd(input_1,input_2)==ewadd(input_2,input_1)"
                                      "relu(conv2d(1,1,0,0,input_7,input_10))=="
                                      "conv2d(1,1,0,2,input_7,input_10)")
    out = tmp_path / "out.json"
    assert main(["verify", "--jobs", "1", "--samples", "4", eqs, "--json", str(out)]) == 0
    at = [r["verdict_shapes"] for r in json.loads(out.read_text())["rules"]]
    assert all(w.startswith("at TASO's input shapes") for w in at)
    assert main(["verify", "--jobs", "1", "--samples", "4", "--generalise", eqs,
                 "--json", str(out)]) == 0
    rules = json.loads(out.read_text())["rules"]
    assert [r["state"] for r in rules] == ["proved", "proved"]
    assert "generalised" in rules[0]["verdict_shapes"]
    assert "rank(?input_7) == 4" in rules[1]["verdict_shapes"]


def test_a_checkpointed_run_resumes_without_verifying_finished_rules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from superopt.verifier import prover

    rules = _write(tmp_path, "mixed.rules", TRUE + FALSE + NOT_IMPLIED)
    real = prover._verify_task
    calls: list[int] = []

    def counted(task, stop_after=None):
        if len(calls) == stop_after:
            raise KeyboardInterrupt  # Ctrl-C during the third rule
        calls.append(task[0])
        return real(task)

    whole = tmp_path / "whole.json"
    assert _verify(tmp_path, rules, "--json", str(whole)) == 1  # one rule is refuted
    ckpt, out = tmp_path / "v.ckpt.jsonl", tmp_path / "v.json"
    monkeypatch.setattr(prover, "_verify_task", lambda t: counted(t, stop_after=2))
    assert _verify(tmp_path, rules, "--checkpoint", str(ckpt), "--json", str(out)) == 130
    assert not out.exists() and len(ckpt.read_text().splitlines()) == 2
    calls.clear()
    monkeypatch.setattr(prover, "_verify_task", counted)
    assert _verify(tmp_path, rules, "--checkpoint", str(ckpt), "--json", str(out)) == 1
    assert calls == [2, 3]  # only the rules the interrupted run had not finished

    def verdicts(path: Path) -> list[tuple[str, str, str, object]]:
        return [(r["name"], r["state"], r["reason"], r["counterexample"])
                for r in json.loads(path.read_text())["rules"]]

    assert verdicts(out) == verdicts(whole)
    calls.clear()  # other settings: nothing of the checkpoint applies
    assert _verify(tmp_path, rules, "--checkpoint", str(ckpt), "--seed", "7") == 1
    assert calls == [0, 1, 2, 3]


# ---- nesting 10,000 levels deep (issue 46) ----------------------------------------------

DEEP = 10_000


def _deep_pb() -> bytes:
    from superopt.substitutions.taso_pb import OP, PbOperator, PbRule, PbTensor, encode_rules

    chain = [PbOperator(OP["OP_RELU"], [PbTensor(-1, 0)])] + [
        PbOperator(OP["OP_RELU"], [PbTensor(k, 0)]) for k in range(DEEP - 1)]
    return encode_rules([PbRule(src=chain, dst=[PbOperator(OP["OP_RELU"], [PbTensor(-1, 0)])],
                                mapped=[(DEEP - 1, 0, 0, 0)])])


@pytest.mark.parametrize(("name", "text", "where"), [
    ("deep.rules", "ok: (relu ?x) => (relu ?x)\nr: " + "(relu " * DEEP + "?x" + ")" * DEEP
     + " => (relu ?x)\n", ":2:"),
    ("deep_attr.rules", "r: (transpose perm=" + "[" * DEEP + "]" * DEEP + " ?x) => ?x\n",
     ":1:"),
    ("deep_cond.rules", "r: (relu ?x) => (relu ?x) if " + "not " * DEEP + "true\n", ":1:"),
    ("tensat_equations.txt", "relu(input_1)==relu(input_1)\n" + "relu(" * DEEP + "input_1"
     + ")" * DEEP + "==relu(input_1)\n", ":2:"),
    ("tensat_rules.txt", "(relu ?input_1)=>(relu ?input_1)\n" + "(relu " * DEEP
     + "?input_1" + ")" * DEEP + "=>(relu ?input_1)\n", ":2:"),
    ("deep.json", '{"schema": "superopt.rules",\n "rules": ' + "[" * DEEP + "]" * DEEP + "}",
     ":2:"),
    ("deep.jsonl", '{"schema": "superopt.rules", "version": 1}\n' + "[" * DEEP + "]" * DEEP
     + "\n", ":2:"),
    ("graph_subst.pb", None, ": rule 0 srcOp op 200:"),
])
def test_deeply_nested_files_are_one_line_input_errors(tmp_path: Path, capsys, name: str,
                                                       text: str | None, where: str) -> None:
    """Every reader bounds its recursion: a file nested 10,000 levels deep is exit 2 with
    one line naming the file and where, never a RecursionError traceback."""
    p = tmp_path / name
    if text is None:
        p.write_bytes(_deep_pb())
    else:
        p.write_text(text)
    assert main(["verify", "--jobs", "1", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err[-2000:]
    assert f"{p}{where}" in err, err
    assert "deeper than" in err or "nested too deeply" in err, err
    assert "Traceback" not in err and "RecursionError" not in err


def test_nesting_within_the_bound_is_read(tmp_path: Path) -> None:
    from superopt.ir.files import MAX_NESTING

    depth = MAX_NESTING - 1
    p = _write(tmp_path, "ok.rules", "r: " + "(relu " * depth + "?x" + ")" * depth
               + " => (relu ?x)\n")
    assert len(parse_rules(Path(p).read_text(), p)) == 1
