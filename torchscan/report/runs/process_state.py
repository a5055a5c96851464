"""What one run may change in a warm worker process, put back before the next run, or a reason to end the worker.

A warm worker (``--isolation worker``) serves many runs, so that torch is imported once per worker instead of once
per run. Each run must still see the process as a fresh one would: `ProcessState` is captured once, when the
worker's first run has been received (its function, and with it torch, imported), and `ProcessState.reset` runs
after every run. It puts back what is cheap to put back (``sys.path``, ``os.environ``, the working directory, the
``warnings`` filters, the modules imported from outside the Python installation and TorchScan, torch's global hook
tables and process-wide settings, and, before every run, the random number generators) and names what is not (a
torch function or dispatch mode left active, inference mode, CUDA initialized, a thread the run started still
running, an attribute of torch replaced); the worker then ends and a fresh one takes the next run. docs/cli.md
lists both in full.
"""

from __future__ import annotations

import os
import random
import sys
import sysconfig
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Folders of code that stays imported between runs: the Python installation, and TorchScan itself.
_KEPT_FOLDERS = tuple(sorted({os.path.realpath(path) for path in (
    *(sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")),
    str(Path(__file__).resolve().parents[2]))}))


@dataclass
class ProcessState:
    """The process's state when a warm worker received its first run; `reset` brings a run's changes back to it."""

    path: list[str]
    environ: dict[str, str]
    cwd: str
    filters: list[Any]
    modules: set[str]
    threads: set[int]
    python_random: Any
    torch: dict[str, Any] | None = None
    numpy_random: Any = None
    namespaces: dict[str, tuple[int, Any]] = field(default_factory=dict)

    @classmethod
    def capture(cls) -> ProcessState:
        """The current state (torch's and NumPy's only when they are imported)."""
        threads = {thread.ident for thread in threading.enumerate()
                   if thread.ident is not None and not thread.name.startswith("exit-with-parent")}
        state = cls(path=list(sys.path), environ=dict(os.environ), cwd=os.getcwd(), filters=list(warnings.filters),
                    modules=set(sys.modules), threads=threads, python_random=random.getstate())
        if "numpy" in sys.modules:
            state.numpy_random = sys.modules["numpy"].random.get_state()
        if "torch" in sys.modules:
            state.torch = _torch_settings()
            state.namespaces = _torch_namespaces()
        return state

    def reset(self) -> str | None:
        """Put back what a run changed; returns why the worker must end instead, or None when it may go on."""
        if self.torch is not None:  # first: a default device is a torch function mode, popped here
            _restore_torch_settings(self.torch)
        reason = self._unresettable()
        self._reset_python()  # last: the check above looks up the modules that replaced torch functions
        return reason

    def reseed(self) -> None:
        """Give the random number generators the state they had when the worker received its first run."""
        random.setstate(self.python_random)
        if self.numpy_random is not None and "numpy" in sys.modules:
            sys.modules["numpy"].random.set_state(self.numpy_random)
        if self.torch is not None:
            sys.modules["torch"].set_rng_state(self.torch["rng"])

    def _reset_python(self) -> None:
        sys.path[:] = self.path
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        if os.getcwd() != self.cwd:
            os.chdir(self.cwd)
        warnings.filters[:] = self.filters  # type: ignore[index]  # a list at run time
        warnings._filters_mutated()  # type: ignore[attr-defined]  # forget the "shown once" registries
        for name in [name for name in sys.modules if name not in self.modules]:
            if _is_user_module(sys.modules.get(name)):
                del sys.modules[name]
            else:
                self.modules.add(name)  # installed code stays imported: not looked at again

    def _new_user_thread(self) -> bool:
        """Whether a thread started since the capture, running code of a user module, is still alive; threads of
        installed code (a library's monitor thread, started on first use) join the reference instead."""
        for thread in threading.enumerate():
            if thread.ident is None or thread.ident in self.threads or thread.name.startswith("exit-with-parent"):
                continue
            target = getattr(thread, "_target", None)
            owner = getattr(target, "__module__", None) if target is not None else type(thread).__module__
            module = sys.modules.get(owner or "")
            if module is None or _is_user_module(module):
                return True
            self.threads.add(thread.ident)
        return False

    def _unresettable(self) -> str | None:
        if self._new_user_thread():
            return "a thread started by the run is still running"
        if "torch" not in sys.modules:
            return None
        if self.torch is None:
            return "the run imported torch"
        return _torch_unresettable(self.namespaces)


def warn_every_run() -> None:
    """Let PyTorch's once-per-process warnings (``TORCH_WARN_ONCE`` in its C++ code, such as ``torch.meshgrid``'s)
    reach every run, in both isolation modes, so that a run's recorded warnings do not depend on what ran before it
    in its process."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_warn_always(True)


def _is_user_module(module: Any) -> bool:
    """Whether a module's code lies outside the Python installation and TorchScan (namespace packages by their
    folders; built-in and frozen modules, and ``None``, are not user modules)."""
    file = getattr(module, "__file__", None)
    files = [file] if isinstance(file, str) else list(getattr(module, "__path__", None) or [])
    return bool(files) and not any(os.path.realpath(file).startswith(_KEPT_FOLDERS) for file in files)


def _torch_settings(rng: bool = True) -> dict[str, Any]:
    """torch's process-wide settings a run may change, its global hook tables (copied) and its CPU RNG state."""
    import torch

    tables = {name: value.copy() if isinstance(value, dict) else value
              for name, value in vars(torch.nn.modules.module).items() if name.startswith("_global_")}
    return {"hooks": tables, "dtype": torch.get_default_dtype(), "device": torch.get_default_device(),
            "grad": torch.is_grad_enabled(), "anomaly": (torch.is_anomaly_enabled(),
                                                         torch.is_anomaly_check_nan_enabled()),
            "deterministic": (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled()),
            "matmul_precision": torch.get_float32_matmul_precision(), "threads": torch.get_num_threads(),
            "cudnn": (torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark,
                      torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32),
            "rng": torch.get_rng_state() if rng else None}


