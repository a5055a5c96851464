"""The model registry (``models.toml``): load it, validate every key, and explain every mistake at once.

Validation never imports or runs a model: it checks the file's structure, types and names, so that a typo is
reported with the entry's name, the key path and what was expected before a single worker starts. Here the file is
read table by table; `checks` checks the values, `jobs` makes each entry's runs.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .callables import lookup_problems
from .checks import Checker, describe
from .jobs import Run, make_run, sweep_runs, variant_runs
from .placement import DEVICES
from .sweeps import Sweep, check_references, parse_sweep

TOP_KEYS = ("catalog", "site", "models")
CATALOG_KEYS = ("title", "description")
SITE_KEYS = ("mkdocs", "section")
ENTRY_KEYS = ("name", "factory", "kwargs", "input_shape", "dtype", "inputs", "inputs_kwargs", "device", "as_device",
              "meta_kernels", "memory", "tags", "description", "strict", "variants", "sweep", "custom_modules",
              "custom_mapping", "training", "timeout", "hardware", "time")


class RegistryError(ValueError):
    """Every problem found in a registry; ``problems`` holds one line per mistake."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: {len(problems)} problem(s)\n" + "\n".join(f"  - {line}" for line in problems))


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


def load_registry(path: str | Path, *, lookups: bool = False) -> Registry:
    """Read and validate ``path``; raise `RegistryError` listing every problem found. With ``lookups``, the problems
    include every callable that cannot be found (`check`'s lookups, which ``build`` runs before any worker)."""
    reading = read_registry(path, lookups=lookups)
    if reading.problems or reading.missing:
        raise RegistryError(reading.registry.path, reading.problems + reading.missing)
    return reading.registry


@dataclass(frozen=True)
class Reading:
    """A registry as read, with every mistake: in its structure and values (``problems``), and the callables that
    cannot be found (``missing``, found by reading source files, never by importing them)."""

    registry: Registry
    problems: list[str]
    missing: list[str]


def read_registry(path: str | Path, *, lookups: bool = True) -> Reading:
    """Read ``path`` and list every mistake in one round; `RegistryError` only when it is not a TOML file."""
    path = Path(path).resolve()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RegistryError(path, ["file not found"]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise RegistryError(path, [f"cannot read the file: {error}"]) from None
    except tomllib.TOMLDecodeError as error:
        raise RegistryError(path, [f"invalid TOML: {error}"]) from None
    check = Checker(path)
    registry = _registry(check, data)
    missing = lookup_problems(registry.entries, registry.folder) if lookups else []
    # a sweep's points share the entry's settings: a mistake in them is listed once
    return Reading(registry, list(dict.fromkeys(check.problems)), missing)


def _registry(check: Checker, data: dict[str, Any]) -> Registry:
    check.unknown_keys("registry", data, TOP_KEYS)
    catalog = check.table("catalog", data.get("catalog", {}))
    check.unknown_keys("catalog", catalog, CATALOG_KEYS)
    site = check.table("site", data.get("site", {}))
    check.unknown_keys("site", site, SITE_KEYS)
    models = data.get("models")
    entries: list[Entry] = []
    if not isinstance(models, list) or not models or not all(isinstance(item, dict) for item in models):
        check.problem("models", "expected at least one [[models]] table (an array of tables), got "
                      + describe(models))
    else:
        entries = [_entry(check, index, item) for index, item in enumerate(models)]
        _unique_names(check, entries)
    return Registry(path=check.path, title=check.string("catalog.title", catalog.get("title", "Model catalog")),
                    description=check.string("catalog.description", catalog.get("description", "")),
                    mkdocs=check.mkdocs_path(site.get("mkdocs")),
                    section=check.string("site.section", site.get("section", "Model catalog")),
                    entries=tuple(entries))


def _entry(check: Checker, index: int, item: dict[str, Any]) -> Entry:
    raw_name = item.get("name")
    where = f"models[{index}]" + (f" ({raw_name})" if isinstance(raw_name, str) else "")
    check.unknown_keys(where, item, ENTRY_KEYS)
    name = check.name(f"{where}: name", raw_name)
    factory = check.callable_path(f"{where}: factory", item.get("factory"))
    device = item.get("device", "cpu")
    if device not in DEVICES:
        check.problem(f"{where}: device", f"expected one of {', '.join(DEVICES)}, got {describe(device)}")
    tags = item.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) and tag for tag in tags):
        check.problem(f"{where}: tags", f"expected a list of non-empty strings, got {describe(tags)}")
        tags = []
    strict = item.get("strict", False)
    if not isinstance(strict, bool):
        check.problem(f"{where}: strict", f"expected true or false, got {describe(strict)}")
        strict = False
    description = check.string(f"{where}: description", item.get("description", ""))
    base: dict[str, Any] = {key: item[key] for key in ("kwargs", "input_shape", "dtype", "inputs", "inputs_kwargs",
                                                    "training") if key in item}
    variants = item.get("variants")
    common = {"entry": name, "factory": factory, "device": device, "strict": strict,
              "memory": check.memory(f"{where}: memory", item.get("memory")),
              "timeout": check.timeout(f"{where}: timeout", item.get("timeout")),
              "extensions": check.extensions(where, item), "as_device": check.choice(where, item, "as_device"),
              "meta_kernels": check.choice(where, item, "meta_kernels"), "hardware": check.hardware(where, item),
              "time": check.time(where, item, device)}
    sweep = _sweep(check, where, item)
    if sweep is not None:
        runs = sweep_runs(check, where, common, base, sweep)
    elif variants is None:
        runs = [make_run(check, where, common, base, None, name, description)]
    else:
        runs = variant_runs(check, where, common, base, variants)
    return Entry(name=name, factory=factory, description=description, tags=tuple(tags), device=device,
                 strict=strict, runs=tuple(runs), sweep=sweep)


def _sweep(check: Checker, where: str, item: dict[str, Any]) -> Sweep | None:
    """The entry's ``[models.sweep]`` (None without one), its references checked; a sweep and variants do not
    combine (a sweep generates the runs that variants would name by hand)."""
    sweep = parse_sweep(f"{where}: sweep", item["sweep"], check.problem) if "sweep" in item else None
    check_references(where, item, sweep, check.problem)
    if sweep is not None and "variants" in item:
        check.problem(f"{where}: variants", "an entry with a [models.sweep] cannot also have [[models.variants]]: "
                      "the sweep's points are its runs; declare the other variants as entries of their own")
    return sweep


def _unique_names(check: Checker, entries: list[Entry]) -> None:
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        key = entry.name.lower()
        if key in seen and entry.name:
            check.problem(f"models[{index}] ({entry.name}): name", f"duplicate name; models[{seen[key]}] is "
                          "already called that (names are compared ignoring case, they name files)")
        seen.setdefault(key, index)
