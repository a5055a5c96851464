"""Time: bounded by a device's peaks (`roofline`, `HARDWARE`, `measure_hardware`) and measured (issue 46)."""

from .hardware import HARDWARE, Hardware, measure_hardware
from .roofline import Roofline, roofline, roofline_curve

__all__ = ["HARDWARE", "Hardware", "Roofline", "measure_hardware", "roofline", "roofline_curve"]
