"""Invariants of the split strategies over random seeds, client counts and parameters."""

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pflpipe.data import allocation, partition_dataset, skews, splits, write_partition
from pflpipe.data.client_split import split_clients, split_sizes
from pflpipe.data.splits import Limits
from pflpipe.spec import parse_spec

FAST = settings(max_examples=40, deadline=None)
SLOW = settings(max_examples=8, deadline=None)
NO_MINIMUM = Limits(min_samples=0, max_retries=5)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def labelled(draw, min_classes=2, max_classes=10, min_per_class=1, max_per_class=40):
    """Shuffled labels with a random size per class; returns (labels, n_classes)."""
    n_classes = draw(st.integers(min_classes, max_classes))
    sizes = draw(st.lists(st.integers(min_per_class, max_per_class), min_size=n_classes,
                          max_size=n_classes))
    labels = np.repeat(np.arange(n_classes), sizes)
    return np.random.default_rng(draw(seeds)).permutation(labels), n_classes


def counts_of(labels, clients, n_classes):
    return np.array([np.bincount(labels[c], minlength=n_classes) for c in clients])


def assert_disjoint(clients, n_samples, every=False):
    merged = np.concatenate(clients) if clients else np.array([], dtype=np.int64)
    assert len(np.unique(merged)) == len(merged), "a sample is in two clients"
    assert merged.min(initial=0) >= 0 and merged.max(initial=0) < max(n_samples, 1)
    if every:
        assert len(merged) == n_samples, "a sample is in no client"


@FAST
@given(data=labelled(), n_clients=st.integers(1, 12), sigma=st.none() | st.floats(0.1, 3),
       seed=seeds)
def test_iid_puts_every_sample_in_exactly_one_client(data, n_clients, sigma, seed):
    labels, _ = data

    clients = splits.iid(len(labels), n_clients, np.random.default_rng(seed), skew_sigma=sigma,
                         limits=NO_MINIMUM)

    assert_disjoint(clients, len(labels), every=True)
    if sigma is None:
        assert max(map(len, clients)) - min(map(len, clients)) <= 1


@FAST
@given(data=labelled(min_per_class=12), n_clients=st.integers(1, 12), k=st.integers(1, 10),
       seed=seeds)
def test_ds1_sizes_are_equal_and_each_client_has_k_classes(data, n_clients, k, seed):
    labels, n_classes = data
    k = min(k, n_classes)

    clients, size = splits.ds1(labels, n_classes, n_clients, k, np.random.default_rng(seed),
                               limits=Limits(min_samples=0))

    counts = counts_of(labels, clients, n_classes)
    assert_disjoint(clients, len(labels))
    assert {len(c) for c in clients} == {size}
    assert ((counts > 0).sum(axis=1) == k).all()


@FAST
@given(data=labelled(min_per_class=5), n_clients=st.integers(1, 12), seed=seeds)
def test_ds2_with_huge_alpha_gives_each_client_the_prior(data, n_clients, seed):
    labels, n_classes = data

    clients = splits.ds2(labels, n_classes, n_clients, 1e9, np.random.default_rng(seed),
                         limits=NO_MINIMUM)

    counts = counts_of(labels, clients, n_classes)
    expected = np.bincount(labels, minlength=n_classes) / n_clients  # prior × client size
    assert_disjoint(clients, len(labels), every=True)
    assert np.abs(counts - expected).max() < 1 + 1e-9


@FAST
@given(data=labelled(min_per_class=5), n_clients=st.integers(2, 12), seed=seeds)
def test_ds2_with_tiny_alpha_gives_each_class_to_one_client(data, n_clients, seed):
    labels, n_classes = data

    clients = splits.ds2(labels, n_classes, n_clients, 1e-9, np.random.default_rng(seed),
                         limits=NO_MINIMUM)

    counts = counts_of(labels, clients, n_classes)
    assert_disjoint(clients, len(labels), every=True)
    assert ((counts > 0).sum(axis=0) == 1).all()


