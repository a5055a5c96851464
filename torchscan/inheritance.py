"""Verified inheritance: a subclass that overrides ``forward`` keeps its parent's leaf formula when the operators
its call ran prove that it did the parent's work.

The built-in lookup refuses the parent's formula for such a class and offers it here, as an `InheritedHandler`,
trusted call by call. Each built-in leaf formula declares the aten operators with arithmetic it describes
(``OPERATORS`` in each family of `torchscan.formulas.modules`); a call is verified when every arithmetic operator
it ran is one of them and the functional cost table prices its operators at the formula's FLOPs and MACs. The
equivalences allowed besides, what each changes metric by metric, and what an unverified call gets (what a
third-party formula gets on a mismatch, `torchscan.operator_check`) are specified in docs/model-support.md
("Subclasses that override forward: verified inheritance").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .diagnostics import diagnostic
from .direct_work import DirectWork, ObservedWork
from .handlers import ModuleCall, ModuleHandler
from .operator_check import by_name, class_name, mark_mismatch, significant_operator, zero_work_names
from .operators import operator_name
from .results import FUNCTIONAL_OPS, METRIC_UNITS, MODULE_CALL, SPATIAL_METRICS, MetricResult, complete, unavailable

if TYPE_CHECKING:
    from .estimation import CallEstimate

#: The method label prefix of inherited results: ``inherited:<parent class>:<parent's method>``.
INHERITED_PREFIX = "inherited"
#: Views that only reshape (each output element is the input element at the same logical position).
RESHAPING = frozenset({
    "aten.view", "aten._unsafe_view", "aten.reshape", "aten.t", "aten.transpose", "aten.permute", "aten.alias",
    "aten.unsqueeze", "aten.squeeze", "aten.flatten", "aten.unflatten", "aten.expand", "aten.detach",
    "aten.lift_fresh", "aten.view_as",
})
#: Casts and copies (the same elements, in another dtype, device or layout) and fresh allocations (they read no
#: input element).
COPIES = frozenset({"aten._to_copy", "aten.clone", "aten.contiguous", "aten.copy_", "aten.to", "aten.zeros",
                    "aten.ones", "aten.empty", "aten.full", "aten.zeros_like", "aten.ones_like", "aten.empty_like",
                    "aten.full_like", "aten.new_zeros", "aten.new_empty", "aten.new_ones", "aten.new_full"})
#: Padding copies: the input with a border, which shifts the effective padding.
PADDING = frozenset({
    "aten.constant_pad_nd", "aten.pad", "aten.reflection_pad1d", "aten.reflection_pad2d", "aten.reflection_pad3d",
    "aten.replication_pad1d", "aten.replication_pad2d", "aten.replication_pad3d", "aten._pad_circular",
})
#: Operators that read no element (sizes, strides).
METADATA = zero_work_names(["metadata"])
#: Element movement after which the formula's receptive field and stride still hold.
KEEPS_RECEPTIVE_FIELDS = RESHAPING | COPIES | PADDING | METADATA


@dataclass(frozen=True)
class InheritedHandler(ModuleHandler):
    """The leaf formula of ``parent`` (a ``torch.nn`` or third-party class) offered to a subclass that overrides
    its ``forward``, with the aten operators with arithmetic that the formula describes (``operators``)."""

    parent: type = field(kw_only=True)
    formula: ModuleHandler = field(kw_only=True)
    operators: frozenset[str] = frozenset()
    checks_operators: ClassVar[bool] = True
    leaves_only: ClassVar[bool] = True

    @property
    def parent_name(self) -> str:
        return f"{self.parent.__module__}.{self.parent.__qualname__}"

    def declared_operators(self, call: ModuleCall) -> frozenset[str]:
        """The operators the parent's formula describes for this call (a third-party signature may depend on it)."""
        declared = self.formula.declared_operators(call)
        return self.operators if declared is None else declared

    def verify(self, call: ModuleCall, observed: DirectWork | None, fields: Iterable[str], estimate: CallEstimate,
               where: dict[str, Any]) -> None:
        """Keep, adjust or distrust the inherited formula's ``fields`` of this call (see the module docstring)."""
        supplied = [name for name in METRIC_UNITS if name in fields and name in estimate.metrics]
        if not supplied:
            return
        problem = _unverified(self, call, observed, estimate.metrics)
        if problem is not None:
            detail, significant = problem
            mark_mismatch(call, observed, supplied, estimate, where, f"the formula of {self.parent_name} it "
                          f"inherits {detail}", significant)
            return
        assert isinstance(observed, ObservedWork)  # _unverified returns a problem otherwise
        _account_equivalences(observed, self.declared_operators(call), supplied, estimate)
        estimate.diagnostics.append(diagnostic(
            "verified_inheritance", f"{class_name(call)} overrides forward; the formula of {self.parent_name} "
            "applies because the operators of this call do the work it describes", **where))


