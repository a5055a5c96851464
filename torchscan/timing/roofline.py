"""The roofline bound of a report on a device: a lower bound of time from FLOPs, bytes and the device's peaks.

For a piece of work with ``F`` FLOPs computed in dtype ``d`` and ``B`` bytes read and written (the report's operator
FLOPs and operator bytes, an unfused model: `torchscan.operator_bytes`), on a device of peak ``P[d]`` FLOP/s and
memory bandwidth ``W`` bytes/s::

    compute_seconds = F / P[d]      memory_seconds = B / W      bound = max(compute_seconds, memory_seconds)
    arithmetic_intensity = F / B    bound_by = "compute" if compute_seconds > memory_seconds else "memory"

computed per operator (each row of the report's ``operator_bytes.by_operator``: one operator in one compute dtype),
per layer call (direct and inclusive) and for the model. The model's compute time is the sum over the operator rows
of their FLOPs at their own dtype's peak (mixed precision is priced per dtype). A layer call's dtype is, among the
floating-point dtypes of the tensors entering and leaving the call and every call under it, the one with the
highest peak on the device: a lower bound stays a lower bound when a call mixes dtypes. ``tf32=True`` prices
float32 work at the TF32 tensor-core peak (as ``torch.backends.cuda.matmul.allow_tf32`` does on the device).

Statuses carry through: FLOPs or bytes that are lower bounds, or a dtype the device has no peak for, make the bound
``partial`` (its ``known_value`` a lower bound); ``bound_by`` is ``None`` when the incomplete term could still
overtake the other. The result is plain data (`Roofline`). When the report was analyzed with ``time=True``, its
measured times are joined to the bounds (`torchscan.timing.efficiency`): ``measured_seconds`` and ``efficiency``
beside each bound, and the model's `Efficiency` (achieved FLOP/s, MFU, achieved bandwidth).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Literal, NotRequired, TypedDict

from ..curves.exact_fit import on_lattice
from ..results import DIRECT, INCLUSIVE, MODEL, MetricResult, Scope, complete, lower_bound, unavailable
from .efficiency import (
    Efficiency,
    join_layers,
    join_operators,
    join_point,
    model_efficiency,
    number,
    skipped_reason,
)
from .hardware import HARDWARE, PEAK_KEYS, Hardware

#: The method label and unit of a bound.
METHOD: Final = "roofline_bound"
UNIT: Final = "seconds"
BoundBy = Literal["compute", "memory"]


class RooflinePoint(TypedDict):
    """FLOPs and bytes of one piece of work, and the bound they give on the device.

    ``compute_seconds`` and ``memory_seconds`` are the known FLOPs over the peak and the known bytes over the
    bandwidth (``None``: no known FLOPs or no peak for the dtype); ``arithmetic_intensity`` is FLOPs per byte when both
    are complete (``None`` otherwise, or with no bytes). ``measured_seconds`` (median kernel time) and ``efficiency``
    (a complete bound over the measured time) are there when the report has measured time."""

    flops: MetricResult
    bytes: MetricResult
    arithmetic_intensity: float | None
    compute_seconds: float | None
    memory_seconds: float | None
    bound: MetricResult
    bound_by: BoundBy | None
    measured_seconds: NotRequired[float]
    efficiency: NotRequired[float | None]


class RooflineOperator(RooflinePoint):
    """One operator in one compute dtype (``dtype`` ``None``: integer or boolean work), with its peak."""

    operator: str
    dtype: str | None
    calls: int
    peak_flops: float | None


class RooflineCall(TypedDict):
    """One layer call, joinable to the report's ``layers`` by ``(path, call_index)``."""

    path: str
    call_index: int
    dtype: str | None
    peak_flops: float | None
    direct: RooflinePoint
    inclusive: RooflinePoint


class Roofline(TypedDict):
    """What `roofline` returns: the device, its ridge points (FLOPs per byte at which each peak takes as long as
    the bytes), the model's bound, and the bound of every layer call and operator row."""

    method: Literal["roofline_bound"]
    convention: Literal["unfused"]
    hardware: Hardware
    tf32: bool
    ridge_points: dict[str, float]
    model: RooflinePoint
    layers: list[RooflineCall]
    operators: list[RooflineOperator]
    efficiency: NotRequired[Efficiency]
    efficiency_skipped: NotRequired[str]


