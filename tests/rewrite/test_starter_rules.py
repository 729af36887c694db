"""Every starter rule is exact: on several shapes (exact mod-p and float64 reference), through
the matcher and the rewriter, and on real models before and after rewriting."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from superopt.ir import TensorType, interpret, random_feeds
from superopt.rewrite import (
    Matcher,
    RewritePass,
    apply_sites,
    choose_all,
    group_rules,
    library_rules,
    starter_rules,
)
from superopt.rewrite.check import check_values
from superopt.substitutions import differs

T = TensorType
# The starter library and the libraries shipped beside it (`groups.rules`, `runtime.rules`).
RULES = {r.name: r for r in [*starter_rules(), *group_rules(), *library_rules("runtime")]}
CONV = {"s": (1, 1), "p": "same", "d": (1, 1), "g": 1}
CONV2 = {"s": (2, 1), "p": (1, 0, 0, 1), "d": (1, 2), "g": 2}


def bn(c: int) -> dict[str, T]:
    return {k: T((c,)) for k in ("scale", "bias", "mean", "var")}


Case = tuple[dict[str, T], dict[str, Any]]

# Per rule, (variable types, attribute bindings) for at least two configurations.
CASES: dict[str, list[Case]] = {
    "fuse_conv_relu": [({"x": T((1, 3, 6, 6)), "w": T((4, 3, 3, 3))}, CONV),
                       ({"x": T((2, 4, 7, 5)), "w": T((4, 2, 3, 1))}, CONV2)],
    "fuse_matmul_relu": [({"x": T((3, 4)), "y": T((4, 5))}, {}),
                         ({"x": T((2, 3, 4)), "y": T((4, 2))}, {})],
    "fuse_avgpool_relu": [({"x": T((1, 2, 6, 6))},
                           {"k": (3, 3), "s": (1, 1), "p": "same", "c": False}),
                          ({"x": T((2, 3, 7, 5))},
                           {"k": (2, 2), "s": (2, 2), "p": "valid", "c": True})],
    "fuse_maxpool_relu": [({"x": T((1, 2, 6, 6))}, {"k": (3, 3), "s": (2, 2), "p": "same"}),
                          ({"x": T((1, 1, 5, 5))}, {"k": (2, 2), "s": (1, 1), "p": (0, 1, 1, 0)})],
    "relu_idempotent": [({"x": T((3, 4))}, {}), ({"x": T((2, 2, 3))}, {})],
    "fold_conv_bn": [({"x": T((1, 2, 5, 5)), "w": T((4, 2, 3, 3)), **bn(4)}, {"e": 1e-3, **CONV}),
                     ({"x": T((1, 4, 6, 6)), "w": T((4, 1, 3, 3)), **bn(4)},
                      {"e": 1e-5, "s": (2, 2), "p": (1, 1, 1, 1), "d": (1, 1), "g": 4})],
    "fold_matmul_bn": [({"x": T((3, 4)), "w": T((4, 5)), **bn(5)}, {"e": 1e-5}),
                       ({"x": T((2, 6)), "w": T((6, 3)), **bn(3)}, {"e": 1e-3})],
    "avgpool_as_conv": [({"x": T((1, 2, 5, 4))},
                         {"k": (3, 3), "s": (2, 2), "p": "same", "a": "relu"}),
                        ({"x": T((1, 2, 6, 6))},
                         {"k": (3, 2), "s": (1, 2), "p": (1, 0, 2, 1), "a": "none"})],
    "avgpool_same3_as_conv": [({"x": T((1, 2, 5, 4))}, {}), ({"x": T((2, 3, 3, 7))}, {})],
    "merge_matmul": [({"x": T((3, 4)), "w1": T((4, 2)), "w2": T((4, 5))}, {"a": "none"}),
                     ({"x": T((2, 3, 4)), "w1": T((4, 3)), "w2": T((4, 3))}, {"a": "relu"})],
    "merge_linear": [({"x": T((3, 4)), "w1": T((4, 2)), "b1": T((2,)), "w2": T((4, 5)),
                       "b2": T((5,))}, {}),
                     ({"x": T((2, 3, 4)), "w1": T((4, 3)), "b1": T((3,)), "w2": T((4, 1)),
                       "b2": T((1,))}, {})],
    "fuse_matmul_bias": [({"x": T((3, 4)), "w": T((4, 5)), "b": T((5,))}, {}),
                         ({"x": T((2, 3, 4)), "w": T((4, 2)), "b": T((2,))}, {})],
    "fuse_linear_relu": [({"x": T((3, 4)), "w": T((5, 4)), "b": T((5,))}, {}),
                         ({"x": T((2, 3, 4)), "w": T((2, 4)), "b": T((2,))}, {})],
    "merge_dense": [({"x": T((3, 4)), "w1": T((2, 4)), "b1": T((2,)), "w2": T((5, 4)),
                      "b2": T((5,))}, {"a": "none"}),
                    ({"x": T((2, 3, 4)), "w1": T((3, 4)), "b1": T((3,)), "w2": T((1, 4)),
                      "b2": T((1,))}, {"a": "tanh"})],
    "merge_conv": [({"x": T((1, 3, 6, 6)), "w1": T((2, 3, 3, 3)), "w2": T((4, 3, 3, 3))},
                    {"s": (1, 1), "p": "same", "d": (1, 1), "a": "none"}),
                   ({"x": T((2, 2, 7, 7)), "w1": T((3, 2, 1, 3)), "w2": T((1, 2, 1, 3))},
                    {"s": (2, 1), "p": (0, 1, 1, 1), "d": (1, 1), "a": "relu"})],
    "merge_conv_enlarge": [({"x": T((1, 3, 6, 6)), "w1": T((2, 3, 1, 1)), "w2": T((4, 3, 3, 3))},
                            {"d": (1, 1), "a": "none"}),
                           ({"x": T((1, 2, 7, 6)), "w1": T((3, 2, 3, 1)), "w2": T((2, 2, 3, 5))},
                            {"d": (2, 1), "a": "relu"})],
    "merge_conv_enlarge_valid": [
        ({"x": T((1, 3, 6, 6)), "w1": T((2, 3, 1, 1)), "w2": T((4, 3, 3, 3))},
         {"p": (1, 1, 1, 1), "a": "none"}),
        ({"x": T((1, 2, 7, 7)), "w1": T((2, 2, 1, 3)), "w2": T((3, 2, 5, 5))},
         {"p": (2, 2, 1, 1), "a": "relu"})],
    "merge_conv_enlarge_pads": [
        ({"x": T((1, 3, 6, 6)), "w1": T((2, 3, 1, 1)), "w2": T((4, 3, 3, 3))},
         {"p1": (0, 1, 0, 1), "p2": (1, 2, 1, 2), "a": "none"}),
        ({"x": T((1, 2, 7, 7)), "w1": T((2, 2, 3, 3)), "w2": T((3, 2, 5, 5))},
         {"p1": (1, 1, 0, 0), "p2": (2, 2, 1, 1), "a": "none"})],
    "matmul_add_rhs": [({"x": T((3, 4)), "w1": T((4, 5)), "w2": T((4, 5))}, {}),
                       ({"x": T((2, 3, 4)), "w1": T((4, 2)), "w2": T((4, 2))}, {})],
    "matmul_add_lhs": [({"x": T((3, 4)), "y": T((3, 4)), "w": T((4, 5))}, {}),
                       ({"x": T((2, 3, 4)), "y": T((2, 3, 4)), "w": T((2, 4, 2))}, {})],
    "conv_add_weights": [({"x": T((1, 3, 6, 6)), "w1": T((4, 3, 3, 3)), "w2": T((4, 3, 3, 3))},
                          CONV),
                         ({"x": T((1, 4, 5, 5)), "w1": T((2, 2, 1, 1)), "w2": T((2, 2, 1, 1))},
                          {"s": (2, 2), "p": "valid", "d": (1, 1), "g": 2})],
    "add_small_terms": [({"x": T((2, 3, 4)), "b": T((4,)), "c": T((3, 4))}, {}),
                        ({"x": T((1, 4, 5, 5)), "b": T((4, 1, 1)), "c": T((4, 1, 1))}, {})],
    "add_pair_biases": [({"x": T((2, 3, 4)), "b": T((4,)), "y": T((2, 3, 4)), "c": T((1, 4))},
                         {}),
                        ({"x": T((1, 4, 5, 5)), "b": T((4, 1, 1)), "y": T((1, 4, 5, 5)),
                          "c": T((4, 1, 1))}, {})],
    "scale_matmul_lhs": [({"x": T((3, 4)), "y": T((4, 5)), "c": T(())}, {}),
                         ({"x": T((2, 3, 4)), "y": T((4, 2)), "c": T(())}, {})],
    "scale_conv_weight": [({"x": T((1, 3, 6, 6)), "w": T((4, 3, 3, 3)), "c": T(())}, CONV),
                          ({"x": T((1, 4, 5, 5)), "w": T((2, 2, 3, 3)), "c": T(())},
                           {"s": (2, 2), "p": "valid", "d": (1, 1), "g": 2})],
    "scale_through_transpose": [({"x": T((2, 3, 4)), "c": T(())}, {"p": (2, 0, 1)}),
                                ({"x": T((3, 5)), "c": T(())}, {"p": (1, 0)})],
    "scale_through_reshape": [({"x": T((2, 3, 4)), "c": T(())}, {"s": (6, 4)}),
                              ({"x": T((12,)), "c": T(())}, {"s": (3, 2, 2)})],
    "scale_through_add": [({"x": T((2, 3, 4)), "y": T((4,)), "c": T(())}, {}),
                          ({"x": T((3, 1)), "y": T((1, 5)), "c": T(())}, {})],
    "transpose_cancel": [({"x": T((2, 3, 4))}, {"p": (1, 2, 0), "q": (2, 0, 1)}),
                         ({"x": T((2, 3))}, {"p": (1, 0), "q": (1, 0)}),
                         ({"x": T((1, 2, 3, 4))}, {"p": (0, 2, 1, 3), "q": (0, 2, 1, 3)})],
    "transpose_compose2": [({"x": T((2, 3))}, {"p": (1, 0), "q": (1, 0)}),
                           ({"x": T((2, 3))}, {"p": (0, 1), "q": (1, 0)})],
    "transpose_compose3": [({"x": T((2, 3, 4))}, {"p": (2, 0, 1), "q": (1, 2, 0)}),
                           ({"x": T((2, 3, 4))}, {"p": (0, 2, 1), "q": (2, 1, 0)})],
    "transpose_compose4": [({"x": T((1, 2, 3, 4))}, {"p": (0, 1, 3, 2), "q": (0, 2, 1, 3)}),
                           ({"x": T((1, 2, 3, 4))}, {"p": (3, 2, 1, 0), "q": (1, 0, 3, 2)})],
    "transpose_identity": [({"x": T((2, 3))}, {"p": (0, 1)}),
                           ({"x": T((2, 3, 4, 5))}, {"p": (0, 1, 2, 3)})],
    "reshape_compose": [({"x": T((2, 3, 4))}, {"s": (4, 6), "t": (6, 4)}),
                        ({"x": T((12,))}, {"s": (2, 6), "t": (3, 4)})],
    "reshape_identity": [({"x": T((2, 3))}, {"s": (2, 3)}), ({"x": T((4,))}, {"s": (4,)})],
    "slice_identity": [({"x": T((2, 3))}, {"b": (0, 0), "e": (2, 3), "t": (1, 1)}),
                       ({"x": T((4,))}, {"b": (0,), "e": (4,), "t": (1,)})],
    "concat_single": [({"x": T((2, 3))}, {"a": 1}), ({"x": T((4,))}, {"a": 0})],
    "concat_split": [({"x": T((2, 5))}, {"a": 1, "s": (2, 3)}),
                     ({"x": T((4, 3, 2))}, {"a": 0, "s": (1, 3)})],
    # ResNeXt's shape (several channels and outputs per group), two groups with a stride
    # and explicit pads, and three groups of one output each.
    "group_conv_dense": [({"x": T((1, 8, 5, 5)), "w": T((8, 2, 3, 3))},
                          {"s": (1, 1), "p": "same", "d": (1, 1), "g": 4, "a": "relu"}),
                         ({"x": T((2, 4, 7, 5)), "w": T((6, 2, 3, 1))},
                          {"s": (2, 1), "p": (1, 0, 0, 1), "d": (1, 2), "g": 2, "a": "none"}),
                         ({"x": T((1, 6, 4, 4)), "w": T((3, 2, 1, 1))},
                          {"s": (1, 1), "p": "valid", "d": (1, 1), "g": 3, "a": "none"}),
                         # Depthwise (NasNet-A's separable convs) and depthwise with a
                         # channel multiplier of two.
                         ({"x": T((2, 5, 6, 6)), "w": T((5, 1, 3, 3))},
                          {"s": (1, 1), "p": "same", "d": (1, 1), "g": 5, "a": "none"}),
                         ({"x": T((1, 3, 5, 5)), "w": T((6, 1, 3, 3))},
                          {"s": (2, 2), "p": (1, 1, 1, 1), "d": (1, 1), "g": 3, "a": "relu"})],
    # ResNeXt's first stage (groups of 4 channels, 4 outputs each) merged to groups of
    # 8 and 16 channels; two channels per group with a stride and explicit pads, three
    # or one output per group.
    "group_conv_merge2": [({"x": T((1, 16, 5, 5)), "w": T((16, 4, 3, 3))},
                           {"s": (1, 1), "p": "same", "d": (1, 1), "g": 4, "a": "relu"}),
                          ({"x": T((2, 8, 7, 5)), "w": T((12, 2, 3, 1))},
                           {"s": (2, 1), "p": (1, 0, 0, 1), "d": (1, 2), "g": 4, "a": "none"}),
                          # Depthwise, two outputs per channel.
                          ({"x": T((2, 6, 7, 5)), "w": T((12, 1, 3, 1))},
                           {"s": (1, 1), "p": "same", "d": (1, 1), "g": 6, "a": "none"})],
    "group_conv_merge4": [({"x": T((1, 32, 4, 4)), "w": T((32, 4, 3, 3))},
                           {"s": (1, 1), "p": "same", "d": (1, 1), "g": 8, "a": "relu"}),
                          ({"x": T((1, 16, 6, 6)), "w": T((8, 2, 3, 3))},
                           {"s": (2, 2), "p": (1, 1, 1, 1), "d": (1, 1), "g": 8,
                            "a": "none"})],
    # A depthwise conv on 6 channels (NASNet-A's 22, smaller) padded to 8, and on 3 with a
    # stride, explicit pads, a dilation and a fused relu, padded to 4.
    "pad_depthwise4": [({"x": T((1, 6, 5, 5)), "w": T((6, 1, 3, 3))},
                        {"s": (1, 1), "p": "same", "d": (1, 1), "g": 6, "a": "none"}),
                       ({"x": T((2, 3, 7, 6)), "w": T((3, 1, 3, 2))},
                        {"s": (2, 1), "p": (1, 0, 2, 1), "d": (1, 2), "g": 3, "a": "relu"})],
    # BERT's hidden states (batch 2, 5 tokens, 4 features) and one token of one sequence.
    "flatten_layer_norm3": [({"x": T((2, 5, 4)), "g": T((4,)), "c": T((4,))}, {"n": 1e-12}),
                            ({"x": T((1, 1, 6)), "g": T((6,)), "c": T((6,))}, {"n": 1e-5})],
    # Swin's windows x heads x 49 x 49 probabilities against 32-wide values (smaller), and a
    # rank-2 product with the softmax over the first axis.
    "scale_softmax_product": [({"x": T((2, 3, 7, 7)), "v": T((2, 3, 7, 4))}, {"a": 3}),
                              ({"x": T((5, 4)), "v": T((4, 3))}, {"a": 0})],
    # SqueezeNet's fire module output (two expansions side by side) read by a 1x1 squeeze
    # conv with its bias, and by a strided, padded 3x3 conv; the pool between them.
    "split_conv_concat_bias": [({"x": T((1, 4, 5, 5)), "y": T((1, 3, 5, 5)),
                                 "w": T((2, 7, 1, 1)), "b": T((2, 1, 1))},
                                {"s": (1, 1), "p": "valid", "d": (1, 1)}),
                               ({"x": T((2, 2, 6, 7)), "y": T((2, 5, 6, 7)),
                                 "w": T((3, 7, 3, 3)), "b": T((3, 1, 1))},
                                {"s": (2, 1), "p": (1, 1, 0, 1), "d": (1, 1)})],
    "split_conv_concat": [({"x": T((1, 4, 5, 5)), "y": T((1, 3, 5, 5)), "w": T((2, 7, 1, 1))},
                           {"s": (1, 1), "p": "valid", "d": (1, 1)}),
                          ({"x": T((2, 2, 6, 7)), "y": T((2, 1, 6, 7)), "w": T((3, 3, 3, 2))},
                           {"s": (1, 2), "p": "same", "d": (2, 1)})],
    "maxpool_through_concat": [({"x": T((1, 4, 7, 7)), "y": T((1, 3, 7, 7))},
                                {"k": (3, 3), "s": (2, 2), "p": "valid", "a": "none"}),
                               ({"x": T((2, 2, 6, 5)), "y": T((2, 1, 6, 5))},
                                {"k": (2, 3), "s": (1, 2), "p": (0, 1, 1, 1), "a": "relu"})],
    # VGG's first block at two sizes: a 3-channel image, and 2 channels in, 3 out, batch 2.
    "fold_vgg_block": [({"x": T((1, 3, 4, 6)), "w1": T((4, 3, 3, 3)), "b1": T((4, 1, 1)),
                          "w2": T((4, 4, 3, 3)), "b2": T((4, 1, 1))}, {}),
                         ({"x": T((2, 2, 6, 8)), "w1": T((3, 2, 3, 3)), "b1": T((3, 1, 1)),
                           "w2": T((3, 3, 3, 3)), "b2": T((3, 1, 1))}, {})],
    "split_concat0": [({"x": T((2, 3)), "y": T((2, 4))}, {"a": 1}),
                      ({"x": T((1, 3)), "y": T((2, 3))}, {"a": 0})],
    # Llama's MLP (gate and up of one width) and unequal widths over a batch.
    "merge_swiglu": [({"x": T((3, 4)), "wg": T((4, 6)), "wu": T((4, 6))}, {}),
                     ({"x": T((2, 3, 5)), "wg": T((5, 4)), "wu": T((5, 4))}, {})],
    # Grouped-query projections: K and V narrower than Q (4 query heads, 2 or 1 kv heads).
    "merge_qkv": [({"x": T((2, 3, 8)), "wq": T((8, 8)), "wk": T((8, 4)), "wv": T((8, 4))}, {}),
                  ({"x": T((5, 6)), "wq": T((6, 12)), "wk": T((6, 3)), "wv": T((6, 3))}, {})],
    # Head dims 4 and 128 (scales 1/2 and Python's 1 / sqrt(128)), causal and not,
    # grouped-query.
    "fold_attention_scale": [({"q": T((1, 2, 3, 4)), "k": T((1, 2, 5, 4)), "v": T((1, 2, 5, 3))},
                              {"s": 0.5, "c": False}),
                             ({"q": T((2, 4, 5, 128)), "k": T((2, 2, 5, 128)),
                               "v": T((2, 2, 5, 8))}, {"s": 1.0 / math.sqrt(128), "c": True})],
    "fold_rms_norm_weight": [({"x": T((3, 4)), "g": T((4,)), "w": T((4, 5))},
                              {"a": 1, "e": 1e-6}),
                             ({"x": T((2, 3, 6)), "g": T((6,)), "w": T((6, 2))},
                              {"a": 2, "e": 1e-5})],
    "scale_through_mul": [({"x": T((2, 3)), "y": T((3,)), "c": T(())}, {}),
                          ({"x": T((1, 4)), "y": T((3, 1)), "c": T(())}, {})],
    "scale_through_concat": [({"x": T((2, 3)), "y": T((2, 4)), "c": T(())}, {"a": 1}),
                             ({"x": T((1, 2, 2)), "y": T((3, 2, 2)), "c": T(())}, {"a": 0})],
    "scale_through_neg": [({"x": T((2, 3)), "c": T(())}, {}), ({"x": T((4,)), "c": T(())}, {})],
    "scale_through_split": [({"x": T((2, 6)), "c": T(())}, {"a": 1, "n": (3, 3)}),
                            ({"x": T((5, 2, 4)), "c": T(())}, {"a": 0, "n": (1, 4)})],
    "fold_rms_norm_weight2": [({"x": T((3, 4)), "g": T((4,)), "w1": T((4, 5)), "w2": T((4, 5))},
                               {"a": 1, "e": 1e-6}),
                              ({"x": T((2, 3, 6)), "g": T((6,)), "w1": T((6, 2)),
                                "w2": T((6, 7))}, {"a": 2, "e": 1e-5})],
    "fold_rms_norm_weight3": [({"x": T((2, 3, 8)), "g": T((8,)), "w1": T((8, 8)),
                                "w2": T((8, 4)), "w3": T((8, 4))}, {"a": 2, "e": 1e-6}),
                              ({"x": T((3, 4)), "g": T((4,)), "w1": T((4, 2)), "w2": T((4, 1)),
                                "w3": T((4, 3))}, {"a": 1, "e": 1e-5})],
    # Narrowing: slices (some strided, some of one token) through ops they commute with.
    "slice_relu": [({"x": T((2, 5))}, {"b": (0, 1), "e": (2, 4), "t": (1, 1)}),
                   ({"x": T((3, 4, 2))}, {"b": (1, 0, 0), "e": (3, 4, 2), "t": (1, 2, 1)})],
    "slice_gelu": [({"x": T((2, 5))}, {"b": (0, 1), "e": (2, 4), "t": (1, 1), "ap": "none"}),
                   ({"x": T((3, 4, 2))}, {"b": (1, 0, 0), "e": (3, 4, 2), "t": (1, 2, 1),
                                          "ap": "tanh"})],
    "slice_ewadd": [({"x": T((2, 5)), "y": T((2, 5))}, {"b": (1, 0), "e": (2, 5), "t": (1, 2)}),
                    ({"x": T((3, 4, 2)), "y": T((3, 4, 2))},
                     {"b": (0, 1, 0), "e": (3, 2, 2), "t": (2, 1, 1)})],
    "slice_ewadd_bias2": [({"x": T((4, 3)), "c": T((3,))}, {"b": (1, 0), "e": (3, 3),
                                                          "t": (1, 1)}),
                          ({"x": T((5, 2)), "c": T((2,))}, {"b": (0, 0), "e": (5, 2),
                                                          "t": (2, 1)})],
    "slice_ewadd_bias3": [({"x": T((2, 5, 3)), "c": T((3,))},
                           {"b": (0, 0, 0), "e": (2, 1, 3), "t": (1, 1, 1)}),
                          ({"x": T((3, 4, 2)), "c": T((2,))},
                           {"b": (1, 1, 0), "e": (3, 4, 2), "t": (1, 2, 1)})],
    "slice_matmul2": [({"x": T((4, 3)), "w": T((3, 5))},
                       {"a": "none", "b": (1, 0), "e": (3, 5), "t": (1, 1)}),
                      ({"x": T((5, 2)), "w": T((2, 3))},
                       {"a": "relu", "b": (0, 0), "e": (5, 3), "t": (2, 1)})],
    "slice_matmul3": [({"x": T((2, 5, 3)), "w": T((3, 4))},
                       {"a": "none", "b": (0, 0, 0), "e": (2, 1, 4), "t": (1, 1, 1)}),
                      ({"x": T((3, 4, 2)), "w": T((2, 3))},
                       {"a": "tanh", "b": (1, 1, 0), "e": (3, 4, 3), "t": (1, 2, 1)})],
    "slice_linear2": [({"x": T((4, 3)), "w": T((5, 3)), "c": T((5,))},
                       {"a": "none", "b": (1, 0), "e": (3, 5), "t": (1, 1)}),
                      ({"x": T((5, 2)), "w": T((3, 2)), "c": T((3,))},
                       {"a": "relu", "b": (0, 0), "e": (5, 3), "t": (2, 1)})],
    "slice_linear3": [({"x": T((2, 5, 3)), "w": T((4, 3)), "c": T((4,))},
                       {"a": "none", "b": (0, 0, 0), "e": (2, 1, 4), "t": (1, 1, 1)}),
                      ({"x": T((3, 4, 2)), "w": T((3, 2)), "c": T((3,))},
                       {"a": "sigmoid", "b": (1, 1, 0), "e": (3, 4, 3), "t": (1, 2, 1)})],
    # Over the last axis (ViT's) and over the last two (a slice of the rows only).
    "slice_layer_norm": [({"x": T((2, 5, 4)), "g": T((4,)), "c": T((4,))},
                          {"a": 2, "n": 1e-5, "b": (0, 0, 0), "e": (2, 1, 4), "t": (1, 1, 1)}),
                         ({"x": T((3, 4, 2, 3)), "g": T((2, 3)), "c": T((2, 3))},
                          {"a": 2, "n": 1e-6, "b": (1, 1, 0, 0), "e": (3, 4, 2, 3),
                           "t": (1, 2, 1, 1)})],
    "slice_transpose_0213": [({"x": T((2, 3, 4, 5))},
                              {"b": (0, 1, 0, 2), "e": (2, 4, 3, 5), "t": (1, 1, 2, 1)}),
                             ({"x": T((1, 2, 3, 2))},
                              {"b": (0, 0, 1, 0), "e": (1, 3, 2, 2), "t": (1, 2, 1, 1)})],
    "slice_reshape_merge_last": [({"x": T((2, 5, 3, 4))}, {"s": (2, 5, 12), "b": (0, 0, 0),
                                                         "e": (2, 1, 12), "t": (1, 1, 1)}),
                                 ({"x": T((3, 4, 2, 2))}, {"s": (3, 4, 4), "b": (1, 2, 0),
                                                         "e": (3, 4, 4), "t": (1, 1, 1)})],
    "slice_reshape_split_last": [({"x": T((2, 5, 12))},
                                  {"s": (2, 5, 3, 4), "b": (0, 0, 0, 0), "e": (2, 1, 3, 4),
                                   "t": (1, 1, 1, 1)}),
                                 ({"x": T((3, 4, 6))},
                                  {"s": (3, 4, 2, 3), "b": (1, 1, 0, 0), "e": (2, 3, 2, 3),
                                   "t": (1, 1, 1, 1)})],
    # One query row (the class token) and strided rows under grouped-query attention.
    "slice_attention_rows": [({"q": T((1, 2, 5, 4)), "k": T((1, 2, 6, 4)), "v": T((1, 2, 6, 3))},
                              {"s": 0.5, "b": (0, 0, 0, 0), "e": (1, 2, 1, 3),
                               "t": (1, 1, 1, 1)}),
                             ({"q": T((2, 4, 5, 8)), "k": T((2, 2, 7, 8)), "v": T((2, 2, 7, 8))},
                              {"s": 0.125, "b": (0, 0, 1, 0), "e": (2, 4, 5, 8),
                               "t": (1, 1, 2, 1)})],
}
# Exact over the reals only: the mod-p semantics has no exact square roots (rsqrt is a
# pseudo-random function there) and reads the scale attribute as a rational's residue.
REAL_ONLY = {"fold_attention_scale"}
# Rules that differ from a listed one only in the op or activation share its cases.
SAME_AS = {"fuse_conv_sigmoid": "fuse_conv_relu", "fuse_conv_tanh": "fuse_conv_relu",
           "relu_after_fused_relu": "fuse_conv_relu", "fuse_matmul_sigmoid": "fuse_matmul_relu",
           "fuse_matmul_tanh": "fuse_matmul_relu", "scale_matmul_rhs": "scale_matmul_lhs",
           "split_concat1": "split_concat0", "fuse_bias_matmul": "fuse_matmul_bias",
           "fuse_linear_sigmoid": "fuse_linear_relu", "fuse_linear_tanh": "fuse_linear_relu",
           "slice_silu": "slice_relu", "slice_sigmoid": "slice_relu", "slice_tanh": "slice_relu",
           "slice_ewmul": "slice_ewadd"}


def cases(name: str) -> list[Case]:
    return CASES[SAME_AS.get(name, name)]


def test_every_starter_rule_has_test_cases() -> None:
    assert set(RULES) == set(CASES) | set(SAME_AS)


def _float_feeds(graph: Any, seed: int) -> dict[str, np.ndarray]:
    feeds = random_feeds(graph, seed=seed)
    if "var" in feeds:  # batch-norm variances are positive
        feeds["var"] = np.abs(feeds["var"]) + 0.5
    return feeds


@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_is_exact_on_several_shapes(name: str) -> None:
    rule = RULES[name]
    for types, attrs in cases(name):
        types = {k: v for k, v in types.items() if k in rule.source_vars()}
        assert rule.holds_condition(types, attrs), f"{name}: case does not meet the condition"
        if name not in REAL_ONLY:
            assert differs(rule, types, attrs, trials=2) is None, f"{name} differs at {types}"
        src, tgt = rule.instantiate(types, attrs)
        feeds = _float_feeds(src, seed=1)
        for a, b in zip(interpret(src, feeds), interpret(tgt, feeds), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(a).max()))


@pytest.mark.parametrize("name", sorted(RULES))
def test_matcher_finds_each_rule_on_its_own_source_and_rewrites_it(name: str) -> None:
    rule = RULES[name]
    m = Matcher([rule])
    for types, attrs in cases(name):
        types = {k: v for k, v in types.items() if k in rule.source_vars()}
        src, _ = rule.instantiate(types, attrs)
        found = m.match(src)
        assert any(set(s.roots) == set(src.outputs) for s in found.sites), \
            f"{name}: no site at the source's outputs ({dict(found.rejected)})"
        site = next(s for s in found.sites if set(s.roots) == set(src.outputs))
        new = apply_sites(src, [site], m).graph
        assert new.structural_hash != src.structural_hash
        feeds = _float_feeds(src, seed=2)
        want, got = interpret(src, feeds), interpret(new, feeds)
        for a, b in zip(want, got, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(a).max()))


@pytest.mark.parametrize("model,options", [
    ("squeezenet", {"image_size": 64}),
    ("resnet18", {"image_size": 32}),
    ("inception_v3", {"image_size": 75}),
    ("nasnet_a", {"image_size": 64}),
    ("bert-small", {"seq_len": 16}),
    ("resnext50", {"image_size": 32}),
])
def test_rewriting_real_models_keeps_their_values(model: str, options: dict[str, Any]) -> None:
    from superopt import zoo

    g = zoo.build(model, **options)
    rewrite = RewritePass(starter_rules())
    # Every applicable site, round after round; scaling rules fire at every point, so
    # a few rounds exercise every rule that applies to the model.
    _, run = rewrite.iterate(g, choose_all(), max_rounds=3)
    assert run.applied, f"no starter rule applies to {model}"
    run.graph.lint()
    check = check_values(g, run.graph, rtol=1e-9)
    assert check.ok, check.summary()


def test_vgg_blocks_fold_and_keep_their_values() -> None:
    # CSRNet's front end (VGG-16's first ten convs) has three conv-relu-conv-relu-pool
    # chains: blocks 1 and 2, and the last two convs of block 3.
    from superopt import zoo

    g = zoo.build("csrnet", image_size=32)
    m = Matcher([RULES["fold_vgg_block"]])
    sites = m.match(g).sites
    assert len(sites) == 3
    new = apply_sites(g, sites, m).graph
    assert sum(n.op == "pool2d_max" for n in new.nodes) == 2 * sum(
        n.op == "pool2d_max" for n in g.nodes)
    new.lint()
    check = check_values(g, new, rtol=1e-9)
    assert check.ok, check.summary()


def _decoder_block(rope: bool = False) -> Any:
    """A small Llama-style block: RMSNorm, grouped-query causal attention (4 query heads,
    2 kv heads, head dim 4, default scale 1/2; with `rope`, rotary embeddings on q and k:
    x * cos + concat(-x2, x1) * sin), output projection, RMSNorm, SwiGLU MLP."""
    from superopt.ir import GraphBuilder

    b = GraphBuilder("decoder_block")
    x = b.input("x", (2, 5, 16))
    cos, sin = b.input("cos", (5, 4)), b.input("sin", (5, 4))

    def heads(t: Any, n: int) -> Any:
        h = b.transpose(b.reshape(t, shape=(2, 5, n, 4)), perm=(0, 2, 1, 3))
        if not rope:
            return h
        x1, x2 = b.split(h, axis=3, sizes=(2, 2))
        return b.ewadd(b.ewmul(h, cos), b.ewmul(b.concat(b.neg(x2), x1, axis=3), sin))

    n = b.rms_norm(x, b.weight("ln1", (16,), init="positive"), axis=-1, eps=1e-6)
    q = heads(b.matmul(n, b.weight("wq", (16, 16))), 4)
    k = heads(b.matmul(n, b.weight("wk", (16, 8))), 2)
    v = heads(b.matmul(n, b.weight("wv", (16, 8))), 2)
    ctx = b.transpose(b.attention(q, k, v, causal=True), perm=(0, 2, 1, 3))
    h = b.ewadd(x, b.matmul(b.reshape(ctx, shape=(2, 5, 16)), b.weight("wo", (16, 16))))
    m = b.rms_norm(h, b.weight("ln2", (16,), init="positive"), axis=-1, eps=1e-6)
    gate = b.silu(b.matmul(m, b.weight("wg", (16, 24))))
    up = b.matmul(m, b.weight("wu", (16, 24)))
    return b.build(b.ewadd(h, b.matmul(b.ewmul(gate, up), b.weight("wd", (24, 16)))))


@pytest.mark.parametrize("name,sites", [("merge_swiglu", 1), ("merge_qkv", 1),
                                        ("fold_attention_scale", 1),
                                        ("fold_rms_norm_weight", 0),
                                        ("fold_rms_norm_weight2", 1),
                                        ("fold_rms_norm_weight3", 1)])
def test_transformer_rules_match_a_decoder_block(name: str, sites: int) -> None:
    # Each norm feeds several matmuls, so the one-matmul RMSNorm fold has no exclusive
    # site; the two- and three-matmul forms cover the MLP's and the attention's norm.
    from superopt.rewrite.check import check_values

    g = _decoder_block()
    m = Matcher([RULES[name]])
    found = m.match(g).sites
    assert len(found) == sites, (name, dict(m.match(g).rejected))
    if not sites:
        return
    new = apply_sites(g, found, m).graph
    new.lint()
    assert new.structural_hash != g.structural_hash
    check = check_values(g, new, rtol=1e-9)
    assert check.ok, check.summary()


SCALE_PATH = ("fold_attention_scale", "scale_through_transpose", "scale_through_reshape",
              "scale_matmul_rhs", "scale_through_add", "scale_through_mul",
              "scale_through_concat", "scale_through_neg", "scale_through_split")


@pytest.mark.parametrize("rope", [False, True])
def test_attention_scale_moves_into_the_query_weight(rope: bool) -> None:
    # fold_attention_scale, then the scale_* rules carry the factor through the head split
    # (and rotary embeddings) into the query projection's weight; attention keeps scale 1.
    from superopt.rewrite.check import check_values

    g = _decoder_block(rope)
    names = SCALE_PATH
    _, run = RewritePass([RULES[n] for n in names]).iterate(g, choose_all(), max_rounds=12)
    new = run.graph
    new.lint()
    (att,) = [n for n in new.nodes if n.op == "attention"]
    assert att.attr("scale") == 1.0
    (sm,) = [n for n in new.nodes if n.op == "smul"]
    assert new.nodes[sm.inputs[0].node].op == "weight"  # the factor sits on W_q
    check = check_values(g, new, rtol=1e-9)
    assert check.ok, check.summary()


@pytest.mark.parametrize("head_dim", [4, 32, 96, 128])
def test_default_attention_scale_is_recognised_at_every_head_dim(head_dim: int) -> None:
    # The scale is resolved to 1.0 / math.sqrt(d) when the graph is built; the rule's
    # condition computes the same float (a product like s * s * d == 1 misses d = 32, 128).
    from superopt.ir import GraphBuilder
    from superopt.rewrite.check import check_values

    b = GraphBuilder("sdpa")
    q, k, v = (b.input(n, (1, 2, 3, head_dim)) for n in "qkv")
    g = b.build(b.attention(q, k, v, causal=True))
    m = Matcher([RULES["fold_attention_scale"]])
    sites = m.match(g).sites
    assert len(sites) == 1
    new = apply_sites(g, sites, m).graph
    assert [n.attr("scale") for n in new.nodes if n.op == "attention"] == [1.0]
    assert check_values(g, new, rtol=1e-9).ok


def test_narrowing_computes_the_last_block_of_a_vit_for_the_class_token_only() -> None:
    # The classifier reads the class token alone: after the search, the last block's MLP
    # runs on one token per image and every other block's on all of them; the keys and
    # values of the last block are still computed for every token.
    from superopt.rewrite import create_cost, optimize
    from superopt.zoo.vit import ViTConfig, vit

    # Wide enough that the narrowed block pays under the FLOP cost (at width 16 the extra
    # slices cost more than the one-token MLP saves, and the search leaves it).
    cfg = ViTConfig(layers=2, hidden=64, heads=4, mlp=256, patch=4)
    g = vit(cfg, batch=2, image_size=16, num_classes=5)  # 16 patches + the class token
    flops = create_cost("flops")
    res = optimize(g, starter_rules(), flops, budget=30)
    assert any(r.startswith("slice_attention_rows") for r in res.applied)

    def mlp_rows(graph: Any) -> list[int]:
        return sorted(n.types[0].shape[1] for n in graph.nodes
                      if n.op in ("matmul", "linear") and n.types[0].rank == 3
                      and graph.type_of(n.inputs[0]).shape[-1] == cfg.mlp)

    assert mlp_rows(g) == [17, 17]
    assert mlp_rows(res.graph) == [1, 17]
    assert flops.cost(res.graph) < flops.cost(g)
    check = check_values(g, res.graph, rtol=1e-9)
    assert check.ok, check.summary()
