"""Performance metrics (thesis §5.2.3): the QoI, the metrics on it, the accuracy summaries.

The accuracy summaries are AA, std, min and the bottom-decile mean.

Every function is pure and takes per-client values in the table's accuracy unit (fractions or
percent); PUI and PUD are always percentages of clients. U⁺ is the set of clients with QoI > 0,
U⁻ the set with QoI < 0; a client with QoI = 0 exactly is in neither.
"""

import math
from collections.abc import Sequence

import numpy as np

from pflpipe.metrics.metric_registry import (
    Metric,
    UndefinedMetricError,
    all_equal,
    fsum,
    register,
    require_values,
)

NO_IMPROVED = "U⁺ is empty: no client improved on max(G, L)"
NO_DECREASED = "U⁻ is empty: no client lost accuracy against max(G, L)"


def quantum_of_improvement(
    personalized: Sequence[float], global_: Sequence[float], local: Sequence[float]
) -> np.ndarray:
    """Return each client's QoI_i = P_i − max(G_i, L_i) (thesis eq. 5.2).

    P, G and L are the client's accuracies under the personalized model, the global model
    (FedAvg) and the local-only model, listed in the same client order.

    >>> quantum_of_improvement([90, 60, 70, 80], [80, 70, 50, 80], [50, 60, 75, 70]).tolist()
    [10.0, -10.0, -5.0, 0.0]
    """
    p, g, loc = (np.asarray(v, dtype=float) for v in (personalized, global_, local))
    if not p.shape == g.shape == loc.shape or p.ndim != 1:
        raise ValueError(
            f"P, G and L need one value per client each (got shapes {p.shape}, {g.shape}, "
            f"{loc.shape})"
        )
    return p - np.maximum(g, loc)


def improved(qoi: np.ndarray) -> np.ndarray:
    """Return QoI over U⁺ (the clients with QoI > 0), in client order."""
    return qoi[qoi > 0]


def decreased(qoi: np.ndarray) -> np.ndarray:
    """Return QoI over U⁻ (the clients with QoI < 0), in client order; the values are negative."""
    return qoi[qoi < 0]


def percent_improved(qoi: np.ndarray) -> float:
    """Return PUI = 100 · |U⁺| / |U| (eq. 5.3), the percentage of clients that improved.

    >>> percent_improved(np.array([2, 4, 12, -1, -3, -8, 0, 0]))
    37.5
    """
    require_values(qoi, "PUI")
    return 100.0 * int(np.count_nonzero(qoi > 0)) / qoi.size


def percent_decreased(qoi: np.ndarray) -> float:
    """Return PUD = 100 · |U⁻| / |U| (eq. 5.4), the percentage of clients that lost accuracy.

    >>> percent_decreased(np.array([2, 4, 12, -1, -3, -8, 0, 0, 5, 6]))
    30.0
    """
    require_values(qoi, "PUD")
    return 100.0 * int(np.count_nonzero(qoi < 0)) / qoi.size


def _median(values: np.ndarray) -> float:
    # Sorting first makes the result independent of the client order.
    return float(np.median(np.sort(values)))


def median_improvement(qoi: np.ndarray) -> float:
    """Return MPI = median(QoI_i for i in U⁺).

    >>> median_improvement(np.array([2, 4, 12, -1, -3, -8, 0, 0]))
    4.0
    """
    require_values(qoi, "MPI")
    gains = improved(qoi)
    if gains.size == 0:
        raise UndefinedMetricError(NO_IMPROVED)
    return _median(gains)


def average_improvement(qoi: np.ndarray) -> float:
    """Return API = Σ_{i∈U⁺} QoI_i / |U⁺| (eq. 5.5).

    >>> average_improvement(np.array([2, 4, 12, -1, -3, -8, 0, 0]))
    6.0
    """
    require_values(qoi, "API")
    gains = improved(qoi)
    if gains.size == 0:
        raise UndefinedMetricError(NO_IMPROVED)
    return fsum(gains) / gains.size


def median_decrease(qoi: np.ndarray) -> float:
    """Return MPD = median(QoI_i for i in U⁻); negative, and closer to 0 is better.

    >>> median_decrease(np.array([2, 4, 12, -1, -3, -8, 0, 0]))
    -3.0
    """
    require_values(qoi, "MPD")
    losses = decreased(qoi)
    if losses.size == 0:
        raise UndefinedMetricError(NO_DECREASED)
    return _median(losses)


def average_decrease(qoi: np.ndarray) -> float:
    """Return APD = Σ_{i∈U⁻} QoI_i / |U⁻| (eq. 5.6); negative, and closer to 0 is better.

    >>> average_decrease(np.array([2, 4, 12, -1, -3, -8, 0, 0]))
    -4.0
    """
    require_values(qoi, "APD")
    losses = decreased(qoi)
    if losses.size == 0:
        raise UndefinedMetricError(NO_DECREASED)
    return fsum(losses) / losses.size