def resolve_hardware(hardware: Any) -> Hardware:
    """A `HARDWARE` name, or a `Hardware` mapping (a `torchscan.measure_hardware` result), checked; errors name the
    ``hardware`` argument and list the valid names."""
    names = ", ".join(repr(name) for name in HARDWARE)
    if isinstance(hardware, str):
        if hardware not in HARDWARE:
            raise ValueError(f"hardware {hardware!r} is not in torchscan.HARDWARE; valid names: {names} (or pass "
                             "the result of torchscan.measure_hardware())")
        return HARDWARE[hardware]
    if not isinstance(hardware, Mapping):
        raise TypeError(f"hardware must be a name from torchscan.HARDWARE ({names}) or a measure_hardware() "
                        f"result, got {type(hardware).__name__}")
    peaks, bandwidth = hardware.get("peak_flops"), hardware.get("memory_bandwidth")
    if not isinstance(peaks, Mapping) or not all(_positive(value) for value in peaks.values()):
        raise ValueError("hardware['peak_flops'] must map dtype keys "
                         f"({', '.join(PEAK_KEYS)}) to positive FLOP/s")
    if not _positive(bandwidth):
        raise ValueError(f"hardware['memory_bandwidth'] must be a positive number of bytes/s, got {bandwidth!r}")
    if not isinstance(hardware.get("name"), str):
        raise TypeError("hardware['name'] must be a string")
    return hardware  # type: ignore[return-value]


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and value != float("inf")


def peak_key(dtype: str | None, tf32: bool = False) -> str | None:
    """The `Hardware.peak_flops` key of a compute dtype (``float8_e4m3fn`` -> ``float8``; float32 -> ``tf32`` when
    asked); ``None`` for no dtype."""
    if dtype is None:
        return None
    if dtype == "float32" and tf32:
        return "tf32"
    return "float8" if dtype.startswith("float8") else dtype


def bound_point(flops: MetricResult, nbytes: MetricResult, compute_seconds: float | None,
                compute_known: bool, bandwidth: float, scope: Scope) -> RooflinePoint:
    """The bound of work with ``flops`` and ``nbytes``, whose compute time is ``compute_seconds`` (known FLOPs
    over their peaks; ``compute_known``: complete FLOPs with a peak for every dtype)."""
    known_bytes = nbytes["known_value"]
    memory_seconds = None if known_bytes is None else known_bytes / bandwidth  # type: ignore[operator]
    memory_known = nbytes["status"] == "complete"
    terms = [term for term in (compute_seconds, memory_seconds) if term is not None]
    if not terms:
        bound = unavailable(UNIT, scope, METHOD)
    elif compute_known and memory_known and len(terms) == 2:
        bound = complete(max(terms), UNIT, scope, METHOD)
    else:
        bound = lower_bound(max(terms), UNIT, scope, METHOD)
    return {"flops": flops, "bytes": nbytes,
            "arithmetic_intensity": _intensity(flops, nbytes),
            "compute_seconds": compute_seconds, "memory_seconds": memory_seconds, "bound": bound,
            "bound_by": _bound_by(compute_seconds, compute_known, memory_seconds, memory_known)}


def _intensity(flops: MetricResult, nbytes: MetricResult) -> float | None:
    if flops["status"] != "complete" or nbytes["status"] != "complete" or not nbytes["value"]:
        return None
    return flops["value"] / nbytes["value"]  # type: ignore[operator]


def _bound_by(compute: float | None, compute_known: bool, memory: float | None, memory_known: bool) -> BoundBy | None:
    """Which term bounds: decided when the larger term is known to be the larger (an incomplete term can only
    grow, so it may be the larger; it may not be the smaller)."""
    if compute is None or memory is None:
        return None
    if compute > memory:
        return "compute" if memory_known else None
    return "memory" if compute_known else None


def roofline(report: Mapping[str, Any], hardware: Any, *, tf32: bool = False) -> Roofline:
    """The roofline bound of a full analysis's ``report`` on ``hardware`` (a name from `torchscan.HARDWARE` or a
    `torchscan.measure_hardware` result): per operator row, per layer call and for the model. See the module
    docstring for the formulas and docs/time.md for what the bound means."""
    device = resolve_hardware(hardware)
    section = _operator_bytes(report)
    peaks, bandwidth = device["peak_flops"], device["memory_bandwidth"]
    operators = [_operator(row, peaks, bandwidth, tf32) for row in section["by_operator"]]
    compute = [(row["compute_seconds"], row["flops"]) for row in operators]
    compute_known = (report["totals"]["operator_flops"]["status"] == "complete"
                     and all(seconds is not None or flops["known_value"] == 0 for seconds, flops in compute))
    model_compute = sum(seconds for seconds, _ in compute if seconds is not None)
    model = bound_point(report["totals"]["operator_flops"], section["total"], model_compute, compute_known,
                        bandwidth, MODEL)
    result: Roofline = {
        "method": METHOD, "convention": "unfused", "hardware": device, "tf32": tf32,
        "ridge_points": {key: peak / bandwidth for key, peak in peaks.items()}, "model": model,
        "layers": list(_layers(report["layers"], peaks, bandwidth, tf32, report.get("context", {}))),
        "operators": operators}
    if "time" in report:
        _join_measured(result, report)
    return result


