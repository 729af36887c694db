"""Weight folding, cost functions, exact pricing of rewrites, value checks and timing."""

from __future__ import annotations

import numpy as np
import pytest

from superopt.ir import GraphBuilder, interpret, random_feeds
from superopt.ir import TensorType as T
from superopt.rewrite import Matcher, apply_sites, create_cost, fold_weights, starter_rules
from superopt.rewrite.check import check_values, time_side_by_side
from superopt.rewrite.cost import CostError, FlopsCost, OrtOpCost, TorchOpCost
from superopt.rewrite.effect import site_effect
from superopt.rewrite.fold import runtime_ops, weight_only


def _weight_math(with_data: bool):
    b = GraphBuilder("wm")
    x = b.input("x", (2, 4))
    rng = np.random.default_rng(0)
    w1 = b.weight("w1", (4, 3), data=rng.standard_normal((4, 3)) if with_data else None)
    w2 = b.weight("w2", (4, 3), data=rng.standard_normal((4, 3)) if with_data else None)
    w = b.concat(w1, b.relu(w2), axis=1)  # weight-only
    y = b.matmul(x, w)
    return b.build([y, b.transpose(w1, perm=(1, 0))])  # a weight-only output too


def test_fold_turns_weight_only_values_into_weights_with_equal_values() -> None:
    for with_data in (True, False):
        g = _weight_math(with_data)
        flags = weight_only(g)
        assert sum(flags) == 5  # w1, w2, relu, concat, transpose
        res = fold_weights(g)
        folded = res.graph
        folded.lint()
        assert res.folded == 2
        assert folded.op_histogram() == {"input": 1, "weight": 2, "matmul": 1}
        assert all(n.attr("name") in folded.weights for n in folded.weight_nodes)
        feeds = random_feeds(g, seed=3)
        for a, b in zip(interpret(g, feeds), interpret(folded, feeds), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)


def test_fold_without_materialising_keeps_ops_over_weights_without_data() -> None:
    g = _weight_math(with_data=False)
    res = fold_weights(g, materialize=False)
    assert res.folded == 0 and res.kept == 2 and res.graph is not None
    assert res.graph.op_histogram()["concat"] == 1
    # Structural folding (for costing): new weights, no data.
    s = fold_weights(g, evaluate=False).graph
    assert s.op_histogram()["concat"] == 0 and not s.weights


def test_foldable_hashes_keep_the_models_own_weight_math_in_a_rewritten_copy() -> None:
    from superopt.rewrite.fold import foldable_hashes

    g = _weight_math(with_data=True)
    skip = foldable_hashes(g)
    assert len(skip) == 2  # the concat and the transpose: the two foldable values
    # The same graph built again (as a rewrite's copy is) keeps both computed under the
    # skip, and folds both without it.
    again = _weight_math(with_data=True)
    kept = fold_weights(again, evaluate=False, skip=skip)
    assert kept.folded == 0 and kept.graph.op_histogram()["concat"] == 1
    assert fold_weights(again, evaluate=False).folded == 2


def test_costs_by_name_and_their_errors() -> None:
    assert create_cost("flops").name == "flops"
    assert create_cost("sim").name == "sim"
    # One op alone: its per-op simulated cost is the simulator's time of the graph.
    b = GraphBuilder("one")
    one = b.build([b.conv2d(b.input("x", (2, 8, 16, 16)), b.weight("w", (16, 8, 3, 3)))])
    assert create_cost("simop", hardware="v4").cost(one) == pytest.approx(
        create_cost("sim", hardware="v4").cost(one), rel=1e-12)
    with pytest.raises(CostError, match="unknown cost"):
        create_cost("nope")
    with pytest.raises(CostError, match="unexpected"):
        create_cost("flops", bogus=1)
    g = _weight_math(with_data=True)
    f = FlopsCost()
    # Only the matmul runs: weight-only ops are free (they fold away).
    assert f.cost(g) == pytest.approx(f.breakdown(g)["matmul"])
    assert FlopsCost(fold=False).cost(g) > f.cost(g)
    assert runtime_ops(g) == 1


def test_torch_cost_times_each_op_signature_once() -> None:
    b = GraphBuilder()
    x = b.input("x", (8, 16))
    y = b.relu(b.matmul(x, b.weight("w", (16, 16))))
    z = b.relu(b.matmul(y, b.weight("v", (16, 16))))
    g = b.build([z])
    c = TorchOpCost(samples=2, min_sample_s=2e-4)
    total = c.cost(g)
    assert total > 0 and c.cached == 2  # one matmul and one relu signature
    assert c.cost(g) == total  # cached: the same number again


