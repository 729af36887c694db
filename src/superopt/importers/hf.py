"""HuggingFace `transformers` models built from a config (no download), captured with
torch.export and imported.

Two entry points:

- `bert_graph("base")`: `transformers.BertModel` at the published BERT sizes (tiny, small,
  base) with seeded random weights and eager attention, captured on `input_ids` alone (no
  attention mask, so the all-ones mask arithmetic folds into constants).
- `hf_graph(NAME)` (the CLI's `hf:NAME`): one of `FAMILIES`, each a public architecture
  (GPT-2, Llama, Mistral, Qwen2, Phi, Gemma, BERT, DistilBERT, RoBERTa, T5's encoder,
  ViT, DeiT, Swin, ConvNeXt, MobileViT, ResNet, EfficientNet, MobileNet-V2, Whisper's
  encoder, ...) built
  from a small config of that family with seeded random weights. Attention is the library's
  default (SDPA where the family has it), so decoders reach the importer as
  `scaled_dot_product_attention` with a causal flag or mask. `hf_module` and `hf_inputs` give
  the module and example inputs, so callers (benchmarks/models.py) can save the capture as
  `.pt2` or export it to ONNX.

Every family's module is wrapped so that its outputs are plain tensors (the model's first
output, and its pooled output where it has one) and no key/value cache is built.
transformers and torch load only when called; `HF_HUB_OFFLINE` is set before they do.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from superopt.importers.errors import ModelImportError
from superopt.ir.graph import Graph


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"  # built from a config: nothing may be fetched
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


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
    _offline()
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


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


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
        raise ModelImportError(f"{name}: torch.export failed: {_first_line(e)}") from e
    return import_exported(program, name=name,
                           input_high={"input_ids": BERT_SIZES[size].vocab})


# ---- the family registry ----------------------------------------------------------------

# Small shared sizes: every family is a real instance of its architecture (all block types,
# norms, attention variants) at a width and depth that import, interpret and tune in seconds.
VOCAB = 128
SEQ = 8
IMAGE = 32
_TEXT = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64,
         "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64,
         "use_cache": False}


@dataclass(frozen=True)
class Family:
    """A `transformers` architecture: how to build it small and what it reads.

    `inputs` is "ids" (int64 token ids in [0, VOCAB) of shape (batch, SEQ)), "pixels"
    (float (batch, 3, IMAGE, IMAGE)) or "mel" (float (batch, mel bins, frames), Whisper).
    """

    name: str
    kind: str  # "decoder", "encoder", "vision", "audio": the suite's grouping
    build: Callable[[], Any]  # () -> an nn.Module from a small config
    inputs: str
    mel: tuple[int, int] = (0, 0)  # (bins, frames) for "mel" inputs
    image: int = IMAGE  # side of "pixels" inputs


def _cfg(cls_name: str, **kw: Any) -> Any:
    import transformers

    return getattr(transformers, cls_name)(**kw)


def _model(cls_name: str, config: Any) -> Any:
    import transformers

    return getattr(transformers, cls_name)(config)


def _gpt2() -> Any:
    return _model("GPT2Model", _cfg("GPT2Config", vocab_size=VOCAB, n_positions=64, n_embd=32,
                                    n_layer=2, n_head=4, use_cache=False, bos_token_id=0,
                                    eos_token_id=0))


def _decoder(model: str, config: str, **extra: Any) -> Callable[[], Any]:
    def build() -> Any:
        return _model(model, _cfg(config, **{**_TEXT, **extra}))
    return build


def _encoder(model: str, config: str, **extra: Any) -> Callable[[], Any]:
    def build() -> Any:
        kw = {**_TEXT, **extra}
        kw.pop("use_cache", None)
        return _model(model, _cfg(config, **kw))
    return build


def _mixtral() -> Any:
    # Mixture of experts: a router's top-2 of 4 experts per token, each a SwiGLU MLP. The
    # experts run as transformers' `batched_mm` (each routed row's expert weights gathered,
    # batched matmuls), the static-shape form its own exporters pick, which torch's ONNX
    # exporter and float64 references also take. The library's default under torch.export,
    # `grouped_mm` (rows sorted by expert, a histogram, a grouped matmul, the sort undone),
    # imports too: `model.inner.set_experts_implementation("grouped_mm")` on `hf_module`.
    model = _model("MixtralModel", _cfg("MixtralConfig", **{
        **_TEXT, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2}))
    model.set_experts_implementation("batched_mm")
    return model


def _deepseek_v3() -> Any:
    # Multi-head latent attention (queries and keys/values through low-rank latents, a
    # rotary part of each head kept apart) and a mixture of experts routed by sigmoid
    # scores with a bias, top groups first, plus a shared expert; the first layer dense.
    # DeepSeek-V2's and Kimi-K2's blocks are of this kind. Experts as `batched_mm`.
    model = _model("DeepseekV3Model", _cfg("DeepseekV3Config", **{
        **_TEXT, "num_key_value_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 16,
        "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "head_dim": 8, "v_head_dim": 8,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
        "moe_intermediate_size": 16, "n_shared_experts": 1, "first_k_dense_replace": 1}))
    model.set_experts_implementation("batched_mm")
    return model


def _llama4() -> Any:
    # Llama-4's text model: rotary embeddings as complex products, a mixture of experts
    # whose router scatters its top score among -inf (a sigmoid of it gates the expert)
    # beside a shared expert, and layers without rotary embeddings every fourth.
    model = _model("Llama4TextModel", _cfg("Llama4TextConfig", **{
        **_TEXT, "num_key_value_heads": 2, "head_dim": 8, "num_local_experts": 4,
        "num_experts_per_tok": 1, "intermediate_size_mlp": 64, "interleave_moe_layer_step": 1,
        "attention_chunk_size": 64}))
    model.set_experts_implementation("batched_mm")
    return model


def _mamba() -> Any:
    # A selective state-space model: no attention; each block's scan over the sequence is
    # written out step by step (transformers' path without its CUDA kernels).
    return _model("MambaModel", _cfg("MambaConfig", vocab_size=VOCAB, hidden_size=32,
                                     num_hidden_layers=2, state_size=4, use_cache=False))


def _llama_classifier() -> Any:
    # Sequence classification from a decoder (reward models, classifiers fine-tuned from
    # Llama): the score of the last token that is not padding, found by an argmax.
    return _model("LlamaForSequenceClassification", _cfg(
        "LlamaConfig", **{**_TEXT, "num_key_value_heads": 2, "num_labels": 3,
                          "pad_token_id": 0}))


def _clip_text() -> Any:
    # CLIP's text tower: causal self-attention over the text; the pooled output is the
    # end token's row, found by an argmax of the ids equal to the end token.
    return _model("CLIPTextModel", _cfg(
        "CLIPTextConfig", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
        eos_token_id=VOCAB - 1, pad_token_id=1, bos_token_id=0))


def _distilbert() -> Any:
    return _model("DistilBertModel", _cfg("DistilBertConfig", vocab_size=VOCAB, dim=32,
                                          hidden_dim=64, n_layers=2, n_heads=4,
                                          max_position_embeddings=64))


def _t5_encoder() -> Any:
    return _model("T5EncoderModel", _cfg("T5Config", vocab_size=VOCAB, d_model=32, d_kv=8,
                                         d_ff=64, num_layers=2, num_heads=4, use_cache=False,
                                         feed_forward_proj="gated-gelu"))


_VIT = {"image_size": IMAGE, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4}


def _vit() -> Any:
    return _model("ViTModel", _cfg("ViTConfig", **_VIT))


def _vit_classifier() -> Any:
    return _model("ViTForImageClassification", _cfg("ViTConfig", num_labels=10, **_VIT))


def _deit() -> Any:
    return _model("DeiTModel", _cfg("DeiTConfig", **_VIT))


def _swin() -> Any:
    return _model("SwinModel", _cfg("SwinConfig", image_size=IMAGE, patch_size=4, embed_dim=16,
                                    depths=[1, 1], num_heads=[2, 2], window_size=4))


def _convnext() -> Any:
    return _model("ConvNextModel", _cfg("ConvNextConfig", image_size=IMAGE, num_stages=2,
                                        hidden_sizes=[16, 32], depths=[1, 1]))


def _convnextv2() -> Any:
    # ConvNeXt-V2: ConvNeXt's block with a global response norm (a 2-norm over positions).
    return _model("ConvNextV2Model", _cfg("ConvNextV2Config", image_size=IMAGE, num_stages=2,
                                          hidden_sizes=[16, 32], depths=[1, 1]))


def _poolformer() -> Any:
    # PoolFormer: average pooling as the token mixer, GroupNorm(1, C) as the norm.
    return _model("PoolFormerModel", _cfg("PoolFormerConfig", num_encoder_blocks=2,
                                          depths=[1, 1], hidden_sizes=[16, 32],
                                          patch_sizes=[7, 3], strides=[4, 2],
                                          padding=[2, 1]))


def _segformer() -> Any:
    # Semantic segmentation: the decode head upsamples every stage bilinearly to the
    # first stage's size (Resize / upsample_bilinear2d).
    return _model("SegformerForSemanticSegmentation", _cfg(
        "SegformerConfig", num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
        hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
        num_attention_heads=[1, 2], decoder_hidden_size=32, num_labels=5))


def _dpt() -> Any:
    # Depth estimation: a ViT whose reassembled stages are upsampled by transposed
    # convolutions (kernel == stride) and fused with bilinear upsampling.
    return _model("DPTForDepthEstimation", _cfg(
        "DPTConfig", image_size=64, patch_size=16, hidden_size=32, num_hidden_layers=4,
        num_attention_heads=4, intermediate_size=64, backbone_out_indices=[0, 1, 2, 3],
        neck_hidden_sizes=[8, 16, 24, 32], fusion_hidden_size=16, head_hidden_size=8))


def _upernet() -> Any:
    # Semantic segmentation with a pyramid pooling module: adaptive average pooling to 1,
    # 2, 3 and 6 of a 2x2 map (uneven, growing windows), then bilinear upsampling.
    backbone = _cfg("ConvNextConfig", depths=[1, 1, 1, 1], hidden_sizes=[8, 16, 24, 32],
                    out_features=["stage1", "stage2", "stage3", "stage4"])
    return _model("UperNetForSemanticSegmentation", _cfg(
        "UperNetConfig", backbone_config=backbone, hidden_size=16, auxiliary_in_channels=24,
        use_auxiliary_head=False, num_labels=4))


def _mobilevit() -> Any:
    # 64 pixels: every MobileViT block's feature map divides into 2x2 patches, so no
    # interpolation (bilinear resampling) is needed.
    return _model("MobileViTModel", _cfg("MobileViTConfig", image_size=64, patch_size=2,
                                         hidden_sizes=[32, 40, 48],
                                         neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                                         num_attention_heads=2))


def _resnet() -> Any:
    return _model("ResNetModel", _cfg("ResNetConfig", embedding_size=16, hidden_sizes=[16, 32],
                                      depths=[1, 1], layer_type="bottleneck"))


def _regnet() -> Any:
    # RegNetY: grouped 3x3 convolutions (groups of `groups_width` channels) with
    # squeeze-and-excitation.
    return _model("RegNetModel", _cfg("RegNetConfig", embedding_size=16, hidden_sizes=[16, 32],
                                      depths=[1, 1], groups_width=8, layer_type="y"))


def _efficientnet() -> Any:
    return _model("EfficientNetModel", _cfg("EfficientNetConfig", image_size=IMAGE,
                                            width_coefficient=0.25, depth_coefficient=0.25,
                                            hidden_dim=320))  # round_filters(1280) at 0.25


def _mobilenet_v2() -> Any:
    # ReLU6 throughout: torch's exporter writes it as Clip, which the importer and the
    # exporter must keep one Clip for onnxruntime to fuse it into the convolutions.
    return _model("MobileNetV2Model", _cfg("MobileNetV2Config", image_size=IMAGE,
                                           depth_multiplier=0.35))


_WHISPER_MEL = (16, 32)  # mel bins, frames (= 2 x max_source_positions)


def _whisper_encoder() -> Any:
    config = _cfg("WhisperConfig", vocab_size=VOCAB, num_mel_bins=_WHISPER_MEL[0], d_model=32,
                  encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
                  decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=64,
                  max_source_positions=_WHISPER_MEL[1] // 2, max_target_positions=16,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                  use_cache=False)
    import transformers

    return transformers.WhisperModel(config).get_encoder()


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("gpt2", "decoder", _gpt2, "ids"),
    Family("llama", "decoder", _decoder("LlamaModel", "LlamaConfig", num_key_value_heads=2),
           "ids"),
    Family("mistral", "decoder", _decoder("MistralModel", "MistralConfig",
                                          num_key_value_heads=2, sliding_window=None), "ids"),
    Family("qwen2", "decoder", _decoder("Qwen2Model", "Qwen2Config", num_key_value_heads=2),
           "ids"),
    Family("phi", "decoder", _decoder("PhiModel", "PhiConfig", partial_rotary_factor=0.5),
           "ids"),
    Family("gemma", "decoder", _decoder("GemmaModel", "GemmaConfig", num_key_value_heads=1,
                                        head_dim=8), "ids"),
    Family("bert", "encoder", _encoder("BertModel", "BertConfig"), "ids"),
    # A classifier head reads one token of the last layer (BERT's pooler and ViT's head
    # the first): what the narrowing rules (`slice_*` in the starter library) exploit.
    Family("bert-classifier", "encoder", _encoder("BertForSequenceClassification",
                                                  "BertConfig", num_labels=3), "ids"),
    Family("mixtral", "decoder", _mixtral, "ids"),
    Family("mamba", "decoder", _mamba, "ids"),
    Family("deepseek-v3", "decoder", _deepseek_v3, "ids"),
    Family("llama4", "decoder", _llama4, "ids"),
    Family("llama-classifier", "decoder", _llama_classifier, "ids"),
    Family("distilbert", "encoder", _distilbert, "ids"),
    Family("roberta", "encoder", _encoder("RobertaModel", "RobertaConfig"), "ids"),
    Family("t5-encoder", "encoder", _t5_encoder, "ids"),
    Family("clip-text", "encoder", _clip_text, "ids"),
    Family("vit", "vision", _vit, "pixels"),
    Family("vit-classifier", "vision", _vit_classifier, "pixels"),
    Family("deit", "vision", _deit, "pixels"),
    Family("swin", "vision", _swin, "pixels"),
    Family("convnext", "vision", _convnext, "pixels"),
    Family("convnextv2", "vision", _convnextv2, "pixels"),
    Family("poolformer", "vision", _poolformer, "pixels"),
    Family("segformer", "vision", _segformer, "pixels", image=64),
    Family("dpt", "vision", _dpt, "pixels", image=64),
    Family("upernet", "vision", _upernet, "pixels", image=64),
    Family("mobilevit", "vision", _mobilevit, "pixels", image=64),
    Family("resnet", "vision", _resnet, "pixels"),
    Family("regnet", "vision", _regnet, "pixels"),
    Family("efficientnet", "vision", _efficientnet, "pixels"),
    Family("mobilenet_v2", "vision", _mobilenet_v2, "pixels"),
    Family("whisper-encoder", "audio", _whisper_encoder, "mel", _WHISPER_MEL),
)}


# ---- published sizes -------------------------------------------------------------------

# Some families at a published size, for timing on real hardware (the small configs run
# in microseconds, where a runtime's per-node overhead is all there is to time). Each is
# the library's config at the published model's shape: MobileNet-V2 1.0 at 224 pixels,
# ResNet-50, RegNetY-400MF, EfficientNet-B0 (the library's default config is B7), ConvNeXt-T, Swin-T,
# ViT-B/16, BERT-base, GPT-2 (124M) and T5-small's encoder, texts of PUBLISHED_SEQ tokens;
# and two classifiers as users fine-tune them: ViT-B/16 with its 1000-class head and BERT-base
# for two-way sequence classification.
PUBLISHED_SEQ = 128
PUBLISHED_IMAGE = 224


def _published(model: str, config: str, **kw: Any) -> Callable[[], Any]:
    def build() -> Any:
        return _model(model, _cfg(config, **kw))
    return build


PUBLISHED: dict[str, Callable[[], Any]] = {
    "mobilenet_v2": _published("MobileNetV2Model", "MobileNetV2Config"),
    "resnet": _published("ResNetModel", "ResNetConfig"),
    # RegNetY-400MF (facebook/regnet-y-400mf): groups of 8 channels.
    "regnet": _published("RegNetModel", "RegNetConfig", embedding_size=32,
                         hidden_sizes=[48, 104, 208, 440], depths=[1, 3, 6, 6],
                         groups_width=8, layer_type="y"),
    "efficientnet": _published("EfficientNetModel", "EfficientNetConfig", image_size=224,
                               width_coefficient=1.0, depth_coefficient=1.0,
                               dropout_rate=0.2, hidden_dim=1280),
    "convnext": _published("ConvNextModel", "ConvNextConfig"),
    "swin": _published("SwinModel", "SwinConfig"),
    "vit": _published("ViTModel", "ViTConfig"),
    "vit-classifier": _published("ViTForImageClassification", "ViTConfig", num_labels=1000),
    "bert": _published("BertModel", "BertConfig"),
    "bert-classifier": _published("BertForSequenceClassification", "BertConfig",
                                  num_labels=2),
    "gpt2": _published("GPT2Model", "GPT2Config", use_cache=False),
    "t5-encoder": _published("T5EncoderModel", "T5Config", use_cache=False),
}


def _family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ModelImportError(f"unknown HuggingFace family {name!r}; known: "
                               f"{', '.join(FAMILIES)}") from None


def _wrap(model: Any, mask: bool) -> Any:
    """`model` with plain-tensor outputs: its first output and its pooled output, if any.

    With `mask`, an all-ones attention mask is passed as users of decoders do: without one,
    transformers looks for packed sequences in the position ids (`aten::diff`, which torch's
    ONNX exporter refuses). The mask is known at capture time, so the importer folds it.
    """
    import torch

    class Plain(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> Any:
            kwargs = {"attention_mask": torch.ones_like(x)} if mask else {}
            out = self.inner(x, return_dict=True, **kwargs)
            first = out[0]
            pooled = getattr(out, "pooler_output", None)
            return first if pooled is None else (first, pooled)

    return Plain(model).eval()


def _lively(model: Any) -> None:
    """Seeded weights that keep activations near unit scale through every layer.

    The libraries' own initialisation (normal(0, 0.02) everywhere, norm scales at 0.02 or
    0 in some vision models) makes the deep convolutional families' outputs underflow to
    exactly 0 in float32, and a value check on zeros checks nothing. Linear and convolution
    weights get variance 1/fan_in, norm scales 1 + noise, biases and running means small
    noise, running variances in [0.5, 1.5].
    """
    import torch

    with torch.no_grad():
        for mod in model.modules():
            kind = type(mod).__name__
            w = getattr(mod, "weight", None)
            if isinstance(mod, torch.nn.Linear | torch.nn.Conv1d | torch.nn.Conv2d):
                fan_in = w[0].numel()
                w.normal_(0.0, fan_in ** -0.5)
                if mod.bias is not None:
                    mod.bias.normal_(0.0, 0.1)
            elif kind.endswith("Norm") or isinstance(mod, torch.nn.modules.batchnorm._BatchNorm
                                                     | torch.nn.LayerNorm | torch.nn.GroupNorm):
                if isinstance(w, torch.nn.Parameter) and w.dim() >= 1:
                    # Gemma's RMSNorm scales by (1 + weight): its weights stay near 0.
                    w.normal_(0.0 if "Gemma" in kind else 1.0, 0.1)
                b = getattr(mod, "bias", None)
                if isinstance(b, torch.nn.Parameter):
                    b.normal_(0.0, 0.1)
                if isinstance(getattr(mod, "running_var", None), torch.Tensor):
                    mod.running_mean.normal_(0.0, 0.1)
                    mod.running_var.uniform_(0.5, 1.5)


def hf_module(name: str, seed: int = 0, published: bool = False) -> Any:
    """The family's small model (with `published`, the published size: `PUBLISHED`) with
    seeded random weights, eval mode, tensor outputs."""
    fam = _family(name)
    if published and name not in PUBLISHED:
        raise ModelImportError(f"hf:{name} has no published size here; those with one: "
                               f"{', '.join(PUBLISHED)}")
    _offline()
    import torch

    torch.manual_seed(seed)
    try:
        model = PUBLISHED[name]() if published else fam.build()
        _lively(model)
    except Exception as e:
        raise ModelImportError(f"hf:{name}: building the model from its config failed: "
                               f"{type(e).__name__}: {_first_line(e)}") from e
    return _wrap(model.eval(), mask=fam.kind == "decoder")


def hf_inputs(name: str, batch: int = 1, seed: int = 0, published: bool = False
              ) -> tuple[Any, ...]:
    """Seeded example inputs for `hf_module(name, published=...)` (one tensor, as a
    1-tuple)."""
    import torch

    fam = _family(name)
    if batch < 1:
        raise ModelImportError(f"hf:{name}: batch must be >= 1, found {batch}")
    gen = torch.Generator().manual_seed(seed)
    if fam.inputs == "ids":
        return (torch.randint(0, VOCAB, (batch, PUBLISHED_SEQ if published else SEQ),
                              generator=gen),)
    if fam.inputs == "pixels":
        side = PUBLISHED_IMAGE if published else fam.image
        return (torch.randn((batch, 3, side, side), generator=gen),)
    bins, frames = fam.mel
    return (torch.randn((batch, bins, frames), generator=gen),)


def hf_input_high(name: str) -> dict[str, int]:
    """Value ranges of integer inputs, by the placeholder name torch.export gives them."""
    return {"x": VOCAB} if _family(name).inputs == "ids" else {}


def hf_export(name: str, batch: int = 1, seed: int = 0) -> Any:
    """The family's `torch.export` program (an `ExportedProgram`)."""
    import torch

    model = hf_module(name, seed)
    args = hf_inputs(name, batch, seed)
    try:
        with torch.no_grad():
            return torch.export.export(model, args)
    except Exception as e:
        raise ModelImportError(f"hf:{name}: torch.export failed: {type(e).__name__}: "
                               f"{_first_line(e)}") from e


