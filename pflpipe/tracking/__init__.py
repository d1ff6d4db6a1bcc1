"""Experiment tracking.

Only this package imports mlflow, and only inside functions, so importing it stays light. Stages
receive a `Tracker`; the CLI and the components use the entry points of `pflpipe.tracking.runs`.
"""

from pflpipe.tracking.base import NULL_TRACKER, Tracker
from pflpipe.tracking.runs import (
    ParentRun,
    child_run,
    finish_parent,
    open_parent_run,
    parent_tracker,
    record_failure,
    resolve_tracking_uri,
)

__all__ = [
    "NULL_TRACKER", "ParentRun", "Tracker", "child_run", "finish_parent", "open_parent_run",
    "parent_tracker", "record_failure", "resolve_tracking_uri",
]
