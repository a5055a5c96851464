"""Change budgets for before/after reviews: ``torchscan-report diff --fail-if "macs>+5%"``.

A budget is ``METRIC OP LIMIT``: a total of the comparison (``parameters``, ``macs``, ``module_flops``, ``dmas``,
``operator_flops``, and the memory totals ``forward_peak_bytes``, ``activations``, ``training_peak_bytes`` and
``per_device_peak_bytes``, the sharded training step's peak on one device of its plan), one of
``>``, ``>=``, ``<``, ``<=``, and a signed limit on the change ``after - before``,
either absolute in the metric's unit or relative to ``before`` (``+5%``). An absolute limit reads numbers as every
view writes them (`torchscan.views.formatting`): ``1.5M``, ``8.97k`` (or ``8.97K``), ``1.81G``, ``2T``, and for parameters
``8.03B`` (billions, the model-card style); a byte total also takes the byte suffixes the views write, ``B``,
``kB`` (or ``KB``), ``MB``, ``GB``, ``TB``, in powers of 1000 (``training_peak_bytes>80GB``); a minus sign may be ``-`` or the ``−`` the views write. The budget is *exceeded* when the change satisfies the condition, so ``macs>+5%`` fails a
review whose MACs grew by more than 5%. In a catalog diff a budget applies to every entry, or, prefixed with an
entry's name (``resnet18:macs>+5%``), to that entry (and its variants) alone. A swept entry (``[models.sweep]``)
is checked at its declared point only, unless the budget names another point by its size: ``gpt2_small@512:macs>+5%``
checks the point at 512 alone. A change that cannot be computed exactly (a side incomplete or not
requested) leaves the budget *unknown*, which a gate treats as failed: a lower bound cannot prove a budget met.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...compare import COMPARED_TOTALS, MEMORY_TOTALS, PARALLEL_MEMORY_TOTALS, TRAINING_MEMORY_TOTALS
from ...views.formatting import PARAMETER_SCALES, SCALES

#: The measured forward's median (a report analyzed with ``time=True``): a change within the two sides' combined
#: interquartile ranges is noise, and meets every budget (`torchscan.views.timing.measured_comparison`).
MEASURED = "measured_seconds"
METRICS = ("parameters", *COMPARED_TOTALS, *MEMORY_TOTALS, *TRAINING_MEMORY_TOTALS, *PARALLEL_MEMORY_TOTALS, MEASURED)
#: The suffixes of a measured time's limit, in seconds.
TIME_FACTORS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
#: The totals counted in bytes: only they take byte suffixes (``MB``), and a bare ``B`` means bytes there.
BYTE_METRICS = ("forward_peak_bytes", "training_peak_bytes", "per_device_peak_bytes")
OPERATORS: dict[str, Callable[[float, float], bool]] = {">": operator.gt, ">=": operator.ge, "<": operator.lt,
                                                       "<=": operator.le}
#: The suffixes of a limit, as the views write counts (`torchscan.views.formatting`), plus ``K`` for ``k``.
SCALE_FACTORS = {"K": 1e3, **{suffix: scale for scale, suffix in (*SCALES, *PARAMETER_SCALES)}}
SUFFIXES = ("k (or K), M, G, T, B (billions for parameters, bytes for a byte total), kB (or KB), MB, GB, TB (byte "
            "totals only, powers of 1000) or % (relative to before)")
GRAMMAR = re.compile(r"(?:(?P<entry>[A-Za-z0-9_.-]+)(?:@(?P<point>\d+))?\s*:\s*)?(?P<metric>[A-Za-z_]+)\s*"
                     r"(?P<op>>=|<=|>|<)\s*(?P<number>[+\-−]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*"
                     r"(?P<unit>%|ms|us|µs|[kKMGT]B|[kKMGTB]|s)?")
USAGE = ("expected METRIC OP LIMIT, such as 'macs>+5%' (relative to before) or 'parameters>8B' (absolute); OP is "
         f"one of {', '.join(OPERATORS)}; METRIC is one of {', '.join(METRICS)}; LIMIT is a signed number with an "
         f"optional suffix: {SUFFIXES}; in a catalog diff, ENTRY:METRIC OP LIMIT checks one entry only, and "
         "ENTRY@SIZE:METRIC OP LIMIT one point of a swept entry")


@dataclass(frozen=True)
class Budget:
    """One parsed budget: exceeded when ``change OP limit`` holds (``change`` in percent when ``relative``)."""

    text: str
    metric: str
    op: str
    limit: float
    relative: bool
    #: ``resnet18:macs>+5%`` applies to one catalog entry (a run stem, or an entry and all its variants); empty:
    #: to every entry a catalog diff compares.
    entry: str = ""
    #: ``gpt2_small@512:macs>+5%`` checks the point of size 512 of a swept entry; None: the declared point.
    point: int | None = None

    def applies_to(self, stem: str, size: int | None = None, declared: bool = True) -> bool:
        """Whether the budget checks a catalog run: ``size`` is a sweep point's size, ``declared`` whether the run
        is its entry's declared point (every run of an unswept entry is)."""
        if self.point is not None:
            return size == self.point and (stem == self.entry or stem.startswith(self.entry + "."))
        return declared and (not self.entry or stem == self.entry or stem.startswith(self.entry + "."))