def hf_onnx(name: str, path: str | os.PathLike[str], batch: int = 1, seed: int = 0,
            opset: int = 17, published: bool = False, dynamo: bool = False) -> Any:
    """Write the family's model as ONNX with `torch.onnx.export` and return the path; the
    one input is named `x`. By default the TorchScript-based exporter at `opset` (torch's
    exporter lowers SDPA itself, with IsNaN/Where guards); with `dynamo` the exporter
    `torch.onnx.export` runs by default since torch 2.9 (through torch.export and
    onnxscript, at its own opset, the weights beside the file as `PATH.data`)."""
    import warnings
    from pathlib import Path

    import torch

    model = hf_module(name, seed, published)
    args = hf_inputs(name, batch, seed, published)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
            if dynamo:
                torch.onnx.export(model, args, str(path), dynamo=True, input_names=["x"],
                                  verbose=False)
            else:
                torch.onnx.export(model, args, str(path), dynamo=False, input_names=["x"],
                                  opset_version=opset)
    except Exception as e:
        raise ModelImportError(f"hf:{name}: torch.onnx.export failed: {type(e).__name__}: "
                               f"{_first_line(e)}") from e
    return Path(path)


def published_families(spec: str) -> list[str]:
    """The families a `--hf` option names: "published" (every family with a published
    size, `PUBLISHED`) or names separated by commas. Raises ValueError naming those
    without a published size."""
    names = list(PUBLISHED) if spec == "published" else [n for n in spec.split(",") if n]
    unknown = [n for n in names if n not in PUBLISHED]
    if not names:
        raise ValueError(f"no family named; those with a published size: "
                         f"{', '.join(PUBLISHED)}")
    if unknown:
        raise ValueError(f"no published size for {', '.join(map(repr, unknown))}; those "
                         f"with one: {', '.join(PUBLISHED)}")
    return names


