"""The Tracker a stage receives.

The base class records nothing (the default); the MLflow tracker in
`pflpipe.tracking.mlflow_tracker` writes to a tracking server. Algorithms and the engine never
track: stages log what the engine returns.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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

    def log_dataset(self, name: str, digest: str, source: str, context: str = "train") -> None:
        """Record a dataset the run used as an input (MLflow's Dataset column)."""

    def log_dict(self, data: dict[str, Any], artifact_file: str) -> None:
        """Upload a mapping as JSON (or YAML when `artifact_file` ends in .yaml/.yml)."""

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        """Upload a matplotlib figure as an image (e.g. ``figures/label_distribution.png``)."""

    def log_state_dict(self, state_dict: dict[str, Any], name: str) -> None:
        """Upload a model's state_dict as ``models/<name>.pt`` (load with weights_only=True)."""

    def run_exists(self, run_id: str) -> bool:
        """Whether run `run_id` exists (not deleted) in this run's store and experiment."""
        return False

    def log_table(self, rows: list[dict[str, Any]], artifact_file: str) -> None:
        """Upload rows as an MLflow table (a JSON artifact the UI shows and compares)."""

    def log_model(self, module: Any, name: str) -> str | None:
        """Log a torch module as an MLflow model of this run; return its id (None: not logged)."""
        return None

    def log_batch(self, rows: list[dict[str, float]] = (), metrics: dict[str, float] | None = None,
                  params: dict[str, Any] | None = None, *, step_key: str = "round",
                  model_id: str | None = None) -> None:
        """Record history rows, final metrics and params at once (one request where possible).

        `model_id` links the final `metrics` to a model of `log_model` (its Models tab).
        """
        if rows:
            self.log_history(list(rows), step_key)
        if metrics:
            self.log_metrics(metrics)
        if params:
            self.log_params(params)


NULL_TRACKER = Tracker()
