"""Benchmark: what the joint search could gain on VGG-style rows from folding their first block.

On vgg19 and csrnet (VGG-16's front end) joint ties XTAT-only (joint.json: within 0.06% on
all four rows, below it on three): TASO finds nothing, and PET's corrected mutants are
fixes the layout and tile search already makes. Their first block is conv 3->64, relu,
conv 64->64, relu, 2x2 max pool at full resolution. A 64-channel conv fills half of each
128-wide MXU column, and a width-to-channel fold of one conv alone does not pay: the
64-channel value is padded to 128 lanes, so the fold and unfold around it are relayouts
(session 40: vgg19 b16 11.0 ms tuned against 6.7 ms).

The *chain fold* keeps the whole block in folded form, so nothing is relaid out between
its ops: the image (3 channels) is padded by 2 columns a side and folded, column pairs
into channels; conv1_1 computes the column pairs (2j-1, 2j), j = 0..W/2, as one conv of
128 output channels (weights padded to width 4 and folded the same way, one half per
pair position); bias and relu on the folded value; a constant mask zeroes the two padding
columns (-1 and W) so that conv1_2 sees them as its zero padding; conv1_2 reads pairs
(2j-1, 2j) and (2j+1, 2j+2) and writes the column pairs (2j, 2j+1) (width-2 kernel, 128
channels in and out); bias and relu; the 2x2 max pool is a (2, 1) pool over rows and the
maximum of the two channel halves (b + relu(a - b)), which unfolds the columns.

This builds the folded block by hand (it came before the rule: the fold spans two relus
and a max pool, so it is no multilinear PET mutant, and the verifier had no fold laws
until the column-fold axioms that now prove the starter rule `fold_vgg_block`, which
pools the channel halves instead of `b + relu(a - b)`: no rule can make the constant -1),
checks its values against the original block (reference interpreter, on
the block alone at the model's channel counts and a small image), and tunes both whole
graphs with XTAT-only (layout, fusion, tiles, flags; joint.py's schedule, strategy and
budget; 3 seeds). The tuned folded graph is a bound on what joint would reach if a rule
source offered the fold, not a joint result: joint.json stays the headline.

Prints a table and writes JSON (`--out`). Run:
`.venv/bin/python benchmarks/fold_headroom.py [--rows vgg19:16,...] [--seeds 3]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).parent))

import numpy as np

from superopt.ir.graph import Graph, GraphBuilder, Node, Value

ROWS = "vgg19:1,vgg19:16,csrnet:1,csrnet:16"
LANES = 128  # the MXU's width: a conv with at most half as many output channels folds


def _fold_w(b: GraphBuilder, w: Value, left: int) -> Value:
    """A 3-wide kernel padded to width 4 (`left` zero columns first) with its column pairs
    folded into the input channels: [O, I, kh, 3] -> [O, 2I, kh, 2]."""
    from superopt.mutants.rebuild import fold

    wp = b.pad(w, pads=(0, 0, 0, left, 0, 0, 0, 1 - left))
    return fold(b, wp, 3, 2, False, 1, True)


def folded_block(b: GraphBuilder, x: Value, w1: Value, b1: Value, w2: Value, b2: Value
                 ) -> Value:
    """pool2x2(relu(conv(relu(conv(x, w1) + b1), w2) + b2)) computed on column pairs folded
    into channels (module docstring); 3x3 convs, stride 1, padding 1, even width."""
    from superopt.mutants.rebuild import fold

    n, _, h, wd = b.shape(x)
    o = b.shape(w1)[0]
    conv = {"activation": "none", "dilation": (1, 1), "groups": 1, "padding": (1, 1, 0, 0),
            "stride": (1, 1)}
    xf = fold(b, b.pad(x, pads=(0, 0, 0, 2, 0, 0, 0, 2)), 3, 2, False, 1, True)
    y = b.conv2d(xf, b.concat(_fold_w(b, w1, 0), _fold_w(b, w1, 1), axis=0), **conv)
    y = b.relu(b.ewadd(y, b.concat(b1, b1, axis=0)))
    # Pair 0's first half is column -1 and the last pair's second half column W: conv1_2's
    # zero padding.
    mask = np.ones((2 * o, 1, wd // 2 + 1), np.float32)
    mask[:o, 0, 0] = 0.0
    mask[o:, 0, -1] = 0.0
    y = b.ewmul(y, b.weight("fold_headroom.mask", mask.shape, data=mask))
    y = b.conv2d(y, b.concat(_fold_w(b, w2, 0), _fold_w(b, w2, 1), axis=0), **conv)
    y = b.relu(b.ewadd(y, b.concat(b2, b2, axis=0)))
    y = b.pool2d_max(y, activation="none", kernel=(2, 1), padding="valid", stride=(2, 1))
    even = b.slice(y, starts=(0, 0, 0, 0), ends=(n, o, h // 2, wd // 2))
    odd = b.slice(y, starts=(0, o, 0, 0), ends=(n, 2 * o, h // 2, wd // 2))
    minus = b.weight("fold_headroom.minus_one", (), data=np.array(-1.0, np.float32))
    return b.ewadd(odd, b.relu(b.ewadd(even, b.smul(odd, minus))))


def _conv3x3(n: Node) -> bool:
    return (n.op == "conv2d" and n.attr("stride") == (1, 1) and n.attr("padding") == (1, 1, 1, 1)
            and n.attr("dilation") == (1, 1) and n.attr("groups") == 1
            and n.attr("activation") == "none")


def find_block(g: Graph) -> tuple[int, tuple[Value, ...]] | None:
    """The first conv -> +bias -> relu -> conv -> +bias -> relu -> 2x2 max pool chain with
    3x3 stride-1 convs of at most LANES / 2 output channels and an even width: (the pool's
    id, (x, w1, b1, w2, b2)); each inner value used once."""
    users: dict[int, list[Node]] = {}
    for n in g.nodes:
        for v in n.inputs:
            users.setdefault(v.node, []).append(n)

    def only(node: Node, op: str) -> Node | None:
        u = users.get(node.id, [])
        return u[0] if len(u) == 1 and u[0].op == op and u[0].inputs[0].node == node.id \
            else None

    for c1 in g.nodes:
        if not _conv3x3(c1) or 2 * c1.type.shape[1] > LANES or c1.type.shape[3] % 2:
            continue
        a1 = only(c1, "ewadd")
        r1 = a1 and only(a1, "relu")
        c2 = r1 and only(r1, "conv2d")
        if c2 is None or not _conv3x3(c2) or c2.type.shape != c1.type.shape:
            continue
        a2 = only(c2, "ewadd")
        r2 = a2 and only(a2, "relu")
        p = r2 and only(r2, "pool2d_max")
        if p is None or p.attr("kernel") != (2, 2) or p.attr("stride") != (2, 2) \
                or p.attr("padding") != "valid" or p.attr("activation") != "none":
            continue
        bias = [a.inputs[1] for a in (a1, a2)]
        if any(g.type_of(v).shape != (c1.type.shape[1], 1, 1) for v in bias):
            continue
        return p.id, (c1.inputs[0], c1.inputs[1], bias[0], c2.inputs[1], bias[1])
    return None


def fold_graph(g: Graph, found: tuple[int, tuple[Value, ...]]) -> Graph:
    """`g` with the block `found` (`find_block`) computed folded."""
    from superopt.mutants.rebuild import rebuild

    pool, args = found

    def replace(b: GraphBuilder, node: Node, get: object) -> tuple[Value, ...] | None:
        if node.id != pool:
            return None
        return (folded_block(b, *(get(v) for v in args)),)  # type: ignore[operator]

    return rebuild(g, replace, g.name)


def check_block(g: Graph, found: tuple[int, tuple[Value, ...]]) -> dict:
    """The folded block's values against the original block's (reference interpreter), at
    the model's channel counts on a 2 x 12 x 16 image."""
    from superopt.rewrite.check import check_values

    _, (x, w1, b1, w2, b2) = found
    shapes = [g.type_of(v).shape for v in (w1, b1, w2, b2)]
    graphs = []
    for folded in (False, True):
        b = GraphBuilder("block")
        xi = b.input("x", (2, g.type_of(x).shape[1], 12, 16))
        ws = [b.weight(f"w{i}", s) for i, s in enumerate(shapes)]
        if folded:
            y = folded_block(b, xi, *ws)
        else:
            conv = {"activation": "none", "dilation": (1, 1), "groups": 1,
                    "padding": (1, 1, 1, 1), "stride": (1, 1)}
            y = b.relu(b.ewadd(b.conv2d(xi, ws[0], **conv), ws[1]))
            y = b.relu(b.ewadd(b.conv2d(y, ws[2], **conv), ws[3]))
            y = b.pool2d_max(y, activation="none", kernel=(2, 2), padding="valid",
                             stride=(2, 2))
        graphs.append(b.build([y]))
    vc = check_values(*graphs)
    return {"ok": vc.ok, "max_rel_err": vc.max_rel_err, "problem": vc.problem}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=ROWS, help="comma-separated model:batch")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"
                                         / "fold_headroom.json"))
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out")
    args = ap.parse_args()
    if args.seeds < 1 or args.budget < 1:
        raise SystemExit("--seeds and --budget must be >= 1")
    import joint

    from superopt import zoo
    from superopt.rewrite import fold_weights
    from superopt.xtat.session import open_session
    from superopt.xtat.tuner import Tuner, make_schedule

    rows = joint.parse_rows(args.rows)
    headline_path = Path(__file__).parent / "results" / "joint.json"
    headline = {(r["model"], r["batch"]): r["speedup"] for r in
                json.loads(headline_path.read_text())["rows"]} if headline_path.exists() else {}
    settings = {"budget": args.budget, "seeds": args.seeds, "hardware": "v4",
                "schedule": joint.schedule_key(passes=joint.COMPILER),
                "strategy": joint.STRATEGY}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res: dict = json.loads(out.read_text()) if args.resume and out.exists() else {}
    if res and {k: res.get(k) for k in settings} != settings:
        raise SystemExit(f"{out}: made with other settings; run without --resume")
    res = {**settings, "rows": [r for r in res.get("rows", []) if (r["model"], r["batch"])
                                in rows]}
    done = {(r["model"], r["batch"]) for r in res["rows"]}
    print(f"{'row':12s} {'values':>7s} {'XTAT orig':>9s} {'XTAT fold':>9s} {'gain':>7s} "
          f"{'joint.json':>10s}  wall (s)")
    for m, b in rows:
        if (m, b) in done:
            continue
        t0 = time.perf_counter()
        g = zoo.build(m, batch=b)
        found = find_block(g)
        if found is None:
            raise SystemExit(f"{m}:{b}: no conv-relu-conv-relu-pool block of at most "
                             f"{LANES // 2} channels to fold (vgg19 and csrnet have one)")
        check = check_block(g, found)
        if not check["ok"]:
            raise SystemExit(f"{m}:{b}: the folded block's values differ: {check}")
        folded = fold_weights(fold_graph(g, found), evaluate=False).graph
        row: dict = {"model": m, "batch": b, "values": check}
        for name, graph in (("original", g), ("folded", folded)):
            s = open_session({"model": m, "batch": b, "rules": None}, graph)
            runs = [joint.finished(Tuner(s.pipeline, s.runner, s.default, seed=seed)
                                   .run(make_schedule("joint", joint.COMPILER, joint.STRATEGY),
                                        args.budget)) for seed in range(args.seeds)]
            row[name] = {"default_s": runs[0].default_time,
                         "tuned_s": [r.best_time for r in runs]}
        d = row["original"]["default_s"]
        orig = statistics.median(d / t for t in row["original"]["tuned_s"])
        fold = statistics.median(d / t for t in row["folded"]["tuned_s"])
        row["speedup"] = {"xtat_original": orig, "xtat_folded": fold,
                          "folded_default": d / row["folded"]["default_s"],
                          "joint_json": headline.get((m, b), {}).get("joint")}
        row["wall_s"] = time.perf_counter() - t0
        res["rows"].append(row)
        jj = row["speedup"]["joint_json"]
        print(f"{m + ':' + str(b):12s} {check['max_rel_err']:7.0e} {orig:9.4f} {fold:9.4f} "
              f"{fold / orig - 1:+7.2%} {jj if jj is None else format(jj, '10.4f'):>10}  "
              f"{row['wall_s']:.0f}", flush=True)
        out.write_text(json.dumps(res, indent=1) + "\n")
    res["geomean_gain"] = math.exp(statistics.fmean(
        math.log(r["speedup"]["xtat_folded"] / r["speedup"]["xtat_original"])
        for r in res["rows"]))
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"geomean gain of the fold over these rows: {res['geomean_gain'] - 1:+.2%}")


if __name__ == "__main__":
    import joint

    joint.run_main(main)
