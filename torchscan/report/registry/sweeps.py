"""Sweeps in the registry: ``[models.sweep]`` declares one swept quantity, its values and its declared point.

An entry's ``kwargs``, ``inputs_kwargs`` and ``input_shape`` refer to the quantity by a string that is exactly
``"{name}"`` (TOML has no expressions): ``input_shape = [3, "{size}", "{size}"]``, ``inputs_kwargs = { seq_len =
"{seq_len}" }``. Each value of the sweep becomes one run with the reference replaced by the integer. The run of the
declared point (``default``) keeps the entry's name as its stem, so its files, catalog row and budgets read like an
unswept entry's; the other points are ``<entry>.<quantity>-<value>``. Only the declared point runs the entry's
training step: a training step is a question about one size, and it costs several forwards. Mistakes are reported
through a callback (``problem(where, message)``), listed with every other problem of the registry.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The keys of ``[models.sweep]``: ``values`` or the range ``from``/``to``/``step``.
SWEEP_KEYS = ("name", "values", "from", "to", "step", "default")
#: The entry keys whose values may refer to the swept quantity.
SWEPT_KEYS = ("kwargs", "inputs_kwargs", "input_shape")
QUANTITY_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
REFERENCE = re.compile(r"^\{([^{}]*)\}$")
#: The most points one sweep may have: each is a full analysis.
MAX_POINTS = 64
SWEEP_HELP = ("[models.sweep] with name = \"seq_len\", values = [128, 256, 512] (or from = 128, to = 512, step = "
              "128) and an optional default (the declared point, the first value when omitted)")

Problem = Callable[[str, str], None]


@dataclass(frozen=True)
class Sweep:
    """One swept quantity of an entry: its name, its values in increasing order and the declared point."""

    name: str
    values: tuple[int, ...]
    default: int

    def variant(self, size: int) -> str:
        """The run label of one point (``seq_len-512``), also the suffix of its stem."""
        return f"{self.name}-{size}"

    @property
    def range_text(self) -> str:
        """``128–1,024 (4 points)``: the sampled range, as the catalog row shows it."""
        low, high = self.values[0], self.values[-1]
        return f"{low:,}–{high:,} ({len(self.values)} points)"


def parse_sweep(where: str, value: Any, problem: Problem) -> Sweep | None:
    """The entry's ``sweep`` table as a `Sweep`, or None (with the problems reported) when it is malformed."""
    if not isinstance(value, dict):
        problem(where, f"expected a table: {SWEEP_HELP}")
        return None
    for key in value:
        if key not in SWEEP_KEYS:
            problem(f"{where}.{key}", f"unknown key; expected one of {', '.join(SWEEP_KEYS)}")
    name = value.get("name")
    if not isinstance(name, str) or not QUANTITY_PATTERN.match(name):
        problem(f"{where}.name", "expected the quantity's name, a Python identifier such as \"seq_len\" (at most 32 "
                f"characters), got {_shown(name)}")
        return None
    values = _sweep_values(where, value, problem)
    if not values:
        return None
    default = value.get("default", values[0])
    if not _is_size(default) or default not in values:
        problem(f"{where}.default", f"expected one of the sweep's values ({_listed(values)}), got {_shown(default)}")
        return None
    return Sweep(name, values, default)


def _sweep_values(where: str, table: dict[str, Any], problem: Problem) -> tuple[int, ...]:
    """The sweep's values from ``values`` or from ``from``/``to``/``step``: positive, distinct, 2 to MAX_POINTS."""
    ranged = [key for key in ("from", "to", "step") if key in table]
    if ("values" in table) == bool(ranged):
        problem(where, "expected either values = [...] or from/to/step, "
                + ("not both" if ranged else "got neither"))
        return ()
    values = _range_values(where, table, problem) if ranged else _listed_values(where, table["values"], problem)
    if values and len(set(values)) != len(values):
        problem(f"{where}.values", f"each value may appear once, got {_listed(values)}")
        return ()
    if values and not 2 <= len(values) <= MAX_POINTS:
        problem(f"{where}.values", f"expected 2 to {MAX_POINTS} points (each is one analysis), got {len(values)}")
        return ()
    return tuple(sorted(values))


