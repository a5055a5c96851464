"""The sizing of a run with a sharded plan (``training.parallel`` in ``models.toml``): the plan at every world size,
as `torchscan.fit_devices` sizes it (the per-device peak at each, and the smallest world size whose devices hold it).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ...calls.inputs import resolve_call
from ...parallel.fit import fit_summary
from ...parallel.step import sharded_step
from ..registry.parallel import plan_of


def sized_plan(model: nn.Module, call: dict[str, Any], optimizer: str, parallel: dict[str, Any],
               declared: dict[str, Any]) -> dict[str, Any]:
    """``training.parallel.fit`` of a run: ``declared`` is the report's ``training.parallel`` (the plan at its
    ``world_size``), the other sizes of ``parallel["world_sizes"]`` are analyzed here on the same call."""
    plan = plan_of(parallel)
    sections = {plan["world_size"]: declared}
    others = [size for size in parallel["world_sizes"] if size != plan["world_size"]]
    if others:
        args, kwargs, _ = resolve_call(model, call.get("input_shape"), call.get("dtype"), call.get("args"),
                                       call.get("kwargs"), None)
        for size in others:
            sections[size] = sharded_step(model, args, kwargs, None, optimizer, {**plan, "world_size": size})
    return fit_summary(sections, parallel["device_memory"], parallel["headroom"])
