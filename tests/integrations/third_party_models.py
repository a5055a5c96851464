"""The one shared helper of the third-party tests: importing the libraries, building tiny models from configs
(random weights, never a download), counting their MACs independently, and analyzing each once per session.

torchvision's wheel on the test machine is a CUDA build whose C extension does not load next to the CPU torch;
its import then fails on ``torchvision::nms``. `import_torchvision` uses the catalog's `zoo.torchvision_ops`, which defines
``torchvision::nms`` and ``torchvision::qnms`` as Python CPU kernels through ``torch.library`` in that case
(classification models never call them) and imports it again. timm and transformers import torchvision, so they go through the same door.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode
from zoo.torchvision_ops import ensure_torchvision

from torchscan import IncompleteAnalysisError, crawl_module

aten = torch.ops.aten
Inputs = Callable[[str], tuple[tuple, dict[str, Any]]]
#: torchvision, imported once per session through the catalog's own door (`zoo.torchvision_ops`), which defines
#: the Python detection kernels where its compiled ones do not load.
_torchvision = functools.cache(ensure_torchvision)


def _require(name: str) -> None:
    """Skip the test when ``name`` is not installed (found without importing it: its import may need help)."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed")


def import_torchvision() -> Any:
    """torchvision, importable even where its compiled operators do not load (skips the test without it)."""
    _require("torchvision")
    return _torchvision()


def import_timm() -> Any:
    _require("timm")
    import_torchvision()
    return importlib.import_module("timm")


def import_transformers() -> Any:
    _require("transformers")
    if importlib.util.find_spec("torchvision") is not None:
        _torchvision()  # transformers imports torchvision whenever it is installed
    return importlib.import_module("transformers")


# --- independent counts -----------------------------------------------------------------------------------------


def _cpu_flash_attention(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
    """PyTorch's own SDPA formula, for the CPU kernel its counter does not register (QK^T and the weighted sum)."""
    return flop_counter.sdpa_flop_count(query, key, value)


def independent_macs(model: nn.Module, args: tuple, kwargs: dict[str, Any]) -> int:
    """PyTorch's ``FlopCounterMode`` over one evaluation forward, halved. It counts dot products only (matmuls,
    convolutions, attention) at 2 FLOPs per multiply-accumulate, by formulas TorchScan does not share."""
    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_attention}
    flags = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=mapping) as counter:
            model(*args, **kwargs)
    finally:
        for module, flag in flags:
            module.training = flag
    return counter.get_total_flops() // 2


def unique_parameters(model: nn.Module) -> int:
    """Elements of every distinct parameter (``parameters()`` yields a shared tensor once)."""
    return sum(parameter.numel() for parameter in model.parameters())


# --- cases -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One model family of one library, built tiny from a config, analyzed on each device and variant."""

    library: str
    model: str                        # the family, as the support table names it
    config: str                       # what is built, for the table
    build: Callable[[str], nn.Module]  # variant -> model, called under ``torch.device(device)``
    inputs: Inputs                    # device -> (args, kwargs)
    devices: tuple[str, ...] = ("cpu", "meta")
    variants: tuple[str, ...] = ("",)  # attention implementations, for transformers

    def runs(self) -> list[tuple[str, str]]:
        return [(device, variant) for variant in self.variants for device in self.devices]

    def run_id(self, device: str, variant: str) -> str:
        return "-".join(part for part in (self.library, self.model, variant, device) if part)


def token_inputs(length: int = 8, padding: int = 2, **extra: Callable[[str], torch.Tensor]) -> Inputs:
    """Token ids with a padding mask on a real device; ids only on ``meta``, where a mask has no values for the
    model's mask code to read."""
    def inputs(device: str) -> tuple[tuple, dict[str, Any]]:
        ids = torch.arange(3, 3 + length, device=device).unsqueeze(0)
        kwargs = {name: make(device) for name, make in extra.items()}
        if device != "meta":
            mask = torch.ones(1, length, dtype=torch.long)
            mask[:, length - padding:] = 0
            kwargs["attention_mask"] = mask
        return (ids,), kwargs
    return inputs


