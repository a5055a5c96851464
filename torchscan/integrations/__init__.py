"""Built-in handlers for building blocks that other libraries define: ``transformers``, timm, torchvision.

One module per library (`.transformers`, `.timm`, `.torchvision`, plus `.parametrizations` for PyTorch's private
parametrization classes) lists its handlers by qualified class name and its family rules; `.lookup` joins them
with the ``torch.nn`` formulas in one MRO walk; `torchscan.operator_check` holds the operator check that keeps
each formula trusted only while it describes what ran. Nothing in this package imports the libraries it describes.
"""
