"""Module-view formulas: one file per family of ``torch.nn`` layers, each exposing ``HANDLERS``."""
