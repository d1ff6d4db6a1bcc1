"""Fairness metrics on hand-computed cases (thesis eqs. 5.8, 5.10, 5.12, 5.13)."""

import math

import numpy as np
import pytest

from pflpipe.metrics import (
    METRIC_REGISTRY,
    UndefinedMetricError,
    average_variance,
    cosine_similarity,
    entropy,
    jain_index,
)


def test_average_variance_divides_by_k():
    # [2, 4, 6, 8]: mean 5, squared deviations 9 + 1 + 1 + 9 = 20, / 4 = 5.
    assert average_variance(np.array([2.0, 4.0, 6.0, 8.0])) == 5.0
    # [0.25, 0.75]: mean 0.5, deviations ±0.25 → 0.0625.
    assert average_variance(np.array([0.25, 0.75])) == 0.0625


def test_cosine_similarity_is_mean_over_root_mean_square():
    # [1, 7]: mean 4, mean square (1 + 49) / 2 = 25, sqrt 5 → 4 / 5.
    assert cosine_similarity(np.array([1.0, 7.0])) == 0.8
    # [0, 2]: mean 1, mean square 2 → 1 / sqrt 2.
    assert cosine_similarity(np.array([0.0, 2.0])) == pytest.approx(1 / math.sqrt(2), rel=1e-15)


def test_entropy_uses_natural_log_of_shares():
    # [1, 1, 2]: shares 1/4, 1/4, 1/2 → −(2 · 1/4 · ln 1/4 + 1/2 · ln 1/2) = 1.5 ln 2.
    assert entropy(np.array([1.0, 1.0, 2.0])) == pytest.approx(1.5 * math.log(2), rel=1e-15)
    # A zero share contributes 0: [0, 3, 3] → ln 2.
    assert entropy(np.array([0.0, 3.0, 3.0])) == pytest.approx(math.log(2), rel=1e-15)


def test_jain_index_is_squared_sum_over_k_times_sum_of_squares():
    # [1, 7]: 8² / (2 · 50) = 0.64.
    assert jain_index(np.array([1.0, 7.0])) == 0.64
    # One client holds everything: 5² / (4 · 25) = 1/4.
    assert jain_index(np.array([0.0, 0.0, 0.0, 5.0])) == 0.25


def test_jain_index_is_one_when_all_equal():
    assert jain_index(np.array([0.3, 0.3, 0.3])) == 1.0


def test_all_equal_values_are_perfectly_fair():
    values = np.array([0.7] * 6)
    assert average_variance(values) == 0.0
    assert cosine_similarity(values) == 1.0
    assert entropy(values) == pytest.approx(math.log(6), rel=1e-15)
    assert jain_index(values) == 1.0


def test_single_value_is_trivially_fair():
    values = np.array([0.4])
    assert (average_variance(values), cosine_similarity(values), entropy(values),
            jain_index(values)) == (0.0, 1.0, 0.0, 1.0)


@pytest.mark.parametrize("fn", [cosine_similarity, entropy, jain_index])
def test_fairness_metric_is_undefined_when_every_value_is_zero(fn):
    with pytest.raises(UndefinedMetricError, match="every value is 0"):
        fn(np.zeros(3))


def test_average_variance_of_zeros_is_zero():
    assert average_variance(np.zeros(3)) == 0.0


@pytest.mark.parametrize("fn", [cosine_similarity, entropy, jain_index])
def test_fairness_metric_rejects_the_mixed_qoi_set(fn):
    with pytest.raises(ValueError, match="never to the mixed set"):
        fn(np.array([0.2, -0.1]))


@pytest.mark.parametrize("name", ["AV", "CS", "Entropy", "JI"])
def test_fairness_metric_is_undefined_on_an_empty_set(name):
    value, reason = METRIC_REGISTRY[name].compute([])
    assert value is None and reason == f"{name} is undefined on an empty set of clients"


def test_registry_says_lower_av_and_higher_cs_entropy_ji_are_fairer():
    assert {n: METRIC_REGISTRY[n].higher_is_better for n in ("AV", "CS", "Entropy", "JI")} == {
        "AV": False, "CS": True, "Entropy": True, "JI": True}


def test_fairness_metric_needs_a_flat_array():
    with pytest.raises(ValueError, match="1-D"):
        jain_index(np.ones((2, 2)))
