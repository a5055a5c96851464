"""The pure function of the batch runner: one registry run in, one JSON-serializable result out.

``analyze_run(job)`` imports the factory relative to the registry's folder, builds the model, creates its inputs,
runs `torchscan.crawl_module`, and returns ``{"status": "ok", "report": ...}`` or ``{"status": "failed", "error":
{...}}``. It never raises for a model's mistakes and never writes files, so any ``concurrent.futures.Executor`` can
run it. Python warnings raised meanwhile are recorded in the report's ``context.warnings``, not printed. A failure
keeps the traceback frames of the user's own code, relative to the registry folder, and the path of the layer whose
forward raised.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Mapping
from operator import methodcaller
from pathlib import Path
from types import TracebackType
from typing import Any


def _ignore_interrupts_in_spawned_workers() -> None:
    """A spawned worker leaves Ctrl-C, which the terminal sends to the whole process group, to the build: the
    parent kills its workers, which print no tracebacks. Runs when the worker imports this module, before torch."""
    in_child = multiprocessing.current_process().name != "MainProcess" or multiprocessing.parent_process() is not None
    if in_child and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


_ignore_interrupts_in_spawned_workers()

# Imported here rather than per call: the executor starts a run's timeout once this module is loaded.
import torch  # noqa: E402

from ...calls.errors import LAYER_NOTE  # noqa: E402
from ...crawler import crawl_module  # noqa: E402
from ...handlers import validate_handler_map  # noqa: E402
from ...operators import validate_custom_mapping  # noqa: E402
from ...training.step import crawl_training_step  # noqa: E402
from ...values import map_tensors  # noqa: E402
from ..registry.parallel import plan_of  # noqa: E402
from ..registry.placement import require_device  # noqa: E402
from .isolated_executor import import_object  # noqa: E402
from .sizing import sized_plan  # noqa: E402

#: Frames of a failure's traceback kept for its page (the innermost ones).
TRACEBACK_FRAMES = 12


def analyze_run(job: dict[str, Any]) -> dict[str, Any]:
    """Analyze one run described by `Run.to_job`; failures come back as data naming the stage and error."""
    stage, model = "import", None
    with warnings.catch_warnings(record=True) as caught:  # the process's filters decide what is recorded
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
            call = _call(job, inputs_callable)
            # fake-tensor stand-ins of a device, or the attention kernels on meta, when the entry asks for them
            call.update({key: job[key] for key in ("as_device", "meta_kernels") if key in job})
            stage = "analysis"
            report = analyze_model(model, call, extensions, job.get("training"), job.get("time", False))
        except BaseException as error:
            if isinstance(error, KeyboardInterrupt):
                raise
            return failure(stage, error, Path(job["folder"]), model if stage == "analysis" else None)
    recorded = recorded_warnings(caught)
    if recorded:
        report["context"]["warnings"] = recorded
    return {"status": "ok", "report": report}


def analyze_model(model: Any, call: dict[str, Any], extensions: dict[str, Any],
                  training: dict[str, Any] | None, time: Any = False) -> dict[str, Any]:
    """``crawl_module``'s report of the model; with ``training`` options, plus the ``training`` section of
    ``crawl_training_step`` on the same call. The report's forward stays ``crawl_module``'s (eval mode, no gradients)
    so that the catalog's forward columns mean the same for every entry. Both trace memory. A sharded plan adds
    ``training.parallel`` and its ``fit`` across the entry's world sizes (`torchscan.report.runs.sizing`); ``time``
    measures the forward per layer call (the training step is not timed)."""
    report = crawl_module(model, **call, **extensions, memory=True, time=time)
    if training is not None:
        parallel = training.get("parallel")
        step = crawl_training_step(model, **call, **extensions, optimizer=training.get("optimizer"), memory=True,
                                   parallel=None if parallel is None else plan_of(parallel))
        report["training"] = step["training"]
        if parallel is not None:
            report["training"]["parallel"]["fit"] = sized_plan(model, call, training["optimizer"], parallel,
                                                               report["training"]["parallel"])
    return report


def _call(job: dict[str, Any], inputs_callable: Any) -> dict[str, Any]:
    """The keyword arguments of `crawl_module` that describe the call: generated shapes or the provided call."""
    if inputs_callable is None:
        dtypes = job["inputs"]["dtypes"]
        return {"input_shape": [tuple(shape) for shape in job["inputs"]["shapes"]],
                "dtype": None if dtypes is None else [dtype_named(name) for name in dtypes]}
    args, kwargs = unpack_inputs(inputs_callable(**job["inputs"]["kwargs"]))
    if job["device"] == "meta":
        args, kwargs = map_tensors((args, kwargs), methodcaller("to", "meta"))
    return {"args": args, "kwargs": kwargs}


def recorded_warnings(caught: list[warnings.WarningMessage]) -> list[dict[str, str]]:
    """Each distinct warning once, in order: its category and message (no file names: reports hold no paths)."""
    seen: dict[tuple[str, str], None] = {}
    for item in caught:
        seen.setdefault((item.category.__name__, " ".join(str(item.message).split())[:500]), None)
    return [{"category": category, "message": message} for category, message in seen]


def failure(stage: str, error: BaseException, folder: Path, model: Any) -> dict[str, Any]:
    """A recorded failure: the stage, the exception type and message (with the exception's notes, such as
    TorchScan's hint that ``input_shape`` excludes the batch dimension), the user's traceback frames and, when the
    forward of a layer raised, that layer's path (so the note naming the layer call is left out of the message)."""
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ in ("builtins", "__main__") else f"{kind.__module__}.{kind.__qualname__}"
    notes = [note for note in getattr(error, "__notes__", ()) if isinstance(note, str) and
             not note.startswith(LAYER_NOTE)]
    record = {"stage": stage, "type": name, "message": "\n".join([str(error), *notes])[:2000]}
    frames = user_frames(error.__traceback__, folder)
    if frames:
        record["traceback"] = frames
    layer = failing_layer(error.__traceback__, model) if model is not None else None
    if layer is not None:
        record["layer"] = layer
    return {"status": "failed", "error": record}


def user_frames(trace: TracebackType | None, folder: Path) -> str:
    """The traceback's frames in files under ``folder`` (not installed code), as Python shows them, paths relative."""
    root = folder.resolve()
    lines = []
    for frame in traceback.extract_tb(trace)[-TRACEBACK_FRAMES * 4:]:
        try:
            relative = Path(frame.filename).resolve().relative_to(root)
        except (ValueError, OSError):
            continue
        if "site-packages" in relative.parts:
            continue
        lines.append(f'  File "{relative.as_posix()}", line {frame.lineno}, in {frame.name}')
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    return "\n".join(lines[-TRACEBACK_FRAMES * 2:])


def failing_layer(trace: TracebackType | None, model: Any) -> str | None:
    """The path of the innermost module of ``model`` whose code is on the traceback (``""`` for the root)."""
    paths = {id(module): path for path, module in model.named_modules()}
    found = None
    while trace is not None:
        owner = trace.tb_frame.f_locals.get("self")
        if id(owner) in paths:
            found = paths[id(owner)]
        trace = trace.tb_next
    return found


def resolve(target: str) -> Any:
    """The callable that ``module:attribute.path`` names."""
    value = import_object(target)
    if not callable(value):
        raise TypeError(f"{target} is a {type(value).__name__}, not a callable")
    return value


def resolve_extensions(job: dict[str, Any]) -> dict[str, Any]:
    """The entry's ``custom_modules`` and ``custom_mapping`` mappings, checked before any model is built; a wrong
    object is reported with the key and the import path that named it."""
    extensions: dict[str, Any] = {}
    if "custom_modules" in job:
        target = job["custom_modules"]
        extensions["custom_modules"] = validate_handler_map(import_object(target), f"custom_modules ({target})")
    if "custom_mapping" in job:
        target = job["custom_mapping"]
        try:
            extensions["custom_mapping"] = validate_custom_mapping(import_object(target))
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
