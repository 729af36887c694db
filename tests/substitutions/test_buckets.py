"""Fingerprint buckets by partition (`superopt.substitutions.buckets`): the rules do not
depend on how many partitions the terms are cut into, and a resumed run redoes only the
partitions without a saved result."""

from __future__ import annotations

import numpy as np
import pytest

from superopt.substitutions import buckets
from superopt.substitutions.generator import generate
from superopt.substitutions.library import rule_to_json
from superopt.substitutions.presets import make_config


def _run(**kwargs):
    res = generate(make_config("taso", max_ops=2), sample_check=False, **kwargs)
    return [rule_to_json(r) for r in res.rules], res.stages, res.info


@pytest.fixture(scope="module")
def one_partition():
    return _run()


def test_partitions_give_the_rules_of_one(monkeypatch, one_partition) -> None:
    rules, stages, info = one_partition
    assert info["bucket_partitions"] == 1
    monkeypatch.setattr(buckets, "PART_TERMS", 1_500)  # 10k terms: 8 partitions
    got_rules, got_stages, got_info = _run()
    assert got_info["bucket_partitions"] == 8
    assert got_rules == rules
    assert got_stages == stages


def test_partitions_on_forked_workers(monkeypatch, one_partition) -> None:
    monkeypatch.setattr(buckets, "PART_TERMS", 3_000)
    got_rules, got_stages, _ = _run(workers=2)
    assert (got_rules, got_stages) == one_partition[:2]


def test_every_term_lies_in_the_partition_of_its_fingerprint(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(buckets, "PART_TERMS", 2_000)
    generate(make_config("taso", max_ops=2), workdir=tmp_path, sample_check=False)
    last, parts = buckets.open_last_level(tmp_path)
    assert parts == 8
    seen = []
    for p in range(parts):
        rows = np.fromfile(buckets.part_terms_path(tmp_path, p, parts), dtype=buckets.ROW)
        assert np.all(rows["h1"] % parts == p)
        assert np.all(np.diff(rows["id"]) > 0)  # id order: the order a global sort keeps
        assert np.array_equal(last["h1"][rows["id"]], rows["h1"])
        assert np.array_equal(last["h2"][rows["id"]], rows["h2"])
        seen.append(rows["id"])
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(len(last["h1"])))


def test_a_resumed_run_redoes_only_missing_partitions(tmp_path, monkeypatch, one_partition
                                                      ) -> None:
    monkeypatch.setattr(buckets, "PART_TERMS", 2_000)
    generate(make_config("taso", max_ops=2), workdir=tmp_path, sample_check=False)
    files = sorted(tmp_path.glob("bucket-*.npz"))
    assert len(files) == 8
    (tmp_path / "checked.json").unlink(missing_ok=True)  # redo the stages after buckets
    files[3].unlink()
    done: list[int] = []
    real = buckets.bucket_task

    def counted(task):
        done.append(task[2])
        return real(task)

    monkeypatch.setattr(buckets, "bucket_task", counted)
    res = generate(make_config("taso", max_ops=2), workdir=tmp_path, sample_check=False)
    assert done == [3]
    assert res.info["bucket_partitions_resumed"] == 7
    assert [rule_to_json(r) for r in res.rules] == one_partition[0]


def test_two_output_graphs_are_capped_single_output_rules_are_not(monkeypatch) -> None:
    """TWO_OUTPUT_MAX_OPS bounds both sides of every two-output rule (at 4 ops the linking
    of terms sharing an operator would not fit); single-output rules keep every size."""
    from superopt.substitutions import generator

    cfg = make_config("small", max_ops=3)
    full = generate(cfg, sample_check=False)
    monkeypatch.setattr(generator, "TWO_OUTPUT_MAX_OPS", 2)
    capped = generate(cfg, sample_check=False)
    two_full = [r for r in full.rules if r.outputs == 2]
    two_capped = [r for r in capped.rules if r.outputs == 2]
    assert any(max(r.provenance["size"]) == 3 for r in two_full)  # something to cut
    assert len(two_capped) < len(two_full)
    assert all(max(r.provenance["size"]) <= 2 for r in two_capped)
    single = [rule_to_json(r) for r in full.rules if r.outputs == 1]
    assert single == [rule_to_json(r) for r in capped.rules if r.outputs == 1]


def test_every_stage_after_buckets_reports_progress() -> None:
    """At 4 ops dedup and build take minutes each: a live display must show them move
    instead of a pairing bar stuck at 0/1."""
    seen: list[tuple[str, int, int]] = []
    generate(make_config("taso", max_ops=2), sample_check=False,
             progress=lambda stage, done, total: seen.append((stage, done, total)))
    stages = [s for s, _, _ in seen]
    assert ("candidates", 1, 1) in seen
    for stage in ("bucket+pair", "dedup", "build", "verify"):
        assert stage in stages
    assert stages.index("candidates") < stages.index("dedup") < stages.index("build") \
        < stages.index("verify")
