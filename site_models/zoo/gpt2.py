"""GPT-2 small (Radford et al., 2019, "Language Models are Unsupervised Multitask Learners") as a language model.

Same parameter count as Hugging Face's ``GPT2LMHeadModel`` for ``gpt2`` (124,439,808 unique parameters): token and
learned position embeddings, twelve pre-norm decoder blocks run with a causal mask, a final LayerNorm (eps 1e-5)
and a bias-free LM head whose weight is the token embedding (tied, counted once). The blocks are PyTorch's native
``nn.TransformerEncoderLayer`` (``norm_first=True``), whose parameters match GPT-2's fused ``c_attn``/``c_proj``/
``c_fc`` projections one for one. One deliberate difference: the native layer's ``"gelu"`` is the exact GELU,
GPT-2's is the tanh approximation; parameters and MACs are the same.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["GPT2LMHead", "gpt2_inputs", "gpt2_small"]


class GPT2LMHead(nn.Module):
    """Decoder-only transformer returning next-token logits for every position."""

    def __init__(
        self,
        vocab_size: int,
        n_positions: int,
        n_embd: int,
        n_layer: int,
        n_head: int,
        n_inner: int,
        dropout: float,
        layer_norm_epsilon: float,
    ) -> None:
        super().__init__()
        self.n_positions = n_positions
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.drop = nn.Dropout(dropout)
        block = nn.TransformerEncoderLayer(
            d_model=n_embd,
            nhead=n_head,
            dim_feedforward=n_inner,
            dropout=dropout,
            activation="gelu",
            layer_norm_eps=layer_norm_epsilon,
            batch_first=True,
            norm_first=True,
        )
        self.blocks = nn.TransformerEncoder(block, n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(n_embd, eps=layer_norm_epsilon)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        if seq_len > self.n_positions:
            raise ValueError(f"sequence length {seq_len} exceeds n_positions {self.n_positions}")
        positions = torch.arange(seq_len, device=input_ids.device).unsqueeze(0)
        hidden = self.drop(self.wte(input_ids) + self.wpe(positions))
        causal_mask = nn.Transformer.generate_square_subsequent_mask(seq_len, device=hidden.device, dtype=hidden.dtype)
        hidden = self.blocks(hidden, mask=causal_mask, is_causal=True)
        return self.lm_head(self.ln_f(hidden))


def gpt2_small(
    vocab_size: int = 50257,
    n_positions: int = 1024,
    n_embd: int = 768,
    n_layer: int = 12,
    n_head: int = 12,
    n_inner: int | None = None,
    dropout: float = 0.1,
    layer_norm_epsilon: float = 1e-5,
) -> GPT2LMHead:
    """GPT-2 small; 124,439,808 unique parameters. ``n_inner`` defaults to ``4 * n_embd``."""
    n_inner = 4 * n_embd if n_inner is None else n_inner
    return GPT2LMHead(vocab_size, n_positions, n_embd, n_layer, n_head, n_inner, dropout, layer_norm_epsilon)


def gpt2_inputs(
    batch: int = 1, seq_len: int = 128, vocab_size: int = 50257, device: str | torch.device = "cpu", seed: int = 0
) -> tuple[tuple[torch.Tensor], dict[str, torch.Tensor]]:
    """Token ids for ``gpt2_small``: int64, uniform over the vocabulary, from a private seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab_size, (batch, seq_len), generator=generator, dtype=torch.int64)
    return (input_ids.to(device),), {}
