"""Split strategies on tiny label arrays whose outcome can be worked out by hand."""

import numpy as np
import pytest

from pflpipe.data import allocation, skews, splits
from pflpipe.data.splits import Limits
from pflpipe.errors import DataError


def sorted_labels(n_classes: int, per_class: int) -> np.ndarray:
    return np.repeat(np.arange(n_classes), per_class)


def class_counts(labels, clients, n_classes):
    return np.array([np.bincount(labels[c], minlength=n_classes) for c in clients])


# ---- building blocks --------------------------------------------------------------------------

def test_proportional_floors_cumulative_shares():
    # cumulative shares 1/4, 2/4, 4/4 of 10 → edges 2, 5, 10
    assert allocation.proportional(10, np.array([1.0, 1.0, 2.0])).tolist() == [2, 3, 5]
    # a zero weight gets nothing: edges 3.5→3, 3.5→3, 7
    assert allocation.proportional(7, np.array([1.0, 0.0, 1.0])).tolist() == [3, 0, 4]


def test_share_counts_gives_floor_first_then_shares():
    sizes = np.array([10, 4])
    shares = np.array([[1.0, 1.0], [0.0, 0.0]])
    floor = np.array([[2, 0], [0, 0]])

    counts = allocation.share_counts(sizes, shares, floor)

    # class 0: 2 + 8 shared equally = [6, 4]; class 1 is held by nobody
    assert counts.tolist() == [[6, 4], [0, 0]]


def test_class_indices_lists_positions_per_class():
    result = allocation.class_indices(np.array([2, 0, 2, 1]), 3)

    assert [r.tolist() for r in result] == [[1], [3], [0, 2]]


def test_members_groups_positions_by_owner_and_skips_unassigned():
    result = allocation.members(np.array([1, -1, 0, 1]), 2)

    assert [r.tolist() for r in result] == [[2], [0, 3]]


def test_deal_gives_distinct_types_and_balances_holders():
    held = allocation.deal(n_clients=6, per_client=3, n_types=4, rng=np.random.default_rng(0))

    assert all(len(set(row)) == 3 for row in held.tolist())
    # 6 × 3 = 18 cards from a deck of 4: each type dealt 4 or 5 times
    assert sorted(np.bincount(held.ravel(), minlength=4).tolist()) == [4, 4, 5, 5]


def test_random_cut_counts_are_positive_and_sum_to_size():
    parts = allocation.random_cut_counts(10, 4, np.random.default_rng(1))

    assert parts.sum() == 10 and parts.min() >= 1 and len(parts) == 4


def test_random_cut_counts_with_given_cuts():
    assert allocation.random_cut_counts(10, 3, None, np.array([2, 7])).tolist() == [2, 5, 3]


# ---- strategies --------------------------------------------------------------------------------

def test_iid_sizes_differ_by_at_most_one():
    clients = splits.iid(23, 5, np.random.default_rng(0))

    assert sorted(len(c) for c in clients) == [4, 4, 5, 5, 5]
    assert sorted(np.concatenate(clients).tolist()) == list(range(23))


def test_ds1_uses_largest_equal_size_with_k_classes_each():
    # 4 classes × 10 samples, 4 clients × 2 classes: each class held by 2 clients, so a client
    # can take 5 of each class: S = 10 and every sample is used.
    labels = sorted_labels(4, 10)

    clients, size = splits.ds1(labels, 4, 4, 2, np.random.default_rng(0))

    counts = class_counts(labels, clients, 4)
    assert size == 10
    assert [len(c) for c in clients] == [10, 10, 10, 10]
    assert all(sorted(row[row > 0].tolist()) == [5, 5] for row in counts)
    assert counts.sum(axis=0).tolist() == [10, 10, 10, 10]


def test_ds1_spreads_remainder_over_first_classes():
    labels = sorted_labels(4, 10)

    clients, size = splits.ds1(labels, 4, 4, 2, np.random.default_rng(0), samples_per_client=7)

    counts = class_counts(labels, clients, 4)
    assert size == 7
    assert all(sorted(row[row > 0].tolist()) == [3, 4] for row in counts)


