"""Experiment tracking.

Only this package imports mlflow, and only inside functions, so importing it stays light. Stages
receive a `Tracker`; the CLI and the components use the entry points of `pflpipe.tracking.runs`.
"""

from pflpipe.tracking.runs import (
    ParentRun,
    child_run,
    finish_parent,
    open_parent_run,
    parent_tracker,
    record_failure,
    resolve_tracking_uri,
)
from pflpipe.tracking.tracker import NULL_TRACKER, Tracker

__all__ = [
    "NULL_TRACKER", "ParentRun", "Tracker", "child_run", "finish_parent", "open_parent_run",
    "parent_tracker", "record_failure", "resolve_tracking_uri",
]
