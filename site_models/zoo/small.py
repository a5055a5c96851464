"""Tiny models for fast end-to-end tests: a residual CNN and a transformer text classifier.

They reproduce no published checkpoint; they are miniature versions of the two common shapes of vision and
language models (a ResNet-style conv net with one identity residual block, and a BERT-style encoder classifier),
small enough that one forward takes a few milliseconds on a CPU.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "ResidualBlock",
    "SmallCNN",
    "TinyTransformerClassifier",
    "small_cnn",
    "tiny_transformer",
    "tiny_transformer_inputs",
]


class ResidualBlock(nn.Module):
    """conv-bn-relu-conv-bn plus the identity, then relu (a ResNet BasicBlock without downsampling)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(out + identity)


class SmallCNN(nn.Module):
    """Stem conv-bn-relu, max pooling, one residual block, global average pooling, flatten, linear."""

    def __init__(self, in_channels: int, channels: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU()
        )
        self.pool = nn.MaxPool2d(2)
        self.block = ResidualBlock(channels)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.flatten(self.avgpool(self.block(self.pool(self.stem(x))))))


class TinyTransformerClassifier(nn.Module):
    """Token + learned position embeddings, a small native encoder stack, a linear head on token 0."""

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        num_layers: int,
        num_classes: int,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_embedding = nn.Parameter(torch.zeros(1, max_len, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        tokens = self.embedding(input_ids) + self.pos_embedding[:, : input_ids.shape[1]]
        return self.head(self.encoder(tokens)[:, 0])


def small_cnn(in_channels: int = 3, channels: int = 8, num_classes: int = 10) -> SmallCNN:
    """Small residual CNN; 1,506 parameters with the defaults. Meant for inputs like ``(3, 32, 32)``."""
    return SmallCNN(in_channels, channels, num_classes)


def tiny_transformer(
    vocab_size: int = 100,
    max_len: int = 16,
    d_model: int = 32,
    nhead: int = 4,
    dim_feedforward: int = 64,
    num_layers: int = 2,
    num_classes: int = 3,
) -> TinyTransformerClassifier:
    """Two-layer post-norm encoder classifier; 20,899 parameters with the defaults."""
    return TinyTransformerClassifier(vocab_size, max_len, d_model, nhead, dim_feedforward, num_layers, num_classes)


def tiny_transformer_inputs(
    batch: int = 2, seq_len: int = 16, vocab_size: int = 100, device: str | torch.device = "cpu", seed: int = 0
) -> tuple[tuple[torch.Tensor], dict[str, torch.Tensor]]:
    """Token ids for ``tiny_transformer``: int64, from a private seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab_size, (batch, seq_len), generator=generator, dtype=torch.int64)
    return (input_ids.to(device),), {}
