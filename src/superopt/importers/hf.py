"""HuggingFace BERT built from a config (no download), captured with torch.export.

`bert_graph("base")` builds `transformers.BertModel` with the published BERT-base shape and
seeded random weights, captures it with `torch.export` on `input_ids` alone (no attention
mask, so the all-ones mask arithmetic folds into constants), and imports it with
`superopt.importers.torch.import_exported`. Attention is the eager implementation, so it
appears as explicit matmul / softmax. transformers and torch load only when called.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from superopt.importers.errors import ModelImportError
from superopt.ir.graph import Graph


@dataclass(frozen=True)
class BertSize:
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab: int = 30522
    max_positions: int = 512


# "base" is the published bert-base-uncased shape (Devlin et al. 2019): ~109.5M parameters.
BERT_SIZES: dict[str, BertSize] = {
    "base": BertSize(layers=12, hidden=768, heads=12, intermediate=3072),
    "small": BertSize(layers=4, hidden=256, heads=4, intermediate=1024),
    "tiny": BertSize(layers=2, hidden=128, heads=2, intermediate=512),
}


def bert_model(size: str = "base", seed: int = 0, pooler: bool = True) -> Any:
    """An eval-mode `transformers.BertModel` of the named size with seeded random weights."""
    if size not in BERT_SIZES:
        raise ModelImportError(f"unknown BERT size {size!r}; known: {', '.join(BERT_SIZES)}")
    os.environ["HF_HUB_OFFLINE"] = "1"  # built from a config: nothing may be fetched
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from transformers import BertConfig, BertModel

    s = BERT_SIZES[size]
    config = BertConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=s.layers,
                        num_attention_heads=s.heads, intermediate_size=s.intermediate,
                        max_position_embeddings=s.max_positions,
                        attn_implementation="eager")
    torch.manual_seed(seed)
    return BertModel(config, add_pooling_layer=pooler).eval()


def bert_inputs(size: str = "base", batch: int = 1, seq: int = 128, seed: int = 0) -> Any:
    """Seeded example `input_ids` (int64, values in [0, vocab)) for `bert_model(size)`."""
    import torch

    if size not in BERT_SIZES:
        raise ModelImportError(f"unknown BERT size {size!r}; known: {', '.join(BERT_SIZES)}")
    s = BERT_SIZES[size]
    if not 1 <= seq <= s.max_positions or batch < 1:
        raise ModelImportError(f"bert-{size}: need batch >= 1 and 1 <= seq <= "
                               f"{s.max_positions}, found batch={batch} seq={seq}")
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, s.vocab, (batch, seq), generator=gen)


def bert_graph(size: str = "base", batch: int = 1, seq: int = 128, *, pooler: bool = True,
               seed: int = 0) -> Graph:
    """BERT (`base`, `small` or `tiny`) as a graph over `input_ids` (i64, high=vocab).

    Outputs: last_hidden_state (batch, seq, hidden) and, with `pooler`, pooler_output
    (batch, hidden). Weights carry the model's data under their parameter names.
    """
    import torch

    from superopt.importers.torch import import_exported

    model = bert_model(size, seed, pooler=pooler)
    ids = bert_inputs(size, batch, seq, seed)
    name = f"bert-{size}"
    try:
        # The ModelOutput flattens to (last_hidden_state[, pooler_output]), in that order.
        program = torch.export.export(model, (ids,))
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelImportError(f"{name}: torch.export failed: {first}") from e
    return import_exported(program, name=name,
                           input_high={"input_ids": BERT_SIZES[size].vocab})


__all__ = ["BERT_SIZES", "BertSize", "bert_graph", "bert_inputs", "bert_model"]
