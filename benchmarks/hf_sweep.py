"""Benchmark: every family `transformers` knows for a task, captured and imported as a user
would (the importers' coverage of users' models, beyond the families `hf:NAME` builds).

For each model type in transformers' mapping for the task (`--task`: `causal-lm`, about
200 families, the default; `masked-lm`, about 50; `image-classification`, about 40;
`seq2seq-lm`, about 40, many of them speech models whose audio inputs this sweep does not
make), a child process builds the family from its config with one generic set of small
sizes (hidden 64, 2 layers, 4 heads, 2 key/value heads, vocabulary 256, images 64x64 of 3
channels; each config takes the keys it knows), seeded random weights that keep
activations near unit scale (as the `hf:` families are seeded: some libraries initialise
routers to zero, and a top-k of tied scores is the runtime's choice), captures `logits`
of the task's inputs (`input_ids`; `pixel_values`; `input_ids` and `decoder_input_ids`)
with `torch.export`, imports the program, and runs the imported graph on other inputs
against the exported program and against the eager model. Each family's outcome is one of:

- `ok`: imported; the largest relative difference of its logits from the program's;
- `import`: refused by the importer (the reason is the importer's one-line error);
- `values`: imported, but its logits differ from the program's by more than `--tol`;
- `config`, `build`, `export`: the generic small sizes do not make a valid config or
  model of that family, or torch.export fails on it: no verdict on the importer;
- `timeout`, `memory`: the child ran past `--timeout` seconds or `--memory` GiB.

The program and the eager model are compared too (`program_vs_eager`): where they differ
the export itself is not faithful, whatever the importer does.

With `--format onnx` the family, at the size set its `torch.export` capture took, is
written by torch's TorchScript ONNX exporter instead (the `.onnx` files most users have),
imported by the ONNX importer and run against onnxruntime on the same file; an exporter
failure or a file onnxruntime refuses is `export` (no verdict), and `program_vs_eager`
compares onnxruntime's result with the eager model. `--format onnx-dynamo` writes it with
the exporter `torch.onnx.export` runs by default since torch 2.9 (`dynamo=True`, through
`torch.export` and onnxscript, at that exporter's own defaults): the files users on
current torch have; `--opset 23` has it write SDPA as opset 23's `Attention`.

`OMP_WAIT_POLICY=PASSIVE taskset -c 1 .venv/bin/python benchmarks/hf_sweep.py`
(`--task masked-lm`, `--types llama,mixtral`, `--out FILE`, `--report` to print the table
of a finished run; each task's JSON is `results/hf_sweep.json` for causal LMs and
`results/hf_sweep_TASK.json` otherwise). The JSON is written after every family; a rerun
keeps the families it has (`--fresh` starts over), and Ctrl-C stops it with the families
done so far kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

RESULTS = Path(__file__).parent / "results" / "hf_sweep.json"
# Small sizes under every spelling the families' configs use; a config ignores the keys it
# does not know.
SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
         "n_embd": 64, "n_layer": 2, "n_head": 4, "d_model": 64, "num_layers": 2,
         "num_heads": 4, "head_dim": 16, "max_position_embeddings": 128, "use_cache": False,
         "ffn_dim": 128, "n_positions": 128, "pad_token_id": 0, "bos_token_id": 1,
         "eos_token_id": 2}
SEQ = 12
# What every size set keeps: a small vocabulary (the ids are drawn below 200) and no cache.
KEEP = {"vocab_size": 256, "use_cache": False, "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": 2, "num_labels": 10}
IMAGE = {"image_size": 64, "num_channels": 3}
# Families whose constraints no generic number meets: multi-head latent attention (as
# many key/value heads as heads, its rotary part is `head_dim`, its latent ranks default
# to thousands) with a few small experts, partial rotary widths given in channels, and a
# default config far past the published small one.
# Applied on every size set.
_LATENT = {"q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
           "num_key_value_heads": 4, "qk_rope_head_dim": 16, "v_head_dim": 16,
           "head_dim": 16, "n_routed_experts": 8, "num_experts": 8,
           "moe_intermediate_size": 32, "expert_ffn_hidden_size": 32,
           "ffn_hidden_size": 128, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
           "first_k_dense_replace": 1, "zero_expert_num": 2}
FAMILY: dict[str, dict[str, Any]] = {
    **{name: _LATENT for name in ("axk1", "axk2", "deepseek_v2", "deepseek_v3",
                                  "deepseek_v32", "glm4_moe_lite", "glm_moe_dsa",
                                  "longcat_flash", "minicpm3", "sarvam_mla", "youtu")},
    "gptj": {"rotary_dim": 8}, "codegen": {"rotary_dim": 8},
    # The library's default EfficientNet is B7 (64M parameters); B0's multipliers.
    "efficientnet": {"width_coefficient": 1.0, "depth_coefficient": 1.0, "hidden_dim": 1280},
    # Funnel counts its layers in blocks; LUKE's entity vocabulary defaults to 500,000.
    "funnel": {"block_sizes": [1, 1]},
    "luke": {"entity_vocab_size": 64, "entity_emb_size": 32},
    "perceiver": {"d_latents": 64, "num_latents": 32, "num_self_attends_per_block": 2,
                  "num_self_attention_heads": 4, "num_cross_attention_heads": 4},
    # Encoder-decoders that count heads and layers per side; mixtures of experts of
    # encoder-decoders with their experts' count and capacity.
    **{name: {"encoder_attention_heads": 4, "decoder_attention_heads": 4,
              "encoder_layers": 2, "decoder_layers": 2, "encoder_ffn_dim": 128,
              "decoder_ffn_dim": 128} for name in ("plbart", "nllb-moe")},
    "prophetnet": {"num_encoder_layers": 2, "num_decoder_layers": 2,
                   "num_encoder_attention_heads": 4, "num_decoder_attention_heads": 4,
                   "encoder_ffn_dim": 128, "decoder_ffn_dim": 128},
    "switch_transformers": {"num_experts": 4, "expert_capacity": 8, "d_ff": 128, "d_kv": 16,
                            "num_decoder_layers": 2, "num_sparse_encoder_layers": 1,
                            "num_sparse_decoder_layers": 1},
}
# Keys a family derives and will not be given (Falcon's head_dim is a read-only property;
# Funnel's and ProphetNet's layer counts follow their blocks and sides).
DERIVED: dict[str, tuple[str, ...]] = {"falcon": ("head_dim",),
                                       "funnel": ("num_hidden_layers",),
                                       "prophetnet": ("num_hidden_layers",)}


@dataclass(frozen=True)
class Task:
    """What a task's families are built from, fed and judged on."""

    mapping: str  # transformers' mapping of model types to the task's class
    auto: str  # the Auto class that builds one from a config
    inputs: tuple[str, ...]  # the forward's keyword arguments, in the program's order
    config: Mapping[str, Any]  # small sizes beside SMALL
    use_cache: bool  # whether the forward takes use_cache (decoders)
    # Keys of SMALL left out: vision families spell per-stage lists under them (Swin's
    # num_heads), which one number would break.
    drop: tuple[str, ...] = ()

    def sizes(self) -> dict[str, Any]:
        return {**{k: v for k, v in SMALL.items() if k not in self.drop}, **self.config}

    def ladder(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        """Size sets from the generic small one to the family's own defaults (with a small
        vocabulary): where one number fits no family's constraints (a rotary width, a
        latent rank, per-stage lists) the family's own values do."""
        return (("small", self.sizes()),
                ("layers", {"num_hidden_layers": 2, **KEEP, **self.config}),
                ("defaults", dict(KEEP)))


TASKS = {
    "causal-lm": Task("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM",
                      ("input_ids",), {}, True),
    "masked-lm": Task("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM",
                      ("input_ids",), {}, False),
    "image-classification": Task("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
                                 "AutoModelForImageClassification", ("pixel_values",), IMAGE,
                                 False, ("num_heads", "num_layers", "d_model", "head_dim")),
    "seq2seq-lm": Task("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
                       "AutoModelForSeq2SeqLM", ("input_ids", "decoder_input_ids"), {}, True),
}


def results_path(task: str, fmt: str = "pt2", opset: int | None = None) -> Path:
    name = "hf_sweep" + ("" if task == "causal-lm" else f"_{task}") + (
        "" if fmt == "pt2" else "_" + fmt.replace("-", "_")) + (
        f"_op{opset}" if opset else "")
    return RESULTS.with_name(f"{name}.json")


def _example(name: str, config: Any, seed: int) -> Any:
    """One input of the task: token ids in the vocabulary's middle, or a unit-scale image."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    if name == "pixel_values":
        # The family's own size where none was given (a composite keeps it in its tower);
        # 224, the size convolutional families are published at, where it names none.
        holder = config if hasattr(config, "image_size") else getattr(
            config, "vision_config", config)
        size = getattr(holder, "image_size", 224)
        side = size if isinstance(size, int) else size[0]
        channels = getattr(holder, "num_channels", 3)
        return torch.randn(1, channels, side, side, generator=gen)
    return torch.randint(3, 200, (1, SEQ), generator=gen)


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:400]


# Parameters past which a size set's model is not built (memory, time): the generic small
# sizes make some mixtures of experts of 512 small experts (Qwen3-Next: 103M), which import
# within the child's memory; a family's own widths past 60M do not stay small.
MAX_PARAMETERS = {"small": 400_000_000, "layers": 60_000_000, "defaults": 60_000_000}


def _config(transformers: Any, model_type: str, sizes: Mapping[str, Any]) -> Any:
    """The family's config with `sizes`, its sub-configs (a vision tower, a text model)
    given the same sizes: a composite's defaults are full-sized models."""
    sizes = {k: v for k, v in {**sizes, **FAMILY.get(model_type, {})}.items()
             if k not in DERIVED.get(model_type, ())}
    base = transformers.AutoConfig.for_model(model_type)
    subs = {}
    for name in getattr(base, "sub_configs", None) or {}:
        sub = getattr(base, name, None)
        if hasattr(sub, "to_dict"):
            # A sub-config's per-layer lists are of its default depth: left out, its own
            # rules make them again for the new depth.
            subs[name] = {k: v for k, v in {**sub.to_dict(), **sizes}.items()
                          if k not in ("layer_types", "per_layer_config")}
    return transformers.AutoConfig.for_model(model_type, **{**sizes, **subs})


def _logits(torch: Any, model: Any, spec: Task, mask: bool) -> Any:
    """`model` as a module of the task's inputs (positional, in `spec.inputs` order) that
    returns its logits; with `mask`, an all-ones attention mask beside the ids."""

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, *args: Any) -> Any:
            kwargs: dict[str, Any] = dict(zip(spec.inputs, args, strict=True))
            if mask:
                kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
            if spec.use_cache:
                kwargs["use_cache"] = False
            return self.inner(**kwargs).logits

    return Logits().eval()


