"""TorchScan: truthful cost analysis of PyTorch models.

The public API is imported on first use, so tools that only read reports (``torchscan-report`` rebuilding a
cached catalog, for instance) do not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__ as __version__

#: public name -> the module that defines it
_EXPORTS = {
    "CURVE_SCHEMA_VERSION": "curves.cost_curve",
    "HARDWARE": "timing.hardware",
    "SCHEMA_VERSION": "schema",
    "IncompleteAnalysisError": "crawler",
    "MetricResult": "results",
    "ModuleCall": "handlers",
    "ModuleEstimates": "handlers",
    "ModuleHandler": "handlers",
    "compare_reports": "compare",
    "cost_curve": "curves.cost_curve",
    "crawl_module": "crawler",
    "crawl_training_step": "training.step",
    "decode_step_inputs": "calls.decode",
    "evaluate_piece": "curves.cost_curve",
    "fit_curves": "curves.cost_curve",
    "fit_devices": "parallel.fit",
    "measure_flops": "operators",
    "measure_hardware": "timing.hardware",
    "measure_peak_memory": "memory.measured",
    "measure_time": "timing.measured",
    "roofline": "timing.roofline",
    "roofline_curve": "timing.roofline",
    "summary": "text",
    "trace_memory": "memory.timeline",
}
__all__ = [
    "CURVE_SCHEMA_VERSION",
    "HARDWARE",
    "SCHEMA_VERSION",
    "IncompleteAnalysisError",
    "MetricResult",
    "ModuleCall",
    "ModuleEstimates",
    "ModuleHandler",
    "compare_reports",
    "cost_curve",
    "crawl_module",
    "crawl_training_step",
    "decode_step_inputs",
    "evaluate_piece",
    "fit_curves",
    "fit_devices",
    "measure_flops",
    "measure_hardware",
    "measure_peak_memory",
    "measure_time",
    "roofline",
    "roofline_curve",
    "summary",
    "trace_memory",
]

if TYPE_CHECKING:
    from .calls.decode import decode_step_inputs
    from .compare import compare_reports
    from .crawler import IncompleteAnalysisError, crawl_module
    from .curves.cost_curve import CURVE_SCHEMA_VERSION, cost_curve, evaluate_piece, fit_curves
    from .handlers import ModuleCall, ModuleEstimates, ModuleHandler
    from .memory.measured import measure_peak_memory
    from .memory.timeline import trace_memory
    from .operators import measure_flops
    from .parallel.fit import fit_devices
    from .results import MetricResult
    from .schema import SCHEMA_VERSION
    from .text import summary
    from .timing.hardware import HARDWARE, measure_hardware
    from .timing.measured import measure_time
    from .timing.roofline import roofline, roofline_curve
    from .training.step import crawl_training_step


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'torchscan' has no attribute {name!r}")
    module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
