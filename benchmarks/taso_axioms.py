"""Benchmark: which true rules TASO's axioms leave unproved, and which of those ours prove.

TASO's `verify.py` proves rules from a short list of operator axioms and blacklists the
true rules that list cannot prove (25 of its historical 820-rule file, which is no longer
published). This asks the same question of rule files we have: each file is verified twice
with the same prover, once with only the axioms that state TASO's list (`TASO_AXIOMS`: our
validated statement of each of TASO's axioms and lemmas, with the shape conditions ours
carry) and once with every built-in axiom, and the rules proved only by the second are
listed with the axioms their proofs used: the analogue of the blacklist table.

Files: the TASO-preset generated library (`superopt generate --preset taso --max-ops N`,
generated here unless `--library FILE` gives one) and any `--rules FILE` (e.g. TASO's own
`graph_subst.pb`, on which TASO's verifier proves 131 of 146 outputs with a current z3:
how close the TASO subset comes to that says how faithful a statement of TASO's list it is).

Run: `.venv/bin/python benchmarks/taso_axioms.py [--rules ../shared/data/taso/graph_subst.pb]
[--jobs 2] [--out benchmarks/results/taso_axioms.json]`. Prints a table and writes the JSON
after every file; `--resume` keeps the files it has and verifies the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HERE = Path(__file__).parent
# Our axioms that state TASO's verify.py list, in its order (its comment for each in ours).
TASO_AXIOMS = (
    # ewadd and ewmul associative, commutative, distributive
    "ewadd_assoc", "ewadd_comm", "ewmul_assoc", "ewmul_comm", "ewmul_distrib",
    # scalar_mul: associative, over ewadd, with ewmul, transpose, matmul, concat, conv2d
    "smul_assoc", "smul_ewadd", "smul_ewmul", "smul_transpose", "smul_matmul_r",
    "smul_concat", "smul_conv_swap", "smul_conv",
    # relu fused into conv2d, through concat and transpose
    "fuse_conv_relu", "relu_concat", "relu_transpose",
    # conv2d linear in each input; a sum of convs is the conv of the concatenations
    "conv_linear_w", "conv_linear_x", "conv_sum_concat",
    # a sum of matmuls is the matmul of the concatenations; concat of sums and products
    "matmul_concat_inner2", "concat_ewadd", "concat_ewmul",
    # concat of convs along the batch, and along the output channels
    "conv_batch_concat", "conv_out_concat",
    # matmul associative; split of a concat; matmul through a column concat; linear
    "matmul_assoc", "split2_concat_0", "split2_concat_1", "matmul_concat_r2",
    "matmul_linear_r",
    # transpose: involutive, through matmul and concat; concat geometry; through ew ops
    "transpose_id2", "transpose_matmul2", "transpose_concat2", "concat_geometry",
    "transpose_ewadd", "transpose_ewmul",
    # pooling through concat (the avgpool one along axis 0 is TASO's lemma)
    "avgpool_concat1", "maxpool_concat0", "maxpool_concat1", "avgpool_concat0",
    # constants: const_pool conv is avgpool, const_iconv conv is the identity, imm and
    # one are identities (imm on the left and transposed are TASO's lemmas), avgpool of
    # iconv is const_pool
    "conv_as_avgpool", "avgpool_as_conv", "conv_iconv", "matmul_imm_r", "matmul_imm_l",
    "transpose_imm", "ewmul_one", "conv_pooled_iconv",
    # enlarge
    "conv_enlarge",
)


def generated(max_ops: int, out: Path) -> list:
    from superopt.substitutions.generator import generate
    from superopt.substitutions.library import save_library
    from superopt.substitutions.presets import make_config

    rules = list(generate(make_config("taso", max_ops=max_ops)).rules)
    save_library(rules, out)
    return rules


def compare(name: str, rules: list, taso_axioms: list, all_axioms: list, options: Any,
            jobs: int) -> dict[str, Any]:
    """Both verifications of one file, and the rules whose outcome differs."""
    from superopt.verifier.command import summary
    from superopt.verifier.prover import OUTCOMES, at_source_shapes, verify_rules

    made = [at_source_shapes(r)[0] for r in rules]
    out: dict[str, Any] = {"file": name, "rules": len(rules),
                           "outputs": sum(r.outputs for r in rules)}
    results = {}
    for label, axioms in (("taso", taso_axioms), ("ours", all_axioms)):
        t0 = time.perf_counter()
        res = verify_rules(made, axioms, options, jobs)
        results[label] = {r.name: r for r in res}
        s = summary(res, time.perf_counter() - t0)  # as `superopt verify` counts them
        out[label] = {"axioms": len(axioms), "wall_s": s["wall_s"],
                      "outputs_proved": s["outputs_proved"],
                      "by_state": {st: s[st] for st in OUTCOMES}}
    diff = []
    for rule_name, r in results["ours"].items():
        t = results["taso"][rule_name]
        if t.state != r.state:
            diff.append({"rule": rule_name, "taso_axioms": t.state, "ours": r.state,
                         "axioms_used": sorted(r.axioms),
                         "beyond_taso": sorted(set(r.axioms) - set(TASO_AXIOMS)),
                         "reason_taso": t.reason, "reason_ours": r.reason})
    out["differ"] = sorted(diff, key=lambda d: d["rule"])
    out["proved_only_by_ours"] = sum(d["ours"] == "proved" for d in diff)
    out["proved_only_by_taso"] = sum(d["taso_axioms"] == "proved" for d in diff)
    out["refuted_either"] = sum(r.state == "refuted" for rs in results.values()
                                for r in rs.values())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--library", default=None, metavar="FILE",
                    help="the TASO-preset library to use (default: generate it)")
    ap.add_argument("--max-ops", type=int, default=3)
    ap.add_argument("--rules", action="append", default=[], metavar="FILE",
                    help="another rule file, as `superopt verify` reads it (repeatable)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--out", default=str(HERE / "results" / "taso_axioms.json"))
    ap.add_argument("--resume", action="store_true",
                    help="keep the files --out has already and verify the rest")
    args = ap.parse_args()
    for p in [*args.rules, *([args.library] if args.library else [])]:
        if not Path(p).is_file():
            ap.error(f"no such file: {p}")

    from rich.console import Console
    from rich.table import Table

    from superopt.ir.errors import IRError
    from superopt.substitutions.readers import read_any
    from superopt.verifier.axioms import builtin_axioms
    from superopt.verifier.prover import VerifyOptions

    console = Console()
    all_axioms = builtin_axioms()
    known = {a.name for a in all_axioms}
    missing = [n for n in TASO_AXIOMS if n not in known]
    if missing:
        raise SystemExit(f"taso_axioms.py: no built-in axiom {', '.join(missing)}")
    taso = [a for a in all_axioms if a.name in TASO_AXIOMS]
    options = VerifyOptions(timeout_s=args.timeout)
    unreadable: dict[str, list[str]] = {}

    def read(path: str) -> tuple[str, list]:
        """A rule file as `superopt verify` reads it; a file that cannot be read at all is
        one line and exit 2, rules the reader cannot make are counted in the JSON."""
        problems: list = []
        try:
            rules = read_any(path, problems)
        except (IRError, OSError) as err:
            ap.error(str(err))
        if problems:
            unreadable[Path(path).name] = [str(p) for p in problems]
        return Path(path).name, rules

    files: list[tuple[str, list]] = [read(p) for p in
                                     ([args.library] if args.library else []) + args.rules]
    if not args.library:
        with console.status("generating the TASO-preset library"):
            lib = generated(args.max_ops, Path(tempfile.mkdtemp()) / "taso.json")
        files.insert(0, (f"generated (taso preset, {args.max_ops} ops)", lib))
    t0 = time.perf_counter()
    out = Path(args.out)
    rows: list[dict[str, Any]] = []
    if args.resume and out.exists():
        try:
            rows = list(json.loads(out.read_text()).get("files", []))
        except (ValueError, AttributeError):
            ap.error(f"--resume: {out} is not a taso_axioms.py result")

    def write() -> None:
        """The JSON after every file, so that a run killed midway keeps what it measured."""
        doc = {"what": "rules TASO's axioms leave unproved and ours prove "
                       "(benchmarks/taso_axioms.py)",
               "machine": {"host": platform.node(), "cpus": os.cpu_count()},
               "taso_axioms": list(TASO_AXIOMS), "builtin_axioms": len(all_axioms),
               "timeout_s": args.timeout, "jobs": args.jobs, "unreadable": unreadable,
               "wall_s": round(time.perf_counter() - t0, 1), "files": rows}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")

    done = {r.get("file") for r in rows}
    for name, rules in files:
        if name in done:
            console.print(f"{name}: kept from {out} (--resume)")
            continue
        with console.status(f"verifying {name} twice ({len(rules)} rules)"):
            rows.append(compare(name, rules, taso, all_axioms, options, args.jobs))
        write()
    table = Table(title="outputs proved: TASO's axioms (as ours state them) vs all of ours")
    for col in ("file", "rules", "outputs", "TASO's axioms", "ours", "rules proved only by ours"):
        table.add_column(col, justify="left" if col == "file" else "right")
    for r in rows:
        table.add_row(r["file"], str(r["rules"]), str(r["outputs"]),
                      str(r["taso"]["outputs_proved"]), str(r["ours"]["outputs_proved"]),
                      str(r["proved_only_by_ours"]))
    console.print(table)
    for r in rows:
        if not r["differ"]:
            continue
        t = Table(title=f"{r['file']}: rules whose outcome differs")
        for col in ("rule", "TASO's axioms", "ours", "axioms beyond TASO's list"):
            t.add_column(col)
        for d in r["differ"]:
            t.add_row(d["rule"], d["taso_axioms"], d["ours"], ", ".join(d["beyond_taso"]))
        console.print(t)
    write()
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