def tensor_inputs(*shape: int, **extra: Callable[[str], torch.Tensor]) -> Inputs:
    """One zero tensor of ``(1, *shape)``, plus keyword tensors made per device."""
    def inputs(device: str) -> tuple[tuple, dict[str, Any]]:
        return (torch.zeros(1, *shape, device=device),), {name: make(device) for name, make in extra.items()}
    return inputs


def ids(length: int) -> Callable[[str], torch.Tensor]:
    return lambda device: torch.arange(1, 1 + length, device=device).unsqueeze(0)


def _hf(config: str, model: str, **settings: Any) -> Callable[[str], nn.Module]:
    def build(variant: str) -> nn.Module:
        library = import_transformers()
        configuration = getattr(library, config)(**settings)
        configuration._attn_implementation = variant
        return getattr(library, model)(configuration)
    return build


TINY = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
TINY_DECODER = {"vocab_size": 64, "num_key_value_heads": 1, "pad_token_id": 0, "bos_token_id": 1,
                "eos_token_id": 2, **TINY}
ATTENTION = ("sdpa", "eager")
SPEECH = {"vocab_size": 64, "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
          "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "num_mel_bins": 8,
          "max_source_positions": 16, "max_target_positions": 16, "pad_token_id": 0, "bos_token_id": 1,
          "eos_token_id": 2, "decoder_start_token_id": 1}


def _transformers(model: str, config: str, build: Callable[[str], nn.Module], inputs: Inputs) -> Case:
    return Case("transformers", model, config, build, inputs, variants=ATTENTION)


TRANSFORMERS_CASES = (
    _transformers("BERT", "BertModel: 1 layer, width 32", _hf(
        "BertConfig", "BertModel", vocab_size=64, **TINY), token_inputs()),
    _transformers("RoBERTa", "RobertaModel: 1 layer, width 32", _hf(
        "RobertaConfig", "RobertaModel", vocab_size=64, pad_token_id=0, **TINY), token_inputs()),
    _transformers("GPT-2", "GPT2LMHeadModel: 1 layer, width 32", _hf(
        "GPT2Config", "GPT2LMHeadModel", vocab_size=64, n_embd=32, n_layer=1, n_head=2, bos_token_id=1,
        eos_token_id=2), token_inputs()),
    _transformers("Llama", "LlamaForCausalLM: 1 layer, width 32, 2 query and 1 key/value heads", _hf(
        "LlamaConfig", "LlamaForCausalLM", **TINY_DECODER), token_inputs()),
    _transformers("Mistral", "MistralForCausalLM: 1 layer, width 32, 2 query and 1 key/value heads", _hf(
        "MistralConfig", "MistralForCausalLM", **TINY_DECODER), token_inputs()),
    _transformers("Qwen2", "Qwen2ForCausalLM: 1 layer, width 32, 2 query and 1 key/value heads", _hf(
        "Qwen2Config", "Qwen2ForCausalLM", **TINY_DECODER), token_inputs()),
    _transformers("Gemma", "GemmaForCausalLM: 1 layer, width 32, head size 16", _hf(
        "GemmaConfig", "GemmaForCausalLM", head_dim=16, **TINY_DECODER), token_inputs()),
    _transformers("Phi-3", "Phi3ForCausalLM: 1 layer, width 32, 2 query and 1 key/value heads", _hf(
        "Phi3Config", "Phi3ForCausalLM", **TINY_DECODER), token_inputs()),
    _transformers("T5", "T5ForConditionalGeneration: 1 encoder and 1 decoder layer, d_model 32", _hf(
        "T5Config", "T5ForConditionalGeneration", vocab_size=64, d_model=32, d_kv=16, d_ff=64, num_layers=1,
        num_heads=2), token_inputs(decoder_input_ids=ids(4))),
    _transformers("ViT", "ViTModel: 1 layer, width 32, 32x32 images, 8x8 patches", _hf(
        "ViTConfig", "ViTModel", image_size=32, patch_size=8, **TINY), tensor_inputs(3, 32, 32)),
    _transformers("CLIP vision", "CLIPVisionModel: 1 layer, width 32, 32x32 images, 8x8 patches", _hf(
        "CLIPVisionConfig", "CLIPVisionModel", image_size=32, patch_size=8, **TINY), tensor_inputs(3, 32, 32)),
    _transformers("CLIP text", "CLIPTextModel: 1 layer, width 32", _hf(
        "CLIPTextConfig", "CLIPTextModel", vocab_size=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, **TINY),
        token_inputs()),
    _transformers("Whisper", "WhisperModel: 1 encoder and 1 decoder layer, d_model 32, 8 mel bins", _hf(
        "WhisperConfig", "WhisperModel", **SPEECH), tensor_inputs(8, 32, decoder_input_ids=ids(4))),
    _transformers("OPT", "OPTForCausalLM: 1 layer, width 32", _hf(
        "OPTConfig", "OPTForCausalLM", vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        ffn_dim=64, word_embed_proj_dim=32, pad_token_id=0, bos_token_id=1, eos_token_id=2), token_inputs()),
    _transformers("Falcon", "FalconForCausalLM: 1 layer, width 32", _hf(
        "FalconConfig", "FalconForCausalLM", vocab_size=64, hidden_size=32, num_hidden_layers=1,
        num_attention_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2), token_inputs()),
    _transformers("Wav2Vec2", "Wav2Vec2Model: 2 feature convolutions, 1 layer, width 32, 400 samples", _hf(
        "Wav2Vec2Config", "Wav2Vec2Model", conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, **TINY), tensor_inputs(400)),
)


