"""Performance metrics on hand-computed cases (thesis §5.2.3, eqs. 5.2-5.6)."""

import math

import numpy as np
import pytest

from pflpipe.metrics import (
    METRIC_REGISTRY,
    UndefinedMetricError,
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

# Five clients, fractions. P, G, L per client and QoI = P − max(G, L) by hand:
#   client 0: 0.75 − max(0.5, 0.25)   = +0.25
#   client 1: 0.5  − max(0.625, 0.5)  = −0.125
#   client 2: 0.625 − max(0.5, 0.75)  = −0.125
#   client 3: 0.875 − max(0.75, 0.75) = +0.125
#   client 4: 0.5  − max(0.5, 0.25)   = 0      (neither U⁺ nor U⁻)
P = [0.75, 0.5, 0.625, 0.875, 0.5]
G = [0.5, 0.625, 0.5, 0.75, 0.5]
L = [0.25, 0.5, 0.75, 0.75, 0.25]
QOI = np.array([0.25, -0.125, -0.125, 0.125, 0.0])


def test_quantum_of_improvement_subtracts_the_better_baseline():
    assert quantum_of_improvement(P, G, L).tolist() == QOI.tolist()


def test_quantum_of_improvement_rejects_mismatched_clients():
    with pytest.raises(ValueError, match="one value per client"):
        quantum_of_improvement([0.5, 0.6], [0.5], [0.5, 0.4])


def test_percent_improved_counts_strictly_positive_qoi():
    # U⁺ = {0, 3}: 2 of 5 clients = 40 %; the zero client is not improved.
    assert percent_improved(QOI) == 40.0


def test_percent_decreased_counts_strictly_negative_qoi():
    # U⁻ = {1, 2}: 2 of 5 = 40 %.
    assert percent_decreased(QOI) == 40.0


def test_median_and_average_improvement_use_only_improved_clients():
    # U⁺ QoI = [0.25, 0.125]: median = mean = 0.1875.
    assert median_improvement(QOI) == 0.1875
    assert average_improvement(QOI) == 0.1875


def test_median_and_average_improvement_differ_on_skewed_gains():
    # U⁺ = [1, 2, 9] (percent): median 2, mean 12 / 3 = 4.
    qoi = np.array([1.0, 2.0, 9.0, -3.0])
    assert median_improvement(qoi) == 2.0
    assert average_improvement(qoi) == 4.0


def test_median_improvement_of_even_count_averages_middle_values():
    # U⁺ = [1, 3, 5, 11] → (3 + 5) / 2 = 4.
    assert median_improvement(np.array([11.0, 1.0, 5.0, 3.0])) == 4.0


def test_median_and_average_decrease_are_negative():
    # U⁻ QoI = [−0.125, −0.125]: median = mean = −0.125.
    assert median_decrease(QOI) == -0.125
    assert average_decrease(QOI) == -0.125
    # U⁻ = [−1, −2, −9]: median −2, mean −4.
    qoi = np.array([-1.0, -2.0, -9.0, 5.0])
    assert median_decrease(qoi) == -2.0
    assert average_decrease(qoi) == -4.0


def test_improvement_metrics_are_undefined_when_no_client_improved():
    qoi = np.array([-1.0, 0.0, -2.0])
    for fn in (median_improvement, average_improvement):
        with pytest.raises(UndefinedMetricError, match="U⁺ is empty"):
            fn(qoi)
    assert percent_improved(qoi) == 0.0


def test_decrease_metrics_are_undefined_when_no_client_lost():
    qoi = np.array([1.0, 0.0, 2.0])
    for fn in (median_decrease, average_decrease):
        with pytest.raises(UndefinedMetricError, match="U⁻ is empty"):
            fn(qoi)
    assert percent_decreased(qoi) == 0.0


def test_all_zero_qoi_is_neither_improved_nor_decreased():
    qoi = np.zeros(4)
    assert percent_improved(qoi) == 0.0
    assert percent_decreased(qoi) == 0.0


def test_average_accuracy_is_the_plain_client_mean():
    # (0.5 + 0.75 + 1.0) / 3 = 0.75: clients weigh equally whatever their sizes.
    assert average_accuracy(np.array([0.5, 0.75, 1.0])) == 0.75


def test_accuracy_std_uses_k_minus_one():
    # [60, 70, 80]: squared deviations 100 + 0 + 100 = 200; 200 / (3 − 1) = 100; sqrt = 10.
    assert accuracy_std(np.array([60.0, 70.0, 80.0])) == 10.0
    # [1, 3]: deviations ±1, 2 / 1 = 2 → sqrt(2).
    assert accuracy_std(np.array([1.0, 3.0])) == math.sqrt(2)


def test_accuracy_std_of_equal_values_is_zero_and_needs_two_clients():
    assert accuracy_std(np.array([0.8, 0.8, 0.8])) == 0.0
    with pytest.raises(UndefinedMetricError, match="at least 2 clients"):
        accuracy_std(np.array([0.8]))


def test_min_accuracy_is_the_worst_client():
    assert min_accuracy(np.array([0.9, 0.0, 0.4])) == 0.0


def test_bottom_decile_mean_averages_the_worst_tenth_rounded_up():
    # K = 10 → ⌈1⌉ = 1 client: the minimum.
    assert bottom_decile_mean(np.arange(10, 20, dtype=float)) == 10.0
    # K = 11 → ⌈1.1⌉ = 2 clients: (10 + 11) / 2.
    assert bottom_decile_mean(np.arange(10, 21, dtype=float)) == 10.5
    # K = 3 → 1 client.
    assert bottom_decile_mean(np.array([0.7, 0.2, 0.9])) == 0.2


def test_metrics_are_undefined_on_no_clients():
    for name in ("PUI", "PUD", "AA", "min", "bottom_decile"):
        value, reason = METRIC_REGISTRY[name].compute([])
        assert value is None and "empty set of clients" in reason


def test_registry_marks_the_direction_of_each_performance_metric():
    directions = {name: METRIC_REGISTRY[name].higher_is_better
                  for name in ("PUI", "PUD", "MPI", "API", "MPD", "APD", "AA", "std", "min",
                               "bottom_decile")}
    assert directions == {"PUI": True, "PUD": False, "MPI": True, "API": True, "MPD": True,
                          "APD": True, "AA": True, "std": False, "min": True,
                          "bottom_decile": True}


def test_registry_entry_computes_like_its_function():
    assert METRIC_REGISTRY["MPI"](QOI.tolist()) == median_improvement(QOI)
    assert METRIC_REGISTRY["MPD"].compute([1.0, 2.0]) == (
        None, "U⁻ is empty: no client lost accuracy against max(G, L)")
