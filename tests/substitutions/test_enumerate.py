"""The enumerator: batched mod-p kernels agree with the IR, terms are complete and unique,
fingerprints separate, split boundaries, shards resume."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from superopt.ir import GraphBuilder, interpret
from superopt.ir.kernels import P
from superopt.substitutions.enumerate import TermTable, plan_shards, split_info_of
from superopt.substitutions.fingerprint import hash_rows, random_inputs, resolve
from superopt.substitutions.generator import GenerateError, generate
from superopt.substitutions.presets import (
    GeneratorConfigError,
    InputSpec,
    make_config,
    parse_inputs,
    standard_templates,
)


@pytest.fixture(scope="module")
def taso_table() -> TermTable:
    """All TASO-preset terms of up to two ops (the table of a size-3 run)."""
    return TermTable(make_config("taso", max_ops=3), 2)


def _graph(table: TermTable, t: int):
    """Rebuild term t as an IR graph over inputs named as the generator's."""
    b = GraphBuilder(f"term{t}")
    memo: dict[int, object] = {}

    def build(u: int):
        if u in memo:
            return memo[u]
        if u < table.n_inputs:
            spec = table.cfg.inputs[u]
            v = b.input(spec.name, spec.shape)
        else:
            tmpl = table.templates[table.tmpl[u]]
            args = [a for a in (table.a0[u], table.a1[u]) if a >= 0][:tmpl.arity]
            mid = table.split[args[0]][tmpl.axis][-1] if tmpl.kind == "split" else None
            attrs, _ = resolve(tmpl, [table.shapes[table.group[a]] for a in args], mid)
            outs = b.add(tmpl.op, [build(a) for a in args], attrs)
            v = outs[table.out[u]]
        memo[u] = v
        return v

    return b.build([build(t)])


def test_batched_kernels_agree_with_the_ir_modp_interpreter(taso_table: TermTable) -> None:
    tab = taso_table
    by_template: dict[int, list[int]] = {}
    for t in range(tab.n_inputs, len(tab)):
        by_template.setdefault(tab.tmpl[t], []).append(t)
    # every template kind is exercised (a split below three ops always undoes its concat,
    # so it only occurs in the last level: see the next test)
    assert {tab.templates[k].kind for k in by_template} == {
        "matmul", "ew", "conv", "pool", "unary", "smul", "transpose", "concat", "enlarge",
        "const"}
    rng = np.random.default_rng(1)
    checked = 0
    for ts in by_template.values():
        sample = [ts[0], ts[-1], *rng.choice(ts, size=min(3, len(ts)), replace=False)]
        for t in {int(x) for x in sample}:
            g = _graph(tab, t)
            for s in range(tab.samples):
                feeds = {spec.name: tab.input_values[k][s] for k, spec in enumerate(tab.cfg.inputs)
                         if any(n.op == "input" and n.attr("name") == spec.name for n in g.nodes)}
                (want,) = interpret(g, feeds, "modp")
                got = tab.values[tab.group[t]][tab.row[t]][s]
                assert np.array_equal(got, want), (t, tab.templates[tab.tmpl[t]].key)
            checked += 1
    assert checked >= 40
    # Kept in 32 bits (half the 4-op run's peak memory): the equalities above are exact.
    assert {v.dtype for v in tab.values} == {np.dtype(np.int32)}