def _timm(name: str, **settings: Any) -> Callable[[str], nn.Module]:
    return lambda variant: import_timm().create_model(name, pretrained=False, **settings)


def _poolformer(variant: str) -> nn.Module:
    """PoolFormer-S12's block recipe (timm's ``poolformer_s12`` arguments) at one block per stage, width 8-64."""
    import_timm()
    from timm.layers import GroupNorm1
    from timm.models.metaformer import MetaFormer

    return MetaFormer(depths=(1, 1, 1, 1), dims=(8, 16, 32, 64), downsample_norm=None, mlp_act=nn.GELU,
                      mlp_bias=True, norm_layers=GroupNorm1, layer_scale_init_values=1e-5,
                      res_scale_init_values=None, use_mlp_head=False, num_classes=10)


def _image(size: int) -> Inputs:
    return tensor_inputs(3, size, size)


TIMM_CASES = (
    Case("timm", "ConvNeXt", "convnext_atto: 1 block per stage, widths 8-64, 32x32", _timm(
        "convnext_atto", depths=(1, 1, 1, 1), dims=(8, 16, 32, 64), num_classes=10), _image(32)),
    Case("timm", "ConvNeXt V2", "convnextv2_atto: 1 block per stage, widths 8-64, 32x32", _timm(
        "convnextv2_atto", depths=(1, 1, 1, 1), dims=(8, 16, 32, 64), num_classes=10), _image(32)),
    Case("timm", "DeiT", "deit_tiny_distilled_patch16_224: 1 block, width 32, 32x32, 8x8 patches", _timm(
        "deit_tiny_distilled_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2,
        num_classes=10), _image(32)),
    Case("timm", "ViT", "vit_tiny_patch16_224: 1 block, width 32, 32x32, 8x8 patches", _timm(
        "vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=10),
        _image(32)),
    Case("timm", "Swin", "swin_tiny_patch4_window7_224: 1 block per stage, width 16, window 2, 32x32", _timm(
        "swin_tiny_patch4_window7_224", img_size=32, window_size=2, embed_dim=16, depths=(1, 1, 1, 1),
        num_heads=(1, 1, 2, 2), num_classes=10), _image(32)),
    Case("timm", "EfficientNet", "test_efficientnet (timm's reduced EfficientNet), 32x32", _timm(
        "test_efficientnet", num_classes=10), _image(32)),
    Case("timm", "CoAtNet", "test_coatnet (timm's reduced CoAtNet), 64x64", _timm(
        "test_coatnet", img_size=64, num_classes=10), _image(64)),
    Case("timm", "PoolFormer", "MetaFormer with poolformer_s12's blocks: 1 per stage, widths 8-64, 32x32",
         _poolformer, _image(32)),
    Case("timm", "EfficientFormer", "efficientformer_l1: 1 block per stage, widths 8-64, 224x224", _timm(
        "efficientformer_l1", depths=(1, 1, 1, 1), embed_dims=(8, 16, 32, 64), num_classes=10), _image(224)),
    Case("timm", "LeViT", "levit_128s: 1 block per stage, widths 16-48, key size 8, 64x64", _timm(
        "levit_128s", img_size=64, embed_dim=(16, 32, 48), num_heads=(2, 2, 2), depth=(1, 1, 1), key_dim=8,
        num_classes=10), _image(64)),
    Case("timm", "MobileViT", "mobilevit_xxs, 64x64", _timm("mobilevit_xxs", num_classes=10), _image(64)),
    Case("timm", "EfficientNet (TF)", "tf_efficientnet_b0, 32x32", _timm("tf_efficientnet_b0", num_classes=10),
         _image(32)),
    Case("timm", "MobileNetV4", "mobilenetv4_conv_small, 32x32", _timm("mobilenetv4_conv_small", num_classes=10),
         _image(32)),
)


def _swin(variant: str) -> nn.Module:
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2],
                           window_size=[2, 2], stochastic_depth_prob=0.2, num_classes=10)


