"""Per-client evaluation: the results table, performance and fairness metrics, the report.

Every metric is a pure function with a registry entry (`METRIC_REGISTRY`, see
`pflpipe.metrics.base`); `summarize` applies them to a `ResultsTable` and answers the thesis's two
questions per split;
`pflpipe.metrics.report` writes report.json, report.md, report.html and the figures.
"""

from pflpipe.metrics.base import METRIC_REGISTRY, Metric, UndefinedMetricError
from pflpipe.metrics.fairness import (
    FAIRNESS,
    average_variance,
    cosine_similarity,
    entropy,
    jain_index,
)
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
from pflpipe.metrics.summary import BEST_RULE, FAIREST_RULE, SplitSummary, summarize
from pflpipe.metrics.table import ResultsTable, read_table, table_from_records

__all__ = [
    "ACCURACY", "BEST_RULE", "FAIREST_RULE", "FAIRNESS", "PERFORMANCE", "METRIC_REGISTRY", "Metric",
    "ResultsTable", "SplitSummary", "UndefinedMetricError", "accuracy_std", "average_accuracy",
    "average_decrease", "average_improvement", "average_variance", "bottom_decile_mean",
    "cosine_similarity", "entropy", "jain_index", "median_decrease", "median_improvement",
    "min_accuracy", "percent_decreased", "percent_improved", "quantum_of_improvement",
    "read_table", "summarize", "table_from_records",
]