def test_batched_split_and_broadcast_operands_agree_with_the_ir() -> None:
    from superopt.substitutions.fingerprint import evaluate

    t = standard_templates()
    rng = np.random.default_rng(2)
    x = rng.integers(0, P, size=(3, 2, 7), dtype=np.int64)  # a batch of three
    attrs, outs = resolve(t["split_1"], [(2, 7)], 3)
    got = evaluate(t["split_1"], attrs, [x])
    assert [o.shape for o in got] == [(3, *outs[0]), (3, *outs[1])]
    for n in range(3):
        b = GraphBuilder()
        v = b.input("x", (2, 7))
        g = b.build(list(b.split(v, axis=1, sizes=(3, 4))))
        want = interpret(g, {"x": x[n]}, "modp")
        assert all(np.array_equal(got[k][n], want[k]) for k in (0, 1))
    # a conv whose weight is shared by the whole batch (leading axis 1)
    xs = rng.integers(0, P, size=(4, 2, 4, 5, 5), dtype=np.int64)
    w = rng.integers(0, P, size=(1, 4, 1, 3, 3), dtype=np.int64)
    attrs, _ = resolve(t["conv2d_relu"], [(2, 4, 5, 5), (4, 1, 3, 3)])
    (y,) = evaluate(t["conv2d_relu"], attrs, [xs, w])
    for n in range(4):
        b = GraphBuilder()
        g = b.build(b.conv2d(b.input("x", (2, 4, 5, 5)), b.input("w", (4, 1, 3, 3)), **attrs))
        (want,) = interpret(g, {"x": xs[n], "w": w[0]}, "modp")
        assert np.array_equal(y[n], want)


def test_terms_are_unique_and_counted_by_hand() -> None:
    cfg = make_config("taso", max_ops=2, ops=["matmul", "ewadd"],
                      inputs="x1:2x4,x2:2x4,w1:4x4")
    tab = TermTable(cfg, 1)
    kinds = Counter(tab.templates[tab.tmpl[t]].key for t in range(tab.n_inputs, len(tab)))
    # matmul: left in {x1, x2} (w1 @ w1 repeats an operand), right w1: 2.
    # ewadd: unordered pairs of equal shapes: {x1, x2}: 1.
    assert kinds == Counter({"matmul": 2, "ewadd": 1})
    units, shards = plan_shards(tab, 2)
    # size-2 terms: distinct (template, operands) everywhere
    from superopt.substitutions.enumerate import run_shard

    parts = [run_shard(tab, units, sh, 2) for sh in shards]
    keys = [(int(t), int(a), int(b), int(o)) for p in parts
            for t, a, b, o in zip(p["tmpl"], p["a0"], p["a1"], p["out"], strict=True)]
    assert len(keys) == len(set(keys)) > 0
    # ewadd(x1, x2) + x-something: ewadd of a size-1 term with an input of its shape, each
    # unordered pair once
    ew = [k for k in keys if tab.templates[k[0]].key == "ewadd"]
    assert all(k[1] < k[2] for k in ew)


def test_fingerprint_separates_values_and_shapes() -> None:
    a = np.arange(8, dtype=np.int64).reshape(1, 2, 4)
    b = a.copy()
    b[0, 1, 3] += 1
    h_a, h_b = hash_rows(a), hash_rows(b)
    assert (h_a[0][0], h_a[1][0]) != (h_b[0][0], h_b[1][0])
    assert hash_rows(a.copy())[0][0] == h_a[0][0]
    reshaped = a.reshape(1, 4, 2)
    assert hash_rows(reshaped)[0][0] != h_a[0][0]  # the shape is part of the fingerprint


def test_random_inputs_put_a_negative_and_a_positive_element_in_every_input() -> None:
    xs = random_inputs([(), (2, 4)], seed=3, samples=2)
    for x in xs:
        flat = x.reshape(2, -1)
        assert flat[0, 0] > P // 2 and 0 < flat[1, 0] <= P // 2
    # so relu never fixes an input, not even the scalar
    from superopt.ir.modp import relu

    assert all(not np.array_equal(relu(x), x) for x in xs)


def test_split_undoes_the_last_concat_on_its_axis() -> None:
    t = standard_templates()
    cat = t["concat2d_1"]
    info = split_info_of(cat, {}, [((), (2,)), ((), ())], [(2, 4), (2, 3)], 0)
    assert info == ((), (2, 4))  # x's own boundary, then the new one at 4
    split = t["split_1"]
    assert split_info_of(split, {}, [info], [(2, 7)], 0) == ((), (2,))
    assert split_info_of(split, {}, [info], [(2, 7)], 1) == ((), ())


