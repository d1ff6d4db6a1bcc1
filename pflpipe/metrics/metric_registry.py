"""The metric registry: each metric is a pure function with a thin `Metric` object around it.

The object carries what the report, the best/fairest rule and the plots need to know about the
function: which way is better (`higher_is_better`), what it reads (`reads`) and how an undefined
value ranks (`null_as`).
"""

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

#: What a metric function reads: the per-client QoI, the per-client accuracies, any
#: non-negative distribution (QoI over U⁺, |QoI| over U⁻, accuracies), the per-client
#: accuracies with the clients' sample counts ([K, 2]: accuracy, n_samples), or the per-client
#: gain PA − GA of personalization over the algorithm's own global model.
Reads = Literal["qoi", "accuracy", "distribution", "accuracy_and_samples", "gain"]


class UndefinedMetricError(ValueError):
    """A metric has no value on this input (e.g. U⁻ is empty); the message is the reason."""


@dataclass(frozen=True)
class Metric:
    """A registered metric.

    Attributes:
        name: The short name used in the report, the spec and MLflow (``PUI``, ``JI``).
        fn: The pure function: a 1-D float array in (a [K, 2] array of accuracy and sample count
            when it `reads` ``accuracy_and_samples``), a float out; raises
            `UndefinedMetricError` when the value does not exist.
        higher_is_better: Direction of "better" (performance) or "fairer" (fairness).
        reads: What the function is applied to.
        title: A few words for tables and plots.
        null_as: The value an undefined result ranks as in the best/fairest vote, or None if
            an undefined result cannot win (e.g. MPD with no decreased client ranks as 0: no loss).

    """

    name: str
    fn: Callable[[np.ndarray], float]
    higher_is_better: bool
    reads: Reads
    title: str
    null_as: float | None = None

    def __call__(self, values: Iterable[float]) -> float:
        """Apply the metric; raise `UndefinedMetricError` when it has no value."""
        array = values if isinstance(values, np.ndarray) else np.asarray(list(values))
        return float(self.fn(array.astype(float, copy=False)))

    def compute(self, values: Iterable[float]) -> tuple[float | None, str | None]:
        """Return ``(value, None)``, or ``(None, reason)`` when the metric is undefined."""
        try:
            return self(values), None
        except UndefinedMetricError as err:
            return None, str(err)

    @property
    def direction(self) -> str:
        """``"↑"`` when higher is better, else ``"↓"``."""
        return "↑" if self.higher_is_better else "↓"


METRIC_REGISTRY: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add a metric to the registry under its name; return it."""
    if metric.name in METRIC_REGISTRY:
        raise ValueError(f"metric {metric.name!r} is registered twice")
    METRIC_REGISTRY[metric.name] = metric
    return metric


def fsum(values: np.ndarray) -> float:
    """Exactly rounded sum: results do not depend on the order of the clients."""
    return math.fsum(values.tolist())


def all_equal(values: np.ndarray) -> bool:
    """Return whether every value is the same.

    Metrics then return their exact "perfectly fair" value rather than one rounding moved by an ulp.
    """
    return values.size > 0 and bool((values == values[0]).all())


def require_values(values: np.ndarray, what: str) -> None:
    """Raise `UndefinedMetricError` when there is nothing to compute `what` over."""
    if values.ndim != 1:
        raise ValueError(f"{what} needs a 1-D array of per-client values (got {values.shape})")
    if values.size == 0:
        raise UndefinedMetricError(f"{what} is undefined on an empty set of clients")
