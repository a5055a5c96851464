"""Cost curves: one analysis per size of a swept quantity, and the exact curve of every summable total.

`cost_curve` analyzes the real model at each requested size (on the meta device this costs about a second a
size) and `fit_curves` states, per total, the exact polynomial in the size when the points determine it (see
`torchscan.curves.exact_fit` for the rules and the domain of a curve). Nothing here predicts a size that was not
analyzed: a user who wants a size asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import methodcaller
from typing import Any

from .exact_fit import Fit, evaluate_piece, fit_points

__all__ = ["CURVE_SCHEMA_VERSION", "cost_curve", "counts_of_point", "evaluate_piece", "fit_curves"]

#: The version of a cost curve's wire form (docs/schema.md); bumped only for changes that break consumers.
CURVE_SCHEMA_VERSION = "1"

Series = list[int] | str
#: Why a metric with this status at one size has no exact curve (after "<status> at size <s>").
_STATUS_REASONS = {"unavailable": ": nothing is known of it there", "not_requested": ": the analysis mode did not count it",
                   "not_applicable": ": it has no value there"}


def _counts(totals: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every count in one report's totals by name: MetricResults as themselves, plain integers of nested
    sections (``parameters.total``, ``buffers.bytes``) under a dotted name."""
    for key, value in totals.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and "status" not in value:
            yield from _counts(value, f"{name}.")
        else:
            yield name, value


def _exact_integer(value: Any, size: int) -> int | str:
    """The integer a count holds at one size, or why it cannot lie on an exact curve."""
    if isinstance(value, Mapping):
        status = str(value.get("status"))
        if status == "partial":
            return (f"partial at size {size}: its known value is a lower bound, and a curve through lower bounds "
                    "is not exact")
        if status != "complete":
            return f"{status} at size {size}{_STATUS_REASONS.get(status, '')}"
        value = value.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        return f"not an integer count at size {size} ({value!r})"
    return value


def _series(name: str, sizes: Sequence[int], counts: Sequence[Mapping[str, Any]]) -> Series:
    """One metric's integers at every size, or the first reason it has no exact curve."""
    values = []
    for size, found in zip(sizes, counts, strict=True):
        if name not in found:
            return f"missing at size {size}"
        value = _exact_integer(found[name], size)
        if isinstance(value, str):
            return value
        values.append(value)
    return values


def _check_sizes(sizes: Sequence[int]) -> list[int]:
    sizes = list(sizes)
    if not sizes or any(isinstance(size, bool) or not isinstance(size, int) for size in sizes):
        raise TypeError(f"sizes must be a non-empty sequence of integers, got {sizes!r}")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"sizes must be distinct, got {sizes!r}")
    return sizes