@FAST
@given(data=labelled(min_per_class=36, max_per_class=60), n_clients=st.integers(1, 12),
       min_samples=st.integers(3, 5), sigma=st.floats(0, 3), seed=seeds)
def test_ds3_gives_exactly_two_classes_and_min_samples(data, n_clients, min_samples, sigma, seed):
    labels, n_classes = data  # ≥ 12 holders × ceil(5 / 2) samples per class fit

    clients = splits.ds3(labels, n_classes, n_clients, np.random.default_rng(seed), sigma=sigma,
                         limits=Limits(min_samples=min_samples))

    counts = counts_of(labels, clients, n_classes)
    assert_disjoint(clients, len(labels))
    assert ((counts > 0).sum(axis=1) == 2).all()
    assert min(map(len, clients)) >= min_samples


@FAST
@given(n_clients=st.integers(1, 9), half_k=st.integers(1, 6), extra=st.integers(0, 2),
       per_class=st.integers(70, 90), seed=seeds)
def test_ds4_counts_are_exactly_per_fedavg(n_clients, half_k, extra, per_class, seed):
    n_classes, k = 10 + extra, 2 * half_k
    labels = np.random.default_rng(seed).permutation(np.repeat(np.arange(n_classes), per_class))

    clients, used = splits.ds4(labels, n_classes, n_clients, np.random.default_rng(seed), k=k,
                               limits=Limits(min_samples=0))

    counts = counts_of(labels, clients, n_classes)
    n_full = (n_clients + 1) // 2
    assert used == k
    assert_disjoint(clients, len(labels))
    for row in counts[:n_full]:
        assert row.tolist() == [k] * 5 + [0] * (n_classes - 5)
    for row in counts[n_full:]:
        assert sorted(row[:5].tolist()) == [0, 0, 0, 0, k // 2]
        assert sorted(row[5:10].tolist()) == [0, 0, 0, 0, 2 * k] and row[10:].sum() == 0


@FAST
@given(data=labelled(min_per_class=12), n_clients=st.integers(1, 8), per_client=st.integers(1, 3),
       sigma=st.none() | st.floats(0.1, 2), seed=seeds)
def test_shards_put_every_sample_in_exactly_one_client(data, n_clients, per_client, sigma, seed):
    labels, _ = data

    clients = skews.shards(labels, n_clients, per_client, np.random.default_rng(seed),
                           skew_sigma=sigma, limits=NO_MINIMUM)

    assert_disjoint(clients, len(labels), every=True)


@FAST
@given(data=labelled(min_per_class=12), n_clients=st.integers(1, 12), per_client=st.integers(1, 10),
       sigma=st.none() | st.floats(0.1, 2), seed=seeds)
def test_label_skew_gives_each_client_its_labels_and_uses_held_labels_whole(
        data, n_clients, per_client, sigma, seed):
    labels, n_classes = data
    per_client = min(per_client, n_classes)

    clients = skews.label_skew(labels, n_classes, n_clients, per_client,
                               np.random.default_rng(seed), skew_sigma=sigma, limits=NO_MINIMUM)

    counts = counts_of(labels, clients, n_classes)
    held = counts.sum(axis=0) > 0
    assert_disjoint(clients, len(labels))
    assert ((counts > 0).sum(axis=1) == per_client).all()
    assert (counts.sum(axis=0)[held] == np.bincount(labels, minlength=n_classes)[held]).all()
    assert held.sum() == min(n_classes, n_clients * per_client)


@FAST
@given(groups=st.integers(1, 4), per_group=st.integers(1, 4), n_clients=st.integers(1, 10),
       per_class=st.integers(10, 20), seed=seeds)
def test_concept_drift_gives_one_subclass_per_superclass(groups, per_group, n_clients, per_class,
                                                         seed):
    n_classes = groups * per_group
    superclass = skews.consecutive_groups(n_classes, groups)
    labels = np.random.default_rng(seed).permutation(np.repeat(np.arange(n_classes), per_class))

    clients = skews.concept_drift(labels, superclass, n_clients, np.random.default_rng(seed),
                                  limits=NO_MINIMUM)

    counts = counts_of(labels, clients, n_classes)
    assert_disjoint(clients, len(labels), every=n_clients >= per_group)
    for group in range(groups):
        assert ((counts[:, superclass == group] > 0).sum(axis=1) == 1).all()


@FAST
@given(n_clients=st.integers(1, 30), per_client=st.integers(1, 6), n_types=st.integers(1, 10),
       seed=seeds)
def test_deal_balances_holders_and_never_repeats_within_a_client(n_clients, per_client, n_types,
                                                                 seed):
    per_client = min(per_client, n_types)

    held = allocation.deal(n_clients, per_client, n_types, np.random.default_rng(seed))

    times = np.bincount(held.ravel(), minlength=n_types)
    assert all(len(set(row)) == per_client for row in held.tolist())
    assert times.max() - times.min() <= 1


@FAST
@given(total=st.integers(0, 10_000),
       weights=st.lists(st.floats(0, 1e6), min_size=1, max_size=50).filter(lambda w: sum(w) > 0))
def test_proportional_sums_to_total_within_one_of_each_share(total, weights):
    weights = np.array(weights)

    parts = allocation.proportional(total, weights)

    assert parts.sum() == total and (parts >= 0).all()
    assert np.abs(parts - total * weights / weights.sum()).max() < 1 + 1e-6


@FAST
@given(data=labelled(min_per_class=3), n_clients=st.integers(1, 8), val=st.floats(0.05, 0.45),
       test=st.floats(0.05, 0.45), seed=seeds)
def test_client_split_puts_every_sample_in_exactly_one_split(data, n_clients, val, test, seed):
    labels, n_classes = data
    clients = splits.iid(len(labels), n_clients, np.random.default_rng(seed), limits=NO_MINIMUM)
    clients = [c for c in clients if len(c) >= 3]

    result = split_clients(clients, labels, val, test, np.random.default_rng(seed))

    for indices, parts in zip(clients, result, strict=True):
        merged = np.concatenate([parts.train, parts.val, parts.test])
        assert sorted(merged.tolist()) == sorted(indices.tolist())
        n_train, n_val, n_test = split_sizes(len(indices), val, test)
        assert (len(parts.train), len(parts.val), len(parts.test)) == (n_train, n_val, n_test)
        # stratified: each class's validation share within one sample of proportional
        n_c = np.bincount(labels[indices], minlength=n_classes)
        val_c = np.bincount(labels[parts.val], minlength=n_classes)
        assert np.abs(val_c - n_c * n_val / len(indices)).max() < 1 + 1e-9


def _hash(directory: Path, text: str, seed: int) -> str:
    spec = parse_spec(text)
    plan = partition_dataset(spec, seed)
    return write_partition(plan, spec.partition.model_dump(mode="json"), directory,
                           heatmap=False)["content_hash"]


@SLOW
@given(strategy=st.sampled_from(["iid", "ds1", "ds2", "dirichlet", "ds3", "shards",
                                 "label_skew"]),
       n_clients=st.integers(2, 6), seed=st.integers(0, 10_000))
def test_same_seed_same_hash_and_another_seed_another_hash(strategy, n_clients, seed):
    with tempfile.TemporaryDirectory() as root:
        root = Path(root)
        rng = np.random.default_rng(0)
        np.savez(root / "d.npz", x=rng.integers(0, 256, (120, 3), dtype=np.uint8),
                 y=np.arange(120) % 4)
        text = (f"experiment: {{name: t}}\ndataset: {{name: arrays, root: {root}, path: d.npz, "
                f"n_classes: 4}}\npartition: {{strategy: {strategy}, n_clients: {n_clients}, "
                "min_samples: 3}\n")
        if strategy in ("ds1", "label_skew"):
            text = text.replace("min_samples: 3", "min_samples: 3, " + (
                "classes_per_client: 2" if strategy == "ds1" else "labels_per_client: 2"))

        first = _hash(root / "a", text, seed)
        again = _hash(root / "b", text, seed)
        other = _hash(root / "c", text, seed + 1)

    assert first == again
    assert first != other
