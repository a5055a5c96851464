"""LLaMA-2 decoder (Touvron et al., 2023, "Llama 2: Open Foundation and Fine-Tuned Chat Models").

Same parameter count as Meta's ``Llama-2-7b`` / Hugging Face's ``LlamaForCausalLM`` (6,738,415,616 parameters):
token embedding, 32 pre-norm decoder layers (RMSNorm, bias-free q/k/v/o projections with rotary position
embedding and causal ``scaled_dot_product_attention``, SwiGLU MLP ``down(silu(gate(x)) * up(x))``), a final
RMSNorm and an untied, bias-free LM head. Grouped-query attention (``num_kv_heads < num_heads``) gives the 70B
configuration. Built from ``nn.Embedding``, ``nn.Linear``, ``nn.RMSNorm`` and ``nn.SiLU``; the published sizes are
meant to be built on the meta device (``with torch.device("meta"): model = llama2_7b()``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["LlamaForCausalLM", "llama2_7b", "llama2_70b", "llama_7b", "llama_inputs", "llama_tiny"]


def rotary_tables(seq_len: int, head_dim: int, theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine and sine tables of rotary embedding, shape ``(seq_len, head_dim)``, frequencies repeated per half."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs ``(x_i, x_{i + d/2})`` of every head by position-dependent angles (the "rotate half" layout)."""
    first, second = x.chunk(2, dim=-1)
    rotated = torch.cat([-second, first], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class Attention(nn.Module):
    """Causal multi-head (or grouped-query) self-attention with rotary position embedding."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int) -> None:
        super().__init__()
        if hidden_size % num_heads or num_heads % num_kv_heads:
            raise ValueError("hidden_size must divide into num_heads, and num_heads into num_kv_heads groups")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        """``(batch, seq, heads * head_dim)`` -> ``(batch, heads, seq, head_dim)``."""
        batch, seq_len, _ = x.shape
        return x.view(batch, seq_len, heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        query = apply_rotary(self.split_heads(self.q_proj(x), self.num_heads), cos, sin)
        key = apply_rotary(self.split_heads(self.k_proj(x), self.num_kv_heads), cos, sin)
        value = self.split_heads(self.v_proj(x), self.num_kv_heads)
        group = self.num_heads // self.num_kv_heads
        if group > 1:
            key = key.repeat_interleave(group, dim=1)
            value = value.repeat_interleave(group, dim=1)
        attended = F.scaled_dot_product_attention(query, key, value, is_causal=True)
        return self.o_proj(attended.transpose(1, 2).flatten(2))


class SwiGLU(nn.Module):
    """Gated feed-forward block: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm residual attention and MLP sub-layers."""

    def __init__(
        self, hidden_size: int, num_heads: int, num_kv_heads: int, intermediate_size: int, norm_eps: float
    ) -> None:
        super().__init__()
        self.input_norm = nn.RMSNorm(hidden_size, eps=norm_eps)
        self.self_attn = Attention(hidden_size, num_heads, num_kv_heads)
        self.post_attention_norm = nn.RMSNorm(hidden_size, eps=norm_eps)
        self.mlp = SwiGLU(hidden_size, intermediate_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_norm(x), cos, sin)
        return x + self.mlp(self.post_attention_norm(x))


class LlamaForCausalLM(nn.Module):
    """Token embedding, decoder layers, final RMSNorm and an untied LM head returning logits."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        num_layers: int,
        num_heads: int,
        num_kv_heads: int,
        intermediate_size: int,
        max_position_embeddings: int,
        norm_eps: float,
        rope_theta: float,
    ) -> None:
        super().__init__()
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.head_dim = hidden_size // num_heads
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(hidden_size, num_heads, num_kv_heads, intermediate_size, norm_eps) for _ in range(num_layers)
        )
        self.norm = nn.RMSNorm(hidden_size, eps=norm_eps)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        if seq_len > self.max_position_embeddings:
            raise ValueError(f"sequence length {seq_len} exceeds {self.max_position_embeddings} positions")
        cos, sin = rotary_tables(seq_len, self.head_dim, self.rope_theta, input_ids.device)
        hidden = self.embed_tokens(input_ids)
        for layer in self.layers:
            hidden = layer(hidden, cos, sin)
        return self.lm_head(self.norm(hidden))


def llama2_7b(
    vocab_size: int = 32000,
    hidden_size: int = 4096,
    num_layers: int = 32,
    num_heads: int = 32,
    num_kv_heads: int | None = None,
    intermediate_size: int = 11008,
    max_position_embeddings: int = 4096,
    norm_eps: float = 1e-5,
    rope_theta: float = 10000.0,
) -> LlamaForCausalLM:
    """LLaMA-2-7B; 6,738,415,616 parameters. ``num_kv_heads`` defaults to ``num_heads`` (plain multi-head)."""
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    return LlamaForCausalLM(
        vocab_size,
        hidden_size,
        num_layers,
        num_heads,
        num_kv_heads,
        intermediate_size,
        max_position_embeddings,
        norm_eps,
        rope_theta,
    )


llama_7b = llama2_7b


def llama2_70b() -> LlamaForCausalLM:
    """LLaMA-2-70B: 80 layers, d 8192, 64 query heads sharing 8 key/value heads; 68,976,648,192 parameters."""
    return llama2_7b(hidden_size=8192, num_layers=80, num_heads=64, num_kv_heads=8, intermediate_size=28672)


def llama_tiny(
    vocab_size: int = 256,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    intermediate_size: int = 172,
    max_position_embeddings: int = 256,
) -> LlamaForCausalLM:
    """A LLaMA-architecture model small enough for fast real-device tests (same code path as the 7B)."""
    return llama2_7b(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
    )


def llama_inputs(
    batch: int = 1, seq_len: int = 128, vocab_size: int = 32000, device: str | torch.device = "cpu", seed: int = 0
) -> tuple[tuple[torch.Tensor], dict[str, torch.Tensor]]:
    """Token ids, int64, uniform over the vocabulary, from a private seeded generator.

    Pass ``device="meta"`` for a model built on the meta device.
    """
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab_size, (batch, seq_len), generator=generator, dtype=torch.int64)
    return (input_ids.to(device),), {}