def average_accuracy(accuracy: np.ndarray) -> float:
    """Return AA = (1/K) Σ A_i, the mean accuracy over the K clients (Table 6.8's AA).

    >>> average_accuracy(np.array([60, 70, 80, 90]))
    75.0
    """
    require_values(accuracy, "AA")
    return fsum(accuracy) / accuracy.size


def accuracy_std(accuracy: np.ndarray) -> float:
    """Return the sample standard deviation sqrt(Σ (A_i − Ā)² / (K − 1)) (Table 6.2's Std Dev).

    The thesis's tables use the K − 1 denominator (e.g. CIFAR-10 DS-1, PersFL: 4.9); AV is the
    1/K variance.

    >>> accuracy_std(np.array([60, 70, 80]))
    10.0
    """
    require_values(accuracy, "std")
    if accuracy.size < 2:
        raise UndefinedMetricError("std needs at least 2 clients")
    if all_equal(accuracy):
        return 0.0
    mean = fsum(accuracy) / accuracy.size
    return math.sqrt(fsum((accuracy - mean) ** 2) / (accuracy.size - 1))


def min_accuracy(accuracy: np.ndarray) -> float:
    """Return min_i A_i, the worst client's accuracy.

    >>> min_accuracy(np.array([60, 70, 55, 80]))
    55.0
    """
    require_values(accuracy, "min")
    return float(accuracy.min())


def bottom_decile_mean(accuracy: np.ndarray) -> float:
    """Return the mean accuracy of the worst ⌈K/10⌉ clients (at least one).

    >>> bottom_decile_mean(np.array([90] * 10 + [40, 50]))  # K = 12: the worst 2
    45.0
    """
    require_values(accuracy, "bottom_decile")
    worst = np.sort(accuracy)[: math.ceil(accuracy.size / 10)]
    return fsum(worst) / worst.size


def top_samples_decile(values: np.ndarray) -> float:
    """Return the sample-weighted accuracy Σ n_i A_i / Σ n_i of the ⌈K/10⌉ largest clients.

    Self-FL's "top 10% most samples" (Chen et al. 2022, Table 1). `values` is [K, 2]: each
    client's accuracy and sample count; clients of equal size rank the less accurate first, so
    the value does not depend on the order of the clients.

    >>> top_samples_decile(np.array([[90, 30], [40, 20]] + [[100, 5]] * 10))  # the largest 2
    70.0
    """
    if values.ndim != 2 or values.shape[1:] != (2,):
        raise ValueError(f"top_samples_decile needs [K, 2] (accuracy, n_samples) values "
                         f"(got {values.shape})")
    require_values(values[:, 0], "top_samples_decile")
    order = np.lexsort((values[:, 0], -values[:, 1]))[: math.ceil(len(values) / 10)]
    accuracy, samples = values[order, 0], values[order, 1]
    if fsum(samples) <= 0:
        raise UndefinedMetricError("top_samples_decile is undefined: the largest clients hold "
                                   "no samples")
    return fsum(accuracy * samples) / fsum(samples)


# Undefined MPI/API rank as 0 (no improvement) and undefined MPD/APD as 0 (no loss: the best).
PUI = register(Metric("PUI", percent_improved, True, "qoi", "% of clients improved", 0.0))
PUD = register(Metric("PUD", percent_decreased, False, "qoi", "% of clients decreased", 0.0))
MPI = register(Metric("MPI", median_improvement, True, "qoi", "median QoI over U⁺", 0.0))
API = register(Metric("API", average_improvement, True, "qoi", "mean QoI over U⁺", 0.0))
MPD = register(Metric("MPD", median_decrease, True, "qoi", "median QoI over U⁻", 0.0))
APD = register(Metric("APD", average_decrease, True, "qoi", "mean QoI over U⁻", 0.0))
AA = register(Metric("AA", average_accuracy, True, "accuracy", "average accuracy"))
STD = register(Metric("std", accuracy_std, False, "accuracy", "std of accuracy (K−1)"))
MIN = register(Metric("min", min_accuracy, True, "accuracy", "worst client's accuracy"))
BOTTOM_DECILE = register(
    Metric("bottom_decile", bottom_decile_mean, True, "accuracy", "mean of the worst 10%")
)
TOP_SAMPLES_DECILE = register(Metric(
    "top_samples_decile", top_samples_decile, True, "accuracy_and_samples",
    "weighted accuracy of the 10% largest clients"))

#: The performance metrics of the report, in the thesis's order (Table 6.8 adds AA).
PERFORMANCE = ("PUI", "PUD", "MPI", "API", "MPD", "APD", "AA")
#: The accuracy summaries every model gets, baselines included (bottom_decile is Self-FL's
#: "worst 10%", top_samples_decile its "top 10% most samples").
ACCURACY = ("AA", "std", "min", "bottom_decile", "top_samples_decile")
