"""A Llama-style decoder block and a ViT encoder block, built by hand from the transformer-era
ops (rms_norm, RoPE from iota/gather/sin/cos, grouped-query causal attention, a SiLU-gated
MLP; layer_norm, attention, exact GELU), through the simulator and the joint tuner."""

from __future__ import annotations

import math

import numpy as np
import pytest

import superopt
from superopt.ir import Graph, GraphBuilder, Value
from superopt.ir.interpret import interpret
from superopt.tpu_sim import Simulator, validate


class _Blocks:
    """A builder whose weights carry data (scaled by fan-in), so a tuned graph whose
    weight-only computations were folded into new weights still computes the same values."""

    def __init__(self, name: str) -> None:
        self.b = GraphBuilder(name)
        self.rng = np.random.default_rng(0)

    def w(self, name: str, shape: tuple[int, ...], scale: float | None = None) -> Value:
        s = scale if scale is not None else 1.0 / math.sqrt(shape[0])
        return self.b.weight(name, shape, data=self.rng.normal(0.0, s, shape))

    def matmul(self, x: Value, name: str, k: int, n: int) -> Value:
        return self.b.matmul(x, self.w(name, (k, n)))

    def heads(self, t: Value, batch: int, seq: int, h: int, hd: int) -> Value:
        return self.b.transpose(self.b.reshape(t, shape=(batch, seq, h, hd)), perm=(0, 2, 1, 3))


def llama_block(seq: int = 64, dim: int = 256, heads: int = 4, kv_heads: int = 2,
                ffn: int = 512, batch: int = 1) -> Graph:
    k = _Blocks("llama_block")
    b = k.b
    hd = dim // heads
    x = b.input("x", (batch, seq, dim))
    # RoPE: positions (iota) select rows of the angle table; cos and sin of the angles.
    pos = b.iota(shape=(seq,), axis=0, dtype="i64")
    angles = b.gather(k.w("angles", (2 * seq, hd // 2), 1.0), pos, axis=0)
    cos, sin = b.cos(angles), b.sin(angles)
    cos2, sin2 = b.concat(cos, cos, axis=1), b.concat(sin, sin, axis=1)

    def rope(t: Value) -> Value:
        lo, hi = b.split(t, axis=3, sizes=(hd // 2, hd // 2))
        return b.ewadd(b.ewmul(t, cos2), b.ewmul(b.concat(b.neg(hi), lo, axis=3), sin2))

    h = b.rms_norm(x, k.w("n1", (dim,), 1.0), axis=-1)
    q = rope(k.heads(k.matmul(h, "wq", dim, dim), batch, seq, heads, hd))
    kk = rope(k.heads(k.matmul(h, "wk", dim, kv_heads * hd), batch, seq, kv_heads, hd))
    v = k.heads(k.matmul(h, "wv", dim, kv_heads * hd), batch, seq, kv_heads, hd)
    a = b.attention(q, kk, v, causal=True)
    a = b.reshape(b.transpose(a, perm=(0, 2, 1, 3)), shape=(batch, seq, dim))
    r = b.ewadd(x, k.matmul(a, "wo", dim, dim))
    h2 = b.rms_norm(r, k.w("n2", (dim,), 1.0), axis=-1)
    act = b.ewmul(b.silu(k.matmul(h2, "wg", dim, ffn)), k.matmul(h2, "wu", dim, ffn))
    return b.build([b.ewadd(r, k.matmul(act, "wd", ffn, dim))])


def vit_block(tokens: int = 65, dim: int = 192, heads: int = 3, mlp: int = 768,
              batch: int = 1) -> Graph:
    k = _Blocks("vit_block")
    b = k.b
    hd = dim // heads
    x = b.input("x", (batch, tokens, dim))

    def ln(t: Value, name: str) -> Value:
        return b.layer_norm(t, k.w(name + "_g", (dim,), 1.0), k.w(name + "_b", (dim,), 0.1),
                            axis=-1)

    qkv = k.matmul(ln(x, "ln1"), "wqkv", dim, 3 * dim)
    qkv = b.transpose(b.reshape(qkv, shape=(batch, tokens, 3, heads, hd)), perm=(2, 0, 3, 1, 4))
    q, kk, v = (b.reshape(t, shape=(batch, heads, tokens, hd))
                for t in b.split(qkv, axis=0, sizes=(1, 1, 1)))
    a = b.reshape(b.transpose(b.attention(q, kk, v), perm=(0, 2, 1, 3)),
                  shape=(batch, tokens, dim))
    r = b.ewadd(x, k.matmul(a, "wo", dim, dim))
    m = b.gelu(b.ewadd(k.matmul(ln(r, "ln2"), "w1", dim, mlp), k.w("b1", (mlp,), 0.1)))
    out = b.ewadd(r, b.ewadd(k.matmul(m, "w2", mlp, dim), k.w("b2", (dim,), 0.1)))
    return b.build([out])


BLOCKS = {"llama": llama_block, "vit": vit_block}


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_block_compiles_to_a_valid_plan_with_one_attention_kernel(name: str) -> None:
    g = BLOCKS[name]()
    sim = Simulator("v4")
    c = sim.compile(g)
    validate(c)
    s = sim.simulate(c)
    assert s.valid and 0 < s.time < 1e-3
    att = [k for k in s.kernels if "attention" in k.name.split("+")]
    # One fused kernel, and never with a projection matmul: one MXU op per kernel.
    assert len(att) == 1 and "matmul" not in att[0].name.split("+")
    assert att[0].cost.mxu > 0


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_tune_budget_50_keeps_values_and_never_loses(name: str) -> None:
    from superopt.xtat.session import open_session, rewritten_graph
    from superopt.xtat.tuner import PASS_NAMES, Tuner, make_schedule

    g = BLOCKS[name]()
    session = open_session({"model": g.name}, g)
    r = Tuner(session.pipeline, session.runner, session.default, seed=0).run(
        make_schedule("joint", PASS_NAMES, "sweep"), 50)
    assert r.evaluations == 50
    assert r.best_time <= r.default_time
    # The tuned graph's rewrites (before the structural fold of weight-only computations)
    # compute the original's values.
    want = interpret(g)[0]
    got = interpret(rewritten_graph(session.pipeline, r.best))[0]
    assert np.isfinite(want).all()
    assert np.allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    # The public entry point runs the same search.
    assert superopt.tune(g, budget=50, seed=0).best_time == r.best_time
