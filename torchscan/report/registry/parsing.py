"""The model registry (``models.toml``): load it, validate every key, and explain every mistake at once.

Validation never imports or runs a model: it checks the file's structure, types and names, so that a typo is
reported with the entry's name, the key path and what was expected before a single worker starts.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .placement import DEVICES, parse_memory
from .sweeps import Sweep, check_references, parse_sweep, point_spec

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
CALLABLE_PATTERN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
DTYPE_NAMES = frozenset({
    "float16", "half", "bfloat16", "float32", "float", "float64", "double", "complex64", "complex128",
    "int8", "int16", "int32", "int64", "long", "int", "uint8", "bool",
})
TOP_KEYS = ("catalog", "site", "models")
CATALOG_KEYS = ("title", "description")
SITE_KEYS = ("mkdocs", "section")
ENTRY_KEYS = ("name", "factory", "kwargs", "input_shape", "dtype", "inputs", "inputs_kwargs", "device", "as_device",
              "memory", "tags", "description", "strict", "variants", "sweep", "custom_modules", "custom_mapping",
              "training")
#: ``as_device``: the devices whose kernel choices an analysis on fake-tensor stand-ins keeps
#: (`torchscan.calls.stand_ins`).
AS_DEVICES = ("cpu", "cuda")
#: Entry keys naming a mapping (not a callable) by import path: crawl_module's two extension arguments, with the
#: name the error messages suggest.
EXTENSION_KEYS = {"custom_modules": "HANDLERS", "custom_mapping": "FORMULAS"}
VARIANT_KEYS = ("name", "description", "kwargs", "input_shape", "dtype", "inputs_kwargs", "training")
#: ``training = { optimizer = ... }``: the keys of the table and the optimizers ``crawl_training_step`` knows by name.
TRAINING_KEYS = ("optimizer",)
TRAINING_OPTIMIZERS = ("sgd", "adam", "adamw")
NAME_HELP = "a URL-safe name: letters, digits, '-' and '_', starting with a letter or digit, at most 64 characters"
#: Added to a run's stem for the files of its last good report (``reports/<stem>.last-good.json``): a variant of
#: that name would give a run the stem of another run's last good files, so the name is reserved.
LAST_GOOD_SUFFIX = ".last-good"
RESERVED_VARIANT = LAST_GOOD_SUFFIX.lstrip(".")
SHAPE_HELP = "a shape without the batch dimension such as [3, 224, 224], or a list of shapes such as [[4], [6]]"


class RegistryError(ValueError):
    """Every problem found in a registry; ``problems`` holds one line per mistake."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: {len(problems)} problem(s)\n" + "\n".join(f"  - {line}" for line in problems))


@dataclass(frozen=True)
class InputSpec:
    """Generated inputs (``shapes`` + ``dtypes``) or a callable returning ``(args, kwargs)``."""

    shapes: list[list[int]] | None = None
    dtypes: list[str] | None = None
    callable: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        if self.callable is not None:
            return {"callable": self.callable, "kwargs": self.kwargs}
        return {"shapes": self.shapes, "dtypes": self.dtypes}


@dataclass(frozen=True)
class Run:
    """One analysis: an entry, or one variant of it. ``stem`` names its output files."""

    entry: str
    variant: str | None
    stem: str
    factory: str
    kwargs: dict[str, Any]
    inputs: InputSpec
    device: str
    strict: bool
    description: str = ""
    memory: int | None = None  # bytes a cluster worker must offer (a placement request, not part of the result)
    extensions: dict[str, str] = field(default_factory=dict)  # custom_modules / custom_mapping -> import path
    training: dict[str, str] | None = None  # crawl_training_step's options (``optimizer``), or None: forward only
    quantity: str | None = None  # a sweep's point: the swept quantity's name and ``size``, its value here
    size: int | None = None
    as_device: str | None = None  # analyze on fake-tensor stand-ins of this device (`torchscan.calls.stand_ins`)

    def to_job(self, folder: Path) -> dict[str, Any]:
        """The JSON-serializable description a worker needs (the registry folder resolves module names)."""
        job: dict[str, Any] = {
            "entry": self.entry, "variant": self.variant, "stem": self.stem, "folder": str(folder),
            "factory": self.factory, "kwargs": self.kwargs, "inputs": self.inputs.to_json(), "device": self.device,
            **self.extensions}
        if self.memory is not None:
            job["memory"] = self.memory
        if self.training is not None:  # only then: runs without training keep their jobs (and cache keys)
            job["training"] = dict(self.training)
        if self.as_device is not None:  # likewise
            job["as_device"] = self.as_device
        return job


