"""Time: bounded by a device's peaks (`hardware`: ``HARDWARE``, ``measure_hardware``; `roofline`) and measured on
the device at hand (`measured`: ``measure_time``; `profiled`: per layer call, ``time=True``)."""
