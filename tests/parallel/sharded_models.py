"""The models and the measurement the sharded-step tests share.

`measured_peak` runs the same plan on real CPU tensors: the real model, PyTorch's ``fully_shard`` over the same fake
process group (`torchscan.parallel.fake_world`), the same optimizer and the same loop iteration
(`torchscan.parallel.step.loop_step`). Two iterations run unmeasured (the second is the steady state's start); the
third is measured by the profiler's allocation records (`torchscan.measure_peak_memory`), and the bytes this rank
holds at its start (its parameter shards, buffers, inputs and optimizer-state shards, each storage once) are added:
the measured absolute peak that the analysis's ``per_device.peak`` must match.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from third_party_models import import_transformers
from torch import nn

from torchscan import measure_peak_memory
from torchscan.parallel.fake_world import fake_world
from torchscan.parallel.plan import parse_plan
from torchscan.parallel.sharding import local_tensor, shard, trainable
from torchscan.parallel.step import loop_step
from torchscan.values import tensors_in

WIDTH, HIDDEN, BLOCKS, BATCH = 256, 1024, 4, 16
TOKENS, SEQUENCES, VOCAB = 64, 2, 1000
Call = tuple[tuple, dict[str, Any], Callable[[Any], Any] | None]


class Block(nn.Module):
    """Linear 256 -> 1024, ReLU, Linear 1024 -> 256."""

    def __init__(self, width: int = WIDTH, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class BlockMLP(nn.Module):
    """Four blocks in a ModuleList (the default units: the children of the largest ModuleList)."""

    def __init__(self, width: int = WIDTH, hidden: int = HIDDEN, blocks: int = BLOCKS) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, hidden) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return BlockMLP()


def mlp_call() -> Call:
    torch.manual_seed(1)
    return (torch.randn(BATCH, WIDTH),), {}, None


def llama() -> nn.Module:
    """A 2-layer transformers Llama with grouped-query attention (4 heads, 2 KV heads), SDPA attention."""
    transformers = import_transformers()
    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                                      attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def llama_call() -> Call:
    torch.manual_seed(1)
    return (), {"input_ids": torch.randint(0, VOCAB, (SEQUENCES, TOKENS))}, logits_mean


def logits_mean(output: Any) -> torch.Tensor:
    return output.logits.float().mean()


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], Call]]] = {"mlp": (mlp, mlp_call),
                                                                         "llama": (llama, llama_call)}


def adamw(parameters: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(parameters)


def storage_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages (a DTensor's local one) behind ``tensors``."""
    seen: dict[int, int] = {}
    for tensor in tensors:
        storage = local_tensor(tensor).untyped_storage()
        seen[id(storage)] = storage.nbytes()
    return sum(seen.values())


def measured_peak(build: Callable[[], nn.Module], call: Call, plan: Any, *, rank: int | None = None,
                  activation_checkpointing: bool = False) -> int:
    """The measured absolute peak of the plan's third training step on real tensors, on ``rank``."""
    args, kwargs, loss = call
    with fake_world(parse_plan(plan), rank) as world:
        model = build()
        shard(model, world, activation_checkpointing)
        optimizer = adamw(trainable(model))
        for _ in range(2):
            loop_step(model, args, kwargs, loss, optimizer)
        start = storage_bytes([*model.parameters(), *model.buffers(), *tensors_in((args, kwargs)),
                               *tensors_in(list(optimizer.state.values()))])
        measured = measure_peak_memory(lambda: loop_step(model, args, kwargs, loss, optimizer), device="cpu")
    return start + measured["peak_bytes"]
