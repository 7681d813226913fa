"""The one place the package version is defined (pyproject and extension.toml read or are checked against it)."""

__version__ = "0.1.0"