def test_ds1_names_the_short_class_when_size_does_not_fit():
    labels = sorted_labels(4, 10)

    with pytest.raises(DataError, match=r"needs .* samples of class \d but it has 10"):
        splits.ds1(labels, 4, 4, 2, np.random.default_rng(0), samples_per_client=12)


def test_ds2_with_huge_alpha_gives_every_client_the_prior():
    labels = sorted_labels(10, 100)

    clients = splits.ds2(labels, 10, 5, 1e7, np.random.default_rng(0))

    # 100 per class over 5 clients: 20 each, up to rounding
    assert np.abs(class_counts(labels, clients, 10) - 20).max() <= 1


def test_ds2_with_tiny_alpha_sends_each_class_to_one_client():
    labels = sorted_labels(10, 100)

    clients = splits.ds2(labels, 10, 5, 1e-4, np.random.default_rng(0),
                         limits=Limits(min_samples=3, max_retries=1000))

    counts = class_counts(labels, clients, 10)
    assert (counts.max(axis=0) >= 99).all()


def test_dirichlet_gives_equal_sizes_and_uses_every_sample_when_they_fit_exactly():
    labels = sorted_labels(4, 25)

    clients, size = splits.dirichlet(labels, 4, 5, 0.1, np.random.default_rng(0))

    # 100 samples over 5 clients: 20 each, so exhausted classes leave the priors and every
    # sample is placed exactly once
    assert size == 20 and [len(c) for c in clients] == [20] * 5
    assert sorted(np.concatenate(clients).tolist()) == list(range(100))


def test_dirichlet_small_alpha_concentrates_and_large_alpha_spreads_the_labels():
    labels = sorted_labels(10, 200)

    def top_share(alpha):
        clients, _ = splits.dirichlet(labels, 10, 20, alpha, np.random.default_rng(1),
                                      samples_per_client=20)
        counts = class_counts(labels, clients, 10)
        return float((counts.max(axis=1) / counts.sum(axis=1)).mean())   # [clients, classes]

    # Dir(0.1·1) puts most of a prior on one class; Dir(1000·1) is near uniform (0.1 each)
    assert top_share(0.1) > 0.6 and top_share(1000.0) < 0.3


def test_dirichlet_names_the_sizes_that_do_not_fit():
    with pytest.raises(DataError, match=r"dirichlet with 5 clients × 30 samples"):
        splits.dirichlet(sorted_labels(4, 25), 4, 5, 0.1, np.random.default_rng(0),
                         samples_per_client=30)


def test_ds3_gives_two_classes_and_a_floor_of_half_min_samples():
    labels = sorted_labels(10, 50)

    clients = splits.ds3(labels, 10, 10, np.random.default_rng(0), limits=Limits(min_samples=10))

    counts = class_counts(labels, clients, 10)
    assert ((counts > 0).sum(axis=1) == 2).all()
    assert counts[counts > 0].min() >= 5  # ceil(10 / 2)
    # 10 clients × 2 classes cover each of the 10 classes twice: all data is used
    assert counts.sum() == 500


def test_ds4_counts_follow_per_fedavg():
    labels = sorted_labels(10, 100)

    clients, k = splits.ds4(labels, 10, 4, np.random.default_rng(0), k=4)

    counts = class_counts(labels, clients, 10)
    assert k == 4
    assert counts[0].tolist() == [4] * 5 + [0] * 5
    assert counts[1].tolist() == [4] * 5 + [0] * 5
    for row in counts[2:]:
        assert sorted(row[:5][row[:5] > 0].tolist()) == [2]
        assert sorted(row[5:][row[5:] > 0].tolist()) == [8]


def test_ds4_without_k_takes_largest_even_k():
    # classes 0-4 feed two full clients (2k) and at most one half client (k/2): 2.5k ≤ 100 → 40
    labels = sorted_labels(10, 100)

    _, k = splits.ds4(labels, 10, 4, np.random.default_rng(0))

    assert k == 40


def test_shards_aligned_with_classes_give_two_whole_classes():
    # 10 classes × 10, 5 clients × 2 shards of 10: every shard is one whole class
    labels = sorted_labels(10, 10)

    clients = skews.shards(labels, 5, 2, np.random.default_rng(0))

    counts = class_counts(labels, clients, 10)
    assert all(sorted(row[row > 0].tolist()) == [10, 10] for row in counts)


