"""HLO importer: each mapping computes what the HLO op computes (checked against numpy
implementations of XLA's semantics written here), unsupported opcodes are all reported with
where they occur, cost mode keeps shapes, storage dtypes and kernels, and the shipped
TpuGraphs programs import."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from superopt.importers.errors import ModelImportError, UnsupportedOpsError
from superopt.importers.hlo import import_hlo, load_module
from superopt.ir import DType, interpret
from superopt.tpu_sim.replay import data_dir

DATA = data_dir()  # package data: present in every checkout and installation


# ---- building small modules --------------------------------------------------------------------

def shape(etype: str, dims: tuple[int, ...], m2m: list[int] | None = None) -> dict[str, Any]:
    return {"type": etype, "dims": list(dims),
            "minor_to_major": m2m if m2m is not None else list(range(len(dims) - 1, -1, -1))}


class Module:
    """A one-computation HLO module built instruction by instruction (ids in order)."""

    def __init__(self) -> None:
        self.ins: list[dict[str, Any]] = []
        self.extra: list[dict[str, Any]] = []
        self.params = 0

    def add(self, name: str, opcode: str, s: dict[str, Any], *operands: int, **fields: Any
            ) -> int:
        i = len(self.ins) + 1
        self.ins.append({"id": i, "name": name, "opcode": opcode, "shape": s,
                         "operand_ids": list(operands), **fields})
        return i

    def param(self, name: str, etype: str, dims: tuple[int, ...], m2m: list[int] | None = None
              ) -> int:
        self.params += 1
        return self.add(name, "parameter", shape(etype, dims, m2m),
                        parameter_number=self.params - 1)

    def computation(self, cid: int, name: str, root_opcode: str) -> None:
        """A reducer computation (two scalar parameters combined by `root_opcode`)."""
        s = shape("f32", ())
        self.extra.append({"id": cid, "name": name, "root_id": 1000 + cid, "instructions": [
            {"id": 998 + cid, "name": f"{name}.a", "opcode": "parameter", "shape": s,
             "operand_ids": [], "parameter_number": 0},
            {"id": 999 + cid, "name": f"{name}.b", "opcode": "parameter", "shape": s,
             "operand_ids": [], "parameter_number": 1},
            {"id": 1000 + cid, "name": f"{name}.r", "opcode": root_opcode, "shape": s,
             "operand_ids": [998 + cid, 999 + cid]}]})

    def json(self, root: int) -> dict[str, Any]:
        return {"name": "test", "entry_computation_id": 0, "computations": [
            *self.extra, {"id": 0, "name": "main", "root_id": root, "instructions": self.ins}]}


def run(module: dict[str, Any], feeds: dict[str, np.ndarray], proxies: bool = False) -> Any:
    imp = import_hlo(module, proxies=proxies)
    out = interpret(imp.graph, feeds)
    return out if len(out) > 1 else out[0]


# ---- convolution: XLA's semantics in numpy ---------------------------------------------------

def hlo_conv(x: np.ndarray, w: np.ndarray, dn: dict[str, Any], window: list[dict[str, Any]],
             groups: int = 1) -> np.ndarray:
    """XLA convolution by its definition: base dilation, padding, then every output position
    sums input[pos * stride + tap * dilation] @ kernel[tap] (kernel flipped if reversed)."""
    xs = np.transpose(x, [dn["input_batch_dimension"], dn["input_feature_dimension"],
                          *dn["input_spatial_dimensions"]]).astype(float)
    ws = np.transpose(w, [dn["kernel_output_feature_dimension"],
                          dn["kernel_input_feature_dimension"],
                          *dn["kernel_spatial_dimensions"]]).astype(float)
    n = len(window)
    for k, wd in enumerate(window):
        d = wd.get("base_dilation", 1)
        if d > 1:
            grown = list(xs.shape)
            grown[2 + k] = (grown[2 + k] - 1) * d + 1
            z = np.zeros(grown)
            idx: list[Any] = [slice(None)] * xs.ndim
            idx[2 + k] = slice(None, None, d)
            z[tuple(idx)] = xs
            xs = z
        if wd.get("window_reversal"):
            ws = np.flip(ws, 2 + k)
    xs = np.pad(xs, [(0, 0), (0, 0), *((wd["padding_low"], wd["padding_high"])
                                        for wd in window)])
    out_feat, cg = ws.shape[0], xs.shape[1] // groups
    og = out_feat // groups
    sizes = [(xs.shape[2 + k] - (wd["size"] - 1) * wd.get("window_dilation", 1) - 1)
             // wd.get("stride", 1) + 1 for k, wd in enumerate(window)]
    out = np.zeros([xs.shape[0], out_feat, *sizes])
    for p in itertools.product(*map(range, sizes)):
        for t in itertools.product(*(range(wd["size"]) for wd in window)):
            pos = [p[k] * window[k].get("stride", 1) + t[k] * window[k].get("window_dilation", 1)
                   for k in range(n)]
            xv = xs[(slice(None), slice(None), *pos)]
            wv = ws[(slice(None), slice(None), *t)]
            for g in range(groups):
                out[(slice(None), slice(g * og, (g + 1) * og), *p)] += (
                    xv[:, g * cg:(g + 1) * cg] @ wv[g * og:(g + 1) * og].T)
    order = [dn["output_batch_dimension"], dn["output_feature_dimension"],
             *dn["output_spatial_dimensions"]]
    return np.transpose(out, np.argsort(order))


def win(size: int, stride: int = 1, lo: int = 0, hi: int = 0, dil: int = 1, base: int = 1,
        rev: bool = False) -> dict[str, Any]:
    return {"size": size, "stride": stride, "padding_low": lo, "padding_high": hi,
            "window_dilation": dil, "base_dilation": base, "window_reversal": rev}


def dims(ib: int, if_: int, isp: list[int], ki: int, ko: int, ksp: list[int], ob: int, of: int,
         osp: list[int]) -> dict[str, Any]:
    return {"input_batch_dimension": ib, "input_feature_dimension": if_,
            "input_spatial_dimensions": isp, "kernel_input_feature_dimension": ki,
            "kernel_output_feature_dimension": ko, "kernel_spatial_dimensions": ksp,
            "output_batch_dimension": ob, "output_feature_dimension": of,
            "output_spatial_dimensions": osp}


NHWC = dims(0, 3, [1, 2], 2, 3, [0, 1], 0, 3, [1, 2])
NDHWC = dims(0, 4, [1, 2, 3], 3, 4, [0, 1, 2], 0, 4, [1, 2, 3])
# A weight gradient as TF emits it: the forward input's features are the "batch".
WGRAD3 = dims(4, 0, [1, 2, 3], 0, 4, [1, 2, 3], 3, 4, [0, 1, 2])
NWC = dims(0, 2, [1], 1, 2, [0], 0, 2, [1])
# Dense layers as XLA writes them: convolutions without spatial dims. A weight gradient
# contracts both operands over their dim 0 (the batch): out[i, o] = sum_b x[b, i] w[b, o].
DENSE = dims(0, 1, [], 1, 0, [], 0, 1, [])
DENSE_WGRAD = dims(1, 0, [], 0, 1, [], 0, 1, [])
DENSE_OUT_T = dims(0, 1, [], 0, 1, [], 1, 0, [])

CONVS = {
    "2d, NHWC stored H,W,N,C": ((2, 6, 5, 4), (3, 3, 4, 6), NHWC, [win(3, 1, 1, 1),
                                                                   win(3, 2, 1, 1)], 1,
                                {"x": [3, 0, 2, 1]}),
    "2d, grouped": ((2, 6, 5, 4), (3, 3, 2, 6), NHWC, [win(3, 1, 1, 1), win(3, 1, 1, 1)], 2, {}),
    "1d, strided": ((2, 7, 3), (3, 3, 5), NWC, [win(3, 2, 1, 1)], 1, {}),
    "3d forward (per-tap slabs)": ((2, 5, 4, 6, 3), (3, 2, 3, 3, 4), NDHWC,
                                   [win(3, 1, 1, 1), win(2, 1, 0, 1), win(3, 2, 1, 1)], 1, {}),
    "3d reversed, base-dilated, dilated": ((2, 5, 4, 6, 3), (3, 2, 3, 3, 4), NDHWC,
                                           [win(3, 1, 1, 1, rev=True), win(2, 1, 0, 1, base=2),
                                            win(3, 2, 1, 1, dil=2)], 1,
                                           {"x": [4, 0, 3, 2, 1]}),
    "3d weight gradient (per-output slabs)": ((2, 6, 5, 6, 3), (2, 6, 5, 6, 4), WGRAD3,
                                              [win(6, 1, 1, 1), win(5, 1, 1, 1),
                                               win(6, 1, 1, 1)], 1, {}),
    "0d dense, weights [out, in]": ((5, 8), (7, 8), DENSE, [], 1, {"x": [0, 1]}),
    "0d dense weight gradient (transposed operands)": ((6, 10), (6, 7), DENSE_WGRAD, [], 1, {}),
    "0d dense, transposed output": ((5, 8), (8, 7), DENSE_OUT_T, [], 1, {"out": [0, 1]}),
    "0d dense, feature groups": ((4, 6), (3, 4), dims(0, 1, [], 0, 1, [], 0, 1, []), [], 2,
                                 {"x": [0, 1]}),
}


@pytest.mark.parametrize("case", sorted(CONVS))
@pytest.mark.parametrize("proxies", [False, True])
def test_convolutions_compute_what_xla_computes(case: str, proxies: bool) -> None:
    xshape, wshape, dn, window, groups, lays = CONVS[case]
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xshape), rng.standard_normal(wshape)
    want = hlo_conv(x, w, dn, window, groups)
    m = Module()
    xi = m.param("x", "f32", xshape, lays.get("x"))
    wi = m.param("w", "f32", wshape)
    root = m.add("conv", "convolution", shape("f32", want.shape, lays.get("out")), xi, wi,
                 window=window, convolution_dimension_numbers=dn, feature_group_count=groups,
                 batch_group_count=1)
    got = run(m.json(root), {"x": x, "w": w}, proxies)
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_a_dense_layer_as_a_convolution_is_one_matmul() -> None:
    m = Module()
    xi, wi = m.param("x", "f32", (32, 4096)), m.param("w", "f32", (32, 1000))
    root = m.add("conv", "convolution", shape("f32", (4096, 1000)), xi, wi, window=[],
                 convolution_dimension_numbers=DENSE_WGRAD, feature_group_count=1,
                 batch_group_count=1)
    imp = import_hlo(m.json(root))
    hist = imp.graph.op_histogram()
    assert hist["matmul"] == 1 and "conv2d" not in hist
    # The transposed lhs is a view: its layout keeps x's physical array.
    (mm,) = [n for n in imp.graph.nodes if n.op == "matmul"]
    lhs = mm.inputs[0]
    assert imp.graph.type_of(lhs).shape == (4096, 32) and imp.layouts[lhs] == (0, 1)


def test_a_dense_convolution_with_batch_groups_gives_each_feature_group_its_rows() -> None:
    # XLA: with batch_group_count G, output feature group g (of O / G features) contracts
    # input batch rows g * B/G ... (g + 1) * B/G - 1; the output batch is B / G.
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((6, 5)), rng.standard_normal((5, 8))
    want = np.concatenate([x[g * 3:(g + 1) * 3] @ w[:, g * 4:(g + 1) * 4] for g in range(2)],
                          axis=1)
    m = Module()
    xi, wi = m.param("x", "f32", x.shape), m.param("w", "f32", w.shape)
    root = m.add("conv", "convolution", shape("f32", (3, 8)), xi, wi, window=[],
                 convolution_dimension_numbers=dims(0, 1, [], 0, 1, [], 0, 1, []),
                 feature_group_count=1, batch_group_count=2)
    np.testing.assert_allclose(run(m.json(root), {"x": x, "w": w}), want, atol=1e-12)


def test_a_3d_forward_conv_becomes_one_conv2d_per_tap_and_a_weight_gradient_one_per_output(
        ) -> None:
    for case, slabs in (("3d forward (per-tap slabs)", 3),
                        ("3d weight gradient (per-output slabs)", 3)):
        xshape, wshape, dn, window, groups, _ = CONVS[case]
        want = hlo_conv(np.zeros(xshape), np.zeros(wshape), dn, window, groups)
        m = Module()
        xi, wi = m.param("x", "f32", xshape), m.param("w", "f32", wshape)
        root = m.add("conv", "convolution", shape("f32", want.shape), xi, wi, window=window,
                     convolution_dimension_numbers=dn, feature_group_count=1,
                     batch_group_count=1)
        assert import_hlo(m.json(root)).graph.op_histogram()["conv2d"] == slabs


def test_dot_with_batch_and_contracting_dims() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 3, 5, 2)), rng.standard_normal((4, 2, 5, 6))
    m = Module()
    ai, bi = m.param("a", "f32", a.shape), m.param("b", "f32", b.shape)
    want = np.einsum("bmkc,bckn->bmn", a, b)
    root = m.add("dot", "dot", shape("f32", want.shape), ai, bi, dot_dimension_numbers={
        "lhs_batch_dimensions": [0], "rhs_batch_dimensions": [0],
        "lhs_contracting_dimensions": [2, 3], "rhs_contracting_dimensions": [2, 1]})
    np.testing.assert_allclose(run(m.json(root), {"a": a, "b": b}), want, atol=1e-12)


def test_elementwise_broadcast_and_reduce_mappings_are_exact() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 5))
    v = rng.standard_normal((5, 3))
    m = Module()
    m.computation(7, "add", "add")
    xi = m.param("x", "f32", x.shape, [1, 2, 0])
    vi = m.param("v", "f32", v.shape)
    zero = m.add("zero", "constant", shape("f32", ()), literal=[0.0])
    # broadcast with out-of-order dimensions (v's dim 0 -> output dim 2, dim 1 -> dim 0)
    bv = m.add("bv", "broadcast", shape("f32", x.shape), vi, dimensions=[2, 0])
    z = m.add("z", "broadcast", shape("f32", x.shape), zero, dimensions=[])
    s = m.add("s", "subtract", shape("f32", x.shape), xi, bv)
    r = m.add("r", "maximum", shape("f32", x.shape), s, z)  # relu
    mx = m.add("mx", "maximum", shape("f32", x.shape), xi, bv)
    mn = m.add("mn", "minimum", shape("f32", x.shape), xi, bv)
    ab = m.add("ab", "abs", shape("f32", x.shape), s)
    ng = m.add("ng", "negate", shape("f32", x.shape), ab)
    mu = m.add("mu", "multiply", shape("f32", x.shape), r, mx)
    ad = m.add("ad", "add", shape("f32", x.shape), mu, mn)
    ad2 = m.add("ad2", "add", shape("f32", x.shape), ad, ng)
    red = m.add("red", "reduce", shape("f32", (4,)), ad2, zero, dimensions=[0, 2],
                called_computation_ids=[7])
    bred = m.add("bred", "reduce", shape("f32", (3, 4)), bv, zero, dimensions=[2],
                 called_computation_ids=[7])  # a reduction over a broadcast materialises it
    root = m.add("t", "tuple", {"type": "tuple", "tuple": []}, red, bred)
    bvn = np.transpose(v)[:, None, :]  # (3, 1, 5)
    sn = x - bvn
    want = ((np.maximum(sn, 0) * np.maximum(x, bvn) + np.minimum(x, bvn) - np.abs(sn))
            .sum(axis=(0, 2)))
    got_red, got_bred = run(m.json(root), {"x": x, "v": v})
    np.testing.assert_allclose(got_red, want, atol=1e-12)
    np.testing.assert_allclose(got_bred, np.broadcast_to(bvn, x.shape).sum(axis=2), atol=1e-12)
    imp = import_hlo(m.json(root))
    assert imp.graph.op_histogram()["relu"] >= 1  # maximum with zero is a relu
    assert imp.graph.op_histogram()["concat"] >= 1  # only the reduced broadcast materialises


def test_movement_mappings_are_exact() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6, 8))
    m = Module()
    xi = m.param("x", "f32", x.shape)
    zero = m.add("zero", "constant", shape("f32", ()), literal=[0.0])
    t = m.add("t", "transpose", shape("f32", (8, 4, 6)), xi, dimensions=[2, 0, 1])
    rs = m.add("rs", "reshape", shape("f32", (8, 24)), t)
    sl = m.add("sl", "slice", shape("f32", (3, 11)), rs, slice_dimensions=[[1, 7, 2],
                                                                           [2, 24, 2]])
    pd = m.add("pd", "pad", shape("f32", (5, 10)), sl, zero,
               padding_config=[[1, 1, 0], [0, -1, 0]])
    cat = m.add("cat", "concatenate", shape("f32", (10, 10)), pd, pd, dimensions=[0])
    io = m.add("io", "iota", shape("f32", (10, 10)), dimensions=[1])
    ad = m.add("ad", "add", shape("f32", (10, 10)), cat, io)
    cp = m.add("cp", "copy", shape("f32", (10, 10), [0, 1]), ad)  # a layout change
    bc = m.add("bc", "bitcast", shape("f32", (10, 10)), cp)  # reinterprets: a transpose
    want_pd = np.pad(x.transpose(2, 0, 1).reshape(8, 24)[1:7:2, 2:24:2], [(1, 1), (0, 0)])[:,
                                                                                           :10]
    want = np.concatenate([want_pd, want_pd]) + np.arange(10)[None, :]
    np.testing.assert_allclose(run(m.json(bc), {"x": x}), want.T, atol=1e-12)


@pytest.mark.parametrize("src", [[3, 2, 1, 0], [3, 0, 2, 1], [0, 3, 1, 2]])
@pytest.mark.parametrize("dst", [[3, 0, 2, 1], [1, 2, 3, 0], [2, 0, 3, 1]])
def test_layout_changing_copies_and_bitcasts_with_any_minor_to_major(src: list[int],
                                                                     dst: list[int]) -> None:
    # A copy keeps the value and changes the physical order; a bitcast of the copy to its
    # physical shape (row-major) reads the buffer as it lies: the value transposed so that
    # its dims go major to minor, i.e. by reversed(dst); then a bitcast to [rows, minor dim]
    # flattens that buffer.
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 4, 5))
    phys = [x.shape[d] for d in reversed(dst)]
    m = Module()
    xi = m.param("x", "f32", x.shape, src)
    cp = m.add("cp", "copy", shape("f32", x.shape, dst), xi)
    bc = m.add("bc", "bitcast", shape("f32", tuple(phys)), cp)
    flat = m.add("flat", "bitcast", shape("f32", (x.size // phys[-1], phys[-1])), bc)
    root = m.add("t", "tuple", {"type": "tuple", "tuple": []}, cp, bc, flat)
    got_cp, got_bc, got_flat = run(m.json(root), {"x": x})
    want_bc = np.transpose(x, list(reversed(dst)))
    np.testing.assert_allclose(got_cp, x, atol=0)
    np.testing.assert_allclose(got_bc, want_bc, atol=0)
    np.testing.assert_allclose(got_flat, want_bc.reshape(-1, phys[-1]), atol=0)


def test_fusions_are_inlined_as_one_kernel_with_their_outputs() -> None:
    m = Module()
    p = m.param("p", "f32", (8, 128))
    inner = [
        {"id": 101, "name": "fp", "opcode": "parameter", "shape": shape("f32", (8, 128)),
         "operand_ids": [], "parameter_number": 0},
        {"id": 102, "name": "fe", "opcode": "exponential", "shape": shape("f32", (8, 128)),
         "operand_ids": [101]},
        {"id": 103, "name": "fa", "opcode": "add", "shape": shape("f32", (8, 128)),
         "operand_ids": [101, 101]},
        {"id": 104, "name": "ft", "opcode": "tuple", "shape": {"type": "tuple", "tuple": []},
         "operand_ids": [102, 103]}]
    m.extra.append({"id": 9, "name": "fused", "root_id": 104, "instructions": inner,
                    "is_fusion_computation": True})
    f = m.add("fusion.1", "fusion", {"type": "tuple", "tuple": [shape("f32", (8, 128))] * 2},
              p, called_computation_ids=[9], fusion_kind="kLoop")
    with pytest.raises(UnsupportedOpsError, match=r"exponential.*at fe in fused"):
        import_hlo(m.json(f))
    imp = import_hlo(m.json(f), proxies=True)
    (k,) = imp.kernels
    assert k.name == "fusion.1" and len(k.outputs) == 2
    assert imp.proxies == ("fe (exponential)",)
    x = np.random.default_rng(4).standard_normal((8, 128))
    _, twice = interpret(imp.graph, {"p": x})
    np.testing.assert_allclose(twice, 2 * x)


def test_exact_mode_refuses_what_the_ir_cannot_compute() -> None:
    m = Module()
    a = m.param("a", "f32", (4, 4))
    c = m.add("c", "convert", shape("bf16", (4, 4)), a)
    cmp = m.add("cmp", "compare", shape("pred", (4, 4)), c, c, comparison_direction="GT")
    with pytest.raises(UnsupportedOpsError) as e:
        import_hlo(m.json(cmp))
    assert e.value.ops == ["compare (no exact IR counterpart; proxies=True imports a cost proxy)",
                           "convert (f32 to bf16: the IR has no dtype conversion; proxies=True "
                           "imports a cost proxy)"]
    imp = import_hlo(m.json(cmp), proxies=True)
    out = imp.graph.outputs[0]
    assert imp.graph.type_of(out).dtype == DType.F32  # cost mode computes in f32 ...
    assert imp.dtypes[out] == DType.I8  # ... and stores the pred result in one byte
    assert not imp.exact


def test_bad_input_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ModelImportError, match="nope.json: no such file"):
        load_module(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ModelImportError, match="bad.json: not a JSON HLO module"):
        load_module(bad)
    bad.write_text(json.dumps({"name": "x"}))
    with pytest.raises(ModelImportError, match="bad.json: expected a decoded HLO module"):
        load_module(bad)
    bad.write_text(json.dumps({"entry_computation_id": 5, "computations": []}))
    with pytest.raises(ModelImportError, match="entry computation id 5 names no computation"):
        load_module(bad)


# ---- the shipped TpuGraphs programs ----------------------------------------------------------

def _kernels() -> dict[str, dict[str, Any]]:
    data = json.loads((DATA / "op_tuning_data.json").read_text())
    return {k["name"]: k for k in data["kernels"]}


def test_tpu_graphs_kernels_import_in_cost_mode_and_report_what_exact_mode_lacks() -> None:
    kernels = _kernels()
    exact = {"copy.24", "reshape.38", "reshape.39"}
    for name, k in kernels.items():
        if name in exact:
            assert import_hlo(k, name=name).exact
        else:
            with pytest.raises(UnsupportedOpsError, match=name):
                import_hlo(k, name=name)
        imp = import_hlo(k, proxies=True, name=name)
        assert [kk.name for kk in imp.kernels] == [name]
    imp = import_hlo(kernels["fusion.191"], proxies=True)
    (k,) = imp.kernels
    # The conv's epilogue writes a bf16 activation and a u16 pooling mask: two outputs.
    assert [str(imp.graph.type_of(v)) for v in k.outputs] == ["f32[32,12,384]",
                                                               "f32[32,12,12,384]"]
    assert [imp.dtypes[v] for v in k.outputs] == [DType.I16, DType.BF16]
    assert imp.graph.op_histogram()["conv2d"] == 1
    params = {n.attr("name"): n for n in imp.graph.nodes if n.op == "weight"}
    assert imp.dtypes[params["parameter.1"].outputs[0]] == DType.BF16
    assert imp.layouts[params["parameter.1"].outputs[0]] == (3, 0, 2, 1)  # the HLO layout
    assert {p.split(" ")[1] for p in imp.proxies} == {"(compare)", "(convert)", "(shift-left)",
                                                      "(reduce)"}


def test_the_layout_program_lists_every_unsupported_opcode_and_its_convs_import() -> None:
    module = load_module(DATA / "module_tuning_data_layout.json")
    with pytest.raises(UnsupportedOpsError) as e:
        import_hlo(module, proxies=True)
    ops = {op.split(" ")[0] for op in e.value.ops}
    assert {"all-reduce", "while", "custom-call", "sort", "select-and-scatter",
            "reduce-window", "dynamic-slice"} <= ops
    assert "convolution" not in ops and "compare" not in ops  # proxied in cost mode
    assert "all-reduce.1" in str(e.value)  # where, not only what
    imp = import_hlo(module, roots=["convolution.8588"])  # exact: bf16 throughout
    names = sorted(n.attr("name") for n in imp.graph.nodes if n.op == "weight")
    conv = module.instruction("convolution.8588")
    ops_names = {module.entry_computation.by_id[i]["name"] for i in conv["operand_ids"]}
    assert set(names) == ops_names
    assert str(imp.graph.type_of(imp.graph.outputs[0])) == "bf16[3,3,3,192,64]"
