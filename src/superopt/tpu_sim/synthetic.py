"""Synthetic graphs of any size, for the simulator's scale tests and benchmarks.

Production graphs reach hundreds of thousands of nodes (DESIGN.md section 10) but repeat a
few kinds of layers. `synthetic_graph(n)` builds a residual stack of blocks drawn at random
(seeded) from four kinds -- a feed-forward block, an attention block, a convolution block
on a reshaped activation and an element-wise chain -- with widths drawn from a small set,
until the graph has about `n` nodes. Every weight is its own node, so the graph has the
node count and wiring of a real model rather than one repeated subgraph.
"""

from __future__ import annotations

import math

import numpy as np

from superopt.ir.graph import Graph, GraphBuilder, Value

WIDTHS = (128, 256, 384, 512)
KINDS = ("mlp", "attention", "conv", "chain")


class _Stack:
    def __init__(self, name: str, rows: int, width: int, dtype: str) -> None:
        self.b = GraphBuilder(name)
        self.rows = rows
        self.dtype = dtype
        self.n = 0
        self.x = self.b.input("x", (rows, width), dtype)
        self.scale = self.b.weight("scale", (), dtype,
                                   data=np.array(1.0 / math.sqrt(width), dtype=np.float32))

    def w(self, shape: tuple[int, ...], init: str = "fan_in") -> Value:
        self.n += 1
        return self.b.weight(f"w{self.n}", shape, self.dtype, init=init)

    @property
    def width(self) -> int:
        return self.b.shape(self.x)[-1]

    def dense(self, x: Value, out: int) -> Value:
        d = self.b.shape(x)[-1]
        return self.b.ewadd(self.b.matmul(x, self.w((d, out))), self.w((out,), "normal"))

    def norm(self, x: Value) -> Value:
        d = self.b.shape(x)[-1]
        return self.b.layer_norm(x, self.w((d,), "positive"), self.w((d,), "normal"))

    def mlp(self) -> None:
        d = self.width
        h = self.b.gelu(self.dense(self.x, 4 * d))
        self.x = self.norm(self.b.ewadd(self.dense(h, d), self.x))

    def attention(self) -> None:
        q, k, v = (self.dense(self.x, self.width) for _ in range(3))
        s = self.b.smul(self.b.matmul(q, self.b.transpose(k, perm=(1, 0))), self.scale)
        ctx = self.b.matmul(self.b.softmax(s, axis=-1), v)
        self.x = self.norm(self.b.ewadd(self.dense(ctx, self.width), self.x))

    def conv(self) -> None:
        d, rows = self.width, self.rows
        h = 8 if rows % 8 == 0 else 1
        img = self.b.reshape(self.b.transpose(self.x, perm=(1, 0)), shape=(1, d, h, rows // h))
        y = self.b.conv2d(img, self.w((d, d, 3, 3)), padding="same")
        y = self.b.batch_norm(y, self.w((d,), "positive"), self.w((d,), "normal"),
                              self.w((d,), "normal"), self.w((d,), "positive"))
        y = self.b.transpose(self.b.reshape(self.b.relu(y), shape=(d, rows)), perm=(1, 0))
        self.x = self.b.ewadd(y, self.x)

    def chain(self) -> None:
        g = self.b.sigmoid(self.dense(self.x, self.width))
        self.x = self.b.ewadd(self.b.ewmul(g, self.b.tanh(self.x)), self.x)

    def project(self, width: int) -> None:
        if width != self.width:
            self.x = self.dense(self.x, width)


def synthetic_graph(nodes: int = 100_000, seed: int = 0, rows: int = 128,
                    dtype: str = "f32") -> Graph:
    """A residual stack of random blocks with about `nodes` nodes (seeded, deterministic)."""
    rng = np.random.default_rng(seed)
    s = _Stack(f"synthetic{nodes}", rows, int(rng.choice(WIDTHS)), dtype)
    while len(s.b.nodes) < nodes:
        s.project(int(rng.choice(WIDTHS)))
        getattr(s, str(rng.choice(KINDS)))()
    return s.b.build([s.x])
