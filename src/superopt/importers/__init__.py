"""Model importers and the one entry point that turns a MODEL_OR_FILE string into a graph.

Heavy packages load only when a specific importer is used:
- `superopt.importers.onnx`: ONNX files (and the models the `onnx` package ships);
- `superopt.importers.torch`: PyTorch modules via torch.fx or torch.export (ATen level);
- `superopt.importers.hf`: HuggingFace `transformers` families built from a config (`hf:NAME`),
  captured with torch.export;
- `superopt.importers.hlo`: XLA HLO modules (decoded JSON), with their layouts and kernels.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from superopt.importers.errors import ModelImportError, UnsupportedOpsError
from superopt.ir.graph import Graph

HF_MODELS = ("hf:bert-tiny", "hf:bert-small", "hf:bert-base")  # published BERT sizes
# Small-config families (superopt.importers.hf.FAMILIES), listed here so that the names are
# known without importing transformers.
HF_FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "phi", "gemma", "bert", "bert-classifier",
               "mixtral", "mamba", "deepseek-v3", "llama4", "llama-classifier", "distilbert",
               "roberta", "t5-encoder", "clip-text", "vit", "vit-classifier", "deit", "swin",
               "convnext", "convnextv2", "poolformer", "segformer", "dpt", "upernet",
               "mobilevit", "resnet", "regnet", "efficientnet", "mobilenet_v2",
               "whisper-encoder")


def load_model(spec: str, batch: int | None = None) -> Graph:
    """A zoo name (`resnet50`, `bert-base`), an ONNX light model (`onnx:light_resnet50`),
    a HuggingFace capture (`hf:bert-base`), an `.onnx` file, a `torch.export` program saved
    as `.pt2` (`torch.export.save`) or a saved graph `.json`."""
    from superopt.ir.serialize import load

    path = Path(spec)
    if spec.endswith(".onnx"):
        if not path.exists():
            raise ModelImportError(f"{spec}: no such file")
        from superopt.importers.onnx import import_onnx

        return import_onnx(path, batch=batch)
    if spec.endswith(".pt2"):
        return _load_pt2(path, batch)
    if spec.endswith(".json"):
        graph = load(path)
        if batch is not None:
            raise ModelImportError(f"{spec}: --batch applies to zoo and ONNX models, not saved graphs")
        return graph
    if spec.startswith("onnx:"):
        from superopt.importers.onnx import import_onnx, light_model_path

        return import_onnx(light_model_path(spec.removeprefix("onnx:")), batch=batch)
    if spec.startswith("synthetic:"):
        from superopt.tpu_sim.synthetic import synthetic_graph

        size = spec.removeprefix("synthetic:")
        if not size.isdigit() or not 10 <= int(size) <= 2_000_000:
            raise ModelImportError(f"{spec}: expected synthetic:N with 10 <= N <= 2000000")
        if batch is not None:
            raise ModelImportError(f"{spec}: --batch does not apply to synthetic graphs")
        return synthetic_graph(int(size))
    if spec.startswith("hf:"):
        name = spec.removeprefix("hf:")
        if name in HF_FAMILIES:
            from superopt.importers.hf import hf_graph

            return hf_graph(name, batch=batch or 1)
        from superopt.importers.hf import bert_graph

        size = name.removeprefix("bert-")
        if f"hf:bert-{size}" not in HF_MODELS:
            known = ", ".join((*HF_MODELS, *(f"hf:{f}" for f in HF_FAMILIES)))
            raise ModelImportError(f"unknown HuggingFace model {spec!r}; known: {known}")
        return bert_graph(size, batch=batch or 1)
    if path.suffix or "/" in spec:
        raise ModelImportError(f"{spec}: expected a zoo model name, an .onnx or .pt2 file or a "
                               ".json graph")
    from superopt import zoo

    return zoo.build(spec, batch=batch or 1)


def _load_pt2(path: Path, batch: int | None) -> Graph:
    if not path.exists():
        raise ModelImportError(f"{path}: no such file")
    if batch is not None:
        raise ModelImportError(f"{path}: --batch does not apply to a .pt2 program (its shapes "
                               "were fixed when it was exported)")
    from superopt.importers.torch import import_exported

    program = _load_program(path)
    return import_exported(program, name=path.stem)


# torch names an output container type it cannot rebuild (transformers' exporters save the
# model's ModelOutput dataclasses, which register themselves when their module is imported).
_UNREGISTERED = re.compile(r"Deserializing ([\w.]+)[.:](\w+) in pytree is not registered")
# A custom operator the program calls, unknown until the library that defines it registers
# it; the modules that register the ones the importers read, by namespace.
_UNRESOLVED = re.compile(r"failed to resolve torch\.ops\.(\w+)\.(\w+)")
_CUSTOM_OP_MODULES = {"transformers": "transformers.integrations.moe"}


def _load_program(path: Path) -> Any:
    """`torch.export.load`, importing the modules that define the program's output
    containers first where torch names one it does not know."""
    import logging

    import torch

    class Keep(logging.Handler):
        """torch logs the real cause (with a traceback) and raises a generic error: the
        cause is kept here and not printed."""

        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.text: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            exc = record.exc_info[1] if record.exc_info else None
            self.text += [str(c) for c in _causes(exc)] if exc else [record.getMessage()]

    log = logging.getLogger("torch.export")
    keep, propagate, handlers = Keep(), log.propagate, list(log.handlers)
    for h in handlers:  # torch's own stderr handler
        log.removeHandler(h)
    log.addHandler(keep)
    log.propagate = False
    tried: set[str] = set()
    try:
        while True:
            keep.text.clear()
            try:
                return torch.export.load(str(path))
            except Exception as e:  # torch raises several types for a file that is no program
                said = [str(c) for c in _causes(e)] + keep.text
                op = next((m for m in map(_UNRESOLVED.search, said) if m), None)
                if op is not None and op.group(0) not in tried \
                        and op.group(1) in _CUSTOM_OP_MODULES:
                    tried.add(op.group(0))
                    _import_for(path, _CUSTOM_OP_MODULES[op.group(1)],
                                f"torch.ops.{op.group(1)}.{op.group(2)}")
                    continue
                found = next((m for m in map(_UNREGISTERED.search, said) if m), None)
                if found is None or found.group(0) in tried:
                    # torch's own error points at the log it printed (kept here instead).
                    why = found.group(0) if found else _first_line(
                        RuntimeError(keep.text[-1]) if keep.text and "warnings above" in str(e)
                        else e)[:300]
                    raise ModelImportError(f"{path}: not a torch.export program: {why}") from e
                tried.add(found.group(0))
                _register_container(path, found.group(1), found.group(2))
    finally:
        log.removeHandler(keep)
        for h in handlers:
            log.addHandler(h)
        log.propagate = propagate


def _import_for(path: Path, module: str, what: str) -> None:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as e:
        raise ModelImportError(f"{path}: the program calls {what}, defined by {module}, "
                               f"which does not import here: {_first_line(e)}") from e


def _register_container(path: Path, module: str, name: str) -> None:
    """Make torch's pytree know a transformers output container a program names: import
    its module (a ModelOutput registers itself then); a cache registers through
    transformers' own exporter, as its loader does. Other modules are not imported on a
    file's word."""
    import importlib

    import torch

    if module.split(".")[0] != "transformers":
        # A file names the module; only transformers' are imported on its word.
        raise ModelImportError(f"{path}: the program's outputs hold {module}.{name}, which "
                               "torch cannot rebuild here (import its module first)")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ModelImportError(f"{path}: the program's outputs hold {module}.{name}, which "
                               f"does not import here: {_first_line(e)}") from e
    if cls in torch.utils._pytree.SUPPORTED_NODES:
        return
    try:
        from transformers.exporters.exporter_dynamo import register_pytree_node
    except ImportError as e:
        raise ModelImportError(f"{path}: {module}.{name} needs transformers' exporters "
                               f"to be read back: {_first_line(e)}") from e
    register_pytree_node(cls)


def _causes(e: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and len(out) < 8:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


__all__ = ["HF_FAMILIES", "HF_MODELS", "ModelImportError", "UnsupportedOpsError", "load_model"]