@dataclass(frozen=True)
class BudgetCheck:
    """A budget against one comparison. ``status`` is ``met``, ``exceeded`` or ``unknown`` (not computable)."""

    budget: Budget
    status: str
    before: Any
    after: Any
    delta: float | None
    percent: float | None

    @property
    def failed(self) -> bool:
        return self.status != "met"


def parse_budget(text: str) -> Budget:
    """``"macs>+5%"`` as a `Budget`; ``ValueError`` with the grammar and the valid metrics when malformed."""
    match = GRAMMAR.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"budget {text!r}: {USAGE}")
    metric = match["metric"]
    if metric not in METRICS:
        hint = (" ('flops' is ambiguous: module_flops is the module view, operator_flops the operator view)"
                if metric.lower() == "flops" else "")
        raise ValueError(f"budget {text!r}: unknown metric {metric!r}; expected one of {', '.join(METRICS)}{hint}")
    limit = float(match["number"].replace("−", "-")) * _factor(text, metric, match["unit"] or "")
    if not math.isfinite(limit):
        raise ValueError(f"budget {text!r}: the limit must be a finite number")
    return Budget("".join(text.split()), metric, match["op"], limit, relative=match["unit"] == "%",
                  entry=match["entry"] or "", point=int(match["point"]) if match["point"] else None)


def _factor(text: str, metric: str, unit: str) -> float:
    """What a limit's suffix multiplies it by; a suffix the metric does not write is an error naming the accepted
    ones (``B`` is billions for parameters and bytes for a byte total; ``MB`` is for byte totals only; ``s``,
    ``ms``, ``µs`` for a measured time only, which takes no other)."""
    if (metric == MEASURED) != (unit in TIME_FACTORS) and unit not in ("", "%"):
        raise ValueError(f"budget {text!r}: {unit!r} does not apply to {metric}; a measured time takes s, ms or µs "
                         f"(or %), every other metric: {SUFFIXES}")
    if metric == MEASURED:
        return TIME_FACTORS.get(unit, 1.0)
    if metric in BYTE_METRICS and unit.endswith("B"):
        return SCALE_FACTORS.get(unit[:-1], 1)
    if len(unit) == 2:
        raise ValueError(f"budget {text!r}: {unit!r} is a byte suffix; {metric} is not counted in bytes (byte totals: "
                         f"{', '.join(BYTE_METRICS)}); accepted suffixes: {SUFFIXES}")
    if unit == "B" and metric != "parameters":
        raise ValueError(f"budget {text!r}: {unit!r} (billions) is the parameter count's suffix; {metric} writes "
                         f"billions as 'G'; accepted suffixes: {SUFFIXES}")
    return SCALE_FACTORS.get(unit, 1)


def percent_change(before: float, delta: float) -> float:
    """``delta`` as a percentage of ``before``; from zero, any growth is infinite (and no change is 0%)."""
    if before == 0:
        return 0.0 if delta == 0 else math.copysign(math.inf, delta)
    return 100.0 * delta / before


def check_budgets(budgets: Sequence[Budget], comparison: dict[str, Any], measured: dict[str, Any] | None = None
                  ) -> list[BudgetCheck]:
    """Each budget checked against the totals of a `torchscan.compare_reports` result, in the order given (a
    memory total that neither report traced leaves its budget unknown), and a measured time's against ``measured``
    (`torchscan.views.timing.measured_comparison`; None: a side was not measured, the budget is unknown)."""
    totals = {**comparison["totals"], MEASURED: measured or NOT_TRACED}
    return [_check(budget, totals.get(budget.metric, NOT_TRACED)) for budget in budgets]


#: The comparison of a memory total that neither side traced: the budget cannot be checked (unknown).
NOT_TRACED: dict[str, Any] = {"before": None, "after": None, "delta": {"status": "not_requested", "value": None}}


def _check(budget: Budget, entry: dict[str, Any]) -> BudgetCheck:
    before, after, delta = _numbers(entry)
    if delta is None or not isinstance(delta, (int, float)):
        return BudgetCheck(budget, "unknown", before, after, None, None)
    percent = percent_change(before, delta)
    change = percent if budget.relative else delta
    exceeded = OPERATORS[budget.op](change, budget.limit) and not entry.get("within_noise", False)
    status = "exceeded" if exceeded else "met"  # a measured change within the spreads is noise: no regression
    return BudgetCheck(budget, status, before, after, delta, percent)


def _numbers(entry: dict[str, Any]) -> tuple[Any, Any, float | None]:
    """(before, after, delta) of one compared total; the delta is None unless both sides are complete."""
    if not isinstance(entry["delta"], dict) or "within_noise" in entry:  # parameters: counts; a time: seconds
        delta = entry["delta"]["value"] if isinstance(entry["delta"], dict) else entry["delta"]
        return entry["before"], entry["after"], delta
    before, after = (_known(entry[side]) for side in ("before", "after"))
    return before, after, entry["delta"]["value"] if entry["delta"]["status"] == "complete" else None


def _known(result: dict[str, Any] | None) -> Any:
    return None if result is None else result["value"] if result["status"] == "complete" else result["known_value"]