def _capture(transformers: Any, torch: Any, model_type: str, spec: Task, rung: str,
             sizes: Mapping[str, Any]) -> dict[str, Any]:
    """Build the family at `sizes` and export it: the program, or the stage that failed."""
    try:
        config = _config(transformers, model_type, sizes)
    except Exception as e:
        return {"status": "config", "why": _first(e)}
    auto = getattr(transformers, spec.auto)
    from transformers.models.auto import modeling_auto

    names = getattr(modeling_auto, spec.mapping).get(model_type)
    if isinstance(names, tuple | list) and not getattr(config, "architectures", None):
        # A type mapped to several classes (DeiT, with and without its teacher) is built
        # from the config's architectures, which a fresh config lacks: the first class.
        config.architectures = [names[0]]
    try:
        with torch.device("meta"):  # counted before any memory is taken
            count = sum(p.numel() for p in auto.from_config(config).parameters())
        if count > MAX_PARAMETERS[rung]:
            return {"status": "build", "why": f"{count:,} parameters at these sizes"}
        model = auto.from_config(config).eval()
    except Exception as e:
        return {"status": "build", "why": _first(e)}
    # Weights of unit-scale activations (the hf: families' seeding): the libraries' own
    # initialisation zeroes some routers, and a top-k of equal scores is the runtime's
    # choice (torch.topk promises no order among ties; the IR takes the lowest index).
    from superopt.importers.hf import _lively

    _lively(model)
    if hasattr(model, "set_default_language"):  # X-MOD's adapters are per language
        model.set_default_language(next(iter(getattr(config, "languages", None) or ["en_XX"])))

    wrapped = _logits(torch, model, spec, mask=False)
    first = tuple(_example(n, config, i) for i, n in enumerate(spec.inputs))
    try:
        program = torch.export.export(wrapped, first)
    except Exception as e:
        return {"status": "export", "why": f"{type(e).__name__}: {_first(e)}"}
    return {"program": program, "wrapped": wrapped, "config": config}


