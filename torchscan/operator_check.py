"""The operator check that keeps third-party formulas truthful: a formula is trusted only while it describes what ran.

Each `ThirdPartyHandler` declares the aten operators its formula describes (an `OperatorSignature`), and every call
it estimates is checked against the operators dispatched directly inside that call, on any device (names, never
values). Views, metadata and casts are allowed anywhere (`ALLOWED_ANYWHERE`). On a mismatch the formula's counts
become lower bounds priced from the observed operators, its receptive fields unavailable, and a
``handler_signature_mismatch`` diagnostic names the difference (docs/third-party.md specifies the check).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from .diagnostics import diagnostic
from .direct_work import DirectWork, ObservedWork
from .formulas.operators.table import ZERO_WORK_OPERATORS, operator_significance
from .handlers import ModuleCall, ModuleHandler
from .operators import operator_name
from .results import METRIC_UNITS, MODULE_CALL, SUMMABLE_METRICS, MetricResult, lower_bound, unavailable

if TYPE_CHECKING:
    from .estimation import CallEstimate

#: The method label of the fields a mismatched call falls back to.
MISMATCH_METHOD = "handler_signature_mismatch"
#: Zero-work families that never need declaring: they reinterpret a tensor without reading or writing elements.
ALLOWED_FAMILIES = frozenset({"view", "metadata"})
#: Operators allowed anywhere besides those families: dtype and device casts.
ALLOWED_CASTS = frozenset({"aten._to_copy"})


def zero_work_names(families: Iterable[str]) -> frozenset[str]:
    """The names of the zero-work operators of the given families (`ZERO_WORK_OPERATORS` reasons)."""
    wanted = frozenset(families)
    return frozenset(operator_name(packet) for packet, reason in ZERO_WORK_OPERATORS.items() if reason in wanted)


#: Every operator name a call may run without its handler declaring it.
ALLOWED_ANYWHERE: frozenset[str] = zero_work_names(ALLOWED_FAMILIES) | ALLOWED_CASTS


def resolves(name: str) -> bool:
    """Whether ``aten.<op>`` names an operator packet of the installed PyTorch."""
    namespace, _, op = name.partition(".")
    return bool(op) and hasattr(getattr(torch.ops, namespace, None), op)


@dataclass(frozen=True)
class OperatorSignature:
    """The aten operators one call of a formula describes: ``required`` counts and ``optional`` extras.

    Names are stable operator names such as ``aten.mul`` (packets, never overloads). ``required`` maps each name
    to how many times one call runs it; ``optional`` names operators that may run any number of times (a copy that
    happens only for a non-contiguous input, for instance).
    """

    required: Mapping[str, int] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "required", dict(sorted(self.required.items())))
        object.__setattr__(self, "optional", frozenset(self.optional))
        for name, count in self.required.items():
            if not (isinstance(count, int) and count > 0):
                raise ValueError(f"OperatorSignature count of {name} must be a positive integer, got {count!r}")
        unknown = [name for name in (*self.required, *self.optional) if not resolves(name)]
        if unknown:
            raise ValueError(f"OperatorSignature names operators this PyTorch does not have: {sorted(unknown)}; "
                             "expected names such as 'aten.mul'")

    def describe(self) -> str:
        """``aten.add, aten.mul x2 (optional: aten.clone)`` or ``no operator`` for a pure view."""
        text = counted_names(self.required) or "no operator"
        return text + (f" (optional: {', '.join(sorted(self.optional))})" if self.optional else "")


def signature(*names: str, optional: Iterable[str] = ()) -> OperatorSignature:
    """``signature("aten.mul", "aten.mul", "aten.sigmoid")``: each name once per time the call runs it."""
    return OperatorSignature(Counter(names), frozenset(optional))


SignatureSource = OperatorSignature | Callable[[ModuleCall], OperatorSignature]


@dataclass(frozen=True)
class ThirdPartyHandler(ModuleHandler):
    """A built-in handler for a class another library defines, with the operators its formula describes.

    ``operators`` is an `OperatorSignature`, or a function of the call returning one when the forward's operators
    depend on the module's configuration (an ``inplace`` flag, an optional pooling layer).
    """

    operators: SignatureSource = field(default_factory=OperatorSignature, kw_only=True)
    checks_operators: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.operators, OperatorSignature) or callable(self.operators)):
            raise TypeError(f"ThirdPartyHandler operators must be an OperatorSignature or a function of the call, "
                            f"got {type(self.operators).__name__}")
        if self.method is None:
            raise ValueError("a ThirdPartyHandler is a built-in formula and needs its method label")

    def expected(self, call: ModuleCall) -> OperatorSignature:
        """The signature of this call."""
        return self.operators if isinstance(self.operators, OperatorSignature) else self.operators(call)

    def declared_operators(self, call: ModuleCall) -> frozenset[str]:
        expected = self.expected(call)
        return frozenset(expected.required) | expected.optional

    def verify(self, call: ModuleCall, observed: DirectWork | None, fields: Iterable[str], estimate: CallEstimate,
               where: dict[str, Any]) -> None:
        """Distrust the ``fields`` of this call when the operators it ran directly differ from the declared ones."""
        supplied = [name for name in METRIC_UNITS if name in fields and name in estimate.metrics]
        found = _difference(self, call, observed) if supplied else None
        if found is None:
            return
        detail, significant = found
        mark_mismatch(call, observed, supplied, estimate, where,
                      f"the built-in formula of {class_name(call)} {detail}", significant)


def compare(expected: OperatorSignature, observed: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """``(unexpected, missing)`` operator counts of a call against its declared signature."""
    unexpected = {name: count - expected.required.get(name, 0) for name, count in sorted(observed.items())
                  if name not in ALLOWED_ANYWHERE and name not in expected.optional
                  and count > expected.required.get(name, 0)}
    missing = {name: count - observed.get(name, 0) for name, count in expected.required.items()
               if observed.get(name, 0) < count}
    return unexpected, missing


def counted_names(counts: Mapping[str, int]) -> str:
    """``aten.add, aten.mul x2``: operator names with their counts above one."""
    return ", ".join(name if count == 1 else f"{name} x{count}" for name, count in counts.items())


def mark_mismatch(call: ModuleCall, observed: DirectWork | None, supplied: Iterable[str], estimate: CallEstimate,
                  where: dict[str, Any], detail: str, significant: bool) -> None:
    """Replace the ``supplied`` fields of a call whose operators do not match its formula: counts become lower
    bounds priced from the observed operators, receptive fields unavailable, and a ``handler_signature_mismatch``
    diagnostic says what differs (an error when dot-product work differs)."""
    work = observed if isinstance(observed, ObservedWork) else None
    for name in supplied:
        estimate.metrics[name] = _fallback(name, work)
        estimate.ownership[name] = MODULE_CALL
    estimate.diagnostics.append(diagnostic(
        "handler_signature_mismatch", f"{detail}: its estimates are not trusted for this call; counts are lower "
        "bounds priced from the observed operators and receptive fields are unavailable",
        severity="error" if significant else None, **where))


def class_name(call: ModuleCall) -> str:
    kind = type(call.module)
    return f"{kind.__module__}.{kind.__qualname__}"


def _difference(handler: ThirdPartyHandler, call: ModuleCall, observed: DirectWork | None
                ) -> tuple[str, bool] | None:
    """How the call's operators differ from the formula's (and whether the difference includes dot-product work),
    or ``None`` when they match."""
    try:
        expected = handler.expected(call)
    except Exception as error:  # noqa: BLE001 -- a declaration that cannot describe the call is not trusted
        return f"cannot say which operators this call should run ({type(error).__name__})", False
    if not isinstance(observed, ObservedWork):
        return f"describes {expected.describe()}, but the call's operators were not observed", False
    unexpected, missing = compare(expected, by_name(observed.counts()))
    if not unexpected and not missing:
        return None
    parts = [f"it also ran {counted_names(unexpected)}" if unexpected else "",
             f"it did not run {counted_names(missing)}" if missing else ""]
    detail = f"describes {expected.describe()}, but {'; '.join(part for part in parts if part)}"
    return detail, any(significant_operator(operator) for operator in unexpected)


def by_name(counts: Mapping[Any, int]) -> dict[str, int]:
    """Operator packet counts by stable operator name (two packets may share one)."""
    named: dict[str, int] = {}
    for packet, calls in counts.items():
        name = operator_name(packet)
        named[name] = named.get(name, 0) + calls
    return named


def _fallback(name: str, observed: DirectWork | None) -> MetricResult:
    unit = METRIC_UNITS[name]
    if name in SUMMABLE_METRICS and observed is not None:
        return lower_bound(observed.known(name), unit, MODULE_CALL, MISMATCH_METHOD)
    return unavailable(unit, MODULE_CALL, MISMATCH_METHOD)


def significant_operator(name: str) -> bool:
    namespace, _, op = name.partition(".")
    packet = getattr(getattr(torch.ops, namespace, None), op, None)
    return packet is not None and operator_significance(packet) == "significant"
