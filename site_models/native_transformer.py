"""PyTorch's own ``nn.Transformer`` (Vaswani et al., 2017, the "base" encoder-decoder) for the catalog.

The model is the stock module, built by a factory so that ``models.toml`` can size it; the inputs function
returns a realistic sequence-to-sequence call: source and target embeddings plus the causal target mask.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["transformer_base", "transformer_inputs"]


def transformer_base(
    d_model: int = 512,
    nhead: int = 8,
    num_encoder_layers: int = 6,
    num_decoder_layers: int = 6,
    dim_feedforward: int = 2048,
    dropout: float = 0.1,
) -> nn.Transformer:
    """``nn.Transformer`` with the paper's base sizes and batch-first tensors; 44,140,544 parameters."""
    return nn.Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward, dropout,
                          batch_first=True)


def transformer_inputs(
    batch: int = 1, source_length: int = 128, target_length: int = 128, d_model: int = 512, seed: int = 0
) -> tuple[tuple[torch.Tensor, torch.Tensor], dict[str, object]]:
    """``(src, tgt)`` embeddings from a private seeded generator, and the causal mask over the target."""
    generator = torch.Generator().manual_seed(seed)
    source = torch.randn(batch, source_length, d_model, generator=generator)
    target = torch.randn(batch, target_length, d_model, generator=generator)
    mask = nn.Transformer.generate_square_subsequent_mask(target_length)
    return (source, target), {"tgt_mask": mask, "tgt_is_causal": True}