def test_stored_split_outputs_of_different_shapes_are_one_node() -> None:
    """With four ops, splits reach the stored levels; their outputs differ in shape."""
    cfg = make_config("small", max_ops=4, ops=["concat2d_0", "split_0", "relu"],
                      inputs="x1:2x4,w1:4x4")
    tab = TermTable(cfg, 3)
    splits = [t for t in range(len(tab)) if tab.tmpl[t] >= 0
              and tab.templates[tab.tmpl[t]].kind == "split"]
    assert splits
    for t in splits:
        sib = [u for u in splits if (tab.tmpl[u], tab.a0[u]) == (tab.tmpl[t], tab.a0[t])]
        assert len(sib) == 2 and tab.node[sib[0]] == tab.node[sib[1]] == min(sib)
        assert set(sib) <= set(tab.dag[t])  # both outputs are tensors of t's graph
    shapes = {tab.shapes[tab.group[t]] for t in splits}
    assert {(2, 4), (4, 4)} <= shapes


def test_config_errors_are_clear() -> None:
    with pytest.raises(GeneratorConfigError, match="unknown preset"):
        make_config("nope")
    with pytest.raises(GeneratorConfigError, match="unknown op or template 'conv3d'"):
        make_config("taso", ops=["conv3d"])
    with pytest.raises(GeneratorConfigError, match="bad input spec"):
        parse_inputs("x1=2x4")
    assert parse_inputs("x1:2x4,w1:4x4,s0:scalar,z:3:weight") == (
        InputSpec("x1", (2, 4), "data"), InputSpec("w1", (4, 4), "weight"),
        InputSpec("s0", (), "scalar"), InputSpec("z", (3,), "weight"))


def test_shards_resume_from_the_work_directory(tmp_path) -> None:
    cfg = make_config("small", max_ops=2)
    first = generate(cfg, workdir=tmp_path, verify=False)
    shards = sorted(tmp_path.glob("shard-*.npz"))
    assert len(shards) == first.info["shards"] > 1
    shards[0].unlink()  # as if the run had been stopped before this shard
    (tmp_path / "checked.json").unlink()  # (so before the stages after enumeration)
    again = generate(cfg, workdir=tmp_path, verify=False)
    assert again.info["shards_resumed"] == first.info["shards"] - 1
    assert [r.source for r in again.rules] == [r.source for r in first.rules]
    assert again.stages == first.stages
    with pytest.raises(GenerateError, match="another run"):
        generate(make_config("small", max_ops=2, seed=5), workdir=tmp_path)


def test_parallel_shards_give_the_same_library() -> None:
    cfg = make_config("small", max_ops=3)
    one = generate(cfg, workers=1, sample_check=False)
    two = generate(cfg, workers=2, sample_check=False)
    assert [(r.source, r.target) for r in one.rules] == [(r.source, r.target) for r in two.rules]


@pytest.mark.parametrize("executor", ["process", "dask"])
def test_shards_on_an_executor_give_the_same_library_and_resume(tmp_path, executor: str) -> None:
    if executor == "dask":
        pytest.importorskip("distributed")
    cfg = make_config("small", max_ops=2)
    forked = generate(cfg, workers=1, sample_check=False)
    sent = generate(cfg, workers=2, workdir=tmp_path, sample_check=False, executor=executor)
    assert [(r.source, r.target) for r in sent.rules] == \
        [(r.source, r.target) for r in forked.rules]
    shards = sorted(tmp_path.glob("shard-*.npz"))  # saved by the caller as each arrived
    assert len(shards) == sent.info["shards"] > 1
    shards[-1].unlink()
    again = generate(cfg, workers=2, workdir=tmp_path, verify=False, executor=executor)
    assert again.info["shards_resumed"] == sent.info["shards"] - 1


