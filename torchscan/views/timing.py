"""The time of a run as every renderer shows it: the roofline bound on a named device and the measured latency.

Two different things, never merged (docs/time.md): a **bound** (`torchscan.roofline` of the deterministic report on
the device a registry entry names: the time below which the forward cannot run there, compute- or memory-bound) and
a **measured** time (the report's ``time`` section, ``crawl_module(..., time=True)``: the median of the plain run on
the build machine, with its interquartile range, the machine named). `time_view` computes both once, with the points
of the model page's roofline chart and the table of the calls that take the most time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..findings import layer_label
from .cells import Cell
from .formatting import format_count, format_seconds

#: How many calls the model page's table lists.
TOP_CALLS = 12
#: The catalog's time cell of a run that names no hardware and measured nothing.
NO_TIME = Cell("—", "not_requested", "no bound or measurement requested (hardware = ... or time = true in "
               "models.toml)")


@dataclass(frozen=True)
class TimedCall:
    """One layer call of the roofline chart and the top-calls table: its FLOPs, intensity (FLOP/byte), bound on the
    device and, when measured, its median kernel time (inclusive of the calls under it)."""

    label: str
    type: str
    flops: float
    intensity: float
    bound: float
    bound_by: str
    measured: float | None = None

    @property
    def attainable(self) -> float:
        """The FLOP/s the bound allows: FLOPs over the bound (on the roof, by construction)."""
        return self.flops / self.bound

    @property
    def flops_text(self) -> str:
        return format_count(self.flops)

    @property
    def intensity_text(self) -> str:
        return format_count(self.intensity)

    @property
    def bound_text(self) -> str:
        return format_seconds(self.bound)

    @property
    def measured_text(self) -> str:
        return "—" if self.measured is None else format_seconds(self.measured)

    @property
    def achieved(self) -> float | None:
        """FLOPs over the measured time (on the measured machine only: see `TimeView.achieved_on_hardware`)."""
        return None if not self.measured else self.flops / self.measured


@dataclass
class TimeView:
    """A run's time: ``bound`` and ``latency`` cells (either may be `NO_TIME`), and the roofline's data."""

    bound: Cell = NO_TIME
    latency: Cell = NO_TIME
    hardware: str | None = None
    #: What bounds the forward (``memory-bound``); the bound in prose: ``162ns, memory-bound (5.67 FLOP/byte)``;
    #: the measurement likewise, machine named; its spread alone (``IQR 410µs``), for the catalog's second line.
    bound_by: str = ""
    #: The roof alone (``memory``, ``compute``, ``undecided``): the catalog's short second line.
    roof: str = ""
    bound_text: str = ""
    latency_text: str = ""
    spread_text: str = ""
    device_name: str | None = None
    #: The roofs: the peak FLOP/s of the dtype computing most FLOPs, its key, and the bandwidth (bytes/s).
    peak: float | None = None
    peak_key: str | None = None
    bandwidth: float | None = None
    #: Whether measured time was joined to the bounds (measured on a device of the hardware's kind).
    achieved_on_hardware: bool = False
    #: The leaf calls with complete FLOPs and bytes (the chart's points).
    calls: list[TimedCall] = field(default_factory=list)
    #: The calls that take the most measured time (when measured) or have the largest bound.
    top: list[TimedCall] = field(default_factory=list)
    top_by: str = "bound"
    #: Leaf calls not drawn: no FLOPs (a view, a gather), or FLOPs or bytes not complete (no bound to place).
    undrawn: int = 0

    @property
    def has_roofline(self) -> bool:
        return self.peak is not None and self.bandwidth is not None and bool(self.calls)


def time_view(report: Mapping[str, Any], hardware: str | Mapping[str, Any] | None) -> TimeView | None:
    """The time of ``report`` bounded on ``hardware`` (a `torchscan.HARDWARE` name, a `torchscan.measure_hardware`
    result, or None) and, when it has a ``time`` section, measured; None when it has neither. Measured per-call
    rates are set against the roofs only when the hardware is of the measured device's kind."""
    measured = report.get("time")
    if hardware is None and measured is None:
        return None
    view = TimeView()
    if measured is not None:
        view.latency, view.device_name = latency_cell(measured), measured["device_name"]
        view.latency_text = _latency_text(measured)
        view.spread_text = f"IQR {format_seconds(measured['measured']['iqr'])}"
    if hardware is not None and report.get("operator_bytes", {}).get("total", {}).get("status") not in (
            None, "not_requested"):
        from ..timing.roofline import roofline

        _bounded(view, report, roofline(report, hardware))
    return view


def latency_cell(time: Mapping[str, Any]) -> Cell:
    """``12.3ms``: the plain run's median, its interquartile range and the machine in the hover title (the catalog
    writes the spread under it: `TimeView.spread_text`)."""
    stats = time["measured"]
    threads = f", {time['threads']} threads" if "threads" in time else ""
    note = (f"measured forward on {time['device']} ({time['device_name']}{threads}): median of {time['repeats']} "
            f"runs after {time['warmup']} warm-up, IQR {format_seconds(stats['iqr'])} (q1 "
            f"{format_seconds(stats['q1'])}, q3 {format_seconds(stats['q3'])})")
    return Cell(format_seconds(stats["median"]), "complete", note, stats["median"])