def _convnext(variant: str) -> nn.Module:
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    stages = [CNBlockConfig(8, 16, 1), CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 1), CNBlockConfig(64, None, 1)]
    return ConvNeXt(stages, stochastic_depth_prob=0.1, num_classes=10)


def _efficientnet(variant: str) -> nn.Module:
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    setting, last_channel = _efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)
    return EfficientNet(setting, 0.2, last_channel=last_channel, num_classes=10)


def _maxvit(variant: str) -> nn.Module:
    from torchvision.models.maxvit import MaxVit

    return MaxVit(input_size=(64, 64), stem_channels=8, partition_size=2, block_channels=[8, 16], block_layers=[1, 1],
                  head_dim=4, stochastic_depth_prob=0.2, num_classes=10)


def _regnet(variant: str) -> nn.Module:
    from torchvision.models.regnet import BlockParams, RegNet

    return RegNet(BlockParams.from_init_params(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25),
                  num_classes=10)


def _mobilenet_v3(variant: str) -> nn.Module:
    from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf

    setting, last_channel = _mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25)
    return MobileNetV3(setting, last_channel, num_classes=10)


def _vision(build: Callable[[str], nn.Module]) -> Callable[[str], nn.Module]:
    def built(variant: str) -> nn.Module:
        import_torchvision()
        return build(variant)
    return built


TORCHVISION_CASES = (
    Case("torchvision", "EfficientNet", "efficientnet_b0's recipe at width and depth x0.25, 32x32", _vision(_efficientnet),
         _image(32)),
    Case("torchvision", "ConvNeXt", "ConvNeXt: 1 block per stage, widths 8-64, 32x32", _vision(_convnext), _image(32)),
    Case("torchvision", "Swin", "SwinTransformer: 1 block per stage, width 16, window 2, 32x32", _vision(_swin),
         _image(32)),
    Case("torchvision", "MaxViT", "MaxVit: 2 stages of 1 block, widths 8-16, partition 2, 64x64", _vision(_maxvit),
         _image(64)),
    Case("torchvision", "RegNet", "RegNet-Y recipe, depth 4, width 8, 32x32 (built on the CPU: the constructor "
         "reads values)", _vision(_regnet), _image(32), devices=("cpu",)),
    Case("torchvision", "MobileNetV3", "mobilenet_v3_small's recipe at width x0.25, 32x32", _vision(_mobilenet_v3),
         _image(32)),
)

