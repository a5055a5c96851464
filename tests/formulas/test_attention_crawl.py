"""Native Transformer handlers end to end through crawl_module: ownership, strict totals, wrappers, diagnostics."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchscan import crawl_module

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")

SUMMABLE = ("module_flops", "macs", "dmas")

# Default nn.Transformer: E=512, H=8, F=2048, 6 encoder and 6 decoder layers; here N=1, S=3 src, T=2 tgt tokens.
ENCODER_LAYER_MACS = 4 * 3 * 512 * 512 + 2 * 3 * 3 * 512 + 2 * 3 * 512 * 2048
DECODER_LAYER_MACS = (4 * 2 * 512 * 512 + 2 * 2 * 2 * 512                     # self-attention
                      + 2 * 2 * 512 * 512 + 2 * 3 * 512 * 512 + 2 * 2 * 3 * 512  # cross-attention over S=3
                      + 2 * 2 * 512 * 2048)                                      # feed-forward
DEFAULT_TRANSFORMER_MACS = 6 * ENCODER_LAYER_MACS + 6 * DECODER_LAYER_MACS


def totals(report: dict) -> dict:
    return {name: report["totals"][name] for name in SUMMABLE}


def default_transformer(batch_first: bool) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The default configuration on meta: the same estimates as on CPU, without allocating 44M parameters."""
    with torch.device("meta"):
        model = nn.Transformer(batch_first=batch_first)
        src = torch.empty(1, 3, 512) if batch_first else torch.empty(3, 1, 512)
        tgt = torch.empty(1, 2, 512) if batch_first else torch.empty(2, 1, 512)
    return model, src, tgt


def test_default_transformer_is_complete_under_strict_in_both_layouts():
    layouts = {}
    for batch_first in (False, True):
        model, src, tgt = default_transformer(batch_first)
        report = crawl_module(model, args=(src, tgt), strict=True)
        assert report["totals"]["macs"] == {"status": "complete", "value": DEFAULT_TRANSFORMER_MACS,
                                            "known_value": DEFAULT_TRANSFORMER_MACS, "unit": "MACs",
                                            "scope": "model", "method": "sum_of_layer_estimates"}
        root = report["layers"][0]
        assert root["metric_ownership"] == {name: "subtree" for name in root["metrics"]}
        assert root["metrics"]["receptive_field"]["value"] == 2      # every tgt token sees both tgt tokens
        covered = report["layers"][1:]
        assert covered and all(row["metrics"] == {} for row in covered)
        assert all(row["metric_owners"]["macs"] == {"path": "", "call_index": 0} for row in covered)
        layouts[batch_first] = totals(report)
    assert DEFAULT_TRANSFORMER_MACS == 110_217_216
    assert layouts[False] == layouts[True]


class EncoderWrapper(nn.Module):
    """A custom container: the native encoder receives the masks from this forward, not from crawl_module."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)

    def forward(self, tokens, *, mask=None, padding=None):
        return self.encoder(tokens, mask=mask, src_key_padding_mask=padding)


def window(length: int) -> torch.Tensor:
    positions = torch.arange(length)
    return (positions[:, None] - positions[None, :]).abs() > 1


def test_encoder_inside_a_custom_container_sees_the_real_masks():
    model = EncoderWrapper()
    tokens = torch.randn(2, 6, 16)
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    report = crawl_module(model, args=(tokens,), kwargs={"mask": window(6), "padding": padding})
    encoder_row = next(row for row in report["layers"] if row["path"] == "encoder")
    assert encoder_row["metrics"]["receptive_field"]["value"] == 5   # the window reached the encoder
    assert encoder_row["metrics"]["macs"]["value"] == 2 * (4 * 2 * 6 * 16 * 16 + 2 * 2 * 6 * 6 * 16
                                                           + 2 * 2 * 6 * 16 * 32)
    assert encoder_row["metrics"]["macs"]["scope"] == "subtree"
    layer_rows = [row for row in report["layers"] if row["path"].startswith("encoder.layers.")]
    assert layer_rows and all(row["metric_owners"]["dmas"] == {"path": "encoder", "call_index": 0}
                              for row in layer_rows)
    unmasked = crawl_module(model, args=(tokens,))
    masked_flops = report["totals"]["module_flops"]["value"]
    # Bool masks select (0 FLOPs); only the mask reads differ: L*L + N*L elements per layer.
    assert masked_flops == unmasked["totals"]["module_flops"]["value"]
    assert report["totals"]["dmas"]["value"] - unmasked["totals"]["dmas"]["value"] == 2 * (6 * 6 + 2 * 6)


def test_wrapper_and_root_totals_are_equal():
    model = EncoderWrapper()
    tokens = torch.randn(2, 6, 16)
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    wrapped = crawl_module(model, args=(tokens,), kwargs={"mask": causal})
    root = crawl_module(model.encoder, args=(tokens,), kwargs={"mask": causal})
    assert totals(wrapped) == totals(root)
    assert all(totals(root)[name]["status"] == "complete" for name in SUMMABLE)
    assert root["layers"][0]["metrics"]["receptive_field"]["value"] == 6


def test_unknown_activation_surfaces_as_a_partial_total_with_a_diagnostic():
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, activation=lambda t: t.clamp(min=0))
    report = crawl_module(layer, args=(torch.randn(6, 2, 16),))
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert report["totals"]["macs"]["status"] == report["totals"]["dmas"]["status"] == "complete"
    codes = {(d["code"], d["metric"], d.get("path")) for d in report["diagnostics"]}
    assert ("unsupported_configuration", "module_flops", "") in codes


# --- children that override forward (issue 11, defect 1) -----------------------------------------------------------


class SlowNorm(nn.LayerNorm):
    """A LayerNorm whose forward first does ten (5 x 16) @ (16 x 16) matmuls that no LayerNorm formula describes."""

    def __init__(self, width: int) -> None:
        super().__init__(width)
        self.register_buffer("mix", torch.eye(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(10):
            x @ self.mix
        return super().forward(x)


class SlowReLU(nn.ReLU):
    """A ReLU whose forward first does ten matmuls over the feed-forward width."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.register_buffer("mix", torch.eye(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(10):
            x @ self.mix
        return super().forward(x)


