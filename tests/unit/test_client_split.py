"""Per-client train/val/test: sizes by the documented rule, stratified by class."""

import numpy as np
import pytest

from pflpipe.data.client_split import split_client, split_sizes
from pflpipe.errors import DataError


@pytest.mark.parametrize(("n", "val", "test", "expected"), [
    (10, 0.2, 0.2, (6, 2, 2)),
    (3, 0.2, 0.2, (1, 1, 1)),      # every split gets one sample
    (7, 0.2, 0.2, (5, 1, 1)),      # 1.4 rounds to 1
    (8, 0.25, 0.25, (4, 2, 2)),
    (13, 0.5, 0.1, (5, 7, 1)),     # 6.5 rounds half up to 7
    (4, 0.45, 0.45, (1, 1, 2)),    # train keeps one: val gives one back
])
def test_split_sizes_follow_the_rounding_rule(n, val, test, expected):
    assert split_sizes(n, val, test) == expected


def test_split_sizes_names_a_client_too_small():
    with pytest.raises(DataError, match="client 7 has 2 sample"):
        split_sizes(2, 0.2, 0.2, client_id=7)


def test_split_client_is_exactly_proportional_when_classes_divide():
    # 10 of class 0 and 5 of class 1: val takes 3 (2 + 1); test takes 3 of the other 12 (2 + 1)
    labels = np.array([0] * 10 + [1] * 5)
    indices = np.arange(15)

    result = split_client(indices, labels, 0.2, 0.2, np.random.default_rng(0))

    assert np.bincount(labels[result.val], minlength=2).tolist() == [2, 1]
    assert np.bincount(labels[result.test], minlength=2).tolist() == [2, 1]
    assert np.bincount(labels[result.train], minlength=2).tolist() == [6, 3]


@pytest.mark.parametrize("stratified", [True, False])
def test_split_client_partitions_the_client(stratified):
    pooled_labels = np.arange(100) % 4  # labels of the whole pooled dataset
    indices = np.array([40, 3, 7, 11, 12, 90, 5, 6, 8, 9, 1])

    result = split_client(indices, pooled_labels if stratified else None, 0.2, 0.2,
                          np.random.default_rng(1))

    merged = np.concatenate([result.train, result.val, result.test])
    assert sorted(merged.tolist()) == sorted(indices.tolist())
    assert all(np.all(np.diff(part) > 0) for part in (result.train, result.val, result.test))


def test_split_client_gives_a_singleton_class_to_one_split():
    labels = np.array([0] * 9 + [1])

    result = split_client(np.arange(10), labels, 0.2, 0.2, np.random.default_rng(2))

    where = [int(np.isin(9, part)) for part in (result.train, result.val, result.test)]
    assert sum(where) == 1