def test_every_term_of_the_small_preset_is_enumerated_once() -> None:
    """Brute force: all (template, operands) tuples over terms of smaller size whose
    operator sets unite to size-1 nodes, against what the table holds at size 2."""
    cfg = make_config("small", max_ops=3)
    tab = TermTable(cfg, 2)
    got = {(tab.tmpl[t], tab.a0[t], tab.a1[t], tab.out[t]) for t in range(len(tab))
           if tab.size[t] == 2}
    pruned = tab.level_counts[2]["pruned_duplicate"] + tab.level_counts[2]["collapse"]
    size1 = [t for t in range(len(tab)) if tab.size[t] <= 1]
    expected = 0
    for k, tmpl in enumerate(tab.templates):
        if tmpl.arity == 0:
            continue
        combos = itertools.product(size1, repeat=tmpl.arity)
        for args in combos:
            if sum(1 for a in args if tab.size[a] == 1) == 0:
                continue
            nodes = set()
            for a in args:
                nodes.update(tab.opset[a])
            if len(nodes) != 1:
                continue
            if tmpl.arity == 2 and (args[0] == args[1]
                                    or (tmpl.commutative and args[0] > args[1])):
                continue
            shapes = [tab.shapes[tab.group[a]] for a in args]
            mid = None
            if tmpl.kind == "split":
                if not tab.split[args[0]][tmpl.axis]:
                    continue
                mid = tab.split[args[0]][tmpl.axis][-1]
            res = resolve(tmpl, shapes, mid)
            if res is None:
                continue
            expected += 1
            key = (k, args[0], args[1] if len(args) > 1 else -1)
            kept = {g for g in got if g[:3] == key}
            assert len(kept) in (0, len(res[1]))  # a node is kept with all its outputs
    assert expected == tab.level_counts[2]["evaluated"]
    assert len(got) == tab.level_counts[2]["clean_terms"]
    nodes_kept = len({k[:3] for k in got})
    # every evaluated node is kept, pruned as a duplicate, or collapses (a split node's two
    # outputs may both collapse, so collapses can outnumber their nodes)
    assert nodes_kept + tab.level_counts[2]["pruned_duplicate"] <= expected <= nodes_kept + pruned


def test_a_resumed_run_redoes_no_finished_stage(tmp_path, monkeypatch) -> None:
    """Stopped during the test at other shapes (most of a run's time), a run resumes with
    every earlier stage from the work directory and tests only the rules left."""
    from superopt.substitutions import generator, strengthen, termstore
    from superopt.substitutions.library import rule_to_json

    cfg = make_config("small", max_ops=2)  # 16 rules tested at other shapes
    real = strengthen.strengthen_task
    calls: list[str] = []

    def counted(task, stop_after=None):
        if stop_after is not None and len(calls) == stop_after:
            raise KeyboardInterrupt  # Ctrl-C while testing rule number stop_after + 1
        calls.append(task[0])
        return real(task)

    monkeypatch.setattr(strengthen, "strengthen_task", counted)
    whole = generate(cfg)
    tested = list(calls)
    assert len(tested) > 6
    calls.clear()
    monkeypatch.setattr(strengthen, "strengthen_task", lambda t: counted(t, stop_after=6))
    with pytest.raises(KeyboardInterrupt):
        generate(cfg, workdir=tmp_path)
    assert (tmp_path / generator.CHECKED_FILE).exists()
    assert len((tmp_path / generator.SHAPES_FILE).read_text().splitlines()) == 6

    def redone(*args, **kwargs):
        raise AssertionError("a finished stage was redone")

    calls.clear()
    monkeypatch.setattr(strengthen, "strengthen_task", counted)
    monkeypatch.setattr(termstore, "_single_output_candidates", redone)  # the bucket stage
    for stage in ("TermTable", "enumerate_last_level",
                  "_make_rule", "check_rule"):
        monkeypatch.setattr(generator, stage, redone)
    again = generate(cfg, workdir=tmp_path)
    assert len(calls) == len(tested) - 6 and not set(calls) & set(tested[:6])
    assert again.info["stages_resumed"] and again.info["shape_tests_resumed"] == 6
    assert [rule_to_json(r) for r in again.rules] == [rule_to_json(r) for r in whole.rules]
    assert again.stages == whole.stages
    calls.clear()
    generate(cfg, workdir=tmp_path)  # a finished run's work directory: nothing is redone
    assert calls == []
