"""Re-timing trials against a reference (`superopt.xtat.tvm_retime`) with a fake measure
(no TVM needed), and the benchmark's report on re-timed cells."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from superopt.xtat.tvm_kernels import KERNELS
from superopt.xtat.tvm_retime import Retimer
from xtat.tvm_bench import load_bench


class RegimeMeasure:
    """Programs are names with a base time; the machine is in a slow regime (1.6x) on
    some rounds of two calls, as this machine is for seconds at a time. Every call is
    logged."""

    def __init__(self, base: dict[str, float], slow_pairs: set[int]) -> None:
        self.base, self.slow_pairs = base, slow_pairs
        self.calls: list[str] = []
        self.builds: list[str] = []

    def build(self, mod: str) -> tuple[str, str]:
        if mod not in self.base:
            raise RuntimeError(f"cannot build {mod}")
        self.builds.append(mod)
        return mod, mod

    def run(self, lib: str) -> float:
        pair = len(self.calls) // 2
        self.calls.append(lib)
        return self.base[lib] * (1.6 if pair in self.slow_pairs else 1.0)


def _retimer(m: RegimeMeasure, rounds: int = 3) -> Retimer:
    return Retimer(m, "ref", rounds, key=lambda mod: hash(mod))  # type: ignore[arg-type]


def test_a_slow_regime_drops_out_of_the_paired_ratio() -> None:
    # Pairs of calls 1, 2 and 4 are slow: timing the reference three times and then the
    # program three times would read "fast" at 0.64 of the reference, not 0.4.
    m = RegimeMeasure({"ref": 10.0, "fast": 4.0, "slow": 30.0}, slow_pairs={1, 2, 4})
    r = _retimer(m)
    assert r.ratio("fast") == pytest.approx(0.4)
    assert r.ratio("slow") == pytest.approx(3.0)
    # The regime was there: the reference itself read 10 and 16.
    assert min(r.reference_s) == pytest.approx(10.0)
    assert max(r.reference_s) == pytest.approx(16.0)
    assert len(r.reference_s) == 6  # one per round, both programs


def test_rounds_alternate_which_program_runs_first() -> None:
    m = RegimeMeasure({"ref": 1.0, "a": 2.0}, slow_pairs=set())
    _retimer(m, rounds=4).ratio("a")
    assert m.calls == ["ref", "a", "a", "ref", "ref", "a", "a", "ref"]


def test_a_program_is_retimed_once_and_failures_are_infinite() -> None:
    m = RegimeMeasure({"ref": 1.0, "a": 2.0}, slow_pairs=set())
    r = _retimer(m, rounds=1)
    assert r.ratio("a") == r.ratio("a") == pytest.approx(2.0)
    assert m.builds == ["ref", "a"]  # the reference, then "a" once
    assert r.ratio("unbuildable") == math.inf
    assert r.ratio(None) == math.inf


def test_rounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        _retimer(RegimeMeasure({"ref": 1.0}, set()), rounds=0)


def _bench() -> Any:
    return load_bench()


def test_report_on_retimed_cells(tmp_path: Path) -> None:
    bench = _bench()
    k = KERNELS[0]

    def cell(tuner: str, secs: list[float], ratios: list[float | None] | None,
             refs: list[float], seed: int = 0, session: str = "a") -> None:
        p = bench.cell_path(tmp_path, k.name, tuner, seed, 256, "ms")
        p.write_text(json.dumps({"kernel": k.name, "tuner": tuner, "seed": seed,
                                 "budget": 256, "space": "ms", "seconds": secs}))
        if ratios is not None:
            bench.retimed_path(p).write_text(json.dumps(
                {"ratios": ratios, "reference_s": refs, "session": session}))

    # As measured: MetaSchedule's best (0.5, a quiet moment) at trial 100; guided's
    # trials all read 0.6 or slower, so it never reaches it.
    ms = [1.0] * 256
    ms[99] = 0.5
    ours = [2.0] * 256
    ours[29] = 0.6
    # Re-timed: the same programs against the reference. MetaSchedule's trial 100 is
    # 0.3 of the reference, guided's trial 30 is 0.25 of it: it reaches the target.
    ms_ratios: list[float | None] = [0.5] * 256
    ms_ratios[99] = 0.3
    ours_ratios: list[float | None] = [1.0] * 256
    ours_ratios[29] = 0.25
    ours_ratios[5] = None  # failed as rebuilt
    cell("metaschedule", ms, ms_ratios, [2.0, 2.0])
    cell("guided", ours, ours_ratios, [4.0])
    # Another seed's re-timing is unfinished: not reported, but raw it is.
    cell("guided", ours, [0.1] * 10, [1.0], seed=1)
    # A third seed re-timed in another session (process): its own scale, 10 s.
    cell("metaschedule", ms, ms_ratios, [10.0], seed=2, session="b")

    raw = bench.report(tmp_path)
    retimed = bench.report(tmp_path, retimed=True)
    row = {r["tuner"]: r for r in raw["kernels"][0]["budgets"]["256"] if r["seed"] == 0}
    assert row["guided"]["trials_to_ms_best"] is None
    row = {(r["tuner"], r["seed"]): r for r in retimed["kernels"][0]["budgets"]["256"]}
    assert ("guided", 1) not in row
    assert row[("guided", 0)]["trials_to_ms_best"] == 30
    assert row[("guided", 0)]["ratio_vs_ms"] == 0.3
    # One scale per session: the median of its reference timings (2, 2, 4) = 2 s; the
    # other session's is its own 10 s.
    assert row[("metaschedule", 0)]["best_gflops"] == pytest.approx(
        k.flops / (0.3 * 2.0) / 1e9, rel=1e-3)
    assert row[("metaschedule", 2)]["best_gflops"] == pytest.approx(
        k.flops / (0.3 * 10.0) / 1e9, rel=1e-3)
    assert row[("guided", 0)]["best_gflops"] == pytest.approx(
        k.flops / (0.25 * 2.0) / 1e9, rel=1e-3)
    assert retimed["measure"].startswith("re-timed")
    assert raw["measure"].startswith("each trial as measured")


def test_cells_keep_their_programs_beside_them(tmp_path: Path) -> None:
    bench = _bench()
    cell = bench.cell_path(tmp_path, "k", "guided", 0, 256, "ms")
    assert bench.programs_path(cell).name == "k__guided__ms__s0__b256.programs.json.gz"
    assert bench.retimed_path(cell).name == "k__guided__ms__s0__b256.retimed.json"
    # Neither is read as a cell.
    cell.write_text(json.dumps({"kernel": "k", "tuner": "guided", "seed": 0,
                                "budget": 256, "space": "ms", "seconds": [1.0]}))
    bench.retimed_path(cell).write_text(json.dumps({"ratios": [1.0], "reference_s": [1.0]}))
    assert list(bench.load_cells(tmp_path)) == [("k", "guided", 0, "ms")]


def test_unknown_kernel_and_bad_rounds_are_one_line_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    with pytest.raises(SystemExit) as e:
        bench.main(["--report", "--kernels", "nosuch", "--cells", str(tmp_path)])
    assert e.value.code == 2
    assert "unknown kernel 'nosuch'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--retime", "--retime-rounds", "0", "--cells", str(tmp_path)])
    assert "--retime-rounds must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        bench.main(["--report", "--tuners", "metaschedule,nosuch", "--cells", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown tuner 'nosuch'" in err and "guided_prior_restart" in err
    with pytest.raises(SystemExit) as e:
        bench.main(["--report", "--cells", str(tmp_path / "none")])
    assert e.value.code == 2 and "no such folder" in capsys.readouterr().err


def test_a_retiming_goes_on_only_with_its_own_rounds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    k = KERNELS[0]
    cell = bench.cell_path(tmp_path, k.name, "guided", 0, 256, "ms")
    cell.write_text(json.dumps({"kernel": k.name, "tuner": "guided", "seed": 0,
                                "budget": 256, "space": "ms", "seconds": [1.0, 2.0]}))
    bench.programs_path(cell).write_bytes(b"")  # never read: the check comes first
    bench.retimed_path(cell).write_text(json.dumps(
        {"ratios": [1.0], "reference_s": [1.0], "rounds": 5}))
    code = bench.main(["--retime", "--retime-rounds", "3", "--kernels", k.name,
                       "--cells", str(tmp_path), "--out", str(tmp_path / "r.json")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "begun with 5 rounds" in err and len(err.splitlines()) == 1


def test_an_interrupted_retiming_says_what_is_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "retime", interrupted)
    assert bench.main(["--retime", "--cells", str(tmp_path)]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("tvm_compare.py: interrupted") and len(err.splitlines()) == 1


def test_a_corrupt_programs_file_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import superopt.xtat.tvm_msspace as msspace

    def built(*args: Any) -> None:
        raise AssertionError("TVM's space was built before the programs were read")

    # The file is read before TVM builds anything: no TVM needed, and no minute lost.
    monkeypatch.setattr(msspace, "MsSpace", built)
    bench = _bench()
    k = KERNELS[2]
    cell = bench.cell_path(tmp_path, k.name, "guided", 0, 256, "ms")
    cell.write_text(json.dumps({"kernel": k.name, "tuner": "guided", "seed": 0,
                                "budget": 256, "space": "ms", "seconds": [1.0]}))
    bench.programs_path(cell).write_bytes(b"not gzip")
    code = bench.main(["--retime", "--kernels", k.name, "--cells", str(tmp_path),
                       "--out", str(tmp_path / "r.json")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "not a programs file" in err and len(err.splitlines()) == 1


def test_retime_seeds_picks_the_cells_it_re_times(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--retime --seeds` leaves other seeds' cells alone (so two processes can share
    one cells folder, a seed each): a seed-0 cell that could not go on (begun with other
    rounds) stops a re-timing of every seed, not one of seed 1."""
    bench = _bench()
    k = KERNELS[0]
    cell = bench.cell_path(tmp_path, k.name, "guided", 0, 256, "ms")
    cell.write_text(json.dumps({"kernel": k.name, "tuner": "guided", "seed": 0,
                                "budget": 256, "space": "ms", "seconds": [1.0, 2.0]}))
    bench.programs_path(cell).write_bytes(b"")
    bench.retimed_path(cell).write_text(json.dumps(
        {"ratios": [1.0], "reference_s": [1.0], "rounds": 5}))
    args = ["--retime", "--kernels", k.name, "--cells", str(tmp_path),
            "--out", str(tmp_path / "r.json")]
    assert bench.main([*args, "--seeds", "1"]) == 0
    assert json.loads(bench.retimed_path(cell).read_text())["ratios"] == [1.0]
    assert bench.main(args) == 2
    assert "begun with 5 rounds" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        bench.main([*args, "--seeds", "0,x"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--seeds: not a comma-separated list of integers" in err[-1]


def test_retimed_only_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--retimed` is a report: without `--report` it used to go on to tune every
    missing cell (MetaSchedule's and each strategy's, minutes each)."""
    bench = _bench()

    def tuned(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("--retimed ran a tuner")

    monkeypatch.setattr(bench, "run_cell", tuned)
    assert bench.main(["--retimed", "--kernels", KERNELS[0].name, "--cells", str(tmp_path),
                       "--out", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["measure"].startswith("re-timed")


def test_guided_variants_are_judged_by_the_same_rule_apart(tmp_path: Path) -> None:
    bench = _bench()
    k = KERNELS[0]

    def cell(tuner: str, secs: list[float]) -> None:
        p = bench.cell_path(tmp_path, k.name, tuner, 0, 256, "ms")
        p.write_text(json.dumps({"kernel": k.name, "tuner": tuner, "seed": 0,
                                 "budget": 256, "space": "ms", "seconds": secs}))

    ms = [1.0] * 256
    ms[199] = 0.5  # MetaSchedule's best at trial 200
    cell("metaschedule", ms)
    late = [1.0] * 256
    late[149] = 0.5  # reaches it at trial 150: 0.75x
    cell("guided", late)
    early = [1.0] * 256
    early[49] = 0.4  # at trial 50: 0.25x
    cell("guided_init", early)
    res = bench.report(tmp_path)
    assert res["goal"]["ms"]["256"]["pairs_guided_le_0.5"] == [0, 1]
    variant = res["goal_variants"]["guided_init"]["ms"]["256"]
    assert variant["pairs_guided_le_0.5"] == [1, 1]
    assert variant["per_kernel"] == {k.name: True}
    assert "guided_screened" not in res["goal_variants"]  # no cells, no entry


def test_a_prior_reads_the_corpus_kernels_and_leaves_the_held_out_one_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pre-trained model's corpus: the compared kernels but the held-out one, and the
    corpus kernels (`CORPUS`, never compared); the pre-trained variants' own cells never
    feed it, and a schedule measured in two cells is one example at the median time."""
    import gzip

    import superopt.xtat.tvm_msspace as msspace
    from superopt.xtat.tvm_kernels import CORPUS

    monkeypatch.setattr(msspace, "MsSpace", lambda k: ("space", k.name))
    bench = _bench()
    held, other, extra = KERNELS[1], KERNELS[0], CORPUS[0]
    assert extra.name not in {k.name for k in KERNELS}

    def cell(folder: str, kernel: str, tuner: str, seed: int,
             configs: list[dict], secs: list[float | None]) -> None:
        path = bench.cell_path(tmp_path / folder, kernel, tuner, seed, 256, "ms")
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"kernel": kernel, "tuner": tuner, "seed": seed,
                                    "budget": 256, "space": "ms", "seconds": secs}))
        bench.programs_path(path).write_bytes(
            gzip.compress(json.dumps({"configs": configs}).encode()))

    a, b = {"sketch": 0, "t": [1, 2]}, {"sketch": 1}
    cell("tvm_compare_cells", other.name, "guided", 0, [a, b], [1.0, None])
    cell("tvm_compare_x_cells", other.name, "evolution", 0, [a], [3.0])
    cell("tvm_compare_corpus_cells", extra.name, "guided_init", 0, [b], [2.0])
    cell("tvm_compare_cells", held.name, "guided", 0, [a], [5.0])
    cell("tvm_compare_cells", other.name, "guided_prior", 0, [b], [9.0])
    cell("elsewhere", extra.name, "guided", 1, [a], [7.0])  # not a cells folder
    got = {sp[1]: (configs, secs) for sp, configs, secs in
           bench.prior_examples(held, tmp_path)}
    assert got == {other.name: ([{"sketch": 0, "t": (1, 2)}], [2.0]),
                   extra.name: ([{"sketch": 1}], [2.0])}
    narrow = bench.prior_examples(held, tmp_path, corpus=False)
    assert [sp[1] for sp, _, _ in narrow] == [other.name]
    scored = {sp[1]: secs for sp, _, secs in
              bench.prior_examples(held, tmp_path, held_in=True)}
    assert scored[held.name] == [5.0] and set(scored) == {held.name, *got}


def test_corpus_kernels_are_tuned_when_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from superopt.xtat.tvm_kernels import CORPUS

    bench = _bench()
    code = bench.main(["--retime", "--kernels", CORPUS[0].name, "--cells", str(tmp_path),
                       "--out", str(tmp_path / "r.json")])
    assert code == 0
    # The report is over the compared kernels only: a corpus kernel is no row.
    rows = json.loads((tmp_path / "r.json").read_text())["kernels"]
    assert {r["kernel"] for r in rows} == {k.name for k in KERNELS}


def test_prior_check_corpora_pick_the_kernels_they_name() -> None:
    """`benchmarks/tvm_prior_check.py`'s four corpora: the compared kernels or all, of
    any op or of the held-out kernel's."""
    import importlib.util

    from superopt.xtat.tvm_kernels import CORPUS

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "tvm_prior_check.py"
    spec = importlib.util.spec_from_file_location("tvm_prior_check_bench", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    class Space:
        def __init__(self, kernel: Any) -> None:
            self.kernel = kernel

    held = KERNELS[1]  # a conv
    examples = [(Space(k), [], []) for k in (KERNELS[0], KERNELS[2], *CORPUS)]

    def names(corpus: str) -> set[str]:
        return {e[0].kernel.name for e in mod.corpus(examples, held, corpus)}

    assert names("kernels") == {KERNELS[0].name, KERNELS[2].name}
    assert names("wide") == {KERNELS[0].name, KERNELS[2].name, *(k.name for k in CORPUS)}
    assert names("same_op") == {KERNELS[0].name}
    assert names("same_op_wide") == {KERNELS[0].name,
                                     *(k.name for k in CORPUS if k.op == "conv2d")}
