"""Efficiency: a report's measured time (``time=True``) against its roofline bound and the device's peaks.

`torchscan.roofline` joins the report's ``time`` section, when it has one, to its bounds:

* per layer call (forward): ``measured_seconds`` (the call's median kernel time, self for ``direct`` and inclusive
  for ``inclusive``) and ``efficiency`` = bound / measured (1.0: the call runs at the roof; a call whose data stays
  in a cache can exceed 1, see docs/time.md);
* per operator row (forward, operators computed in one dtype): the same, from the operator's kernel time;
* for the model (`Efficiency`): the measured time of the whole forward or training step (the plain run's
  wall-clock median and its interquartile range), achieved FLOP/s and the model FLOPs utilization
  (``flops_utilization``: achieved over the device's peak at the model's fastest dtype, MFU for a training step),
  and for a forward the achieved bandwidth (bytes over time: what a memory-bound decode step is judged by) and the
  fraction of the roofline bound reached.

Efficiency compares a device with itself: the join happens only when the hardware is of the measured device's kind
(a CPU measurement against a CPU entry such as ``torchscan.measure_hardware("cpu")``); otherwise the roofline says
why it was skipped (``efficiency_skipped``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from ..results import MetricResult


class Efficiency(TypedDict):
    """The model's measured time against the device (see the module)."""

    describes: Literal["forward", "training_step"]
    measured_device: str
    hardware: str
    measured_seconds: float
    spread_seconds: float
    flops: MetricResult
    achieved_flops_per_second: float | None
    peak_flops: float | None
    flops_utilization: float | None
    achieved_bandwidth: float | None
    bandwidth_utilization: float | None
    bound_fraction: float | None


def skipped_reason(time: Mapping[str, Any], hardware: Mapping[str, Any]) -> str | None:
    """Why measured time cannot be set against ``hardware`` (``None``: it can)."""
    measured_kind = "cpu" if time["device"] == "cpu" else "gpu"
    if hardware["kind"] != measured_kind:
        return (f"measured on {time['device']} ({time['device_name']}), bounded on {hardware['name']} "
                f"({hardware['kind']}): efficiency compares a device with itself; bound on the measured device "
                "(torchscan.measure_hardware) to join them")
    return None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, ``None`` when either is unknown or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def number(result: MetricResult, known: bool = False) -> float | None:
    """A metric result's value (or ``known_value``) as a number; ``None`` when it has none."""
    value = result["known_value"] if known else result["value"]
    return value if isinstance(value, (int, float)) else None


def join_point(point: dict[str, Any], seconds: float) -> None:
    """Add a measured time to one roofline point: ``measured_seconds`` and ``efficiency`` (a complete bound over the
    time; ``None`` when the bound is only a lower bound or the time is zero)."""
    bound = point["bound"]
    point["measured_seconds"] = seconds
    point["efficiency"] = ratio(number(bound), seconds) if bound["status"] == "complete" else None


def join_layers(layers: list[dict[str, Any]], time: Mapping[str, Any]) -> None:
    """Each layer call's self and inclusive kernel time, joined by ``(path, call_index)``."""
    times = {(row["path"], row["call_index"]): row for row in time["layers"]}
    for layer in layers:
        row = times.get((layer["path"], layer["call_index"]))
        if row is not None:
            join_point(layer["direct"], row["self"]["median"])
            join_point(layer["inclusive"], row["inclusive"]["median"])


def join_operators(operators: list[dict[str, Any]], time: Mapping[str, Any]) -> None:
    """The forward kernel time of each operator computed in one dtype only (an operator in several dtypes has one
    time and several bounds: left unjoined)."""
    rows_of = Counter(row["operator"] for row in operators)
    times = {row["operator"]: row["time"]["median"] for row in time["operators"] if row["phase"] == "forward"}
    for row in operators:
        if rows_of[row["operator"]] == 1 and row["operator"] in times:
            join_point(row, times[row["operator"]])


def model_efficiency(report: Mapping[str, Any], model: Mapping[str, Any], hardware: Mapping[str, Any],
                     peak_flops: float | None) -> Efficiency:
    """The whole forward's or training step's efficiency (the plain run's median time)."""
    time = report["time"]
    seconds = time["measured"]["median"]
    step = time["describes"] == "training_step"
    flops: MetricResult = report["training"]["totals"]["step"] if step else model["flops"]
    achieved = ratio(number(flops), seconds)
    achieved_bandwidth = None if step else ratio(number(model["bytes"]), seconds)
    bound = model["bound"]
    return {"describes": time["describes"], "measured_device": time["device_name"], "hardware": hardware["name"],
            "measured_seconds": seconds, "spread_seconds": time["measured"]["iqr"], "flops": flops,
            "achieved_flops_per_second": achieved, "peak_flops": peak_flops,
            "flops_utilization": ratio(achieved, peak_flops),
            "achieved_bandwidth": achieved_bandwidth,
            "bandwidth_utilization": ratio(achieved_bandwidth, hardware["memory_bandwidth"]),
            "bound_fraction": None if step or bound["status"] != "complete" else ratio(number(bound), seconds)}
