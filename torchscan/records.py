"""Layer call records, assembled once from named parts.

While the forward runs, the tracer fills a `CallParts` per call: who it is (path, call index, name, depth, type,
parent) and what it saw (its input and output descriptions); when the call closes, its `CallOutcome` (estimates,
owners, the closed operator scope). After the forward, `layer_record` builds the report's record from those parts,
the module's parameter and buffer statistics (known only once lazy modules have materialized) and, when memory is
traced, the call's memory: one function, one dict, never edited afterwards. What needs no live tensor (the parent's
reference, the operator results, the copy of a memoized estimate) is made here rather than inside the hooks, where
every object costs the model's forward more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .breakdown import without_metrics
from .diagnostics import Diagnostic
from .estimation import CallEstimate
from .operator_bytes import UNIT as BYTES_UNIT
from .operators import OperatorScope
from .results import DIRECT, INCLUSIVE, METRIC_UNITS, MODULE_CALL, is_incomplete, not_requested

#: A ``mode="structure"`` record's metrics, operator FLOPs and operator bytes: every one explicitly not requested.
NOT_REQUESTED: dict[str, dict[str, Any]] = {
    "metrics": {name: not_requested(unit, MODULE_CALL) for name, unit in METRIC_UNITS.items()},
    "operator_flops": {scope: not_requested("FLOPs", scope) for scope in (DIRECT, INCLUSIVE)},
    "operator_bytes": {scope: not_requested(BYTES_UNIT, scope) for scope in (DIRECT, INCLUSIVE)},
}


@dataclass(slots=True)
class CallOutcome:
    """A closed call's estimates and operator FLOPs and bytes (an enclosing owner may still cover fields of it until
    every undecided owner around it has closed)."""

    index: int
    estimate: CallEstimate | None
    owners: dict[str, dict[str, Any]]  # covered field -> the owning ancestor's path and call_index
    operators: OperatorScope  # the call's operator FLOPs and bytes, closed
    shared: bool = False  # the estimate is the memo's (`torchscan.estimate_memo`): the record copies it

    def cover(self, fields: frozenset[str], owner: dict[str, Any]) -> None:
        """An enclosing owner's inclusive formula replaces this call's estimates (and their diagnostics) for
        ``fields``: the outermost owner is recorded, as if ownership had been sure from the start."""
        estimate = self.estimate
        for name in sorted(fields):
            if estimate is not None and name in estimate.metrics:
                del estimate.metrics[name]
                estimate.ownership.pop(name, None)
            elif estimate is not None and name in estimate.delegated:
                estimate.delegated.remove(name)
            elif name not in self.owners:
                continue
            self.owners[name] = dict(owner)
        if estimate is not None:
            estimate.breakdown = without_metrics(estimate.breakdown, set(fields))  # their parts go with them
            estimate.diagnostics = [item for item in estimate.diagnostics
                                    if not _superseded(item, estimate, fields)]


def _superseded(item: Diagnostic, estimate: CallEstimate, fields: frozenset[str]) -> bool:
    """A descendant's diagnostic about estimates that an owner's inclusive formula replaced."""
    return item.get("metric") in fields or (item["code"] == "unsupported_module" and not any(
        is_incomplete(result) for result in estimate.metrics.values()))


@dataclass(slots=True)
class CallParts:
    """What one layer call's record is assembled from, filled while the call runs."""

    path: str
    call_index: int
    name: str
    depth: int
    type: str
    leaf: bool
    parent: CallParts | None  # the enclosing call's parts
    input: dict[str, Any]  # the call's argument descriptions
    output: dict[str, Any] | None = None
    outcome: CallOutcome | None = None  # a full analysis's, once the call is settled

    def reference(self) -> dict[str, Any]:
        """``{"path", "call_index"}``: the call as its children's ``parent`` and its covered descendants' owner (a
        new dict each time: no two records share one)."""
        return {"path": self.path, "call_index": self.call_index}


def layer_record(parts: CallParts, parameters: dict[str, int], buffers: dict[str, int],
                 memory: dict[str, Any] | None) -> dict[str, Any]:
    """The report's record of one layer call: identity, input and output, statistics, then the outcome's
    estimates and operator FLOPs (every metric explicitly not requested in ``mode="structure"``, which has no
    outcome), then its memory when traced."""
    parent = None if parts.parent is None else parts.parent.reference()
    record = {"path": parts.path, "call_index": parts.call_index, "name": parts.name, "depth": parts.depth,
              "type": parts.type, "leaf": parts.leaf, "parent": parent, "input": parts.input, "output": parts.output,
              "parameters": parameters, "buffers": buffers}
    outcome = parts.outcome
    if outcome is None:  # each result a copy of its own
        for key, results in NOT_REQUESTED.items():
            record[key] = {name: result.copy() for name, result in results.items()}
    else:
        _add_outcome(record, outcome)
    if memory is not None:
        record["memory"] = memory
    return record


def _add_outcome(record: dict[str, Any], outcome: CallOutcome) -> None:
    estimate = outcome.estimate.copy() if outcome.estimate and outcome.shared else outcome.estimate
    record["metrics"] = estimate.metrics if estimate else {}
    if estimate and estimate.ownership:
        record["metric_ownership"] = dict(sorted(estimate.ownership.items()))
    if outcome.owners:
        record["metric_owners"] = dict(sorted(outcome.owners.items()))
    if estimate and estimate.delegated:
        record["delegated_metrics"] = estimate.delegated
    if estimate and estimate.breakdown:
        record["breakdown"] = estimate.breakdown
    record["operator_flops"], record["operator_bytes"] = outcome.operators.results()