class WeightAwareFlops(FlopsCost):
    """FlopsCost plus 1 us per weight input: prices differ with the weight flags."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, tuple[bool, ...]]] = []

    def measure(self, op, attrs, ins, outs, weights=()):  # type: ignore[no-untyped-def]
        self.seen.append((op, weights))
        return super().measure(op, attrs, ins, outs, weights) + 1e-6 * sum(weights)


def test_costs_are_told_which_inputs_are_weights() -> None:
    b = GraphBuilder("w")
    x = b.input("x", (4, 8))
    t = b.transpose(b.weight("w", (8, 8)), perm=(1, 0))  # weight-only: folded, a weight
    y = b.matmul(x, t)
    g = b.build([b.ewadd(y, x)])
    cost = WeightAwareFlops()
    cost.cost(g)
    assert sorted(cost.seen) == [("ewadd", ()), ("matmul", (False, True))]
    # Same op, attributes and types but other weight flags: a separate signature.
    b = GraphBuilder("a")
    x = b.input("x", (4, 8))
    g_act = b.build([b.matmul(x, b.input("y", (8, 8)))])
    b = GraphBuilder("b")
    g_wt = b.build([b.matmul(b.input("x", (4, 8)), b.weight("y", (8, 8)))])
    assert cost.cost(g_wt) - cost.cost(g_act) == pytest.approx(1e-6)


def test_torch_cost_cycles_weight_copies_to_fill_the_cold_budget() -> None:
    c = TorchOpCost(cold_bytes=10_000)
    ins = (T((4, 8)), T((8, 8)))  # 128 and 256 bytes in float32
    assert c.copies(ins, (False, True)) == 40  # ceil(10000 / 256)
    assert c.copies(ins, (True, True)) == 27  # ceil(10000 / 384)
    assert c.copies(ins, (False, False)) == 1 and c.copies(ins, ()) == 1
    assert TorchOpCost(cold_bytes=1 << 40).copies(ins, (False, True)) == TorchOpCost.MAX_COPIES
    assert TorchOpCost(cold_bytes=0).copies(ins, (False, True)) == 1
    # Timed with weights cold, the op still measures and caches one signature.
    c = TorchOpCost(samples=2, min_sample_s=2e-4, cold_bytes=1 << 16)
    assert c.op_cost("matmul", (("activation", "none"),), ins, (T((4, 8)),),
                     (False, True)) > 0
    assert c.cached == 1


@pytest.mark.parametrize("model,options", [("resnet18", {"image_size": 32}),
                                           ("bert-small", {"seq_len": 8}),
                                           ("squeezenet", {"image_size": 64})])
@pytest.mark.parametrize("cost_kind", [FlopsCost, WeightAwareFlops])
def test_pricing_a_site_without_building_is_exact(model: str, options: dict,
                                                  cost_kind: type[FlopsCost]) -> None:
    from superopt import zoo

    g = zoo.build(model, **options)
    m = Matcher(starter_rules())
    cost = cost_kind()
    base = cost.cost(g)
    sites = m.match(g).sites
    assert sites
    for s in sites[:40]:
        effect = site_effect(g, s, m.rule(s.rule))
        new = apply_sites(g, [s], m).graph
        assert effect.node_delta == len(new) - len(g), s.describe()
        assert effect.runtime_delta(g) == runtime_ops(new) - runtime_ops(g), s.describe()
        assert effect.cost_delta(g, cost) == pytest.approx(cost.cost(new) - base, rel=1e-9,
                                                           abs=1e-15), s.describe()


def test_value_check_catches_a_wrong_graph_and_timing_compares_side_by_side() -> None:
    b = GraphBuilder("a")
    x = b.input("x", (64, 64))
    g1 = b.build([b.relu(b.matmul(x, b.weight("w", (64, 64))))])
    b = GraphBuilder("b")
    x = b.input("x", (64, 64))
    g2 = b.build([b.matmul(x, b.weight("w", (64, 64)), activation="relu")])
    b = GraphBuilder("c")
    x = b.input("x", (64, 64))
    g3 = b.build([b.matmul(x, b.weight("w", (64, 64)), activation="tanh")])
    assert check_values(g1, g2).ok
    bad = check_values(g1, g3)
    assert not bad.ok and bad.max_rel_err > 1e-3 and "DIFFER" in bad.summary()
    t = time_side_by_side([g1, g2], repeats=3, warmup=1, threads=1)
    assert len(t.medians) == 2 and all(m > 0 for m in t.medians)
    assert t.ratio(0, 1) > 0 and len(t.times[0]) == 3


def test_ratio_confidence_interval_brackets_the_median_and_narrows_with_more_rounds() -> None:
    from superopt.rewrite.check import SideBySide

    rng = np.random.default_rng(3)

    def timing(rounds: int) -> SideBySide:
        # Graph 1 is 5% faster; each round's load multiplies both runs of the round alike,
        # plus independent jitter of ~3% per run.
        load = rng.uniform(1.0, 1.5, rounds)
        a = load * 0.105 * rng.normal(1.0, 0.03, rounds)
        b = load * 0.100 * rng.normal(1.0, 0.03, rounds)
        return SideBySide((0.0, 0.0), (0.0, 0.0), (tuple(a), tuple(b)), "cpu", 1)

    few, many = timing(12), timing(400)
    for t in (few, many):
        lo, hi = t.ratio_ci()
        assert lo <= t.ratio() <= hi
    assert many.ratio_ci()[1] - many.ratio_ci()[0] < few.ratio_ci()[1] - few.ratio_ci()[0]
    # With 400 rounds the true 1.05 lies inside and 1.0 (no change) outside the interval.
    lo, hi = many.ratio_ci()
    assert lo < 1.05 < hi and lo > 1.0
    same = SideBySide((0.0, 0.0), (0.0, 0.0), ((0.2,) * 5, (0.1,) * 5), "cpu", 1)
    assert same.ratio_ci() == (2.0, 2.0)


def _tiny_graph():
    b = GraphBuilder("tiny")
    x = b.input("x", (8, 16))
    return b.build([b.relu(b.matmul(x, b.weight("w", (16, 16))))])


def test_cost_database_reuses_measurements_of_the_same_context(tmp_path) -> None:
    db = tmp_path / "costs.jsonl"
    g = _tiny_graph()
    first = TorchOpCost(samples=2, min_sample_s=2e-4, threads=1, database=db)
    total = first.cost(g)
    assert first.reused == 0 and len(db.read_text().splitlines()) == first.cached == 2
    again = TorchOpCost(samples=2, min_sample_s=2e-4, threads=1, database=db)
    assert again.cost(g) == total  # the stored numbers, not a new measurement
    assert again.reused == 2 and again.measured_s == 0.0
    # Another setting (threads) is another context: measured afresh, appended.
    other = TorchOpCost(samples=2, min_sample_s=2e-4, threads=2, database=db)
    other.cost(g)
    assert other.reused == 0 and other.database is not None
    assert other.database.other_contexts == 2
    assert len(db.read_text().splitlines()) == 4


def test_cost_database_errors_name_the_line_and_survive_a_torn_append(tmp_path) -> None:
    db = tmp_path / "costs.jsonl"
    g = _tiny_graph()
    TorchOpCost(samples=2, min_sample_s=2e-4, threads=1, database=db).cost(g)
    good = db.read_text()
    db.write_text(good + '{"context": {}, "key": "k"}\n')  # no "s"
    with pytest.raises(CostError, match=r"costs.jsonl:3: not a cost record"):
        TorchOpCost(threads=1, database=db)
    db.write_text(good + '{"context": {}, "ke')  # an append cut off mid-line
    c = TorchOpCost(samples=2, min_sample_s=2e-4, threads=1, database=db)
    assert c.cost(g) > 0 and c.reused == 2
    c.op_cost("relu", (), (T((3, 3)),), (T((3, 3)),))  # appended after the cut, on its
    reread = TorchOpCost(samples=2, min_sample_s=2e-4, threads=1, database=db)  # own line
    assert reread.database is not None and reread.database.loaded == 3


def test_cli_cost_db_needs_a_measured_cost(tmp_path, capsys) -> None:
    from superopt.cli import main

    code = main(["optimize", "bert-small", "--cost", "sim", "--cost-db",
                 str(tmp_path / "c.jsonl")])
    assert code == 2
    assert "--cost-db keeps measured op costs: it needs --cost torch or onnxruntime" in \
        capsys.readouterr().err


def test_onnxruntime_cost_times_each_op_signature_once_and_tracks_work() -> None:
    c = create_cost("onnxruntime", samples=2, min_sample_s=2e-4, threads=1)
    assert isinstance(c, OrtOpCost) and "onnxruntime" in c.describe()
    # Ops big enough to outlast a run's fixed cost, which is taken off each (8 x 16 ops
    # came out at 0 on a loaded machine).
    b = GraphBuilder("wide")
    g = b.build([b.relu(b.matmul(b.input("x", (256, 256)), b.weight("w", (256, 256))))])
    total = c.cost(g)
    assert total > 0 and c.cached == 2 and c.cost(g) == total  # matmul, relu; cached
    # Four times the rows of a 256 x 256 product: well over twice the time (a run's fixed
    # cost, taken off each op, would otherwise flatten the ratio).
    small, big = ((T((n, 256)), T((256, 256))) for n in (256, 1024))
    act = (("activation", "none"),)
    t_small = c.op_cost("matmul", act, small, (T((256, 256)),), (False, True))
    t_big = c.op_cost("matmul", act, big, (T((1024, 256)),), (False, True))
    assert t_big > 2 * t_small > 0


def test_onnxruntime_cost_database_is_its_own_context(tmp_path) -> None:
    db = tmp_path / "costs.jsonl"
    g = _tiny_graph()
    first = OrtOpCost(samples=2, min_sample_s=2e-4, threads=1, database=db)
    total = first.cost(g)
    again = OrtOpCost(samples=2, min_sample_s=2e-4, threads=1, database=db)
    assert again.cost(g) == total and again.reused == 2 and again.measured_s == 0.0
    # torch's measurements of the same signatures in the same file are not reused.
    torch_cost = TorchOpCost(samples=2, min_sample_s=2e-4, threads=1, database=db)
    torch_cost.cost(g)
    assert torch_cost.reused == 0 and torch_cost.database is not None
    assert torch_cost.database.other_contexts == 2


def test_a_merged_matmul_folded_to_float32_keeps_the_values_bit_for_bit() -> None:
    # Merging two matmuls that read one input concatenates their weights; folded, the
    # concatenation is stored as float32. Drawn weights are float32 values, so the folded
    # graph computes exactly what the original does (T5's merged projections read 1.8e-5
    # apart when the draws were 64-bit, and `optimize` refused to save the graph).
    b = GraphBuilder("two_heads")
    x = b.input("x", (4, 6))
    g = b.build([b.matmul(x, b.weight("w1", (6, 3))), b.matmul(x, b.weight("w2", (6, 5)))])
    rules = [r for r in starter_rules() if r.name == "merge_matmul"]
    m = Matcher(rules)
    merged = apply_sites(g, m.match(g).sites, m).graph
    folded = fold_weights(merged).graph
    assert folded.weights and all(np.asarray(v).dtype == np.float32
                                  for v in folded.weights.values())
    check = check_values(g, folded, rtol=1e-15)
    assert check.ok and check.max_rel_err == 0.0, check.summary()


def test_an_exact_fold_keeps_the_interpreters_values() -> None:
    # A batch norm folded into a conv: stored, the folded kernel is float32; `exact`
    # keeps what the interpreter computed, so the fold itself is checked without the
    # storage's rounding.
    b = GraphBuilder("conv_bn")
    x = b.input("x", (1, 3, 6, 6))
    y = b.conv2d(x, b.weight("w", (4, 3, 3, 3)), padding="same")
    y = b.batch_norm(y, b.weight("s", (4,), init="positive"), b.weight("c", (4,)),
                     b.weight("m", (4,)), b.weight("v", (4,), init="positive"))
    g = b.build([y])
    m = Matcher([r for r in starter_rules() if r.name == "fold_conv_bn"])
    rewritten = apply_sites(g, m.match(g).sites, m).graph
    stored = fold_weights(rewritten).graph
    exact = fold_weights(rewritten, exact=True).graph
    assert set(stored.weights) == set(exact.weights) and stored.weights
    for name, w in exact.weights.items():
        assert w.dtype == np.float64 and stored.weights[name].dtype == np.float32
        np.testing.assert_array_equal(w.astype(np.float32), stored.weights[name])
    assert check_values(g, exact, rtol=1e-12).ok
    assert not check_values(g, stored, rtol=1e-12).ok  # the float32 rounding shows
    # The exact fold cast to the weights' dtypes is the stored fold, without evaluating
    # again; the input's own weights are left as they were.
    from superopt.rewrite.fold import stored as cast

    again = cast(exact, rewritten)
    assert set(again.weights) == set(stored.weights)
    for name, w in again.weights.items():
        assert w.dtype == stored.weights[name].dtype
        np.testing.assert_array_equal(w, stored.weights[name])
