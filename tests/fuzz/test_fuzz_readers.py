"""Every reader against byte-level mutations of real files (graph JSON and its .npz, an
ONNX light model, rule text, a rule library, Tensat's equations, TASO's .pb, a tuner
records database) and against hypothesis-built documents: each case must read or raise
the project's IRError; any other exception fails the test with the case that caused it."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from fuzz_corpus import TALLY, mutate, mutate_json_number, read_verdict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KINDS = ("graph", "weights", "rules", "library", "onnx", "tensat", "pb", "records")
# The default run keeps a sample (about 2 s); -m slow runs thousands.
DEFAULT_CASES = {"onnx": 25, "records": 40}
SLOW_CASES = 2000


def _fuzz(kind: str, seeds: dict[str, Path], work: Path, cases: int, salt: str = "") -> None:
    """Mutate the seed file of `kind` `cases` times, beside copies of the other seed
    files (a graph finds its weights by name), and read each with the kind's reader."""
    failures = []
    source = seeds[kind]
    data = source.read_bytes()
    for i in range(cases):
        rng = random.Random(f"{kind}:{salt}:{i}")
        folder = work / f"{kind}_{i}"
        folder.mkdir()
        for f in seeds.values():
            shutil.copy(f, folder / f.name)
        target = folder / source.name
        structured = kind in ("graph", "library") and rng.random() < 0.5
        target.write_bytes(mutate_json_number(data, rng) if structured else mutate(data, rng))
        read_from = folder / seeds["graph"].name if kind == "weights" else None
        verdict = read_verdict(kind, target, read_from)
        TALLY.cases += 1
        if verdict.startswith("TRACEBACK"):
            TALLY.tracebacks += 1
            failures.append(f"case {kind}:{salt}:{i}: {verdict}")
        shutil.rmtree(folder)
    assert not failures, "\n".join(failures[:10])


@pytest.mark.parametrize("kind", KINDS)
def test_readers_survive_mutated_files(kind: str, seeds: dict[str, Path],
                                       tmp_path: Path) -> None:
    _fuzz(kind, seeds, tmp_path, DEFAULT_CASES.get(kind, 80))


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_readers_survive_thousands_of_mutated_files(kind: str, seeds: dict[str, Path],
                                                    tmp_path: Path) -> None:
    _fuzz(kind, seeds, tmp_path, SLOW_CASES, salt="slow")


# ---- hypothesis: structured documents -----------------------------------------------

JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                        st.floats(allow_nan=False), st.text(max_size=8))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12)


def _paths(doc: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _replace(doc: object, path: tuple, value: object) -> object:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: _replace(doc[head], rest, value)}
    assert isinstance(doc, list)
    return [_replace(v, rest, value) if i == head else v for i, v in enumerate(doc)]


def _check_graph_doc(seeds: dict[str, Path], data: st.DataObject) -> None:
    from superopt.ir.errors import IRError
    from superopt.ir.serialize import from_json

    doc = json.loads(seeds["graph"].read_text())
    doc.pop("weights_file", None)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(doc)))
        doc = _replace(doc, path, data.draw(JSON_VALUES))
    TALLY.cases += 1
    try:
        from_json(doc, source="fuzz.json")
    except IRError:
        pass


def _check_rule_text(text: str) -> None:
    from superopt.ir.errors import IRError
    from superopt.substitutions.text import parse_rules

    TALLY.cases += 1
    try:
        parse_rules(text, "fuzz.rules")
    except IRError:
        pass


RULE_TOKENS = st.sampled_from(["(", ")", " ", "?x", "?y", "?c", "=>", "<=>", ";", "if", "r:",
                               "ewadd", "matmul", "conv2d", "relu", "transpose", "concat",
                               "split", "smul", "none", "1", "-1", "[0,1]", "[-1,0]", "2.5",
                               "1e400", "same", "#", "\n", "true", "pool2d_avg", "reshape"])
RULE_TEXT = st.lists(RULE_TOKENS, min_size=1, max_size=40).map("".join)
FEW = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
MANY = settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))


@FEW
@given(data=st.data())
def test_graph_documents_from_hypothesis(seeds: dict[str, Path], data: st.DataObject) -> None:
    _check_graph_doc(seeds, data)


@FEW
@given(text=RULE_TEXT)
def test_rule_text_from_hypothesis(text: str) -> None:
    _check_rule_text("r: " + text)


@pytest.mark.slow
@MANY
@given(data=st.data())
def test_many_graph_documents_from_hypothesis(seeds: dict[str, Path],
                                              data: st.DataObject) -> None:
    _check_graph_doc(seeds, data)


@pytest.mark.slow
@MANY
@given(text=RULE_TEXT)
def test_many_rule_texts_from_hypothesis(text: str) -> None:
    _check_rule_text("r: " + text)
