"""The pure function of the batch runner: one registry run in, one JSON-serializable result out.

``analyze_run(job)`` imports the factory relative to the registry's folder, builds the model (on the meta device
when asked), creates its inputs, runs `torchscan.crawl_module`, and returns ``{"status": "ok", "report": ...}``
or ``{"status": "failed", "error": {...}}``. It never raises for a model's mistakes and never writes files, so any
``concurrent.futures.Executor`` (a local process pool, a cluster's executor) can run it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any

# Imported here rather than per call: the executor starts a run's timeout once this module is loaded.
import torch

from ..crawler import crawl_module
from ..handlers import validate_handler_map
from ..operators import validate_custom_mapping
from .resources import require_device


def analyze_run(job: dict[str, Any]) -> dict[str, Any]:
    """Analyze one run described by `Run.to_job`; failures come back as data naming the stage and error."""
    stage = "import"
    try:
        if job["folder"] not in sys.path:
            sys.path.insert(0, job["folder"])
        factory = resolve(job["factory"])
        inputs_callable = resolve(job["inputs"]["callable"]) if "callable" in job["inputs"] else None
        extensions = resolve_extensions(job)
        stage = "build"
        require_device(job["device"])
        with torch.device(job["device"]):
            model = factory(**job["kwargs"])
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"the factory returned {type(model).__name__}, not a torch.nn.Module")
        stage = "inputs"
        if inputs_callable is None:
            dtypes = job["inputs"]["dtypes"]
            call = {"input_shape": [tuple(shape) for shape in job["inputs"]["shapes"]],
                    "dtype": None if dtypes is None else [dtype_named(name) for name in dtypes]}
        else:
            args, kwargs = unpack_inputs(inputs_callable(**job["inputs"]["kwargs"]))
            if job["device"] == "meta":
                args, kwargs = to_device(args, "meta"), to_device(kwargs, "meta")
            call = {"args": args, "kwargs": kwargs}
        stage = "analysis"
        report = crawl_module(model, **call, **extensions)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            raise
        return failure(stage, error)
    return {"status": "ok", "report": report}


def failure(stage: str, error: BaseException) -> dict[str, Any]:
    """A recorded failure: the stage, the exception type and its message (no traceback: it holds local paths)."""
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ in ("builtins", "__main__") else f"{kind.__module__}.{kind.__qualname__}"
    return {"status": "failed", "error": {"stage": stage, "type": name, "message": str(error)[:2000]}}


def resolve_object(target: str) -> Any:
    """Import ``module:attribute.path`` and return the object it names."""
    module_name, _, attribute = target.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def resolve(target: str) -> Any:
    """The callable that ``module:attribute.path`` names."""
    value = resolve_object(target)
    if not callable(value):
        raise TypeError(f"{target} is a {type(value).__name__}, not a callable")
    return value


def resolve_extensions(job: dict[str, Any]) -> dict[str, Any]:
    """The entry's ``custom_modules`` and ``custom_mapping`` mappings, checked before any model is built; a wrong
    object is reported with the key and the import path that named it."""
    extensions: dict[str, Any] = {}
    if "custom_modules" in job:
        target = job["custom_modules"]
        extensions["custom_modules"] = validate_handler_map(resolve_object(target), f"custom_modules ({target})")
    if "custom_mapping" in job:
        target = job["custom_mapping"]
        try:
            extensions["custom_mapping"] = validate_custom_mapping(resolve_object(target))
        except TypeError as error:
            raise TypeError(f"custom_mapping ({target}): {error}") from None
    return extensions


def unpack_inputs(value: Any) -> tuple[tuple, dict[str, Any]]:
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], (tuple, list))
            and isinstance(value[1], Mapping)):
        raise TypeError(f"the inputs callable must return (args, kwargs): a tuple and a mapping, got "
                        f"{type(value).__name__}")
    return tuple(value[0]), dict(value[1])


def dtype_named(name: str) -> Any:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name!r} is not a torch dtype")
    return dtype


def to_device(value: Any, device: str) -> Any:
    """Move every tensor inside nested tuples, lists and dicts (a meta-device model takes meta inputs)."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        return type(value)(*(to_device(item, device) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(item, device) for item in value)
    if isinstance(value, dict):
        return {key: to_device(item, device) for key, item in value.items()}
    return value
