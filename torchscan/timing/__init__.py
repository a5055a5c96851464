"""Time: measured on the device at hand (`measured`: ``measure_time``; `profiled`: per layer call, ``time=True``)."""
