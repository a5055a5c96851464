"""An entry's runs, each the job of one analysis: one per point of a sweep, one per variant (the entry's settings with
the variant's changes), or the entry's own; their keys checked as they are read. ``Run.to_job`` is what a worker gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .checks import Checker, describe
from .parallel import parse_parallel
from .sweeps import Sweep, point_spec

VARIANT_KEYS = ("name", "description", "kwargs", "input_shape", "dtype", "inputs_kwargs", "training")
#: Added to a run's stem for the files of its last good report (``reports/<stem>.last-good.json``): a variant of
#: that name would give a run the stem of another run's last good files, so the name is reserved.
LAST_GOOD_SUFFIX = ".last-good"
RESERVED_VARIANT = LAST_GOOD_SUFFIX.lstrip(".")


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
    #: crawl_training_step's options (``optimizer``, ``parallel``: the sharded plan and sizing), or None: forward only
    training: dict[str, Any] | None = None
    quantity: str | None = None  # a sweep's point: the swept quantity's name and ``size``, its value here
    size: int | None = None
    as_device: str | None = None  # analyze on fake-tensor stand-ins of this device (`torchscan.calls.stand_ins`)
    meta_kernels: str | None = None  # on meta, the attention kernels (`torchscan.calls.meta_kernels`); None: default
    timeout: float | None = None  # seconds the run may take (the entry's ``timeout``; None: build --timeout)
    #: A `torchscan.HARDWARE` name the forward is bounded on at render time: never in the job (nor in the report)
    hardware: str | None = None
    #: ``crawl_module(..., time=...)``'s request (``{}``: the defaults), or None: the forward is not measured
    time: dict[str, int] | None = None

    def to_job(self, folder: Path) -> dict[str, Any]:
        """The JSON-serializable description a worker needs (the registry folder resolves module names)."""
        job: dict[str, Any] = {
            "entry": self.entry, "variant": self.variant, "stem": self.stem, "folder": str(folder),
            "factory": self.factory, "kwargs": self.kwargs, "inputs": self.inputs.to_json(), "device": self.device,
            **self.extensions}
        # Each only when set, so that runs without it keep their jobs (and cache keys); memory and timeout are
        # left out of the cache key (`torchscan.report.runs.result_cache`), a cluster task reads them.
        optional = {"memory": self.memory, "training": None if self.training is None else dict(self.training),
                    "as_device": self.as_device, "meta_kernels": self.meta_kernels,
                    "time": None if self.time is None else dict(self.time) or True, "timeout": self.timeout}
        return job | {key: value for key, value in optional.items() if value is not None}


def sweep_runs(check: Checker, where: str, common: dict[str, Any], base: dict[str, Any], sweep: Sweep) -> list[Run]:
    """One run per point: the declared point keeps the entry's stem, the others are ``<entry>.<quantity>-<value>``."""
    runs = []
    for size in sweep.values:
        stem = common["entry"] if size == sweep.default else f"{common['entry']}.{sweep.variant(size)}"
        point = make_run(check, where, common, point_spec(base, sweep, size), sweep.variant(size), stem,
                         f"{sweep.name} = {size:,}")
        runs.append(replace(point, quantity=sweep.name, size=size))
    return runs


def variant_runs(check: Checker, where: str, common: dict[str, Any], base: dict[str, Any], variants: Any) -> list[Run]:
    if not isinstance(variants, list) or not variants or not all(isinstance(v, dict) for v in variants):
        check.problem(f"{where}: variants", "expected a non-empty array of tables ([[models.variants]] with a "
                      f"name and the keys that change), got {describe(variants)}")
        return [make_run(check, where, common, base, None, common["entry"], "")]
    runs, seen = [], set()
    for position, variant in enumerate(variants):
        label = variant.get("name")
        at = f"{where}: variants[{position}]" + (f" ({label})" if isinstance(label, str) else "")
        check.unknown_keys(at, variant, VARIANT_KEYS)
        label = check.name(f"{at}.name", label)
        if label.lower() in seen:
            check.problem(f"{at}.name", f"duplicate variant name {label!r} (names are compared ignoring case)")
        _reserved_variant(check, f"{at}.name", common["entry"], label)
        seen.add(label.lower())
        merged = _variant_settings(check, at, base, variant)
        stem = common["entry"] if position == 0 else f"{common['entry']}.{label}"
        description = check.string(f"{at}.description", variant.get("description", ""))
        runs.append(make_run(check, at, common, merged, label, stem, description))
    return runs


