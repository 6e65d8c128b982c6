"""The package version (a leaf module, so that every layer can stamp it without importing the package)."""

__version__ = "0.1.0"
