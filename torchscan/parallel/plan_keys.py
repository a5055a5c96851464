"""The words of a parallel plan, without torch: its keys, strategies and dtype names.

`torchscan.parallel.plan` checks a plan given in Python; the registry (`torchscan.report.registry.parallel`) checks
the same plan written in ``models.toml`` without importing torch, so both read their vocabulary from here.
"""

from __future__ import annotations

STRATEGIES = ("ddp", "fsdp", "fsdp_no_reshard", "hsdp")
KEYS = ("strategy", "world_size", "shard_group_size", "mixed_precision", "units", "activation_checkpointing")
PRECISION_KEYS = ("param_dtype", "reduce_dtype", "output_dtype")
#: The floating dtype names a plan may use (``torch.`` in front is accepted too), each with the dtype it means.
DTYPE_ALIASES = {
    "float32": "float32", "fp32": "float32", "float": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "float64": "float64", "fp64": "float64", "double": "float64",
}