def _listed_values(where: str, raw: Any, problem: Problem) -> tuple[int, ...]:
    """``values = [...]``: positive integers."""
    if not isinstance(raw, list) or not all(_is_size(item) for item in raw):
        problem(f"{where}.values", f"expected a list of positive integers, got {_shown(raw)}")
        return ()
    return tuple(raw)


def _range_values(where: str, table: dict[str, Any], problem: Problem) -> tuple[int, ...]:
    """``from``, ``from + step``, … up to ``to`` inclusive; ``to`` must be a point (so none is silently dropped)."""
    bad = [key for key in ("from", "to", "step") if not _is_size(table.get(key))]
    for key in bad:
        problem(f"{where}.{key}", f"expected a positive integer, got {_shown(table.get(key))}")
    if bad:
        return ()
    start, stop, step = int(table["from"]), int(table["to"]), int(table["step"])
    if stop < start or (stop - start) % step:
        problem(f"{where}.to", f"expected a value from + k·step at or after from ({start}, step {step}), got {stop}")
        return ()
    if (stop - start) // step + 1 > MAX_POINTS:
        problem(where, f"from/to/step give {(stop - start) // step + 1} points; at most {MAX_POINTS} are allowed")
        return ()
    return tuple(range(start, stop + 1, step))


def check_references(where: str, spec: dict[str, Any], sweep: Sweep | None, problem: Problem) -> None:
    """Every ``"{name}"`` in the entry's swept keys names the swept quantity, and a sweep is referred to at least
    once (otherwise every point would be the same analysis)."""
    found = [(f"{where}: {key}{path}", name) for key in SWEPT_KEYS if key in spec
             for path, name in _references(spec[key])]
    for at, name in found:
        if sweep is None:
            problem(at, f"refers to {{{name}}} but the entry declares no [models.sweep]")
        elif name != sweep.name:
            problem(at, f"unknown quantity {{{name}}}; the entry sweeps {{{sweep.name}}}")
    if sweep is not None and not any(name == sweep.name for _, name in found):
        problem(f"{where}: sweep", f"the sweep's quantity is used nowhere: write \"{{{sweep.name}}}\" where it goes "
                f"in {', '.join(SWEPT_KEYS)} (for example inputs_kwargs = {{ {sweep.name} = \"{{{sweep.name}}}\" }})")


def substitute(value: Any, name: str, size: int) -> Any:
    """``value`` with every string ``"{name}"`` (at any depth) replaced by ``size``; other values unchanged."""
    if isinstance(value, str):
        match = REFERENCE.match(value)
        return size if match and match.group(1) == name else value
    if isinstance(value, dict):
        return {key: substitute(item, name, size) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, name, size) for item in value]
    return value


def point_spec(spec: dict[str, Any], sweep: Sweep, size: int) -> dict[str, Any]:
    """The entry's settings at one point: references replaced, and the training step at the declared point only."""
    settings = {key: substitute(item, sweep.name, size) if key in SWEPT_KEYS else item for key, item in spec.items()}
    if size != sweep.default:
        settings.pop("training", None)
    return settings


def _references(value: Any, path: str = "") -> list[tuple[str, str]]:
    """``(path, name)`` of every ``"{name}"`` string in ``value``."""
    if isinstance(value, str):
        match = REFERENCE.match(value)
        return [(path, match.group(1))] if match else []
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _references(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _references(item, f"{path}[{index}]")]
    return []


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _listed(values: tuple[int, ...] | list[Any]) -> str:
    return ", ".join(str(value) for value in values)


def _shown(value: Any) -> str:
    if value is None:
        return "nothing"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