def _reserved_variant(check: Checker, where: str, entry: str, label: str) -> None:
    """A variant may not be called ``last-good`` (in any case): its run's files, ``<entry>.last-good.*``, would
    be those of the entry's last good report."""
    if label.lower() == RESERVED_VARIANT:
        check.problem(where, f"variant name {label!r} is reserved: its files ({entry}{LAST_GOOD_SUFFIX}.json, "
                      f".html) would clash with those of the last good report that a build keeps for {entry!r} "
                      f"when it fails; choose another name")


def _variant_settings(check: Checker, at: str, base: dict[str, Any], variant: dict[str, Any]) -> dict[str, Any]:
    """The entry's settings with a variant's changes: keyword tables merged key by key, the other keys replaced."""
    merged = dict(base)
    for key in ("kwargs", "inputs_kwargs"):
        if key in variant:
            merged[key] = {**check.table(f"{at}.{key}", base.get(key, {})),
                           **check.table(f"{at}.{key}", variant[key])}
    for key in ("input_shape", "dtype", "training"):
        if key in variant:
            merged[key] = variant[key]
    return merged


def make_run(check: Checker, where: str, common: dict[str, Any], spec: dict[str, Any], variant: str | None, stem: str,
             description: str) -> Run:
    kwargs = check.plain_table(f"{where}.kwargs" if variant else f"{where}: kwargs", spec.get("kwargs", {}))
    return Run(variant=variant, stem=stem, kwargs=kwargs, inputs=_inputs(check, where, spec), description=description,
               training=_training(check, f"{where}.training" if variant else f"{where}: training",
                                  spec.get("training")),
               **common)


def _training(check: Checker, where: str, value: Any) -> dict[str, Any] | None:
    """The run's training options, its sharded plan (``parallel``) checked: a plan needs the optimizer it shards."""
    training = check.training(where, value)
    if training is None or not isinstance(value, dict) or "parallel" not in value:
        return training
    parallel = parse_parallel(check, f"{where}.parallel", value["parallel"])
    if "optimizer" not in value:
        check.problem(f"{where}.parallel", "needs training.optimizer (\"sgd\", \"adam\" or \"adamw\"): a sharded "
                      "step shards the optimizer's state and runs its step")
    return training if parallel is None else {**training, "parallel": parallel}


def _inputs(check: Checker, where: str, spec: dict[str, Any]) -> InputSpec:
    has_shape, has_callable = "input_shape" in spec, "inputs" in spec
    if has_shape == has_callable:
        check.problem(where, "expected exactly one input spec: input_shape (generated inputs, with an optional "
                      "dtype) or inputs = \"module:callable\" returning (args, kwargs)"
                      + ("; both were given" if has_shape else "; neither was given"))
        if "dtype" in spec:  # still named, so that a misspelled dtype is reported with the other mistakes
            dtype = spec["dtype"]
            check.dtypes(f"{where}: dtype", dtype, len(dtype) if isinstance(dtype, list) else 1)
        return InputSpec()
    if has_callable:
        if "dtype" in spec:
            check.problem(f"{where}: dtype", "dtype only applies to generated inputs (input_shape); the inputs "
                          "callable creates its tensors with the dtypes it wants")
        kwargs = check.plain_table(f"{where}: inputs_kwargs", spec.get("inputs_kwargs", {}))
        return InputSpec(callable=check.callable_path(f"{where}: inputs", spec["inputs"]), kwargs=kwargs)
    if "inputs_kwargs" in spec:
        check.problem(f"{where}: inputs_kwargs", "inputs_kwargs only applies with inputs = \"module:callable\"")
    shapes = check.shapes(f"{where}: input_shape", spec["input_shape"])
    return InputSpec(shapes=shapes, dtypes=check.dtypes(f"{where}: dtype", spec.get("dtype"), len(shapes or [])))
