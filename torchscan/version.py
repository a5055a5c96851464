"""The package's version, in a module of its own so that every layer can name it without importing the package face
(`torchscan/__init__.py`, which nothing inside the package imports)."""

__version__ = "0.1.0.dev0"