def inherit(parent: type, formula: ModuleHandler, operators: Iterable[str]) -> InheritedHandler | None:
    """The `InheritedHandler` offering ``parent``'s ``formula`` to its subclasses, or ``None`` for a formula that
    owns its subtree (never inherited)."""
    if formula.subtree_metrics:
        return None
    label = f"{INHERITED_PREFIX}:{parent.__module__}.{parent.__qualname__}:{formula.label}"
    return InheritedHandler(formula.callback, method=label, parent=parent, formula=formula,
                            operators=frozenset(operators))


def _unverified(handler: InheritedHandler, call: ModuleCall, observed: DirectWork | None,
                metrics: Mapping[str, MetricResult]) -> tuple[str, bool] | None:
    """Why the call does not prove the parent's work (and whether dot-product work differs), or ``None``."""
    if not isinstance(observed, ObservedWork):
        return "cannot be checked: the call's operators were not observed", False
    unexpected = _undescribed_work(observed, handler.declared_operators(call))
    if unexpected:
        ran = ", ".join(name if calls == 1 else f"{name} x{calls}" for name, calls in unexpected.items())
        return f"does not describe {ran}, which the call also ran", any(map(significant_operator, unexpected))
    if observed.unestimated:
        return "cannot be checked: some of the call's operators have no functional formula", False
    return _different_counts(observed, metrics)


def _undescribed_work(observed: ObservedWork, described: frozenset[str]) -> dict[str, int]:
    """Calls by operator name of the operators that did arithmetic (or have no price) and the formula does not
    describe."""
    worked = by_name({packet: calls for packet, calls in observed.counts().items()
                      if packet in observed.arithmetic or packet in observed.unestimated})
    return {name: calls for name, calls in sorted(worked.items()) if name not in described}


def _different_counts(observed: ObservedWork, metrics: Mapping[str, MetricResult]) -> tuple[str, bool] | None:
    """The first count the formula gives otherwise than the priced operators (MACs first: a difference in
    dot-product work is an error), or ``None``."""
    for name in ("macs", "module_flops"):
        claimed = metrics.get(name)
        if claimed is not None and claimed["status"] == "complete" and claimed["value"] != observed.known(name):
            detail = f"gives {name} {claimed['value']}, but the operators the call ran come to {observed.known(name)}"
            return detail, name == "macs"
    return None


def _account_equivalences(observed: ObservedWork, described: frozenset[str], supplied: list[str],
                          estimate: CallEstimate) -> None:
    """DMAs from the operators that ran; receptive fields unavailable where the equivalences can change them."""
    if "dmas" in supplied and estimate.metrics["dmas"]["status"] == "complete":
        estimate.metrics["dmas"] = complete(observed.known("dmas"), METRIC_UNITS["dmas"], MODULE_CALL,
                                            FUNCTIONAL_OPS)
    for name in _spatial_fields_lost(observed, described):
        if name in supplied:
            estimate.metrics[name] = unavailable(METRIC_UNITS[name], MODULE_CALL, estimate.metrics[name]["method"])


def _spatial_fields_lost(observed: ObservedWork, described: frozenset[str]) -> tuple[str, ...]:
    """The receptive-field fields the call's element movement can change: all three after a movement other than
    reshaping, copying or padding; the effective padding after a padding copy."""
    moved = {operator_name(packet) for packet in observed.observed
             if packet not in observed.arithmetic and packet not in observed.indices} - described
    if not moved <= KEEPS_RECEPTIVE_FIELDS:
        return SPATIAL_METRICS
    return ("effective_padding",) if moved & PADDING else ()
