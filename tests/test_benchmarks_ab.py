"""The A/B and headroom benchmarks: `eqsat_ab.py --ilp-only` compares two source trees'
extraction ILPs, `cpu_rules.py` times each rule applied everywhere in onnxruntime,
`ort_roundtrip.py` a user's ONNX file beside superopt's re-written one, and `tune_cpu.py
--hf` tunes users' files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=600)


def test_ilp_ab_of_a_tree_with_itself_finds_the_same_optima(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    got = _run("benchmarks/eqsat_ab.py", "--variant", "a=src", "--variant", "b=src",
               "--models", "squeezenet", "--ilp-only", "--out", str(out))
    assert got.returncode == 0, got.stderr
    d = json.loads(out.read_text())
    s = d["summary"]
    assert d["ilp_only"] and s["solves"] == 4  # the four proxies of the sim cost
    assert s["optima_differ"] == [] and s["not_optimal"] == []
    row = d["models"][0]
    assert set(row["a"]["proxies"]) == set(row["b"]["proxies"])
    assert all(p["optimum_s"] > 0 and p["ilp_s"] >= 0 for p in row["a"]["proxies"].values())
    assert s["ilp_s"]["a"] == sum(p["ilp_s"] for p in row["a"]["proxies"].values())


def test_ilp_ab_refuses_a_variant_without_a_package(tmp_path: Path) -> None:
    got = _run("benchmarks/eqsat_ab.py", "--variant", f"a={tmp_path}", "--ilp-only",
               "--out", str(tmp_path / "x.json"))
    assert got.returncode == 2 and "NAME=SRC_DIR" in got.stderr
    assert not (tmp_path / "x.json").exists()


def test_cpu_rules_refuses_unknown_models_and_missing_folders(tmp_path: Path) -> None:
    got = _run("benchmarks/cpu_rules.py", "--models", "squeezenet,nope",
               "--out", str(tmp_path / "x.json"))
    assert got.returncode == 2 and "unknown model 'nope'" in got.stderr
    got = _run("benchmarks/cpu_rules.py", "--models", "squeezenet",
               "--out", str(tmp_path / "missing" / "x.json"))
    assert got.returncode == 2 and "does not exist" in got.stderr


def test_cpu_rules_times_every_rule_with_sites_beside_the_input() -> None:
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("cpu_rules_bench",
                                                  ROOT / "benchmarks" / "cpu_rules.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = argparse.Namespace(batch=1, threads=1, rounds=3)
    row = mod.bench_model("squeezenet", args)
    # SqueezeNet's one rule direction with sites (merging its expand convolutions)
    assert [r["rule"] for r in row["rules"]] == ["merge_conv_enlarge_valid"]
    r = row["rules"][0]
    assert r["sites"] == 8 and r["input_ms"] > 0 and r["rewritten_ms"] > 0
    assert r["ci95"][0] <= r["ratio"] <= r["ci95"][1]
    assert r["verdict"] in ("faster", "slower", "noise")
    assert row["slower"] == ([r["rule"]] if r["verdict"] == "slower" else [])


def test_ort_roundtrip_refuses_unknown_families(tmp_path: Path) -> None:
    got = _run("benchmarks/ort_roundtrip.py", "--families", "mobilenet_v2,nope",
               "--out", str(tmp_path / "x.json"))
    assert got.returncode == 2 and "unknown family 'nope'" in got.stderr
    # A family with no published size is named as such.
    got = _run("benchmarks/ort_roundtrip.py", "--families", "gemma",
               "--out", str(tmp_path / "x.json"))
    assert got.returncode == 2 and "at a published size" in got.stderr
    assert not (tmp_path / "x.json").exists()


def test_ort_roundtrip_times_the_users_file_beside_superopts(tmp_path: Path) -> None:
    # MobileNet-V2's ReLU6 is Clip in torch's file: superopt's file must keep one Clip per
    # clamp and compute the same outputs.
    out = tmp_path / "rt.json"
    got = _run("benchmarks/ort_roundtrip.py", "--small", "--families", "mobilenet_v2",
               "--rounds", "3", "--out", str(out))
    assert got.returncode == 0, got.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["values_agree"] and row["max_rel_diff"] <= 1e-4
    assert row["ops_superopt"]["Clip"] == row["ops_user"]["Clip"] > 10
    assert "Sub" not in row["ops_superopt"] and "Min" not in row["ops_superopt"]
    assert row["user_ms"] > 0 and row["superopt_ms"] > 0 and row["verdict"] in (
        "faster", "slower", "noise")


def test_tune_cpu_refuses_a_users_family_without_a_published_size(tmp_path: Path) -> None:
    got = _run("benchmarks/tune_cpu.py", "--hf", "mobilenet_v2,gemma", "--workdir",
               str(tmp_path), "--out", str(tmp_path / "x.json"))
    assert got.returncode == 2 and "no published size for 'gemma'" in got.stderr
    assert not (tmp_path / "x.json").exists()


def test_tune_cpu_exporter_choice_is_for_users_files(tmp_path: Path) -> None:
    got = _run("benchmarks/tune_cpu.py", "--exporter", "dynamo", "--models", "resnet18",
               "--workdir", str(tmp_path), "--out", str(tmp_path / "x.json"))
    assert got.returncode == 2 and "--exporter applies to users' files (--hf)" in got.stderr
    assert not (tmp_path / "x.json").exists()
