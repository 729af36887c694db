"""`superopt optimize`: rules table, cost before and after, value check, timing, outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superopt.cli import main
from superopt.ir import GraphBuilder, load, save


@pytest.fixture()
def conv_bn(tmp_path: Path) -> Path:
    b = GraphBuilder("convbn")
    x = b.input("x", (1, 4, 12, 12))
    for i in range(3):
        x = b.conv2d(x, b.weight(f"w{i}", (4, 4, 3, 3)), padding="same")
        x = b.batch_norm(x, b.weight(f"s{i}", (4,), init="positive"), b.weight(f"b{i}", (4,)),
                         b.weight(f"m{i}", (4,)), b.weight(f"v{i}", (4,), init="positive"))
        x = b.relu(x)
    return save(b.build([x]), tmp_path / "convbn.json")


def test_optimize_prints_rules_costs_check_and_timing(conv_bn: Path, tmp_path: Path,
                                                      capsys) -> None:
    out, res = tmp_path / "opt.json", tmp_path / "res.json"
    code = main(["optimize", str(conv_bn), "--cost", "flops", "--budget", "4", "--repeats", "2",
                 "--warmup", "0", "--out", str(out), "--json", str(res)])
    text = capsys.readouterr().out
    assert code == 0
    assert "fold_conv_bn" in text and "equal values" in text and "torch cpu" in text
    figures = json.loads(res.read_text())
    assert figures["applied"] == {"fold_conv_bn": 3}
    assert figures["cost_after"] < figures["cost_before"]
    assert figures["max_rel_err"] < 1e-5 and figures["torch_before_s"] > 0
    optimized = load(out)
    assert optimized.op_histogram()["batch_norm"] == 0
    assert all(n.attr("name") in optimized.weights for n in optimized.weight_nodes
               if n.attr("name").startswith("folded."))


def test_values_are_judged_on_the_fold_at_full_precision(conv_bn: Path, tmp_path: Path,
                                                         capsys) -> None:
    # The folded batch norms are stored as float32 weights; the verdict is on the same fold
    # at the interpreter's precision (exact up to reassociation), and the float32 graph's
    # own difference, its storage's rounding, is reported beside it.
    res = tmp_path / "res.json"
    code = main(["optimize", str(conv_bn), "--cost", "flops", "--budget", "4", "--repeats",
                 "0", "--json", str(res)])
    text = capsys.readouterr().out
    assert code == 0
    assert "with the folded weights stored as float32: max relative error" in text
    figures = json.loads(res.read_text())
    assert figures["applied"] == {"fold_conv_bn": 3} and figures["values"] == "equal"
    assert figures["max_rel_err"] < 1e-12 < figures["max_rel_err_float32"] < 1e-5


def test_optimize_with_a_rule_file_and_bad_input(conv_bn: Path, tmp_path: Path, capsys) -> None:
    rules = tmp_path / "mine.rules"
    rules.write_text("fuse: (relu (conv2d ?s ?p ?d ?g none ?x ?w)) => "
                     "(conv2d ?s ?p ?d ?g relu ?x ?w)\n")
    code = main(["optimize", str(conv_bn), "--rules", str(rules), "--cost", "flops",
                 "--budget", "2", "--repeats", "0", "--no-check"])
    assert code == 0
    assert "1 rules from" in capsys.readouterr().out
    assert main(["optimize", str(conv_bn), "--rules", str(tmp_path / "none.rules")]) == 2
    assert "no such rule file" in capsys.readouterr().err
    assert main(["optimize", str(conv_bn), "--budget", "0", "--cost", "flops"]) == 2


def test_optimize_with_the_per_op_simulated_cost(conv_bn: Path, tmp_path: Path,
                                                 capsys) -> None:
    res = tmp_path / "res.json"
    code = main(["optimize", str(conv_bn), "--cost", "simop", "--budget", "4", "--repeats",
                 "1", "--warmup", "0", "--json", str(res)])
    assert code == 0
    assert "simop (TPU v4 simulator, each op alone)" in capsys.readouterr().out
    figures = json.loads(res.read_text())
    assert figures["cost_after"] <= figures["cost_before"] and figures["max_rel_err"] < 1e-5


@pytest.mark.parametrize("search", ["backtracking", "eqsat"])
@pytest.mark.parametrize("step", ["fold", "check", "timing"])
def test_ctrl_c_after_the_search_saves_its_graph_and_says_130(
        conv_bn: Path, tmp_path: Path, monkeypatch, capsys, step: str, search: str) -> None:
    # Ctrl-C while the searched graph is folded, checked or timed: the search's work is
    # finished, so it is saved (unchecked unless the check had ended) and the exit
    # status says the run did not finish.
    import superopt.rewrite
    import superopt.rewrite.check
    from superopt.rewrite.check import check_values

    def ctrl_c(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    target = {"fold": (superopt.rewrite, "fold_weights"),
              "check": (superopt.rewrite.check, "check_values"),
              "timing": (superopt.rewrite.check, "time_side_by_side")}[step]
    monkeypatch.setattr(*target, ctrl_c)
    out, res = tmp_path / "opt.json", tmp_path / "res.json"
    code = main(["optimize", str(conv_bn), "--cost", "flops", "--budget", "4", "--search",
                 search, "--repeats", "2", "--warmup", "0", "--out", str(out),
                 "--json", str(res)])
    assert code == 130
    figures = json.loads(res.read_text())
    assert figures["saved"] == str(out) and "torch_before_s" not in figures
    assert figures["values"] == ("equal" if step == "timing" else "not checked (interrupted)")
    assert ("max_rel_err" in figures) == (step == "timing")
    saved = load(out)
    assert figures["applied"] == {"fold_conv_bn": 3}  # the search's work is in it
    assert saved.structural_hash != load(conv_bn).structural_hash
    folded = any(n.attr("name").startswith("folded.") for n in saved.weight_nodes)
    assert folded == (step != "fold")
    monkeypatch.undo()
    assert check_values(load(conv_bn), saved).ok  # and it computes the model
    if step != "timing":
        assert "values not checked" in capsys.readouterr().out