def _restore_torch_settings(settings: dict[str, Any]) -> None:
    import torch

    module = torch.nn.modules.module
    for name, value in settings["hooks"].items():
        table = getattr(module, name, None)
        if isinstance(value, dict) and isinstance(table, dict):
            table.clear()  # in place: torch's functions hold these very tables
            table.update(value)
        else:
            setattr(module, name, value)
    now = _torch_settings(rng=False)
    torch.set_default_dtype(settings["dtype"])
    if now["device"] != settings["device"]:
        torch.set_default_device(None if settings["device"] == torch.device("cpu") else settings["device"])
    torch.set_grad_enabled(settings["grad"])
    torch.set_anomaly_enabled(*settings["anomaly"])
    if now["deterministic"] != settings["deterministic"]:  # setting it imports torch._inductor (over a second)
        torch.use_deterministic_algorithms(settings["deterministic"][0], warn_only=settings["deterministic"][1])
    if now["matmul_precision"] != settings["matmul_precision"]:
        torch.set_float32_matmul_precision(settings["matmul_precision"])
    if now["threads"] != settings["threads"]:
        torch.set_num_threads(settings["threads"])
    cudnn = torch.backends.cudnn
    cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = settings["cudnn"]


def _torch_unresettable(namespaces: dict[str, tuple[int, Any]]) -> str | None:
    import torch

    if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
        return "the run left a torch function or dispatch mode active"
    if torch.is_inference_mode_enabled():
        return "the run left inference mode on"
    if torch.cuda.is_initialized():
        return "the run initialized CUDA"
    return _patched_by_user_code(namespaces)


def _patched_by_user_code(namespaces: dict[str, tuple[int, Any]]) -> str | None:
    """Names of torch replaced by user code since the capture; replacements by installed code (``torch._dynamo``
    wraps ``torch.manual_seed`` when first imported) become the new reference instead."""
    patched = []
    for name, (identity, value) in _torch_namespaces().items():
        if name in namespaces and namespaces[name][0] != identity:
            owner = sys.modules.get(getattr(value, "__module__", None) or "")
            if owner is None or _is_user_module(owner):
                patched.append(name)
            else:
                namespaces[name] = (identity, value)
    if patched:
        return f"the run replaced {', '.join(sorted(patched)[:3])}" + (" and more" if len(patched) > 3 else "")
    return None


def _torch_namespaces() -> dict[str, tuple[int, Any]]:
    """The identity and value of every attribute of torch's main namespaces and of each ``torch.nn`` module class's methods,
    read from the namespaces' dictionaries (``getattr`` could import torch's lazy submodules)."""
    import torch

    spaces: dict[str, Any] = {"torch": torch, "torch.nn.functional": torch.nn.functional, "torch.Tensor": torch.Tensor}
    for name, value in vars(torch.nn).items():
        if isinstance(value, type) and issubclass(value, torch.nn.Module):
            spaces[f"torch.nn.{name}"] = value
    return {f"{space}.{name}": (id(value), value) for space, owner in spaces.items() for name, value in vars(owner).items()
            if not name.startswith("__") and not isinstance(value, type(torch))}
