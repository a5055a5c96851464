"""Memory: measured on a device by the profiler, and traced through dispatch on any device.

`measured` runs a workload and reads the allocator's records (`measure_peak_memory`); `timeline` follows every
tensor storage an operator creates until it is freed (`trace_memory`); `forward` turns that timeline into a
`crawl_module` report's memory section, and `training_step` into a training step's. The trace sits below the
crawler (the crawler asks it for the forward's section), above tracing and operator recording.
"""
