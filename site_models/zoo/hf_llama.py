"""Hugging Face ``transformers``' own Llama, built from a configuration (random weights, nothing downloaded).

The twin of `zoo.llama`, which re-implements the same architecture in plain PyTorch: the same Llama-2-7B
configuration gives the same 6,738,415,616 parameters and the same MACs, while this one runs the library's own
classes (``LlamaRMSNorm``, ``LlamaRotaryEmbedding``, ``SiLUActivation``, its attention with ``repeat_kv`` and
``apply_rotary_pos_emb``), which TorchScan recognizes as ``transformers`` blocks. Meant for the meta device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .torchvision_ops import ensure_torchvision

__all__ = ["decode_inputs", "llama2_7b"]


def llama2_7b(attn_implementation: str = "sdpa", **overrides: Any) -> nn.Module:
    """``LlamaForCausalLM`` with Llama-2-7B's sizes; ``overrides`` change any ``LlamaConfig`` field."""
    ensure_torchvision()  # transformers imports torchvision when it is installed
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
                "rms_norm_eps": 1e-5, **overrides}
    config = LlamaConfig(**settings)
    config._attn_implementation = attn_implementation
    return LlamaForCausalLM(config)


def decode_inputs(context_length: int, **overrides: Any) -> tuple[tuple, dict[str, Any]]:
    """One decode step of ``llama2_7b(**overrides)`` after ``context_length`` positions, on the meta device.

    `torchscan.decode_step_inputs` needs the model for its configuration and cache class: an inputs callable gets
    only its keyword arguments, so it builds the same configuration on meta (no weight is allocated).
    """
    from torchscan import decode_step_inputs

    with torch.device("meta"):
        model = llama2_7b(**overrides)
    return decode_step_inputs(model, context_length, device="meta")
