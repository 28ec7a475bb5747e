"""expkit's version, here so that a stage can record it without importing the package's
public surface (``expkit/__init__.py``), which re-exports from stages above it."""

__version__ = "0.1.0"
