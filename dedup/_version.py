"""The one version of the toolkit (read by pyproject.toml and ``dedup.__version__``)."""

__version__ = "0.1.0"