def _onnx_verdict(model_type: str, wrapped: Any, config: Any, spec: Task,
                  tol: float, dynamo: bool = False, opset: int | None = None
                  ) -> dict[str, Any]:
    """The family written by torch's ONNX exporter, imported, and run against onnxruntime
    on the same file: the TorchScript exporter (opset 17, what most users' `.onnx` files
    are) or, with `dynamo`, the one `torch.onnx.export` runs by default since torch 2.9
    (through `torch.export` and onnxscript, at its own default opset or `opset`)."""
    import inspect
    import tempfile
    import warnings

    import numpy as np
    import onnxruntime as ort
    import torch

    from superopt.importers.errors import ModelImportError
    from superopt.importers.onnx import import_onnx
    from superopt.ir import interpret

    first = tuple(_example(n, config, i) for i, n in enumerate(spec.inputs))
    other = tuple(_example(n, config, 10 + i) for i, n in enumerate(spec.inputs))
    model = wrapped.inner
    if hasattr(model, "set_experts_implementation"):
        # Mixtures of experts as transformers' own exporters write them (batched matmuls of
        # gathered expert weights): the default grouped form's histogram has no ONNX op.
        try:
            model.set_experts_implementation("batched_mm")
        except Exception:  # a model without experts
            pass
    # An all-ones attention mask beside the ids, as users of these models pass one: without
    # it transformers looks for packed sequences in the positions (aten::diff, which the
    # TorchScript exporter refuses).
    masked = "input_ids" in spec.inputs and "attention_mask" in inspect.signature(
        model.forward).parameters
    wrapped = _logits(torch, model, spec, mask=masked)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / f"{model_type}.onnx")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if dynamo:
                    # As a user calls it: the exporter's defaults (opset, its own graph
                    # optimization, weights beside the file as external data).
                    torch.onnx.export(wrapped, first, path, dynamo=True,
                                      input_names=list(spec.inputs), output_names=["logits"],
                                      verbose=False, opset_version=opset)
                else:
                    torch.onnx.export(wrapped, first, path, dynamo=False, opset_version=17,
                                      input_names=list(spec.inputs),
                                      output_names=["logits"])
        except Exception as e:
            return {"status": "export", "why": f"torch.onnx.export: {type(e).__name__}: "
                                               f"{_first(e)}"}
        feeds = {n: o.numpy() for n, o in zip(spec.inputs, other, strict=True)}
        try:
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            names = {i.name for i in session.get_inputs()}
            want = session.run(None, {k: v for k, v in feeds.items() if k in names})[0]
        except Exception as e:  # an invalid file: no verdict on the importer
            return {"status": "export", "why": f"onnxruntime refuses the file: {_first(e)}"}
        start = time.perf_counter()
        try:
            graph = import_onnx(path)
        except ModelImportError as e:
            return {"status": "import", "why": _first(e)}
        seconds = time.perf_counter() - start
    with torch.no_grad():
        eager = wrapped(*other).numpy()
    got = interpret(graph, {v.attr("name"): feeds[v.attr("name")] for v in graph.inputs})[0]
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got - want).max()) / scale
    return {"status": "ok" if err <= tol else "values", "rel_err": err,
            "program_vs_eager": float(np.abs(want - eager).max()) / max(
                float(np.abs(eager).max()), 1e-30),
            "nodes": len(graph), "import_s": round(seconds, 3),
            "ops": len(set(graph.op_histogram()))}


