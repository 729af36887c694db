"""The transformers sweep judges the importer only where the family was built and exported:
its outcomes, its count of verdicts, and a family it runs end to end."""

from __future__ import annotations

import pytest

from bench_modules import load_benchmark


def _module():
    return load_benchmark("hf_sweep")


def test_summary_counts_only_import_verdicts() -> None:
    rows = {"a": {"status": "ok", "rel_err": 1e-7}, "b": {"status": "import", "why": "x"},
            "c": {"status": "config", "why": "y"}, "d": {"status": "export", "why": "z"},
            "e": {"status": "values", "rel_err": 0.2, "program_vs_eager": 0.3},
            "f": {"status": "ok", "rel_err": 2e-7, "program_vs_eager": 0.0}}
    s = _module().summarize(rows)
    assert s["families"] == 6 and s["judged"] == 4  # config and export are no verdicts
    assert s["counts"] == {"ok": 2, "import": 1, "config": 1, "export": 1, "values": 1}
    assert s["imported_share_of_judged"] == 0.5 and s["export_not_faithful"] == ["e"]


def test_a_family_runs_end_to_end() -> None:
    pytest.importorskip("transformers")
    row = _module().one("llama", 1e-4)
    assert row["status"] == "ok" and row["rel_err"] < 1e-5 and row["nodes"] > 50
    assert row["program_vs_eager"] < 1e-5
    assert _module().one("no-such-family", 1e-4)["status"] == "config"


def test_a_family_runs_end_to_end_as_an_onnx_file() -> None:
    # torch's TorchScript exporter, an attention mask as users pass one, onnxruntime as the
    # reference: the file's logits match the eager model's, and the import matches both.
    pytest.importorskip("onnxruntime")
    row = _module().one("gpt2", 1e-4, "causal-lm", "onnx")
    assert row["status"] == "ok" and row["rel_err"] < 1e-5 and row["nodes"] > 50
    assert row["program_vs_eager"] < 1e-5


def test_a_family_runs_end_to_end_from_the_default_exporter() -> None:
    # torch.onnx.export as users on torch 2.9+ call it (dynamo=True, its own opset): CPM-Ant
    # comes with bitwise ands of 0/1 masks, which need the IR's value ranges.
    pytest.importorskip("onnxscript")
    mod = _module()
    row = mod.one("cpmant", 1e-4, "causal-lm", "onnx-dynamo")
    assert row["status"] == "ok" and row["rel_err"] < 1e-5 and row["nodes"] > 50
    assert row["program_vs_eager"] < 1e-5
    assert mod.results_path("masked-lm", "onnx-dynamo").name == \
        "hf_sweep_masked-lm_onnx_dynamo.json"


def test_each_task_names_a_mapping_and_class_transformers_has() -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.auto import modeling_auto

    mod = _module()
    for name, task in mod.TASKS.items():
        assert len(getattr(modeling_auto, task.mapping)) > 10, name
        assert hasattr(transformers, task.auto), name
        assert mod._types(None, name) == sorted(getattr(modeling_auto, task.mapping))
    with pytest.raises(SystemExit, match="no masked-lm family"):
        mod._types("llama", "masked-lm")  # a causal LM only


def test_sizes_reach_sub_configs_and_the_ladder_ends_at_the_defaults() -> None:
    transformers = pytest.importorskip("transformers")
    mod = _module()
    task = mod.TASKS["image-classification"]
    rungs = task.ladder()
    assert [r for r, _ in rungs] == ["small", "layers", "defaults"]
    assert "image_size" not in rungs[-1][1] and rungs[-1][1]["vocab_size"] == 256
    # CLIP's vision tower is a sub-config: a composite's defaults are full-sized towers
    config = mod._config(transformers, "clip", rungs[0][1])
    assert config.vision_config.hidden_size == 64 and config.vision_config.image_size == 64
    assert config.vision_config.num_hidden_layers == 2
    # the family table meets a constraint no generic size does (latent attention)
    config = mod._config(transformers, "deepseek_v3", mod.TASKS["causal-lm"].sizes())
    assert config.num_key_value_heads == config.num_attention_heads == 4
    assert config.qk_rope_head_dim == config.head_dim


def test_a_file_of_another_task_is_refused(tmp_path) -> None:
    import json
    import subprocess
    import sys

    out = tmp_path / "sweep.json"
    out.write_text(json.dumps({"rows": {}, "settings": {"task": "causal-lm"}}))
    run = subprocess.run([sys.executable, "benchmarks/hf_sweep.py", "--task", "masked-lm",
                          "--out", str(out), "--types", "bert"], capture_output=True,
                         text=True)
    assert run.returncode == 1 and "another sweep (causal-lm, pt2, opset default)" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    # the same task and format at another opset is another sweep too
    out.write_text(json.dumps({"rows": {}, "settings": {"task": "causal-lm",
                                                        "format": "onnx-dynamo"}}))
    run = subprocess.run([sys.executable, "benchmarks/hf_sweep.py", "--format", "onnx-dynamo",
                          "--opset", "23", "--out", str(out), "--types", "llama"],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "(causal-lm, onnx-dynamo, opset default)" in run.stderr
