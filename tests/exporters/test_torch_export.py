"""Torch export: an fx GraphModule with the weights as parameters that computes what the
reference computes, for every op and for zoo models; `.pt2` programs load as MODEL_OR_FILE."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from op_cases import OP_CASES, op_case
from superopt import zoo
from superopt.backends.torch import torch_dtype
from superopt.cli import main
from superopt.exporters.torch import to_module
from superopt.importers import ModelImportError, load_model
from superopt.ir import Graph, GraphBuilder, interpret, random_feeds

PROPERTY = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _args(graph: Graph, feeds: dict[str, Any]) -> list[torch.Tensor]:
    # The module's contract: floats as float32, booleans as torch.bool, other ints int64.
    return [torch.as_tensor(np.asarray(feeds[n.attr("name")])).to(
        torch_dtype(n.type.dtype, torch.float32)) for n in graph.inputs]


def _check(graph: Graph, module: torch.nn.Module, rtol: float = 1e-4) -> None:
    feeds = random_feeds(graph, seed=4)
    with torch.no_grad():
        got = module(*_args(graph, feeds))
    got = got if isinstance(got, tuple) else (got,)
    want = interpret(graph, feeds)
    assert isinstance(want, tuple) and len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        g64, w64 = g.double().numpy(), np.asarray(w, np.float64)
        finite = np.isfinite(w64)
        assert np.array_equal(g64[~finite], w64[~finite], equal_nan=True)
        scale = np.max(np.abs(w64[finite]), initial=0.0)
        assert np.max(np.abs(g64[finite] - w64[finite]), initial=0.0) <= 1e-6 + rtol * scale


@pytest.mark.parametrize("op", sorted(OP_CASES))
@PROPERTY
@given(data=st.data())
def test_every_op_exports_to_a_graph_module(op: str, data: st.DataObject) -> None:
    graph = data.draw(op_case(op))
    module = to_module(graph)
    assert isinstance(module, torch.fx.GraphModule)
    _check(graph, module)


def test_weights_are_parameters_and_inputs_are_arguments() -> None:
    b = GraphBuilder("lin")
    x = b.input("x", (2, 3))
    w = b.weight("layer.0.weight", (3, 2), data=np.arange(6.0).reshape(3, 2))
    m = to_module(b.build(b.op("matmul", x, w)))
    params = dict(m.named_parameters())
    assert list(params) == ["layer_0_weight"]
    assert not params["layer_0_weight"].requires_grad
    # [[1, 1, 1], [0, 1, 0]] @ [[0, 1], [2, 3], [4, 5]] = [[6, 9], [2, 3]]
    y = m(torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]))
    assert y.tolist() == [[6.0, 9.0], [2.0, 3.0]]


@pytest.mark.parametrize("name", ["squeezenet", "bert_small"])
def test_zoo_model_exports(name: str) -> None:
    g = zoo.build(name)
    _check(g, to_module(g))


def test_pt2_program_is_a_model_or_file(tmp_path: Path) -> None:
    g = zoo.build("squeezenet")
    module = to_module(g)
    feeds = random_feeds(g, seed=4)
    program = torch.export.export(module, tuple(_args(g, feeds)))
    path = tmp_path / "squeezenet.pt2"
    torch.export.save(program, str(path))
    back = load_model(str(path))
    assert back.op_histogram()["conv2d"] == g.op_histogram()["conv2d"]
    want = interpret(g, feeds)[0]
    got = interpret(back, {back.inputs[0].attr("name"): feeds["image"]})[0]
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))
    # And every command that takes MODEL_OR_FILE takes it.
    assert main(["show", str(path)]) == 0


def test_pt2_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ModelImportError, match="no such file"):
        load_model(str(tmp_path / "missing.pt2"))
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ModelImportError, match="not a torch.export program"):
        load_model(str(bad))
    # torch logs a traceback for a file that is no program before it raises: not shown.
    run = subprocess.run([sys.executable, "-m", "superopt", "show", str(bad)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().count("\n") == 0, run.stderr
    assert "not a torch.export program: File is not a zip file" in run.stderr


def test_pt2_saved_by_transformers_exporter_loads_in_a_fresh_process(tmp_path: Path) -> None:
    # transformers' DynamoExporter saves the model's output containers (ModelOutput
    # dataclasses, caches) in the program; torch can read them back only once they are
    # registered, which a process that never built the model has not done.
    transformers = pytest.importorskip("transformers")
    from transformers.exporters.configs import DynamoConfig
    from transformers.exporters.exporter_dynamo import DynamoExporter

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)).eval()
    ids = torch.randint(0, 64, (1, 8))
    DynamoExporter().export(model, {"input_ids": ids}, config=DynamoConfig()).save_pretrained(
        tmp_path)
    with torch.no_grad():
        want = model(input_ids=ids).logits.numpy()
    np.save(tmp_path / "ids.npy", ids.numpy())
    script = (
        "import sys, numpy as np\n"
        "from superopt.importers import load_model\n"
        "from superopt.ir import interpret\n"
        "assert 'transformers' not in sys.modules\n"
        f"g = load_model({str(tmp_path / 'model.pt2')!r})\n"
        f"ids = np.load({str(tmp_path / 'ids.npy')!r})\n"
        "out = interpret(g, {g.inputs[0].attr('name'): ids})\n"
        f"np.save({str(tmp_path / 'out.npy')!r}, out[0])\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_pt2_calling_transformers_grouped_matmul_loads_in_a_fresh_process(tmp_path: Path
                                                                          ) -> None:
    # A mixture of experts exported with transformers' default experts calls its custom
    # operator `transformers::grouped_mm_fallback`, unknown to torch until transformers'
    # module registers it.
    pytest.importorskip("transformers")
    from superopt.importers.hf import hf_inputs, hf_module

    model = hf_module("mixtral")
    model.inner.set_experts_implementation("grouped_mm")
    torch.export.save(torch.export.export(model, hf_inputs("mixtral")), tmp_path / "moe.pt2")
    script = (
        "import sys\n"
        "from superopt.importers import load_model\n"
        "assert 'transformers' not in sys.modules\n"
        f"g = load_model({str(tmp_path / 'moe.pt2')!r})\n"
        "print(g.op_histogram()['topk'])\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "6"  # per layer: the router's top-2, two sorts


def _decoder_block() -> Graph:
    """A Llama-style block over the new ops: RMSNorm, grouped-query causal attention, SiLU
    gate, a gathered position table and a boolean select."""
    b = GraphBuilder("block")
    x = b.input("x", (1, 6, 16))
    pos = b.input("pos", (6,), "i64", high=6)
    table = b.weight("pos_table", (6, 16), init="normal")
    h = b.ewadd(x, b.gather(table, pos, axis=0))
    n = b.rms_norm(h, b.weight("norm", (16,), init="positive"), eps=1e-6)

    def proj(name: str, out: int) -> Any:
        return b.linear(n, b.weight(f"{name}.w", (out, 16)), b.weight(f"{name}.b", (out,)))

    q = b.transpose(b.reshape(proj("q", 16), shape=(1, 6, 4, 4)), perm=(0, 2, 1, 3))
    k = b.transpose(b.reshape(proj("k", 8), shape=(1, 6, 2, 4)), perm=(0, 2, 1, 3))
    v = b.transpose(b.reshape(proj("v", 8), shape=(1, 6, 2, 4)), perm=(0, 2, 1, 3))
    a = b.attention(q, k, v, causal=True)
    a = b.reshape(b.transpose(a, perm=(0, 2, 1, 3)), shape=(1, 6, 16))
    gate = b.silu(b.linear(a, b.weight("g.w", (16, 16)), b.weight("g.b", (16,))))
    out = b.ewadd(h, b.ewmul(gate, a))
    return b.build(b.where(b.gt(out, b.neg(out)), out, b.exp(out)))


def test_transformer_block_module_and_pt2_round_trip(tmp_path: Path) -> None:
    g = _decoder_block()
    module = to_module(g)
    _check(g, module)
    feeds = random_feeds(g, seed=4)
    program = torch.export.export(module, tuple(_args(g, feeds)))
    path = tmp_path / "block.pt2"
    torch.export.save(program, str(path))
    back = load_model(str(path))
    hist = back.op_histogram()
    assert hist["attention"] == 1 and hist["rms_norm"] == 1 and hist["silu"] == 1, hist
    names = [n.attr("name") for n in back.inputs]
    got = interpret(back, dict(zip(names, (feeds["x"], feeds["pos"]), strict=True)))[0]
    want = interpret(g, feeds)[0]
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))