def published_onnx(name: str, folder: str | os.PathLike[str], batch: int = 1,
                   dynamo: bool = False) -> Any:
    """The family's published-size model as torch's ONNX exporter writes it (`hf_onnx`;
    `dynamo`: the default exporter's file, `NAME_bBATCH_dynamo.onnx` and its `.data`), in
    `folder`: made once and reused after. It is written in a folder of its own and moved
    in, the file last, so a run killed while exporting leaves no half file."""
    import shutil
    import tempfile
    from pathlib import Path

    path = Path(folder) / f"{name}_b{batch}{'_dynamo' if dynamo else ''}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            hf_onnx(name, Path(tmp) / path.name, batch=batch, published=True, dynamo=dynamo)
            for part in sorted(Path(tmp).iterdir(), key=lambda p: p.suffix == ".onnx"):
                shutil.move(str(part), path.parent / part.name)
    return path


def hf_graph(name: str, batch: int = 1, seed: int = 0) -> Graph:
    """`hf:NAME`: the family's small model captured with torch.export and imported."""
    from superopt.importers.torch import import_exported

    return import_exported(hf_export(name, batch, seed), name=f"hf-{name}",
                           input_high=hf_input_high(name))


__all__ = ["BERT_SIZES", "FAMILIES", "PUBLISHED", "BertSize", "Family", "bert_graph",
           "bert_inputs", "bert_model", "hf_export", "hf_graph", "hf_input_high", "hf_inputs",
           "hf_module", "hf_onnx", "published_families", "published_onnx"]