CASES = (*TRANSFORMERS_CASES, *TIMM_CASES, *TORCHVISION_CASES)
RUNS = {case.run_id(device, variant): (case, device, variant) for case in CASES for device, variant in case.runs()}

#: torchvision's published GMACs (its weights' ``_ops`` metadata, "GFLOPS" that are MACs), at 224x224.
PUBLISHED = ("efficientnet_b0", "convnext_tiny", "swin_t", "maxvit_t", "regnet_y_400mf", "mobilenet_v3_large")


@dataclass(frozen=True)
class Outcome:
    """What one analysis found, kept for the assertions and the support table."""

    run: str
    error: str | None             # IncompleteAnalysisError's message under strict=True, else None
    statuses: dict[str, str]      # totals' module_flops, macs, dmas, operator_flops
    parameters: int
    expected_parameters: int
    macs: float | None
    independent_macs: int
    diagnostics: tuple[str, ...]  # codes
    inherited: tuple[str, ...]    # "class: parent" of the classes complete by verified inheritance


@functools.cache
def analyze(run: str) -> Outcome:
    """Build the run's model and inputs, analyze under ``strict=True``, count MACs independently (memoized)."""
    case, device, variant = RUNS[run]
    with torch.device(device):
        model = case.build(variant)
    args, kwargs = case.inputs(device)
    try:
        report, error = crawl_module(model, args=args, kwargs=kwargs, strict=True), None
    except IncompleteAnalysisError as failure:
        report, error = failure.report, str(failure)
    totals = report["totals"]
    return Outcome(run, error, {name: totals[name]["status"] for name in ("module_flops", "macs", "dmas",
                                                                          "operator_flops")},
                   totals["parameters"]["total"], unique_parameters(model), totals["macs"]["known_value"],
                   independent_macs(model, args, kwargs), tuple(item["code"] for item in report["diagnostics"]),
                   inherited_classes(report))


def inherited_classes(report: dict[str, Any]) -> tuple[str, ...]:
    """``"class: parent"`` for every layer type whose MACs came complete from a verified inherited formula."""
    found = set()
    for layer in report["layers"]:
        macs = layer.get("metrics", {}).get("macs")
        if macs and macs["status"] == "complete" and macs["method"].startswith("inherited:"):
            found.add(f"{layer['type']}: {macs['method'].split(':')[1]}")
    return tuple(sorted(found))


def analyze_call(module: nn.Module, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """One call of ``module`` as the analyzed root, under ``strict=True``: its metric values (status aside, all are
    complete or not applicable) and the root's layer record."""
    report = crawl_module(module, args=args, kwargs=kwargs, strict=True)
    record = report["layers"][0]
    values = {name: result["value"] if result["status"] == "complete" else result["status"]
              for name, result in record["metrics"].items()}
    return values, record


def direct_operator_flops(record: dict[str, Any]) -> Any:
    """The operator FLOPs dispatched directly inside the call: what the module formula must agree with."""
    return record["operator_flops"]["direct"]["value"]


@functools.cache
def published(name: str) -> dict[str, Any]:
    """A full-size torchvision model at 224x224 on ``meta`` (RegNet's constructor reads values: built on the CPU and
    moved), analyzed under ``strict=True``, with torchvision's own figures (memoized)."""
    models = import_torchvision().models
    if name.startswith("regnet"):
        model = getattr(models, name)().to("meta")
    else:
        with torch.device("meta"):
            model = getattr(models, name)()
    meta = models.get_model_weights(name).DEFAULT.meta
    images = torch.zeros(1, 3, 224, 224, device="meta")
    report = crawl_module(model, args=(images,), strict=True)
    return {"model": name, "parameters": report["totals"]["parameters"]["total"],
            "published_parameters": meta["num_params"], "macs": report["totals"]["macs"]["value"],
            "independent_macs": independent_macs(model, (images,), {}), "published_gmacs": meta["_ops"],
            "status": report["totals"]["macs"]["status"]}
