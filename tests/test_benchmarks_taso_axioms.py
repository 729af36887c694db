"""The TASO-axioms benchmark: its list names built-in axioms only, and its comparison
tells a rule TASO's list proves from one that needs an axiom beyond it."""

from __future__ import annotations

from bench_modules import load_benchmark


def _module():
    return load_benchmark("taso_axioms")


def test_the_taso_list_is_a_subset_of_the_builtin_axioms() -> None:
    from superopt.verifier.axioms import builtin_axioms

    names = {a.name for a in builtin_axioms()}
    taso = _module().TASO_AXIOMS
    assert len(set(taso)) == len(taso) and set(taso) <= names
    # what TASO left out or commented out is not in it
    assert not {"matmul_linear_l", "matmul_concat_l2", "concat_assoc", "iconv_data_twice",
                "relu_maxpool", "conv_group_concat"} & set(taso)


def test_a_rule_beyond_tasos_list_is_told_apart_from_one_within_it() -> None:
    from superopt.substitutions import parse_rules
    from superopt.verifier.axioms import builtin_axioms
    from superopt.verifier.prover import VerifyOptions

    mod = _module()
    rules = parse_rules(
        "within: (ewadd (ewadd ?x ?y) ?z) => (ewadd ?x (ewadd ?z ?y))\n"
        "beyond: (matmul (ewadd ?x ?y) ?z) => (ewadd (matmul ?x ?z) (matmul ?y ?z)) "
        "if rank(?x) == 2 and rank(?y) == 2 and rank(?z) == 2 and shape(?x) == shape(?y)\n")
    every = builtin_axioms()
    taso = [a for a in every if a.name in mod.TASO_AXIOMS]
    got = mod.compare("t", rules, taso, every, VerifyOptions(timeout_s=10, samples=4), 1)
    assert got["taso"]["by_state"]["proved"] == 1 and got["ours"]["by_state"]["proved"] == 2
    (d,) = got["differ"]
    assert d["rule"] == "beyond" and d["taso_axioms"] == "unknown" and d["ours"] == "proved"
    assert "matmul_linear_l" in d["beyond_taso"] and got["proved_only_by_ours"] == 1
