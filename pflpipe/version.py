"""The version of pflpipe, spelled here only.

pyproject.toml reads it (`[tool.setuptools.dynamic]`); `pflpipe --version` and the MLflow runs'
tags name it.
"""

__version__ = "0.1.0"
