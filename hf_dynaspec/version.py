"""The package version, from the installed distribution's metadata (pyproject.toml's `version` is the one source).

A leaf module, so that every layer can stamp the version without importing the package. Running from a source
tree that was never installed (no metadata) gives "0+unknown", which no release compares equal to.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hf-dynaspec")
except PackageNotFoundError:  # a source checkout on sys.path without `pip install -e .`
    __version__ = "0+unknown"
