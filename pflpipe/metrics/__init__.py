"""Per-client evaluation: the results table, performance and fairness metrics, the report.

Every metric is a pure function with a registry entry (`METRIC_REGISTRY`, see
`pflpipe.metrics.metric_registry`); `summarize` applies them to a `ResultsTable` and answers the
thesis's two questions per split; `pflpipe.report.report_writer` writes report.json, report.md,
report.html and the figures.
"""

from pflpipe.metrics.fairness import (
    FAIRNESS,
    average_variance,
    cosine_similarity,
    entropy,
    jain_index,
)
from pflpipe.metrics.metric_registry import METRIC_REGISTRY, Metric, UndefinedMetricError
from pflpipe.metrics.performance import (
    ACCURACY,
    PERFORMANCE,
    accuracy_std,
    average_accuracy,
    average_decrease,
    average_improvement,
    bottom_decile_mean,
    median_decrease,
    median_improvement,
    min_accuracy,
    percent_decreased,
    percent_improved,
    quantum_of_improvement,
)
from pflpipe.metrics.results_table import ResultsTable, table_from_records
from pflpipe.metrics.summary import BEST_RULE, FAIREST_RULE, SplitSummary, summarize

__all__ = [
    "ACCURACY", "BEST_RULE", "FAIREST_RULE", "FAIRNESS", "PERFORMANCE", "METRIC_REGISTRY", "Metric",
    "ResultsTable", "SplitSummary", "UndefinedMetricError", "accuracy_std", "average_accuracy",
    "average_decrease", "average_improvement", "average_variance", "bottom_decile_mean",
    "cosine_similarity", "entropy", "jain_index", "median_decrease", "median_improvement",
    "min_accuracy", "percent_decreased", "percent_improved", "quantum_of_improvement",
    "summarize", "table_from_records",
]
