"""`superopt optimize/tune --out X.onnx` write ONNX that onnxruntime runs with the values of
the original model; `superopt.exporters.export` picks the format by suffix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from superopt.cli import main  # noqa: E402
from superopt.exporters import export  # noqa: E402
from superopt.importers import load_model  # noqa: E402
from superopt.ir import GraphBuilder, interpret, load, random_feeds, save  # noqa: E402


def _ort(path: Path, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {k: np.asarray(v, np.float32) for k, v in feeds.items()})


@pytest.fixture()
def conv_bn(tmp_path: Path) -> Path:
    b = GraphBuilder("convbn")
    x = b.input("x", (1, 4, 10, 10))
    for i in range(2):
        x = b.conv2d(x, b.weight(f"w{i}", (4, 4, 3, 3)), padding="same")
        x = b.batch_norm(x, b.weight(f"s{i}", (4,), init="positive"), b.weight(f"b{i}", (4,)),
                         b.weight(f"m{i}", (4,)), b.weight(f"v{i}", (4,), init="positive"))
        x = b.relu(x)
    return save(b.build([x]), tmp_path / "convbn.json")


def test_optimize_out_onnx_runs_in_onnxruntime_with_the_original_values(
        conv_bn: Path, tmp_path: Path) -> None:
    out = tmp_path / "opt.onnx"
    assert main(["optimize", str(conv_bn), "--cost", "flops", "--budget", "4", "--repeats", "1",
                 "--warmup", "0", "--out", str(out)]) == 0
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    # fold_conv_bn applied: no BatchNormalization left, the folded weights are initializers.
    assert "BatchNormalization" not in {n.op_type for n in model.graph.node}
    original = load(conv_bn)
    feeds = random_feeds(original, seed=5)
    want = interpret(original, feeds)[0]
    got = _ort(out, feeds)[0]
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))
    # And the file is a MODEL_OR_FILE like any other.
    assert load_model(str(out)).op_histogram()["conv2d"] == 2


def test_tune_out_onnx(tmp_path: Path) -> None:
    out = tmp_path / "tuned.onnx"
    assert main(["tune", "squeezenet", "--budget", "6", "--out", str(out), "--seed", "1"]) == 0
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    original = load_model("squeezenet")
    feeds = random_feeds(original, seed=2)
    # The tuner folds weights drawn at its --seed; the file holds those values.
    want = interpret(original, feeds, seed=1)[0]
    got = _ort(out, feeds)[0]
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))


def test_export_picks_the_format_by_suffix(tmp_path: Path) -> None:
    b = GraphBuilder("g")
    g = b.build(b.relu(b.input("x", (2, 2))))
    assert onnx.load(str(export(g, tmp_path / "g.onnx"))).graph.node[0].op_type == "Relu"
    assert load(export(g, tmp_path / "g.json")).structural_hash == g.structural_hash
    with pytest.raises(ValueError, match="unknown export format '.txt'"):
        export(g, tmp_path / "g.txt")
