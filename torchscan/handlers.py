"""Module handlers: the one mechanism behind every module estimate.

Built-in formulas and caller registrations are both `ModuleHandler` objects keyed by module class.
For each executed module call the crawler selects the closest registered class in the module's MRO, calls the
handler's callback with a `ModuleCall`, and validates the returned `ModuleEstimates` here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict

from torch import nn

from .breakdown import BREAKDOWN_KEY
from .direct_work import DirectWork
from .results import (
    COUNTED_STATUSES,
    METRIC_UNITS,
    MODULE_CALL,
    NOT_APPLICABLE,
    SPATIAL_METRICS,
    SUBTREE,
    Incomplete,
    MetricResult,
    Scope,
    _NotApplicable,
    complete,
    is_count,
    is_spatial_value,
    lower_bound,
    normalized,
    not_applicable,
    plain_number,
    unavailable,
    validation_error,
)

if TYPE_CHECKING:
    from .estimation import CallEstimate

METRIC_FIELDS = frozenset(METRIC_UNITS)
#: The keys a handler's result may have: the fields and the breakdown.
RESULT_KEYS = METRIC_FIELDS | {BREAKDOWN_KEY}
#: What a handler may report: counts are complete, partial or unavailable (`COUNTED_STATUSES`); a receptive-field
#: field may also say it has no meaning for the call. ``not_requested`` belongs to the analysis mode alone.
SPATIAL_STATUSES = COUNTED_STATUSES | {"not_applicable"}
_REQUIRED: Any = object()


@dataclass(frozen=True)
class ModuleCall:
    """One completed invocation: the actual module, positional args, keyword kwargs and output.

    The objects are those of the invocation itself (nested containers and non-tensor values preserved, omitted
    default arguments not inserted). Treat them as read-only; the wrapper is frozen, the objects are not.
    """

    module: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any

    def argument(self, position: int, name: str, default: Any = _REQUIRED) -> Any:
        """The argument the forward received at ``position`` or as keyword ``name``.

        An argument the caller omitted reads as ``default`` (pass the forward's own default); without a
        ``default``, a missing argument raises ``TypeError`` naming it (a handler's exception is reported as a
        ``handler_exception`` diagnostic, never as a made-up count).
        """
        if len(self.args) > position:
            return self.args[position]
        if name in self.kwargs:
            return self.kwargs[name]
        if default is not _REQUIRED:
            return default
        raise TypeError(f"the call of {type(self.module).__qualname__} has no argument {name!r} "
                        f"(neither positional argument {position} nor keyword {name!r})")


#: A summable field's value: a count, a lower bound (`Incomplete`), a MetricResult, or ``None`` (unavailable).
Count = float | Incomplete | MetricResult | None
#: A spatial field's value: one number or one per spatial dimension, a lower bound, `NOT_APPLICABLE`, a
#: MetricResult, or ``None``.
Spatial = float | Sequence[float] | Incomplete | _NotApplicable | MetricResult | None


class ModuleEstimates(TypedDict, total=False):
    """What a callback may return: any subset of the six fields, and optionally a ``breakdown``.

    A number is a complete estimate (zero included), `Incomplete` a lower bound or nothing known, a MetricResult
    mapping keeps its own status, and ``None`` means explicitly unavailable. Receptive-field fields also accept one
    number per spatial dimension, or `NOT_APPLICABLE`. A ``breakdown`` lists the parts of the estimate (see
    `torchscan.breakdown`); they are never added again.
    """

    module_flops: Count
    macs: Count
    dmas: Count
    receptive_field: Spatial
    effective_stride: Spatial
    effective_padding: Spatial
    breakdown: list[dict[str, Any]]


Callback = Callable[[ModuleCall], Mapping[str, Any]]


@dataclass(frozen=True)
class ModuleHandler:
    """A callback estimating one module call, with the metrics it owns inclusively across its subtree.

    ``subtree_metrics`` names the fields whose estimates include every descendant call executed during the
    invocation; those descendants keep their rows but not their estimates for these fields. ``method`` labels
    built-in formulas; caller handlers are labelled ``custom_module_handler:<module>.<qualname>``.

    ``memoize=True`` promises that the estimate depends only on the module's type, plain attributes and own
    tensor shapes and on the call's structure, shapes, dtypes and scalar values (see ``torchscan.estimate_memo``):
    within one analysis, calls alike in all of these then share one evaluation of a built-in callback.
    """

    checks_operators: ClassVar[bool] = False
    """Whether the formula declares the operators it describes and each call's estimate is trusted only after
    `verify` checks them against the ones the call ran (third-party formulas, see `torchscan.operator_check`, and
    inherited ones, see `torchscan.inheritance`, do)."""
    leaves_only: ClassVar[bool] = False
    """Whether the formula describes a leaf's work only (an inherited one does): a module with children gets none."""

    callback: Callback
    subtree_metrics: frozenset[str] = frozenset()
    method: str | None = field(default=None, kw_only=True)
    memoize: bool = field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        if not callable(self.callback):
            raise TypeError(f"ModuleHandler callback must be callable, got {type(self.callback).__name__}")
        if isinstance(self.subtree_metrics, str) or not isinstance(self.subtree_metrics, (set, frozenset)):
            raise TypeError("ModuleHandler subtree_metrics must be a frozenset of metric names, "
                            f"got {type(self.subtree_metrics).__name__}")
        unknown = set(self.subtree_metrics) - METRIC_FIELDS
        if unknown:
            raise ValueError(f"ModuleHandler subtree_metrics has unknown metric names {sorted(unknown)}; "
                             f"expected a subset of {sorted(METRIC_FIELDS)}")
        object.__setattr__(self, "subtree_metrics", frozenset(self.subtree_metrics))

    @property
    def label(self) -> str:
        """The method label of a built-in handler: its ``method``, or the caller label when it has none."""
        return self.method if self.method is not None else self.caller_label

    @property
    def caller_label(self) -> str:
        """``custom_module_handler:<callback module>.<callback qualname>``: how caller registrations are labelled."""
        callback = self.callback
        module = getattr(callback, "__module__", None) or type(callback).__module__
        qualname = getattr(callback, "__qualname__", None) or type(callback).__qualname__
        return f"custom_module_handler:{module}.{qualname}"

    def scope(self, metric: str) -> Scope:
        return SUBTREE if metric in self.subtree_metrics else MODULE_CALL

    def declared_operators(self, call: ModuleCall) -> frozenset[str] | None:
        """The aten operators this call of the formula describes, where the handler declares them (else ``None``)."""
        return None

    def verify(self, call: ModuleCall, observed: DirectWork | None, fields: Iterable[str], estimate: CallEstimate,
               where: dict[str, Any]) -> None:
        """Keep, adjust or distrust the ``fields`` this handler supplied for ``call`` (in ``estimate``, in place) by
        the operators the call ran directly (``observed``): a formula that declares none is trusted as it is."""


def validate_handler_map(custom_modules: Any, argument: str = "custom_modules") -> dict[type, ModuleHandler]:
    """Check a caller's registrations before the model runs: module classes mapped to ModuleHandler objects."""
    if custom_modules is None:
        return {}
    if not isinstance(custom_modules, Mapping):
        raise TypeError(f"{argument} must be a mapping of nn.Module subclasses to ModuleHandler, "
                        f"got {type(custom_modules).__name__}")
    for key, handler in custom_modules.items():
        if not (isinstance(key, type) and issubclass(key, nn.Module)):
            raise TypeError(f"{argument} keys must be nn.Module subclasses, got {key!r}")
        if not isinstance(handler, ModuleHandler):
            raise TypeError(f"{argument}[{key.__qualname__}] must be a ModuleHandler, got {type(handler).__name__}")
    return dict(custom_modules)


def closest_handler(module_type: type, handlers: Mapping[type, ModuleHandler]) -> ModuleHandler | None:
    """The handler of the nearest registered class in ``module_type``'s MRO (mapping order never matters)."""
    return next((handlers[klass] for klass in module_type.__mro__ if klass in handlers), None)


@dataclass(slots=True)
class ValidatedEstimates:
    """A callback's result after validation: metric results by field, why any field was rejected, and what an
    `Incomplete` value said is missing (quoted by the diagnostic about that field)."""

    metrics: dict[str, MetricResult]
    problems: list[tuple[str | None, str]]  # (field or None for the whole result, message)
    invalid_whole: bool = False
    reasons: dict[str, str] = field(default_factory=dict)
    breakdown: Any = None  # the raw "breakdown" the handler returned, checked by torchscan.breakdown


def validate_estimates(raw: Any, handler: ModuleHandler, requested: frozenset[str] = METRIC_FIELDS, *,
                       builtin: bool | None = None) -> ValidatedEstimates:
    """Turn a callback result into MetricResults with the field's unit, the handler's scope and its label (a
    caller's, or a built-in's ``method``; ``builtin`` defaults to whether it has one). Invalid fields become
    unavailable with a reason; a non-mapping result or an unknown field name invalidates the whole result."""
    if builtin is None:
        builtin = handler.method is not None
    label = handler.label if builtin else handler.caller_label
    if type(raw) is not dict and not isinstance(raw, Mapping):
        reason = f"handler returned {type(raw).__name__}, expected a mapping of metric names to estimates"
        return _whole_invalid(handler, requested, label, reason)
    unknown = _unsupported_names(raw)
    if unknown:
        reason = f"handler returned unsupported field names {unknown}; expected a subset of {sorted(METRIC_FIELDS)}"
        return _whole_invalid(handler, requested, label, reason)
    return _validated_fields(raw, handler.subtree_metrics, requested, label, builtin)


def _validated_fields(raw: Mapping[str, Any], subtree: frozenset[str], requested: frozenset[str], label: str,
                      builtin: bool) -> ValidatedEstimates:
    """Each requested field of a result with known field names, as a MetricResult (or unavailable, and why)."""
    validated = ValidatedEstimates({}, [], breakdown=raw.get(BREAKDOWN_KEY))
    for name, value in raw.items():
        if name not in requested:  # the breakdown key included
            continue
        scope = SUBTREE if name in subtree else MODULE_CALL
        if type(value) is int and value >= 0:  # a complete count: what formulas return for most fields
            validated.metrics[name] = complete(value, METRIC_UNITS[name], scope, label)
            continue
        result, problem = _estimate_to_result(name, value, scope, label, builtin)
        validated.metrics[name] = result
        if problem:
            validated.problems.append((name, problem))
        elif isinstance(value, Incomplete) and value.reason:
            validated.reasons[name] = value.reason
    return validated


def _unsupported_names(raw: Mapping[str, Any]) -> list[str]:
    """The keys of a handler result that are neither a field nor its ``breakdown``."""
    if RESULT_KEYS.issuperset(raw):  # the common case, in one step
        return []
    return sorted(str(name) for name in raw if name not in RESULT_KEYS)


def _whole_invalid(handler: ModuleHandler, requested: frozenset[str], label: str, reason: str) -> ValidatedEstimates:
    metrics = {name: unavailable(METRIC_UNITS[name], handler.scope(name), label) for name in sorted(requested)}
    return ValidatedEstimates(metrics, [(None, reason)], invalid_whole=True)


def _estimate_to_result(name: str, value: Any, scope: Scope, label: str, builtin: bool
                        ) -> tuple[MetricResult, str | None]:
    """One field's value as a MetricResult of the handler's ``scope``, or an unavailable result and why the value is
    invalid."""
    unit = METRIC_UNITS[name]
    spatial = name in SPATIAL_METRICS
    if spatial and type(value) is list and _natural_numbers(value):
        return complete(value.copy(), unit, scope, label), None
    if value is None:
        return unavailable(unit, scope, label), None
    if isinstance(value, Incomplete):
        return _incomplete_to_result(name, value, unit, scope, label)
    if value is NOT_APPLICABLE:
        if spatial:
            return not_applicable(unit, scope, label), None
        return unavailable(unit, scope, label), f"{name} is a count: it cannot be not applicable"
    return _other_to_result(name, value, scope, label, builtin)


def _other_to_result(name: str, value: Any, scope: Scope, label: str, builtin: bool
                     ) -> tuple[MetricResult, str | None]:
    """A MetricResult mapping (checked: its scope becomes the handler's, a caller's method gets the caller label),
    any other number (a float, a numpy scalar), or an invalid value."""
    unit, spatial = METRIC_UNITS[name], name in SPATIAL_METRICS
    if isinstance(value, Mapping):
        problem = validation_error(value, unit=unit, spatial=spatial,
                                   statuses=SPATIAL_STATUSES if spatial else COUNTED_STATUSES)
        if problem:
            return unavailable(unit, scope, label), problem
        result = normalized(value)
        method = result["method"] if builtin else f"{label}:{result['method']}"
        return {**result, "scope": scope, "method": method}, None
    if is_count(value) or (spatial and is_spatial_value(value)):
        return complete(plain_number(value), unit, scope, label), None
    what = "a finite non-negative number" + (" or a list of them" if spatial else "")
    return unavailable(unit, scope, label), f"{name} must be {what}, None or a MetricResult, got {type(value).__name__}"


def _natural_numbers(values: list[Any]) -> bool:
    """A non-empty list of plain non-negative ints (per-dimension receptive-field values, as formulas give them)."""
    for item in values:
        if type(item) is not int or item < 0:
            return False
    return bool(values)


def _incomplete_to_result(name: str, value: Incomplete, unit: str, scope: Scope, label: str
                          ) -> tuple[MetricResult, str | None]:
    """A lower bound (partial) or nothing known (unavailable)."""
    if value.known is None:
        return unavailable(unit, scope, label), None
    if is_count(value.known) or (name in SPATIAL_METRICS and is_spatial_value(value.known)):
        return lower_bound(plain_number(value.known), unit, scope, label), None
    return unavailable(unit, scope, label), f"the known part of {name} must be a finite non-negative number"