def one(model_type: str, tol: float, task: str = "causal-lm",
        fmt: str = "pt2", opset: int | None = None) -> dict[str, Any]:
    """Build, capture, import and compare one family (run in a child process): the
    `torch.export` program (`pt2`) or the file torch's ONNX exporter writes (`onnx`)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import warnings

    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    import numpy as np
    import torch
    import transformers

    from superopt.importers.errors import ModelImportError
    from superopt.importers.torch import import_exported
    from superopt.ir import interpret

    spec = TASKS[task]
    torch.set_num_threads(1)
    # The first size set under which the family builds and exports is the one judged; the
    # rows say which (`sizes`) and why the smaller sets failed (`tried`).
    tried: list[str] = []
    failed: dict[str, Any] = {}
    for rung, sizes in spec.ladder():
        torch.manual_seed(0)
        failed = _capture(transformers, torch, model_type, spec, rung, sizes)
        if "program" in failed:
            break
        tried.append(f"{rung}: {failed['status']}: {failed['why'][:120]}")
    else:
        return {**failed, "tried": tried[:-1]}
    program, wrapped, config = failed["program"], failed["wrapped"], failed["config"]
    base = {"sizes": rung, "tried": tried}
    if fmt in ("onnx", "onnx-dynamo"):
        return {**base, **_onnx_verdict(model_type, wrapped, config, spec, tol,
                                        dynamo=fmt == "onnx-dynamo", opset=opset)}
    start = time.perf_counter()
    try:
        graph = import_exported(program, name=model_type)
    except ModelImportError as e:
        return {**base, "status": "import", "why": _first(e)}
    seconds = time.perf_counter() - start
    other = tuple(_example(n, config, 10 + i) for i, n in enumerate(spec.inputs))
    with torch.no_grad():
        want = program.module()(*other).detach().numpy()
        eager = wrapped(*other).numpy()
    feeds = {v.attr("name"): o.numpy() for v, o in zip(graph.inputs, other, strict=True)}
    got = interpret(graph, feeds)[0]
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got - want).max()) / scale
    return {**base, "status": "ok" if err <= tol else "values", "rel_err": err,
            "program_vs_eager": float(np.abs(want - eager).max()) / max(
                float(np.abs(eager).max()), 1e-30),
            "nodes": len(graph), "import_s": round(seconds, 3),
            "ops": len(set(graph.op_histogram()))}


def _child(model_type: str, args: argparse.Namespace) -> dict[str, Any]:
    def limit() -> None:
        import resource

        cap = int(args.memory * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    cmd = [sys.executable, __file__, "--one", model_type, "--tol", str(args.tol),
           "--task", args.task, "--format", args.format,
           *(["--opset", str(args.opset)] if args.opset else [])]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                             preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "why": f"past {args.timeout} s"}
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
    if run.returncode != 0 or not lines:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        kind = "memory" if "MemoryError" in run.stderr or run.returncode in (-9, 137) \
            else "crash"
        return {"status": kind, "why": tail[:400]}
    return json.loads(lines[-1])


def _types(spec: str | None, task: str = "causal-lm") -> list[str]:
    from transformers.models.auto import modeling_auto

    known = sorted(getattr(modeling_auto, TASKS[task].mapping))
    if not spec:
        return known
    asked = [t.strip() for t in spec.split(",") if t.strip()]
    unknown = [t for t in asked if t not in known]
    if unknown or not asked:
        raise SystemExit(f"hf_sweep.py: no {task} family named {unknown or spec!r}; "
                         f"e.g. {', '.join(known[:5])}")
    return asked


def summarize(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for r in rows.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    judged = sum(counts.get(k, 0) for k in ("ok", "import", "values", "timeout", "memory",
                                           "crash"))
    return {"families": len(rows), "counts": counts, "judged": judged,
            "imported_share_of_judged": counts.get("ok", 0) / judged if judged else None,
            "export_not_faithful": sorted(t for t, r in rows.items()
                                          if r.get("program_vs_eager", 0) > 1e-4)}


def report(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    task = data.get("settings", {}).get("task", "causal-lm")
    how = {"onnx": "torch.onnx.export(dynamo=False)",
           "onnx-dynamo": "torch.onnx.export(dynamo=True)"}.get(
        data.get("settings", {}).get("format", "pt2"), "torch.export")
    if data.get("settings", {}).get("opset"):
        how += f" at opset {data['settings']['opset']}"
    table = Table(title=f"transformers {task} families: {how}, then import")
    for col in ("family", "outcome", "rel err", "nodes", "why (importer or torch)"):
        table.add_column(col)
    for name, r in sorted(data["rows"].items()):
        err = f"{r['rel_err']:.1e}" if "rel_err" in r else "-"
        table.add_row(name, r["status"], err, str(r.get("nodes", "-")),
                      r.get("why", "")[:110])
    Console(width=170).print(table)
    s = data["summary"]
    print(f"{s['families']} families: {s['counts']}; judged {s['judged']} "
          f"(import verdicts), imported {s['counts'].get('ok', 0)}")


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"hf_sweep.py: {path}: not a sweep's JSON ({e}); --fresh starts "
                         "over") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict):
        raise SystemExit(f"hf_sweep.py: {path}: not a sweep's JSON (no rows); --fresh starts "
                         "over")
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", help="comma-separated model types (default: all)")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative difference")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per family")
    ap.add_argument("--memory", type=float, default=10.0, help="GiB per family")
    ap.add_argument("--task", choices=sorted(TASKS), default="causal-lm",
                    help="which of transformers' mappings to sweep (default: causal-lm)")
    ap.add_argument("--format", choices=("pt2", "onnx", "onnx-dynamo"), default="pt2",
                    help="import the torch.export program (pt2, the default), the file "
                         "torch's TorchScript ONNX exporter writes (onnx), or the one its "
                         "default exporter writes (onnx-dynamo)")
    ap.add_argument("--opset", type=int, default=None,
                    help="with --format onnx-dynamo: the opset to write (default: the "
                         "exporter's; from 23 it writes SDPA as Attention)")
    ap.add_argument("--out", type=Path,
                    help="the JSON (default: results/hf_sweep[_TASK][_FORMAT][_opN].json)")
    ap.add_argument("--fresh", action="store_true", help="drop the families already in --out")
    ap.add_argument("--report", action="store_true", help="print the table of --out")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.opset is not None and (args.format != "onnx-dynamo" or args.opset < 18):
        ap.error("--opset takes 18 or more, with --format onnx-dynamo")
    if args.out is None:
        args.out = results_path(args.task, args.format, args.opset)
    if args.one:
        print(json.dumps(one(args.one, args.tol, args.task, args.format, args.opset)))
        return
    if args.timeout <= 0 or args.memory <= 0:
        raise SystemExit("hf_sweep.py: --timeout and --memory must be positive")
    if args.report:
        if not args.out.exists():
            raise SystemExit(f"hf_sweep.py: {args.out}: no such file (run the sweep first)")
        report(_read(args.out))
        return
    import transformers

    data: dict[str, Any] = {"rows": {}}
    if args.out.exists() and not args.fresh:
        data = _read(args.out)
    settings = data.get("settings", {"task": args.task, "format": args.format,
                                     "opset": args.opset})
    held = (settings.get("task", "causal-lm"), settings.get("format", "pt2"),
            settings.get("opset"))
    if held != (args.task, args.format, args.opset):
        raise SystemExit(f"hf_sweep.py: {args.out} holds another sweep ({held[0]}, "
                         f"{held[1]}, opset {held[2] or 'default'}); --fresh starts over")
    data["settings"] = {"small": TASKS[args.task].sizes(), "seq": SEQ, "tol": args.tol,
                        "task": args.task, "format": args.format, "opset": args.opset,
                        "transformers": transformers.__version__}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    todo = [t for t in _types(args.types, args.task) if t not in data["rows"]]
    current = ""
    try:
        for current in todo:
            start = time.perf_counter()
            row = _child(current, args)
            row["wall_s"] = round(time.perf_counter() - start, 1)
            data["rows"][current] = row
            data["summary"] = summarize(data["rows"])
            args.out.write_text(json.dumps(data, indent=1, sort_keys=True))
            print(f"{current:28s} {row['status']:8s} {row.get('why', '')[:100]}", flush=True)
    except KeyboardInterrupt:
        print(f"hf_sweep.py: interrupted in {current}: {len(data['rows'])} families kept in "
              f"{args.out}", file=sys.stderr)
        raise SystemExit(130) from None
    data["summary"] = summarize(data["rows"])
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True))
    report(data)


if __name__ == "__main__":
    main()
