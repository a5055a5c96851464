"""The training step: forward, loss, backward and optimizer step analyzed per layer call.

`step` runs the step (`crawl_training_step`) on top of the crawler's forward; `section` assembles the report's
``training`` section from what the step recorded.
"""
