"""The Tracker a stage receives. The base class records nothing (the default); the MLflow tracker
in `pflpipe.tracking.mlflow` writes to a tracking server. Algorithms and the engine never track:
stages log what the engine returns."""

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


class Tracker:
    """A run that records nothing; subclasses write somewhere."""

    run_id: str | None = None

    @contextmanager
    def child(self, name: str, tags: dict[str, str] | None = None) -> Iterator["Tracker"]:
        """Open a child run (per algorithm, per client) and close it on exit."""
        yield self

    def log_params(self, params: dict[str, Any]) -> None:
        """Record parameters (flat mapping, values stringified)."""

    def set_tags(self, tags: dict[str, str]) -> None:
        """Record tags."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Record metric values, optionally at a step (the round)."""

    def log_history(self, rows: list[dict[str, float]], step_key: str = "round") -> None:
        """Record many metric rows at once; each row holds the step under `step_key`."""

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """Upload a file or a directory."""

    def log_text(self, text: str, artifact_file: str) -> None:
        """Upload text as a file."""


NULL_TRACKER = Tracker()