def _latency_text(time: Mapping[str, Any]) -> str:
    stats = time["measured"]
    threads = f", {time['threads']} threads" if "threads" in time else ""
    return (f"{format_seconds(stats['median'])} median, IQR {format_seconds(stats['iqr'])}, on {time['device']} "
            f"({time['device_name']}{threads}), {time['repeats']} runs after {time['warmup']} warm-up")


def _bounded(view: TimeView, report: Mapping[str, Any], bound: Mapping[str, Any]) -> None:
    """The bound cell and the roofline's points from ``roofline(report, hardware)``."""
    device = bound["hardware"]
    model = bound["model"]
    view.hardware, view.bandwidth = device["name"], device["memory_bandwidth"]
    view.bound = bound_cell(model, device["name"])
    intensity = model["arithmetic_intensity"]
    view.roof = model["bound_by"] or "undecided"
    view.bound_by = f"{view.roof}-bound"
    view.bound_text = (f"{view.bound.text}, {view.bound_by}"
                       + (f" ({format_count(intensity)} FLOP/byte)" if intensity is not None else ""))
    view.peak_key, view.peak = _dominant(bound["operators"])
    view.achieved_on_hardware = "efficiency" in bound
    measured = {(row["path"], row["call_index"]): row["inclusive"]["median"]
                for row in report.get("time", {}).get("layers", ())}
    calls = [_call(layer, point, measured.get((layer["path"], layer["call_index"])))
             for layer, point in zip(report["layers"], bound["layers"], strict=True) if layer["leaf"]]
    view.calls = [call for call in calls if call is not None]
    view.undrawn = len(calls) - len(view.calls)
    if measured:
        view.top_by = "measured"
        view.top = sorted(view.calls, key=lambda call: -(call.measured or 0.0))[:TOP_CALLS]
    else:
        view.top = sorted(view.calls, key=lambda call: -call.bound)[:TOP_CALLS]


def bound_cell(model: Mapping[str, Any], device: str) -> Cell:
    """``6.61ms``: the model's forward bound on ``device`` (``≥`` for a lower bound), what bounds it in the hover
    title (and in `TimeView.bound_by`)."""
    result = model["bound"]
    value = result["value"] if result["status"] == "complete" else result["known_value"]
    if value is None:
        return Cell("n/a", "unavailable", f"no bound on {device}: no FLOPs or bytes were counted")
    by = model["bound_by"] or "undecided"
    prefix = "" if result["status"] == "complete" else "≥"
    intensity = model["arithmetic_intensity"]
    note = (f"roofline bound of the forward on {device} ({by}-bound"
            + (f", {format_count(intensity)} FLOP/byte" if intensity is not None else "")
            + "): the time below which it cannot run there, from the report's FLOPs and unfused bytes; not a latency")
    return Cell(f"{prefix}{format_seconds(value)}", result["status"], note, value)


def _dominant(operators: list[Mapping[str, Any]]) -> tuple[str | None, float | None]:
    """The dtype computing most FLOPs and its peak (the compute roof of the chart)."""
    flops: dict[tuple[str, float], float] = {}
    for row in operators:
        known = row["flops"]["known_value"]
        if row["peak_flops"] is not None and row["dtype"] is not None and known:
            key = (row["dtype"], row["peak_flops"])
            flops[key] = flops.get(key, 0.0) + known
    return max(flops, key=flops.__getitem__) if flops else (None, None)


def _call(layer: Mapping[str, Any], point: Mapping[str, Any], measured: float | None) -> TimedCall | None:
    """A call with complete, positive FLOPs and bytes and a complete bound (the others cannot be placed), with its
    measured median kernel time (inclusive) when the report has one."""
    inclusive = point["inclusive"]
    bound = inclusive["bound"]
    if inclusive["arithmetic_intensity"] is None or bound["status"] != "complete" or not bound["value"]:
        return None
    flops = inclusive["flops"]["value"]
    if not flops:
        return None
    return TimedCall(layer_label(layer["path"], layer["call_index"]), layer["type"].rpartition(".")[2], flops,
                     inclusive["arithmetic_intensity"], bound["value"], inclusive["bound_by"] or "—", measured)


def measured_comparison(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any] | None:
    """The measured forward of two reports compared knowing its noise (None when a side was not measured): the
    medians, their difference, the combined spread (the two interquartile ranges added) and ``within_noise``, a
    difference no larger than that spread, which is no change. Times from different machines (device, its name or
    the thread count differ) are not compared: their difference says nothing about the model (``delta`` unknown)."""
    first, second = before.get("time"), after.get("time")
    if first is None or second is None:
        return None
    sides = (first, second)
    machine = [(side["device"], side["device_name"], side.get("threads")) for side in sides]
    spread = first["measured"]["iqr"] + second["measured"]["iqr"]
    delta = second["measured"]["median"] - first["measured"]["median"]
    comparable = machine[0] == machine[1]
    return {"before": first["measured"]["median"], "after": second["measured"]["median"],
            "delta": {"status": "complete" if comparable else "unavailable", "value": delta if comparable else None},
            "spread": spread, "within_noise": comparable and abs(delta) <= spread,
            "machines": [f"{device} ({name})" for device, name, _ in machine], "sides": sides}