def _join_measured(result: Roofline, report: Mapping[str, Any]) -> None:
    """Measured time beside the bounds, when it was measured on a device of the hardware's kind."""
    time = report["time"]
    reason = skipped_reason(time, result["hardware"])
    if reason is not None:
        result["efficiency_skipped"] = reason
        return
    join_layers(result["layers"], time)  # type: ignore[arg-type]
    join_operators(result["operators"], time)  # type: ignore[arg-type]
    if time["describes"] == "forward":
        join_point(result["model"], time["measured"]["median"])  # type: ignore[arg-type]
    result["efficiency"] = model_efficiency(report, result["model"], result["hardware"],
                                            _dominant_peak(result["operators"]))


def _dominant_peak(operators: list[RooflineOperator]) -> float | None:
    """The peak of the dtype that computes most of the FLOPs: the peak a model FLOPs utilization is read against."""
    flops_by_peak: dict[float, float] = {}
    for row in operators:
        known = number(row["flops"], known=True)
        if row["peak_flops"] is not None and known:
            flops_by_peak[row["peak_flops"]] = flops_by_peak.get(row["peak_flops"], 0.0) + known
    return max(flops_by_peak, key=flops_by_peak.__getitem__) if flops_by_peak else None


def _operator_bytes(report: Any) -> Mapping[str, Any]:
    """The report's ``operator_bytes`` section; errors name the ``report`` argument and say what is missing."""
    if not isinstance(report, Mapping) or "operator_bytes" not in report or "layers" not in report:
        raise ValueError("report must be a crawl_module report with operator bytes (TorchScan's operator_bytes "
                         "section: analyze in mode='full' with this version)")
    section = report["operator_bytes"]
    if section["total"]["status"] == "not_requested":
        raise ValueError("report was analyzed with mode='structure': it has no operator FLOPs or bytes to bound; "
                         "analyze in mode='full'")
    return section


def _bound_at(flops: MetricResult, nbytes: MetricResult, peak: float | None, bandwidth: float, scope: Scope
              ) -> RooflinePoint:
    """The bound of work whose FLOPs all run at ``peak``: known FLOPs over the peak (no peak: zero FLOPs only)."""
    known = flops["known_value"]
    if known is None or (peak is None and known != 0):
        return bound_point(flops, nbytes, None, False, bandwidth, scope)
    seconds = 0.0 if peak is None else known / peak  # type: ignore[operator]
    return bound_point(flops, nbytes, seconds, flops["status"] == "complete", bandwidth, scope)


def _operator(row: Mapping[str, Any], peaks: Mapping[str, float], bandwidth: float, tf32: bool
              ) -> RooflineOperator:
    peak = peaks.get(peak_key(row["dtype"], tf32) or "")
    return {"operator": row["operator"], "dtype": row["dtype"], "calls": row["calls"], "peak_flops": peak,
            **_bound_at(row["flops"], row["bytes"], peak, bandwidth, MODEL)}


def _layers(layers: list[Mapping[str, Any]], peaks: Mapping[str, float], bandwidth: float, tf32: bool,
            context: Mapping[str, Any]) -> Iterator[RooflineCall]:
    """Each layer call's bound, at the fastest dtype seen in its subtree (the model's dtypes when none is)."""
    fallback = set(context.get("dtypes", ())) & FLOATING
    subtree = _subtree_dtypes(layers)
    for layer, dtypes in zip(layers, subtree, strict=True):
        dtype = _fastest(dtypes or fallback, peaks, tf32)
        peak = None if dtype is None else peaks.get(peak_key(dtype, tf32) or "")
        points = {scope: _bound_at(layer["operator_flops"][scope], layer["operator_bytes"][scope], peak,
                                   bandwidth, scope)
                  for scope in (DIRECT, INCLUSIVE)}
        yield {"path": layer["path"], "call_index": layer["call_index"], "dtype": dtype, "peak_flops": peak,
               "direct": points[DIRECT], "inclusive": points[INCLUSIVE]}


