"""The onnxruntime headroom benchmark counts a matrix node's FLOPs from its shapes as the
textbook formulas do, and over a whole model agrees with superopt's own FLOP count."""

from __future__ import annotations

import pytest

from bench_modules import load_benchmark


def _module():
    return load_benchmark("ort_headroom")


def test_matrix_flops_follow_the_shapes() -> None:
    flops = _module()._flops
    # 3x3 convolution, 64 -> 128 channels, 56x56 output: 2 * out elements * 64 * 9
    assert flops("Conv", [[1, 64, 56, 56], [128, 64, 3, 3], [128]],
                 [[1, 128, 56, 56]]) == 2 * 128 * 56 * 56 * 64 * 9
    # depthwise 3x3 over 96 channels: one input channel per output
    assert flops("Conv", [[1, 96, 112, 112], [96, 1, 3, 3]],
                 [[1, 96, 56, 56]]) == 2 * 96 * 56 * 56 * 9
    # batched matmul (12 heads, 128x64 by 64x128) and a Gemm with a transposed left side
    assert flops("MatMul", [[12, 128, 64], [12, 64, 128]],
                 [[12, 128, 128]]) == 2 * 12 * 128 * 128 * 64
    assert flops("Gemm", [[768, 128], [768, 3072]], [[128, 3072]]) == 2 * 128 * 3072 * 768
    # VGG's first classifier layer with its relu fused in, at batch 1
    assert flops("FusedGemm", [[1, 25088], [4096, 25088]], [[1, 4096]]) == 2 * 4096 * 25088
    assert flops("FusedMatMul", [[1, 12, 128, 64], [1, 12, 128, 64]],
                 [[1, 12, 128, 128]]) == 2 * 12 * 128 * 128 * 64


def test_a_profiled_model_s_matrix_flops_are_superopt_s_count() -> None:
    """onnxruntime's shapes and superopt's analysis count resnet18's convolutions and
    classifier alike (within 1%: the rest of superopt's count is the elementwise ops)."""
    from superopt.ir.analysis import stats
    from superopt.zoo import build

    mod = _module()
    row = mod.profile_row("resnet18", 1, 1, 1, peak=1e-6)  # a roof every kernel beats
    assert 0.5 < row["matrix_share"] <= 1
    assert row["bound"] == pytest.approx(1 / row["matrix_share"])  # at the rate they ran
    ours = stats(build("resnet18", batch=1)).flops / 1e9
    assert ours * 0.98 <= row["matrix_gflop"] <= ours