def fit_curves(sizes: Sequence[int], totals: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The exact curve of every count in ``totals`` (``totals[i]`` is ``report["totals"]`` at ``sizes[i]``).

    Returns, per metric name (MetricResult totals by their key, plain integer totals such as
    ``parameters.total`` by a dotted name), ``{"kind", "pieces", "verified_at", "reason"}``: an exact
    ``"polynomial"``, ``"piecewise"`` exact pieces, or ``"points"`` with the reason there is no exact curve
    (an incomplete value, too few sizes, or no polynomial of degree <= 3 that verifies).
    """
    sizes = _check_sizes(sizes)
    if len(totals) != len(sizes):
        raise ValueError(f"totals must hold one report's totals per size: {len(sizes)} sizes, {len(totals)} totals")
    counts = [dict(_counts(total)) for total in totals]
    curves = {}
    for name in dict.fromkeys(name for found in counts for name in found):
        series = _series(name, sizes, counts)
        fit = Fit("points", (), series) if isinstance(series, str) else fit_points(sizes, series)
        curves[name] = fit.to_json()
    return curves


def cost_curve(
    model: Any,
    sizes: Sequence[int],
    inputs: Callable[[int], tuple[Sequence[Any], Mapping[str, Any]]],
    *,
    device: Any = None,
    mode: str = "full",
    custom_modules: Mapping[type, Any] | None = None,
    custom_mapping: Mapping[Any, Any] | None = None,
    as_device: Any = None,
    meta_kernels: str = "accelerator",
) -> dict[str, Any]:
    """Analyze ``model`` at every size and return the versioned, JSON-serializable curve of its totals.

    ``inputs(size)`` returns the call's ``(args, kwargs)`` at that size. ``device``, when given, is where the
    call's tensors go (those nested in tuples, lists and dicts too; other objects, such as a KV cache, are passed
    as they are: build them there); the model stays where it is. ``mode``, ``custom_modules``, ``custom_mapping``,
    ``as_device`` (fake-tensor stand-ins on that device) and ``meta_kernels`` (the attention kernels on meta) are
    `torchscan.crawl_module`'s. The result holds ``schema_version``, ``sizes`` (as given), ``points`` (one
    ``{"size", "totals"}`` per size, each a full report's totals, plus ``kv_cache``, the report's
    ``inputs.kv_cache``, for a call with a KV cache) and ``curves`` (`fit_curves` of the totals, and of the
    KV-cache bytes under ``kv_cache``).
    """
    from ..calls.inputs import normalize_device
    from ..crawler import crawl_module

    sizes = _check_sizes(sizes)
    _check_options(inputs, as_device, meta_kernels)
    target = normalize_device(device)
    points = []
    for size in sizes:
        args, kwargs = _moved(_call_of(inputs, size), target)
        report = crawl_module(model, args=args, kwargs=kwargs, mode=mode,  # type: ignore[arg-type]
                              custom_modules=custom_modules, custom_mapping=custom_mapping, as_device=as_device,
                              meta_kernels=meta_kernels)
        points.append(_point(size, report))
    return {"schema_version": CURVE_SCHEMA_VERSION, "sizes": sizes, "points": points,
            "curves": fit_curves(sizes, [_fitted_counts(point) for point in points])}


def _check_options(inputs: Any, as_device: Any, meta_kernels: Any) -> None:
    """The options every size shares, checked once before the first size runs (errors name the argument)."""
    from ..calls.meta_kernels import check_meta_kernels
    from ..calls.stand_ins import stand_in_device

    stand_in_device(as_device)
    check_meta_kernels(meta_kernels)
    if not callable(inputs):
        raise TypeError(f"inputs must be a callable size -> (args, kwargs), got {type(inputs).__name__}")


def _point(size: int, report: Mapping[str, Any]) -> dict[str, Any]:
    """One size's point: its totals, and the call's KV cache (``inputs.kv_cache``) when it passed one."""
    point = {"size": size, "totals": report["totals"]}
    if "kv_cache" in report["inputs"]:
        point["kv_cache"] = report["inputs"]["kv_cache"]
    return point


def _fitted_counts(point: Mapping[str, Any]) -> Mapping[str, Any]:
    """The counts a curve is fitted to: the totals, and the KV-cache bytes (curve ``kv_cache``) of a decode step."""
    if "kv_cache" not in point:
        return point["totals"]
    return {**point["totals"], "kv_cache": point["kv_cache"]["bytes"]}


def _moved(call: tuple[tuple[Any, ...], dict[str, Any]], device: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call with its tensors on ``device`` (unchanged when ``device`` is ``None``)."""
    if device is None:
        return call
    from ..values import map_tensors

    return map_tensors(call, methodcaller("to", device))


def counts_of_point(point: Mapping[str, Any]) -> dict[str, int | None]:
    """Every count of one point of a cost curve by its curve's name, ``None`` where it is not an exact integer."""
    exact = {name: _exact_integer(value, point["size"]) for name, value in _counts(_fitted_counts(point))}
    return {name: value if isinstance(value, int) else None for name, value in exact.items()}


def _call_of(inputs: Callable[[int], Any], size: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``inputs(size)`` checked to be an ``(args, kwargs)`` pair."""
    call = inputs(size)
    if not (isinstance(call, tuple) and len(call) == 2 and isinstance(call[1], Mapping)):
        raise TypeError(f"inputs({size}) must return an (args, kwargs) pair, got {type(call).__name__}")
    return tuple(call[0]), dict(call[1])
