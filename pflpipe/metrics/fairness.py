"""Fairness metrics (thesis §5.2.3, eqs. 5.7-5.13) over a distribution F_1..F_K of K values.

The thesis applies them to the QoI — never to the mixed set: to QoI over U⁺ and, separately, to
|QoI| over U⁻ — and the report applies them to the raw per-client accuracies too. CS, Entropy and
JI need non-negative values and raise `ValueError` otherwise. Sums are exactly rounded
(`math.fsum`), so every value is independent of the order of the clients; CS, JI and Entropy are
clamped to their proven bounds, which float rounding could otherwise overshoot by an ulp, and
all-equal values get the exact perfectly-fair value (AV 0, CS 1, Entropy ln K, JI 1).
"""

import math

import numpy as np

from pflpipe.metrics.metric_registry import (
    Metric,
    UndefinedMetricError,
    all_equal,
    fsum,
    register,
    require_values,
)

ALL_ZERO = "{name} is undefined when every value is 0"


def _non_negative(values: np.ndarray, name: str) -> None:
    require_values(values, name)
    if (values < 0).any():
        raise ValueError(
            f"{name} needs non-negative values (got {values.min():g}); apply it to QoI over U⁺ "
            f"and to |QoI| over U⁻ separately, never to the mixed set (thesis §5.2.3)"
        )
    if not values.any():
        raise UndefinedMetricError(ALL_ZERO.format(name=name))


def average_variance(values: np.ndarray) -> float:
    """Return AV = (1/K) Σ (F_i − F̄)², F̄ = (1/K) Σ F_i (eq. 5.8); lower is fairer.

    >>> average_variance(np.array([2, 4, 6, 8]))
    5.0
    >>> average_variance(np.array([0.5, 0.5, 0.5]))
    0.0
    """
    require_values(values, "AV")
    if all_equal(values):
        return 0.0
    mean = fsum(values) / values.size
    return fsum((values - mean) ** 2) / values.size


def cosine_similarity(values: np.ndarray) -> float:
    """Return CS = ((1/K) Σ F_i) / sqrt((1/K) Σ F_i²) (eq. 5.10); in (0, 1], higher is fairer.

    It is the cosine between F and the all-ones vector: 1 exactly when all values are equal.

    >>> cosine_similarity(np.array([1, 7]))
    0.8
    >>> cosine_similarity(np.array([3, 3, 3]))
    1.0
    """
    _non_negative(values, "CS")
    if all_equal(values):
        return 1.0
    mean = fsum(values) / values.size
    mean_square = fsum(values**2) / values.size
    return min(1.0, mean / math.sqrt(mean_square))


def entropy(values: np.ndarray) -> float:
    """Return Entropy = − Σ p_i ln p_i, p_i = F_i / Σ F (eq. 5.12); in [0, ln K], higher is fairer.

    The logarithm is natural; a zero value contributes 0 (the limit of p ln p).

    >>> entropy(np.array([1, 1, 2]))  # 1.5 ln 2
    1.0397207708399179
    >>> entropy(np.array([5, 5])) == math.log(2)
    True
    """
    _non_negative(values, "Entropy")
    if all_equal(values):
        return math.log(values.size)
    shares = values[values > 0] / fsum(values)
    return min(math.log(values.size), max(0.0, -fsum(shares * np.log(shares))))


def jain_index(values: np.ndarray) -> float:
    """Return JI = (Σ F_i)² / (K Σ F_i²) (eq. 5.13, Jain et al.); in [1/K, 1], higher is fairer.

    JI = 1 exactly when all values are equal and 1/K when one client holds everything; JI = CS².

    >>> jain_index(np.array([1, 7]))
    0.64
    >>> jain_index(np.array([0, 0, 0, 5]))
    0.25
    """
    _non_negative(values, "JI")
    if all_equal(values):
        return 1.0
    index = fsum(values) ** 2 / (values.size * fsum(values**2))
    return min(1.0, max(1.0 / values.size, index))


AV = register(Metric("AV", average_variance, False, "distribution", "average variance"))
CS = register(Metric("CS", cosine_similarity, True, "distribution", "cosine similarity"))
ENTROPY = register(Metric("Entropy", entropy, True, "distribution", "entropy"))
JI = register(Metric("JI", jain_index, True, "distribution", "Jain's index"))

#: The fairness metrics, in the thesis's order (Fig. 6.9).
FAIRNESS = ("AV", "CS", "Entropy", "JI")