def incomplete_findings(report: dict) -> dict[str, str]:
    return {item["metric"]: item["message"] for item in report["diagnostics"]
            if item["code"] == "unsupported_configuration" and item["metric"] in SUMMABLE}


def test_a_norm_subclass_overriding_forward_makes_the_layer_partial_and_is_named():
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    plain = crawl_module(layer, (5, 16), strict=True)
    assert plain["totals"]["macs"]["value"] == 11_040 and plain["totals"]["operator_flops"]["value"] == 24_570
    layer.norm1 = SlowNorm(16)
    report = crawl_module(layer, (5, 16))
    assert report["totals"]["operator_flops"]["value"] == 50_170  # the matmuls ran and the operator view saw them
    totals, before = report["totals"], plain["totals"]
    assert {totals[name]["status"] for name in SUMMABLE} == {"partial"}
    # known: everything but norm1, whose LayerNorm work (0 MACs) is no longer vouched for
    assert totals["macs"]["known_value"] == before["macs"]["value"]
    assert totals["module_flops"]["known_value"] < before["module_flops"]["value"]
    assert totals["dmas"]["known_value"] < before["dmas"]["value"]
    findings = incomplete_findings(report)
    assert set(findings) == set(SUMMABLE)
    assert all("norm1 (test_attention_crawl.SlowNorm) has no built-in formula" in message
               for message in findings.values())


def test_an_activation_subclass_overriding_forward_makes_the_layer_partial_and_is_named():
    plain = crawl_module(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, activation=nn.ReLU()), (5, 16),
                         strict=True)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, activation=SlowReLU(32))
    report = crawl_module(layer, (5, 16))
    assert report["totals"]["macs"] == {**plain["totals"]["macs"], "status": "partial", "value": None}
    assert {report["totals"][name]["status"] for name in SUMMABLE} == {"partial"}
    findings = incomplete_findings(report)
    assert set(findings) == set(SUMMABLE)
    assert all("activation (test_attention_crawl.SlowReLU) has no built-in formula" in message
               for message in findings.values())


def test_the_missing_part_of_a_stack_is_named_by_its_path_inside_the_stack():
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), num_layers=2,
                                    enable_nested_tensor=False)
    encoder.layers[1].norm2 = SlowNorm(16)
    report = crawl_module(encoder, (5, 16))
    root = report["layers"][0]
    assert {root["metrics"][name]["status"] for name in SUMMABLE} == {"partial"}
    messages = [item["message"] for item in report["diagnostics"] if item.get("path") == ""]
    assert messages and all("layers.1.norm2 (test_attention_crawl.SlowNorm)" in message for message in messages)


def test_an_encoder_layer_runs_its_observable_decomposed_path_under_the_analysis():
    """Only a module hook turns the fused encoder-layer kernel off; the analysis attaches an empty one, so the
    children are called and keep their rows (and the layer's hooks are gone afterwards)."""
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    report = crawl_module(layer, (5, 16))
    assert {row["path"] for row in report["layers"]} >= {"", "self_attn", "linear1", "linear2", "norm1", "norm2"}
    assert "aten._transformer_encoder_layer_fwd" not in {row["operator"] for row in
                                                          report["operator_flops"]["by_operator"]}
    assert not layer._forward_pre_hooks and not layer._forward_hooks
