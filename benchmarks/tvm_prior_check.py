"""Benchmark: how well a cost model pre-trained on other kernels ranks a held-out kernel's
schedules, per training corpus, before any of that kernel is measured (issue 45, part 5).

For each kernel of `tvm_kernels.KERNELS`, MetaSchedule's XGBoost model (`MsScreen`) is
pre-trained leave-one-kernel-out on the committed cells of our tuners
(`tvm_compare.prior_examples`) with one of four corpora:

- `kernels`: the other three compared kernels (what `guided_prior` reads);
- `wide`: those and the corpus kernels (`tvm_kernels.CORPUS`; `guided_prior_wide`);
- `same_op`, `same_op_wide`: the same two, only the kernels of the held-out one's op.

It then scores the held-out kernel's own measured schedules (every schedule of our tuners'
cells of that kernel, its median time), which no model saw. Reported: the Spearman rank
correlation of score and speed, and, over 300 draws of 64 of those schedules (seeded),
the median and 10th percentile of the best of the model's top 8 over the best of the 64
(1.0: the model's top 8 held the fastest). No trial is run: this reads committed cells.

`OMP_WAIT_POLICY=PASSIVE TVM_NUM_THREADS=1 .venv/bin/python benchmarks/tvm_prior_check.py`
writes `benchmarks/results/tvm_prior_check.json` (about 10 minutes on one core).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tvm_compare as tc  # the benchmark beside this one

CORPORA = ("kernels", "wide", "same_op", "same_op_wide")


def corpus(examples: list, kernel: Any, name: str) -> list:
    from superopt.xtat import tvm_kernels as tk

    extra = {k.name for k in tk.CORPUS}
    out = [e for e in examples if name.endswith("wide") or e[0].kernel.name not in extra]
    return [e for e in out if e[0].kernel.op == kernel.op] if name.startswith("same") else out


def check(kernel: Any, names: list[str], root: Path, draws: int = 300) -> list[dict[str, Any]]:
    """One row per corpus in `names` for the held-out `kernel`: the cells are read and
    its schedules built once, each corpus then pre-trains a model of its own."""
    import numpy as np
    from scipy.stats import spearmanr

    from superopt.xtat.tvm_msspace import MsScreen, measure_candidates

    # One read of the cells: the held-out kernel's own schedules, and the others'.
    everything = tc.prior_examples(kernel, root, held_in=True)
    space, configs, secs = next(e for e in everything if e[0].kernel.name == kernel.name)
    examples = [e for e in everything if e[0].kernel.name != kernel.name]
    cands, kept = measure_candidates(space, configs)
    t = np.asarray([secs[i] for i in kept])
    rows = []
    for name in names:
        screen = MsScreen(space, seed=0)
        read = screen.pretrain(corpus(examples, kernel, name))
        pred = np.asarray(screen.model.predict(space.context, cands), dtype=float)
        rng = random.Random(0)
        regret = []
        for _ in range(draws):
            idx = rng.sample(range(len(t)), 64)
            top = sorted(idx, key=lambda i: -pred[i])[:8]
            regret.append(float(t[idx].min() / t[top].min()))
        rows.append({"kernel": kernel.name, "corpus": name, "trained_on": read,
                     "scored": len(t),
                     "spearman": round(float(spearmanr(pred, -t).statistic), 3),
                     "top8_of_64_median": round(statistics.median(regret), 3),
                     "top8_of_64_p10": round(float(np.quantile(regret, 0.1)), 3)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default=",".join(CORPORA))
    ap.add_argument("--root", type=Path, default=tc.ROOT / "results",
                    help="the folder holding the tvm_compare*_cells folders")
    ap.add_argument("--out", type=Path,
                    default=tc.ROOT / "results" / "tvm_prior_check.json")
    a = ap.parse_args(argv)
    names = [n for n in a.corpora.split(",") if n]
    bad = sorted(set(names) - set(CORPORA))
    if bad:
        ap.error(f"--corpora: unknown corpus {bad[0]!r} (known: {', '.join(CORPORA)})")
    from superopt.xtat import tvm_kernels as tk

    # Ctrl-C is taken between kernels: inside one, TVM's calls turn it into an error
    # that a schedule which does not build is skipped for, and the check would go on.
    stop: list[int] = []

    def interrupted(signum: int, frame: Any) -> None:
        stop.append(signum)
        print("tvm_prior_check.py: stopping after the current kernel", file=sys.stderr,
              flush=True)

    signal.signal(signal.SIGINT, interrupted)
    rows = []
    print(f"{'kernel':28} {'corpus':13} {'trained':>7} {'scored':>6} {'rho':>6} "
          f"{'top8/64':>7} {'p10':>6}")
    for k in tk.KERNELS:
        try:
            got = check(k, names, a.root)
        except StopIteration:
            print(f"tvm_prior_check.py: {a.root}: no cells of {k.name} in its "
                  "tvm_compare*_cells folders", file=sys.stderr)
            return 2
        except tc.PriorError as e:
            print(f"tvm_prior_check.py: {e}", file=sys.stderr)
            return 2
        rows += got
        for r in got:
            print(f"{k.name:28} {r['corpus']:13} {r['trained_on']:7d} {r['scored']:6d} "
                  f"{r['spearman']:6.3f} {r['top8_of_64_median']:7.3f} "
                  f"{r['top8_of_64_p10']:6.3f}", flush=True)
        if stop:  # nothing written: a partial table is no result
            print(f"tvm_prior_check.py: interrupted after {len(rows)} of "
                  f"{len(names) * len(tk.KERNELS)} checks; {a.out} not written",
                  file=sys.stderr)
            return 130
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"rows": rows, "draws": 300}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
