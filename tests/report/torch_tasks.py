"""Task functions that use torch, for the warm-worker tests: torch is imported with this module, before a run
starts, as the analysis function's module imports it (a run that imports torch itself ends its worker)."""

from __future__ import annotations

import os
import sys

import torch


def change_global_state() -> str:
    """Change what a run may change in its process and leave it so: a global forward hook, the default dtype and
    device, grad mode, deterministic algorithms, the RNG, ``sys.path``, the environment."""
    torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: output * 0)
    torch.set_default_dtype(torch.float64)
    torch.set_default_device("meta")
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(1234)
    sys.path.insert(0, "/nowhere")
    os.environ["TORCHSCAN_TEST_POLLUTION"] = "1"
    return "changed"


def global_state() -> dict:
    """What `change_global_state` changes, as this process sees it now."""
    return {"hooks": len(torch.nn.modules.module._global_forward_hooks), "dtype": str(torch.get_default_dtype()),
            "device": str(torch.get_default_device()), "grad": torch.is_grad_enabled(),
            "deterministic": torch.are_deterministic_algorithms_enabled(), "random": torch.rand(3).tolist(),
            "path": "/nowhere" in sys.path, "environ": "TORCHSCAN_TEST_POLLUTION" in os.environ,
            "output": torch.nn.Linear(2, 2)(torch.ones(2)).abs().sum().item() > 0, "pid": os.getpid()}


def patch_torch() -> str:
    """Replace a torch function from this (user) module: no reset undoes that, so the worker must be replaced."""
    torch.nn.functional.relu = lambda tensor, inplace=False: tensor
    return "patched"


def relu_is_torchs() -> bool:
    return torch.nn.functional.relu.__module__ == "torch.nn.functional"


def leave_thread() -> str:
    """Start a thread of this (user) module that outlives the call: it could change the process during the next."""
    import threading
    import time

    def linger() -> None:
        time.sleep(600)

    threading.Thread(target=linger, daemon=True).start()
    return "left"
