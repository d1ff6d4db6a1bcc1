"""Experiment tracking. Only this package imports mlflow (lazily, in `pflpipe.tracking.mlflow`)."""

from pflpipe.tracking.base import NULL_TRACKER, Tracker

__all__ = ["NULL_TRACKER", "Tracker"]
