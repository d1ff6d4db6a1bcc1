"""Shared fixtures. Tests run quiet (no progress bars) and never reach the network."""

import os

os.environ.setdefault("CI", "true")
os.environ.setdefault("MLFLOW_SKIP_PIP_REQUIREMENTS_CHECK", "true")
