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