FLOATING = frozenset({"float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2",
                      "float8_e4m3fnuz", "float8_e5m2fnuz", "complex64", "complex128"})


def _fastest(dtypes: Iterable[str], peaks: Mapping[str, float], tf32: bool) -> str | None:
    """The dtype with the highest peak on the device (a dtype without one only when none has one)."""
    ranked = sorted(dtypes, key=lambda dtype: (peaks.get(peak_key(dtype, tf32) or "", 0.0), dtype))
    return ranked[-1] if ranked else None


def _subtree_dtypes(layers: list[Mapping[str, Any]]) -> list[set[str]]:
    """Per record, the floating dtypes of the tensors entering and leaving it and every call under it (records
    are in call-start order, parents first, so one backward pass gathers each subtree)."""
    position = {(layer["path"], layer["call_index"]): index for index, layer in enumerate(layers)}
    found = [set(_tensor_dtypes((layer["input"], layer["output"]))) & FLOATING for layer in layers]
    for index in range(len(layers) - 1, -1, -1):
        parent = layers[index]["parent"]
        if parent is not None and (parent["path"], parent["call_index"]) in position:
            found[position[parent["path"], parent["call_index"]]] |= found[index]
    return found


def _tensor_dtypes(value: Any) -> Iterator[str]:
    """The dtypes of every tensor in value metadata (any nesting)."""
    if isinstance(value, dict):
        if value.get("kind") in ("tensor", "nested_tensor") and isinstance(value.get("dtype"), str):
            yield value["dtype"]
        for item in value.values():
            yield from _tensor_dtypes(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensor_dtypes(item)


# -- across sizes ---------------------------------------------------------------------------------------------------


class RooflineCurvePoint(RooflinePoint):
    """The model's bound at one analyzed size; ``exact``: both the FLOPs and the bytes curves have an exact piece
    through this size, so the bound there is ``max(flops(size) / peak, bytes(size) / bandwidth)`` of two exact
    polynomials."""

    size: int
    exact: bool


class RooflineCurve(TypedDict):
    """`roofline_curve`'s result: the bound at every size of a `torchscan.cost_curve`, and the curves it is made of
    (the cost curve's ``operator_flops`` and ``operator_bytes`` curves, unchanged)."""

    method: Literal["roofline_bound"]
    hardware: Hardware
    dtype: str
    tf32: bool
    peak_flops: float | None
    points: list[RooflineCurvePoint]
    curves: dict[str, Any]


def roofline_curve(curve: Mapping[str, Any], hardware: Any, *, dtype: str, tf32: bool = False) -> RooflineCurve:
    """The model's bound on ``hardware`` at every size of ``curve`` (a `torchscan.cost_curve` result, such as decode
    steps against context length or prefills against prompt length), its FLOPs computed in ``dtype``.

    Only analyzed sizes have a number: the bound between them is the maximum of the exact FLOPs and bytes
    polynomials (``curves``) scaled by the peak and the bandwidth, where both curves have a piece there.
    """
    device = resolve_hardware(hardware)
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a dtype name such as 'bfloat16', got {type(dtype).__name__}")
    curves = curve.get("curves", {}) if isinstance(curve, Mapping) else {}
    if "operator_bytes" not in curves or "operator_flops" not in curves:
        raise ValueError("curve must be a cost_curve result of full analyses with operator bytes (its curves have "
                         "no 'operator_bytes')")
    peak = device["peak_flops"].get(peak_key(dtype, tf32) or "")
    points: list[RooflineCurvePoint] = []
    for point in curve["points"]:
        totals = point["totals"]
        bound = _bound_at(totals["operator_flops"], totals["operator_bytes"], peak, device["memory_bandwidth"], MODEL)
        size = point["size"]
        exact = all(_covers(curves[name], size) for name in ("operator_flops", "operator_bytes"))
        points.append({"size": size, "exact": exact, **bound})
    return {"method": METHOD, "hardware": device, "dtype": dtype, "tf32": tf32, "peak_flops": peak,
            "points": points, "curves": {name: curves[name] for name in ("operator_flops", "operator_bytes")}}


def _covers(fitted: Mapping[str, Any], size: int) -> bool:
    """Whether an exact piece of a fitted curve holds at ``size``."""
    return any(on_lattice(piece, size) for piece in fitted.get("pieces", ()))
