"""A sharded training step (a report's ``training.parallel``) as plain rows: the plan in words, what one device holds
at its peak, the collectives, and, when the report has one, the sizing across world sizes (``training.parallel.fit``).

The model page, the standalone report, the catalog's per-device column and the chart of per-device memory against
world size all read this view, so they cannot disagree on a number.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .cells import Cell, metric_cell
from .formatting import format_bytes
from .memory import MemoryPart, memory_parts

#: How a plan's strategy reads.
STRATEGY_WORDS = {
    "fsdp": "FSDP2 full sharding, ZeRO-3-like: parameters gathered for the forward and again for the backward",
    "fsdp_no_reshard": "FSDP2 without resharding after the forward, ZeRO-2-like: parameters gathered once a step",
    "hsdp": "FSDP2 hybrid sharding: sharded within groups, replicated across them",
    "ddp": "replication, as DDP: every device holds the whole model",
}
#: The categories of a device's live bytes (`torchscan.parallel.memory.CATEGORIES`), in report order, with labels.
DEVICE_PARTS = (
    ("sharded_parameters", "Sharded parameters"),
    ("unsharded_parameters", "Unsharded parameters in flight"),
    ("all_gather_buffers", "All-gather buffers"),
    ("gradient_shards", "Gradient shards"),
    ("unsharded_gradients", "Unsharded gradients"),
    ("reduce_scatter_buffers", "Reduce-scatter buffers"),
    ("optimizer_state", "Optimizer state"),
    ("saved_activations", "Saved activations"),
    ("temporaries", "Temporaries"),
    ("inputs", "Inputs"),
    ("buffers", "Buffers and other persistent tensors"),
)
#: Every category is left out of a breakdown where it is an exact zero (replication has no all-gather buffers).
OMITTED_WHEN_ZERO = frozenset(key for key, _ in DEVICE_PARTS)
COLLECTIVE_LABELS = (("all_gather", "All-gather"), ("reduce_scatter", "Reduce-scatter"), ("all_reduce", "All-reduce"))
#: The catalog's cells of a run without a sharded plan.
NO_PLAN = Cell("—", "not_requested", "no sharded plan (training.parallel in models.toml)")


@dataclass(frozen=True)
class CollectiveRow:
    """One kind of collective per step: how many, the bytes of their buffers and what one rank sends in a ring."""

    label: str
    count: int
    bytes: str
    ring_sent: str


@dataclass(frozen=True)
class SizingPoint:
    """The plan at one world size: its per-device peak, what is live there and whether it fits."""

    world_size: int
    peak: Cell
    parts: list[MemoryPart]
    phase: str
    #: ``fits``, ``too large`` or ``unknown`` (a peak that is only a lower bound proves nothing).
    fits: str
    declared: bool


@dataclass(frozen=True)
class SizingView:
    """The sizing of a plan across world sizes against one device's memory (``training.parallel.fit``)."""

    device_memory: int
    usable: int
    headroom: float
    points: list[SizingPoint]
    smallest: int | None
    reason: str

    @property
    def device_text(self) -> str:
        """``80GB (72GB usable, 10% headroom)``."""
        return (f"{format_bytes(self.device_memory)} ({format_bytes(self.usable)} usable, "
                f"{100 * self.headroom:g}% headroom)")

    @property
    def fits_on(self) -> Cell:
        """The catalog's "fits on" cell: ``2 × 80GB``, the smallest world size whose devices hold the step, or
        ``none of 1–8`` with the reason."""
        sizes = [point.world_size for point in self.points]
        analyzed = f"world sizes analyzed: {', '.join(map(str, sizes))}; {self.device_text} per device"
        if self.smallest is not None:
            return Cell(f"{self.smallest} × {format_bytes(self.device_memory)}", "complete",
                        f"the smallest world size whose devices hold the step's per-device peak; {analyzed}",
                        float(self.smallest))
        span = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}–{sizes[-1]}"
        return Cell(f"none of {span}", "complete", f"{self.reason}; {analyzed}", float(sizes[-1]) + 0.5)

    @property
    def verdict(self) -> str:
        """The sizing in one sentence."""
        if self.smallest is not None:
            return (f"On devices of {self.device_text}, the smallest analyzed world size that holds the step is "
                    f"{self.smallest}.")
        return f"On devices of {self.device_text}, none of the analyzed world sizes holds the step: {self.reason}."


