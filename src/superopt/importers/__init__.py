"""Model importers and the one entry point that turns a MODEL_OR_FILE string into a graph.

Heavy packages load only when a specific importer is used:
- `superopt.importers.onnx`: ONNX files (and the models the `onnx` package ships);
- `superopt.importers.torch`: PyTorch modules via torch.fx or torch.export (ATen level);
- `superopt.importers.hf`: HuggingFace `transformers` families built from a config (`hf:NAME`),
  captured with torch.export;
- `superopt.importers.hlo`: XLA HLO modules (decoded JSON), with their layouts and kernels.
"""

from __future__ import annotations

from pathlib import Path

from superopt.importers.errors import ModelImportError, UnsupportedOpsError
from superopt.ir.graph import Graph

HF_MODELS = ("hf:bert-tiny", "hf:bert-small", "hf:bert-base")  # published BERT sizes
# Small-config families (superopt.importers.hf.FAMILIES), listed here so that the names are
# known without importing transformers.
HF_FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "phi", "gemma", "bert", "bert-classifier",
               "llama-classifier", "distilbert", "roberta", "t5-encoder", "clip-text", "vit",
               "vit-classifier", "deit", "swin", "convnext", "convnextv2", "poolformer",
               "segformer", "dpt", "upernet", "mobilevit", "resnet", "regnet", "efficientnet",
               "mobilenet_v2", "whisper-encoder")


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
    import torch

    from superopt.importers.torch import import_exported

    try:
        program = torch.export.load(str(path))
    except Exception as e:  # torch raises several types for a file that is not a program
        raise ModelImportError(f"{path}: not a torch.export program: {e}") from e
    return import_exported(program, name=path.stem)


__all__ = ["HF_FAMILIES", "HF_MODELS", "ModelImportError", "UnsupportedOpsError", "load_model"]
