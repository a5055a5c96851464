"""TorchScan: truthful cost analysis of PyTorch models."""

__version__ = "0.1.0.dev0"

from .compare import compare_reports
from .crawler import IncompleteAnalysisError, crawl_module
from .handlers import ModuleCall, ModuleEstimates, ModuleHandler
from .memory import measure_peak_memory
from .operators import measure_flops
from .results import MetricResult
from .schema import SCHEMA_VERSION
from .text import summary

__all__ = [
    "SCHEMA_VERSION",
    "IncompleteAnalysisError",
    "MetricResult",
    "ModuleCall",
    "ModuleEstimates",
    "ModuleHandler",
    "compare_reports",
    "crawl_module",
    "measure_flops",
    "measure_peak_memory",
    "summary",
]
