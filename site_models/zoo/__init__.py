"""Plain-PyTorch reference models for TorchScan's accuracy tests and model-zoo catalog.

Each module reproduces one published architecture family with standard ``torch.nn`` building blocks only (no
torchvision, timm or transformers, no weights, no downloads). Every model is built by a factory function whose
keyword arguments default to the published configuration, so ``models.toml`` entries can name them as
``zoo.<family>:<factory>`` and shrink them for fast tests. Models that need integer ids or masks come with an
inputs function returning ``(args, kwargs)``.

Families: ``resnet``, ``mobilenet``, ``vit``, ``bert``, ``gpt2``, ``lstm``, ``llama`` and ``small`` (tiny models
for end-to-end tests).

Two modules are the exception, on purpose: ``hf_llama`` and ``timm_models`` build the libraries' own models
(``transformers``, timm; random weights, nothing downloaded) so that the catalog shows third-party building blocks
analyzed completely. ``torchvision_ops`` makes torchvision importable where its compiled operators do not load.
"""