@dataclass(frozen=True)
class Entry:
    name: str
    factory: str
    description: str
    tags: tuple[str, ...]
    device: str
    strict: bool
    runs: tuple[Run, ...]
    sweep: Sweep | None = None  # the swept quantity (then ``runs`` holds one run per point, in increasing order)


@dataclass(frozen=True)
class Registry:
    path: Path
    title: str
    description: str
    mkdocs: Path | None
    section: str
    entries: tuple[Entry, ...]

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def runs(self) -> list[Run]:
        return [run for entry in self.entries for run in entry.runs]


def load_registry(path: str | Path) -> Registry:
    """Read and validate ``path``; raise `RegistryError` listing every problem found."""
    path = Path(path).resolve()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RegistryError(path, ["file not found"]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise RegistryError(path, [f"cannot read the file: {error}"]) from None
    except tomllib.TOMLDecodeError as error:
        raise RegistryError(path, [f"invalid TOML: {error}"]) from None
    checker = _Checker(path)
    registry = checker.registry(data)
    if checker.problems:  # a sweep's points share the entry's settings: a mistake in them is listed once
        raise RegistryError(path, list(dict.fromkeys(checker.problems)))
    return registry


class _Checker:
    """Collects problems instead of stopping at the first one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []

    def problem(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def registry(self, data: dict[str, Any]) -> Registry:
        self.unknown_keys("registry", data, TOP_KEYS)
        catalog = self.table("catalog", data.get("catalog", {}))
        self.unknown_keys("catalog", catalog, CATALOG_KEYS)
        site = self.table("site", data.get("site", {}))
        self.unknown_keys("site", site, SITE_KEYS)
        models = data.get("models")
        entries: list[Entry] = []
        if not isinstance(models, list) or not models or not all(isinstance(item, dict) for item in models):
            self.problem("models", "expected at least one [[models]] table (an array of tables), got "
                         + _describe(models))
        else:
            entries = [self.entry(index, item) for index, item in enumerate(models)]
            self.unique_names(entries)
        return Registry(path=self.path, title=self.string("catalog.title", catalog.get("title", "Model catalog")),
                        description=self.string("catalog.description", catalog.get("description", "")),
                        mkdocs=self.mkdocs_path(site.get("mkdocs")),
                        section=self.string("site.section", site.get("section", "Model catalog")),
                        entries=tuple(entries))

    def entry(self, index: int, item: dict[str, Any]) -> Entry:
        raw_name = item.get("name")
        where = f"models[{index}]" + (f" ({raw_name})" if isinstance(raw_name, str) else "")
        self.unknown_keys(where, item, ENTRY_KEYS)
        name = self.name(f"{where}: name", raw_name)
        factory = self.callable_path(f"{where}: factory", item.get("factory"), required=True)
        device = item.get("device", "cpu")
        if device not in DEVICES:
            self.problem(f"{where}: device", f"expected one of {', '.join(DEVICES)}, got {_describe(device)}")
        tags = item.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(tag, str) and tag for tag in tags):
            self.problem(f"{where}: tags", f"expected a list of non-empty strings, got {_describe(tags)}")
            tags = []
        strict = item.get("strict", False)
        if not isinstance(strict, bool):
            self.problem(f"{where}: strict", f"expected true or false, got {_describe(strict)}")
            strict = False
        description = self.string(f"{where}: description", item.get("description", ""))
        base: dict[str, Any] = {key: item[key] for key in ("kwargs", "input_shape", "dtype", "inputs", "inputs_kwargs",
                                                        "training") if key in item}
        variants = item.get("variants")
        common = {"entry": name, "factory": factory, "device": device, "strict": strict,
                  "memory": self.memory(f"{where}: memory", item.get("memory")),
                  "extensions": self.extensions(where, item), "as_device": self.as_device(where, item)}
        sweep = self.sweep(where, item)
        if sweep is not None:
            runs = self.sweep_runs(where, common, base, sweep)
        elif variants is None:
            runs = [self.run(where, common, base, None, name, description)]
        else:
            runs = self.variant_runs(where, common, base, variants)
        return Entry(name=name, factory=factory, description=description, tags=tuple(tags), device=device,
                     strict=strict, runs=tuple(runs), sweep=sweep)

    def sweep(self, where: str, item: dict[str, Any]) -> Sweep | None:
        """The entry's ``[models.sweep]`` (None without one), its references checked; a sweep and variants do not
        combine (a sweep generates the runs that variants would name by hand)."""
        sweep = parse_sweep(f"{where}: sweep", item["sweep"], self.problem) if "sweep" in item else None
        check_references(where, item, sweep, self.problem)
        if sweep is not None and "variants" in item:
            self.problem(f"{where}: variants", "an entry with a [models.sweep] cannot also have [[models.variants]]: "
                         "the sweep's points are its runs; declare the other variants as entries of their own")
        return sweep

    def sweep_runs(self, where: str, common: dict[str, Any], base: dict[str, Any], sweep: Sweep) -> list[Run]:
        """One run per point of the sweep: the declared point keeps the entry's stem, the others are
        ``<entry>.<quantity>-<value>``."""
        runs = []
        for size in sweep.values:
            stem = common["entry"] if size == sweep.default else f"{common['entry']}.{sweep.variant(size)}"
            run = self.run(where, common, point_spec(base, sweep, size), sweep.variant(size), stem,
                           f"{sweep.name} = {size:,}")
            runs.append(replace(run, quantity=sweep.name, size=size))
        return runs

    def as_device(self, where: str, item: dict[str, Any]) -> str | None:
        """The entry's ``as_device`` (None without one): a device whose kernel choices stand-ins keep."""
        value = item.get("as_device")
        if value is not None and value not in AS_DEVICES:
            self.problem(f"{where}: as_device", f"expected one of {', '.join(map(repr, AS_DEVICES))} (analyze on "
                         f"fake-tensor stand-ins of that device, keeping its kernel choices), got {_describe(value)}")
            return None
        return value

    def extensions(self, where: str, item: dict[str, Any]) -> dict[str, str]:
        """The entry's ``custom_modules`` / ``custom_mapping`` import paths, by key."""
        return {key: self.callable_path(f"{where}: {key}", item[key], required=True, what=name)
                for key, name in EXTENSION_KEYS.items() if key in item}

    def variant_runs(self, where: str, common: dict[str, Any], base: dict[str, Any], variants: Any) -> list[Run]:
        if not isinstance(variants, list) or not variants or not all(isinstance(v, dict) for v in variants):
            self.problem(f"{where}: variants", "expected a non-empty array of tables ([[models.variants]] with a "
                         f"name and the keys that change), got {_describe(variants)}")
            return [self.run(where, common, base, None, common["entry"], "")]
        runs, seen = [], set()
        for position, variant in enumerate(variants):
            label = variant.get("name")
            at = f"{where}: variants[{position}]" + (f" ({label})" if isinstance(label, str) else "")
            self.unknown_keys(at, variant, VARIANT_KEYS)
            label = self.name(f"{at}.name", label)
            if label.lower() in seen:
                self.problem(f"{at}.name", f"duplicate variant name {label!r} (names are compared ignoring case)")
            self.reserved_variant(f"{at}.name", common["entry"], label)
            seen.add(label.lower())
            merged = self.variant_settings(at, base, variant)
            stem = common["entry"] if position == 0 else f"{common['entry']}.{label}"
            description = self.string(f"{at}.description", variant.get("description", ""))
            runs.append(self.run(at, common, merged, label, stem, description))
        return runs

    def reserved_variant(self, where: str, entry: str, label: str) -> None:
        """A variant may not be called ``last-good`` (in any case): its run's files, ``<entry>.last-good.*``, would
        be those of the entry's last good report."""
        if label.lower() == RESERVED_VARIANT:
            self.problem(where, f"variant name {label!r} is reserved: its files ({entry}{LAST_GOOD_SUFFIX}.json, "
                         f".html) would clash with those of the last good report that a build keeps for {entry!r} "
                         f"when it fails; choose another name")

    def variant_settings(self, at: str, base: dict[str, Any], variant: dict[str, Any]) -> dict[str, Any]:
        """The entry's settings with a variant's changes: keyword tables merged key by key, shapes and dtypes
        replaced."""
        merged = dict(base)
        for key in ("kwargs", "inputs_kwargs"):
            if key in variant:
                merged[key] = {**self.table(f"{at}.{key}", base.get(key, {})),
                               **self.table(f"{at}.{key}", variant[key])}
        for key in ("input_shape", "dtype", "training"):
            if key in variant:
                merged[key] = variant[key]
        return merged

    def run(self, where: str, common: dict[str, Any], spec: dict[str, Any], variant: str | None, stem: str,
            description: str) -> Run:
        kwargs = self.plain_table(f"{where}.kwargs" if variant else f"{where}: kwargs", spec.get("kwargs", {}))
        return Run(variant=variant, stem=stem, kwargs=kwargs, inputs=self.inputs(where, spec), description=description,
                   training=self.training(f"{where}.training" if variant else f"{where}: training",
                                          spec.get("training")),
                   **common)

    def training(self, where: str, value: Any) -> dict[str, str] | None:
        """``training = { optimizer = "adamw" }`` (the optimizer optional; ``false`` in a variant turns the entry's
        off): the options of the run's training step, or None when the run analyzes the forward only."""
        if value is None or value is False:
            return None
        if not isinstance(value, dict):
            self.problem(where, "expected a table such as { optimizer = \"adamw\" } (or {} for forward, loss and "
                         f"backward without an optimizer step), or false, got {_describe(value)}")
            return None
        self.unknown_keys(where, value, TRAINING_KEYS)
        optimizer = value.get("optimizer")
        if optimizer is None:
            return {}
        if optimizer not in TRAINING_OPTIMIZERS:
            self.problem(f"{where}.optimizer", f"expected one of {', '.join(TRAINING_OPTIMIZERS)}, got "
                         f"{_describe(optimizer)}")
            return {}
        return {"optimizer": optimizer}

    def inputs(self, where: str, spec: dict[str, Any]) -> InputSpec:
        has_shape, has_callable = "input_shape" in spec, "inputs" in spec
        if has_shape == has_callable:
            self.problem(where, "expected exactly one input spec: input_shape (generated inputs, with an optional "
                         "dtype) or inputs = \"module:callable\" returning (args, kwargs)"
                         + ("; both were given" if has_shape else "; neither was given"))
            if "dtype" in spec:  # still named, so that a misspelled dtype is reported with the other mistakes
                dtype = spec["dtype"]
                self.dtypes(f"{where}: dtype", dtype, len(dtype) if isinstance(dtype, list) else 1)
            return InputSpec()
        if has_callable:
            if "dtype" in spec:
                self.problem(f"{where}: dtype", "dtype only applies to generated inputs (input_shape); the inputs "
                             "callable creates its tensors with the dtypes it wants")
            kwargs = self.plain_table(f"{where}: inputs_kwargs", spec.get("inputs_kwargs", {}))
            return InputSpec(callable=self.callable_path(f"{where}: inputs", spec["inputs"], required=True),
                             kwargs=kwargs)
        if "inputs_kwargs" in spec:
            self.problem(f"{where}: inputs_kwargs", "inputs_kwargs only applies with inputs = \"module:callable\"")
        shapes = self.shapes(f"{where}: input_shape", spec["input_shape"])
        return InputSpec(shapes=shapes, dtypes=self.dtypes(f"{where}: dtype", spec.get("dtype"), len(shapes or [])))

    def shapes(self, where: str, value: Any) -> list[list[int]]:
        if _is_shape(value):
            return [list(value)]
        if isinstance(value, list) and value and all(_is_shape(item) for item in value):
            return [list(item) for item in value]
        self.problem(where, f"expected {SHAPE_HELP}, got {_describe(value)}")
        return []

    def dtypes(self, where: str, value: Any, count: int) -> list[str] | None:
        if value is None:
            return None
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            self.problem(where, f"expected a dtype name such as \"float32\" or a list of them, got {_describe(value)}")
            return None
        unknown = [name for name in names if name not in DTYPE_NAMES]
        if unknown:
            self.problem(where, f"unknown dtype {unknown[0]!r}; expected one of {', '.join(sorted(DTYPE_NAMES))}")
        if isinstance(value, list) and len(names) != count:
            self.problem(where, f"expected one dtype per input shape ({count}), got {len(names)}")
        return names if isinstance(value, list) else names * count

    def unique_names(self, entries: list[Entry]) -> None:
        seen: dict[str, int] = {}
        for index, entry in enumerate(entries):
            key = entry.name.lower()
            if key in seen and entry.name:
                self.problem(f"models[{index}] ({entry.name}): name", f"duplicate name; models[{seen[key]}] is "
                             "already called that (names are compared ignoring case, they name files)")
            seen.setdefault(key, index)

    def name(self, where: str, value: Any) -> str:
        if not isinstance(value, str) or not NAME_PATTERN.match(value):
            self.problem(where, f"expected {NAME_HELP}, got {_describe(value)}")
            return value if isinstance(value, str) else ""
        return value

    def callable_path(self, where: str, value: Any, required: bool, what: str = "callable") -> str:
        """An import path ``package.module:name`` of a callable (or, for the extension keys, of a mapping)."""
        if value is None and required:
            self.problem(where, f"missing; expected \"package.module:{what}\"")
            return ""
        if not isinstance(value, str) or not CALLABLE_PATTERN.match(value):
            self.problem(where, f"expected \"package.module:{what}\" (an import path relative to the registry's "
                         f"folder), got {_describe(value)}")
            return value if isinstance(value, str) else ""
        return value

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
                         f"{_describe(value)}")
            return None
        resolved = (self.path.parent / value).resolve()
        if not resolved.is_file():
            self.problem("site.mkdocs", f"{value!r} does not exist (relative to {self.path.name}'s folder)")
            return None
        return resolved

    def table(self, where: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.problem(where, f"expected a table, got {_describe(value)}")
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
            self.problem(where, f"expected a string, got {_describe(value)}")
            return ""
        return value

    def unknown_keys(self, where: str, table: Any, allowed: tuple[str, ...]) -> None:
        if not isinstance(table, dict):
            return
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.problem(f"{where}: {key}", f"unknown key{hint}; expected one of {', '.join(allowed)}")


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0
                                           for dim in value)


def _first_non_plain(value: Any, prefix: str = "") -> tuple[str, Any] | None:
    if isinstance(value, dict):
        for key, item in value.items():
            found = _first_non_plain(item, f"{prefix}.{key}" if prefix else str(key))
            if found:
                return found
        return None
    if isinstance(value, list):
        for position, item in enumerate(value):
            found = _first_non_plain(item, f"{prefix}[{position}]")
            if found:
                return found
        return None
    return None if isinstance(value, (str, int, float, bool)) else (prefix, value)


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a table"
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
