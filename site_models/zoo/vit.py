"""Vision Transformer (Dosovitskiy et al., 2020, "An Image is Worth 16x16 Words") as torchvision builds it.

Same parameter count and computation as ``torchvision.models.vit_b_16`` (86,567,656 parameters): a strided
patch-embedding conv, a learned class token, learned position embeddings, pre-norm encoder blocks, a final
LayerNorm and a linear head on the class token. The blocks are PyTorch's native ``nn.TransformerEncoderLayer``
(``norm_first=True``, GELU, LayerNorm eps 1e-6) inside ``nn.TransformerEncoder``; their parameters match
torchvision's hand-written ``EncoderBlock`` one for one. The token bookkeeping (class token concatenation, position
embedding addition, selecting token 0) stays in the model's own ``forward``.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["VisionTransformer", "vit_b_16", "vit_b_32", "vit_l_16"]


class VisionTransformer(nn.Module):
    """Patchify, prepend a class token, add position embeddings, encode, normalize, classify token 0."""

    def __init__(
        self,
        image_size: int,
        patch_size: int,
        num_layers: int,
        num_heads: int,
        hidden_dim: int,
        mlp_dim: int,
        num_classes: int = 1000,
        dropout: float = 0.0,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not divisible by patch_size {patch_size}")
        self.image_size = image_size
        self.patch_size = patch_size
        num_tokens = (image_size // patch_size) ** 2 + 1
        self.conv_proj = nn.Conv2d(in_channels, hidden_dim, kernel_size=patch_size, stride=patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, num_tokens, hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        block = nn.TransformerEncoderLayer(
            d_model=hidden_dim,
            nhead=num_heads,
            dim_feedforward=mlp_dim,
            dropout=dropout,
            activation="gelu",
            layer_norm_eps=1e-6,
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(block, num_layers, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.head = nn.Linear(hidden_dim, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        patches = self.conv_proj(images).flatten(2).transpose(1, 2)
        class_tokens = self.class_token.expand(patches.shape[0], -1, -1)
        tokens = torch.cat([class_tokens, patches], dim=1) + self.pos_embedding
        encoded = self.ln(self.encoder(self.dropout(tokens)))
        return self.head(encoded[:, 0])


def vit_b_16(
    image_size: int = 224,
    patch_size: int = 16,
    num_layers: int = 12,
    num_heads: int = 12,
    hidden_dim: int = 768,
    mlp_dim: int = 3072,
    num_classes: int = 1000,
    dropout: float = 0.0,
) -> VisionTransformer:
    """ViT-B/16; 86,567,656 parameters at 224x224 with 1000 classes. Every size is overridable for small tests."""
    return VisionTransformer(image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim, num_classes, dropout)


def vit_b_32(image_size: int = 224, num_classes: int = 1000) -> VisionTransformer:
    """ViT-B/32; 88,224,232 parameters at 224x224 with 1000 classes."""
    return VisionTransformer(image_size, 32, 12, 12, 768, 3072, num_classes)


def vit_l_16(image_size: int = 224, num_classes: int = 1000) -> VisionTransformer:
    """ViT-L/16; 304,326,632 parameters at 224x224 with 1000 classes."""
    return VisionTransformer(image_size, 16, 24, 16, 1024, 4096, num_classes)
