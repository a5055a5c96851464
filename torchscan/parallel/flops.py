"""FLOPs per device of a sharded step: what one rank computes, by phase.

Every operator the rank dispatches during the traced step is priced by TorchScan's operator formulas
(`torchscan.operator_cache`), as in `torchscan.crawl_training_step`, on the rank's own tensors: an operator on
sharded parameters (a ``DTensor``: the optimizer's update) is priced on its local shard, so the optimizer's FLOPs are
the rank's share, while the forward and the backward run on gathered (unsharded) parameters and the rank's batch.
Collectives and FSDP's copies into and out of their buffers move data and compute nothing (`COMMUNICATION`); any
other operator without a formula makes its phase a lower bound, as everywhere in a report.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.tensor import DTensor

from ..operator_cache import FormulaCache
from ..operators import build_formula_table, flops_result
from ..results import MODEL, MetricResult
from ..values import map_tensors
from .sharding import local_tensor

#: Operator namespaces that move data between ranks or into FSDP's buffers, or mark profiler ranges: no arithmetic.
COMMUNICATION = frozenset({"c10d", "_c10d_functional", "fsdp", "profiler"})
PHASES = ("forward", "backward", "optimizer")


class RankFlops:
    """The FLOPs of one traced step on one rank, by phase (`PHASES`): told of every operator by the step."""

    def __init__(self) -> None:
        self.cache = FormulaCache(build_formula_table({}))
        self.flops: dict[str, int | float] = dict.fromkeys(PHASES, 0)
        self.partial = dict.fromkeys(PHASES, False)
        self.phase: str | None = None

    def record(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        """One dispatched operator, priced on the rank's local tensors in the current phase."""
        if self.phase is None or func.namespace in COMMUNICATION:
            return
        args, kwargs, out = map_tensors((args, kwargs, out), _local)
        plan = self.cache.plan(func)
        outcome = plan.fixed or self.cache.outcome(plan, args, kwargs, out)
        self.flops[self.phase] += outcome.flops
        if outcome.uncounted:
            self.partial[self.phase] = True

    def section(self) -> dict[str, MetricResult]:
        """``forward``, ``backward``, ``optimizer`` and their sum, ``step``: FLOPs one device computes per step."""
        results = {phase: flops_result(self.flops[phase], MODEL, self.partial[phase]) for phase in PHASES}
        results["step"] = flops_result(sum(self.flops.values()), MODEL, any(self.partial.values()))
        return results


def _local(tensor: Any) -> Any:
    """The rank's own part of a distributed tensor; any other tensor as it is."""
    return local_tensor(tensor) if isinstance(tensor, DTensor) else tensor