@dataclass(frozen=True)
class ParallelView:
    """One report's sharded step: the plan at its declared world size, and its sizing when the report has one."""

    plan: str
    strategy: str
    world_size: int
    units: str
    optimizer: str
    peak: Cell
    phase: str
    operator: str
    parts: list[MemoryPart]
    first_step: Cell
    collectives: list[CollectiveRow]
    sizing: SizingView | None

    @property
    def per_device_peak(self) -> Cell:
        """The catalog's per-device cell: the steady-state peak at the declared world size, the plan in its note."""
        return replace(self.peak, note=f"{self.peak.note}; one device of {self.plan}")


def parallel_view(report: dict[str, Any]) -> ParallelView | None:
    """The report's sharded step, or None for a report without ``training.parallel``."""
    section = report.get("training", {}).get("parallel")
    if section is None:
        return None
    plan, device = section["plan"], section["per_device"]
    observed = section["collectives"]["observed"]
    return ParallelView(
        plan=plan_text(plan), strategy=STRATEGY_WORDS.get(plan["strategy"], plan["strategy"]),
        world_size=plan["world_size"], units=units_text(section["units"]),
        optimizer=f"{section['optimizer'].rpartition('.')[2]} ({section['optimizer_implementation']})",
        peak=metric_cell(device["peak"]), phase=device["phase_at_peak"] or "—",
        operator=device["peak_operator"] or "—",
        parts=memory_parts(device["at_peak"], device["peak"], DEVICE_PARTS, OMITTED_WHEN_ZERO),
        first_step=metric_cell(device["first_step"]["peak"]),
        collectives=[CollectiveRow(label, observed[key]["count"], format_bytes(observed[key]["bytes"]),
                                   format_bytes(observed[key]["ring_bytes_sent_per_rank"]))
                     for key, label in COLLECTIVE_LABELS if observed[key]["count"]],
        sizing=sizing_view(section.get("fit"), plan["world_size"]),
    )


def plan_text(plan: dict[str, Any]) -> str:
    """``fsdp over 8 devices, bfloat16 parameters, activation checkpointing``: a plan in a few words."""
    words = [f"{plan['strategy']} over {plan['world_size']} device{'s' if plan['world_size'] != 1 else ''}"]
    if plan["strategy"] == "hsdp":
        words.append(f"shard groups of {plan['shard_group_size']}")
    precision = plan["mixed_precision"]
    if precision["param_dtype"]:
        words.append(f"{precision['param_dtype']} parameters")
    if precision["reduce_dtype"]:
        words.append(f"{precision['reduce_dtype']} reductions")
    if plan["activation_checkpointing"]:
        words.append("activation checkpointing")
    return ", ".join(words)


def units_text(units: dict[str, Any]) -> str:
    """``32 units (DecoderLayer)``: the FSDP units, by class name."""
    names = ", ".join(name.rpartition(".")[2] for name in units["types"])
    return f"{units['count']} unit{'s' if units['count'] != 1 else ''}" + (f" ({names})" if names else "")


def sizing_view(fit: dict[str, Any] | None, declared: int) -> SizingView | None:
    """``training.parallel.fit`` as rows (None without one)."""
    if fit is None:
        return None
    points = [SizingPoint(point["world_size"], metric_cell(point["per_device_peak"]),
                          memory_parts(point["at_peak"], point["per_device_peak"], DEVICE_PARTS, OMITTED_WHEN_ZERO),
                          point["phase_at_peak"] or "—", _fits(point["per_device_peak"], fit["usable"]),
                          point["world_size"] == declared)
              for point in fit["points"]]
    return SizingView(fit["device_memory"], fit["usable"], fit["headroom"], points, fit["smallest_world_size"],
                      fit["reason"] or "")


def _fits(peak: dict[str, Any], usable: int) -> str:
    if peak["status"] != "complete":
        return "unknown"
    return "fits" if peak["value"] <= usable else "too large"
