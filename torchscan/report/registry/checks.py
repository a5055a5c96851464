"""The checks of a registry's values: each reads one kind of value (a name, an import path, shapes, a training step,
a size, a table), records what is wrong with it, and returns a value to go on with: every mistake is listed at once.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...timing.hardware import HARDWARE
from .placement import parse_memory

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
CALLABLE_PATTERN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
DTYPE_NAMES = frozenset({
    "float16", "half", "bfloat16", "float32", "float", "float64", "double", "complex64", "complex128",
    "int8", "int16", "int32", "int64", "long", "int", "uint8", "bool",
})
#: Entry keys that take one of a few values, with what the message says they mean: ``as_device``, the devices whose
#: kernel choices fake-tensor stand-ins keep (`torchscan.calls.stand_ins`), and ``meta_kernels``, the attention
#: kernels of an analysis on meta (`torchscan.calls.meta_kernels`).
CHOICES = {
    "as_device": (("cpu", "cuda"), "analyze on fake-tensor stand-ins of that device, keeping its kernel choices"),
    "meta_kernels": (("accelerator", "math"),
                     "on meta, the attention kernel an accelerator would run, the default, or meta's own math path"),
}
#: Entry keys naming a mapping (not a callable) by import path: crawl_module's two extension arguments, with the
#: name the error messages suggest.
EXTENSION_KEYS = {"custom_modules": "HANDLERS", "custom_mapping": "FORMULAS"}
#: ``training = { optimizer = ... }``: the keys of the table and the optimizers ``crawl_training_step`` knows by name
#: (``parallel``, the sharded plan, is read by `torchscan.report.registry.parallel`).
TRAINING_KEYS = ("optimizer", "parallel")
TRAINING_OPTIMIZERS = ("sgd", "adam", "adamw")
#: ``time = { ... }``: the keys of a measuring entry's table (`torchscan.timing.profiled.time_request` reads them).
TIME_KEYS = ("warmup", "repeats")
NAME_HELP = "a URL-safe name: letters, digits, '-' and '_', starting with a letter or digit, at most 64 characters"
SHAPE_HELP = "a shape without the batch dimension such as [3, 224, 224], or a list of shapes such as [[4], [6]]"


class Checker:
    """Collects problems instead of stopping at the first one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []

    def problem(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def choice(self, where: str, item: dict[str, Any], key: str) -> str | None:
        """The entry's value of a `CHOICES` key (None without one)."""
        choices, meaning = CHOICES[key]
        value = item.get(key)
        if value is not None and value not in choices:
            self.problem(f"{where}: {key}", f"expected one of {', '.join(map(repr, choices))} ({meaning}), got "
                         f"{describe(value)}")
            return None
        return value

    def hardware(self, where: str, item: dict[str, Any]) -> str | None:
        """The entry's ``hardware`` (None without one): a `torchscan.HARDWARE` name the catalog bounds the model's
        forward on (a view of the report at render time: never part of the job or its cache key)."""
        value = item.get("hardware")
        if value is not None and value not in HARDWARE:
            hint = did_you_mean(str(value), HARDWARE)
            self.problem(f"{where}: hardware", f"unknown device {describe(value)}{hint}; expected one of "
                         f"{', '.join(map(repr, HARDWARE))} (torchscan.HARDWARE: the devices with published peaks)")
            return None
        return value

    def time(self, where: str, item: dict[str, Any], device: Any) -> dict[str, int] | None:
        """The entry's ``time`` (None without one or with ``false``): ``true`` or ``{ warmup = 1, repeats = 5 }``
        asks the worker to measure the forward per layer call (``crawl_module(..., time=...)``) on the entry's
        device. Refused where nothing runs (``device = "meta"``, ``as_device`` stand-ins)."""
        value = item.get("time")
        if value is None or value is False:
            return None
        at = f"{where}: time"
        if value is not True and not isinstance(value, dict):
            self.problem(at, f"expected true, false or a table such as {{ warmup = 1, repeats = 5 }}, got "
                         f"{describe(value)}")
            return None
        request = {} if value is True else self._time_counts(at, value)
        if device == "meta" or item.get("as_device") is not None:
            what = "device = \"meta\"" if device == "meta" else "as_device (fake-tensor stand-ins)"
            self.problem(at, f"cannot measure an entry analyzed with {what}: no kernel runs, so there is no time; "
                         "name hardware = \"...\" instead for the roofline bound on a device")
            return None
        return request

    def _time_counts(self, at: str, value: dict[str, Any]) -> dict[str, int]:
        """``time``'s table: ``warmup`` (>= 0) and ``repeats`` (>= 1) runs, each checked."""
        self.unknown_keys(at, value, TIME_KEYS)
        request = {key: value[key] for key in TIME_KEYS if key in value}
        for key, count in request.items():
            low = 0 if key == "warmup" else 1
            if isinstance(count, bool) or not isinstance(count, int) or count < low:
                self.problem(f"{at}.{key}", f"expected an integer >= {low}, got {describe(count)}")
        return request

    def extensions(self, where: str, item: dict[str, Any]) -> dict[str, str]:
        """The entry's ``custom_modules`` / ``custom_mapping`` import paths, by key."""
        return {key: self.callable_path(f"{where}: {key}", item[key], what=name)
                for key, name in EXTENSION_KEYS.items() if key in item}

    def training(self, where: str, value: Any) -> dict[str, Any] | None:
        """``training = { optimizer = "adamw" }`` (the optimizer optional; ``false`` in a variant turns the entry's
        off): the run's training step options (not ``parallel``, read apart), or None: the forward only."""
        if value is None or value is False:
            return None
        if not isinstance(value, dict):
            self.problem(where, "expected a table such as { optimizer = \"adamw\" } (or {} for forward, loss and "
                         f"backward without an optimizer step), or false, got {describe(value)}")
            return None
        self.unknown_keys(where, value, TRAINING_KEYS)
        optimizer = value.get("optimizer")
        if optimizer is None:
            return {}
        if optimizer not in TRAINING_OPTIMIZERS:
            self.problem(f"{where}.optimizer", f"expected one of {', '.join(TRAINING_OPTIMIZERS)}, got "
                         f"{describe(optimizer)}")
            return {}
        return {"optimizer": optimizer}

    def shapes(self, where: str, value: Any) -> list[list[int]]:
        if _is_shape(value):
            return [list(value)]
        if isinstance(value, list) and value and all(_is_shape(item) for item in value):
            return [list(item) for item in value]
        self.problem(where, f"expected {SHAPE_HELP}, got {describe(value)}")
        return []

    def dtypes(self, where: str, value: Any, count: int) -> list[str] | None:
        if value is None:
            return None
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            self.problem(where, f"expected a dtype name such as \"float32\" or a list of them, got {describe(value)}")
            return None
        unknown = [name for name in names if name not in DTYPE_NAMES]
        if unknown:
            self.problem(where, f"unknown dtype {unknown[0]!r}; expected one of {', '.join(sorted(DTYPE_NAMES))}")
        if isinstance(value, list) and len(names) != count:
            self.problem(where, f"expected one dtype per input shape ({count}), got {len(names)}")
        return names if isinstance(value, list) else names * count

    def name(self, where: str, value: Any) -> str:
        if not isinstance(value, str) or not NAME_PATTERN.match(value):
            self.problem(where, f"expected {NAME_HELP}, got {describe(value)}")
            return value if isinstance(value, str) else ""
        return value

    def callable_path(self, where: str, value: Any, what: str = "callable") -> str:
        """An import path ``package.module:name`` of a callable (or, for the extension keys, of a mapping)."""
        if value is None:
            self.problem(where, f"missing; expected \"package.module:{what}\"")
            return ""
        if not isinstance(value, str) or not CALLABLE_PATTERN.match(value):
            self.problem(where, f"expected \"package.module:{what}\" (an import path relative to the registry's "
                         f"folder), got {describe(value)}")
            return value if isinstance(value, str) else ""
        return value

    def timeout(self, where: str, value: Any) -> float | None:
        """An entry's ``timeout``: seconds each of its runs may take (None: ``build --timeout`` decides)."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            self.problem(where, f"expected a positive number of seconds, such as 1800 (how long each run of the entry "
                         f"may take before its worker is killed; build --timeout sets the default), got "
                         f"{describe(value)}")
            return None
        return float(value)

    def memory(self, where: str, value: Any) -> int | None:
        if value is None:
            return None
        try:
            return parse_memory(value)
        except ValueError as error:
            self.problem(where, str(error))
            return None

    def mkdocs_path(self, value: Any) -> Path | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            self.problem("site.mkdocs", f"expected the path of an mkdocs.yml relative to this file, got "
                         f"{describe(value)}")
            return None
        resolved = (self.path.parent / value).resolve()
        if not resolved.is_file():
            self.problem("site.mkdocs", f"{value!r} does not exist (relative to {self.path.name}'s folder)")
            return None
        return resolved

    def table(self, where: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.problem(where, f"expected a table, got {describe(value)}")
            return {}
        return value

    def plain_table(self, where: str, value: Any) -> dict[str, Any]:
        """A table of plain TOML values (no dates or times: they could not be hashed or passed on faithfully)."""
        table = self.table(where, value)
        bad = _first_non_plain(table)
        if bad is not None:
            self.problem(f"{where}.{bad[0]}", f"expected strings, numbers, booleans, arrays or tables, got "
                         f"{type(bad[1]).__name__}")
        return table

    def string(self, where: str, value: Any) -> str:
        if not isinstance(value, str):
            self.problem(where, f"expected a string, got {describe(value)}")
            return ""
        return value

    def unknown_keys(self, where: str, table: Any, allowed: tuple[str, ...]) -> None:
        if not isinstance(table, dict):
            return
        for key in table:
            if key not in allowed:
                self.problem(f"{where}: {key}", f"unknown key{did_you_mean(key, allowed)}; expected one of "
                             f"{', '.join(allowed)}")


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'my_net'?)`` naming the candidate closest to a misspelled ``name``, or ``""`` if none is."""
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0
                                           for dim in value)


def _first_non_plain(value: Any, prefix: str = "") -> tuple[str, Any] | None:
    """The path and value of the first value in ``value`` (at any depth) that is not a plain TOML value."""
    if isinstance(value, dict):
        children = [(f"{prefix}.{key}" if prefix else str(key), item) for key, item in value.items()]
    elif isinstance(value, list):
        children = [(f"{prefix}[{position}]", item) for position, item in enumerate(value)]
    else:
        return None if isinstance(value, (str, int, float, bool)) else (prefix, value)
    return next(filter(None, (_first_non_plain(item, path) for path, item in children)), None)


def describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a table"
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