def test_label_skew_pair_of_clients_covers_every_label_once():
    labels = sorted_labels(10, 7)

    clients = skews.label_skew(labels, 10, 2, 5, np.random.default_rng(0))

    counts = class_counts(labels, clients, 10)
    assert (counts > 0).sum(axis=1).tolist() == [5, 5]
    assert counts.sum(axis=0).tolist() == [7] * 10


def test_label_skew_shared_cuts_cut_every_label_alike():
    labels = sorted_labels(4, 10)

    clients = skews.label_skew(labels, 4, 4, 2, np.random.default_rng(3), shared_cuts=True)

    counts = class_counts(labels, clients, 4)
    parts = sorted(tuple(sorted(counts[:, c][counts[:, c] > 0].tolist())) for c in range(4))
    assert len(set(parts)) == 1  # same cut vector for every label


def test_label_skew_fails_when_a_label_has_fewer_samples_than_holders():
    labels = sorted_labels(2, 3)

    with pytest.raises(DataError, match="needs 4 samples of class 0 but it has 3"):
        skews.label_skew(labels, 2, 4, 2, np.random.default_rng(0),
                         limits=Limits(min_samples=1))


def test_concept_drift_gives_one_subclass_per_superclass():
    labels = sorted_labels(4, 6)
    superclass = np.array([0, 0, 1, 1])

    clients = skews.concept_drift(labels, superclass, 2, np.random.default_rng(0))

    counts = class_counts(labels, clients, 4)
    for row in counts:
        assert (row[:2] > 0).sum() == 1 and (row[2:] > 0).sum() == 1
    # 2 clients, 2 subclasses per superclass: each subclass goes wholly to one client
    assert sorted(counts.ravel().tolist()) == [0, 0, 0, 0, 6, 6, 6, 6]


def test_consecutive_groups_cut_classes_in_blocks():
    assert skews.consecutive_groups(10, 5).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_natural_numbers_groups_in_ascending_order():
    clients = splits.natural(np.array([5, 5, 7, 7, 7, 5]), 2, limits=Limits(min_samples=3))

    assert [c.tolist() for c in clients] == [[0, 1, 5], [2, 3, 4]]


def test_natural_names_the_small_group():
    with pytest.raises(DataError, match=r"client 1 \(group 7\): 2"):
        splits.natural(np.array([5, 5, 7, 7, 5]), 2, limits=Limits(min_samples=3))


def test_natural_requires_n_clients_to_match_groups():
    with pytest.raises(DataError, match="3 client groups but partition.n_clients is 2"):
        splits.natural(np.array([0, 1, 2]), 2, limits=Limits(min_samples=1))


# ---- impossible constraints ----------------------------------------------------------------

def test_ds2_unreachable_min_samples_fails_after_bounded_retries():
    labels = sorted_labels(10, 10)

    # 4 × 25 = 100 fits arithmetically, but Dirichlet(0.1) shares practically never are equal
    with pytest.raises(DataError, match=r"after 7 draws .*min_samples = 25; the best draw's "
                                        r"smallest client had \d+ samples \(\d+ short\)"):
        splits.ds2(labels, 10, 4, 0.1, np.random.default_rng(0),
                   limits=Limits(min_samples=25, max_retries=7))


def test_ds4_names_the_short_class():
    labels = sorted_labels(10, 10)

    with pytest.raises(DataError, match=r"ds4 with k = 196 over 10 clients needs"):
        splits.ds4(labels, 10, 10, np.random.default_rng(0), k=196)


def test_ds3_floor_that_does_not_fit_names_class_and_shortfall():
    labels = sorted_labels(10, 20)

    # 50 clients × 2 classes: each class has 10 holders × ceil(10/2) = 50 > 20
    with pytest.raises(DataError, match=r"needs 50 samples of class \d but it has 20 \(30 short\)"):
        splits.ds3(labels, 10, 50, np.random.default_rng(0), limits=Limits(min_samples=10))
