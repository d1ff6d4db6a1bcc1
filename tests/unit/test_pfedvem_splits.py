"""pFedVEM's splits at the paper's sizes and client counts J = 50, 100, 200 (App. A).

Label skew on FMNIST's 60,000 training images (5 of 10 labels per client, each label held by J/2
clients) and label concept drift on CIFAR-100's 50,000 (one of 5 subclasses per superclass, each
subclass held by J/5 clients): every image used once, every part non-empty, quantity disparity.
"""

import numpy as np
import pytest

from pflpipe.data import skews


def _held(labels, clients, n_classes):
    """Samples of each class per client [J, n_classes]; checks that no sample is used twice."""
    every = np.concatenate(clients)
    assert len(every) == len(np.unique(every)) == len(labels)
    return np.stack([np.bincount(labels[c], minlength=n_classes) for c in clients])


@pytest.mark.parametrize("n_clients", [50, 100, 200])
def test_label_skew_at_fmnist_size_gives_five_labels_each_held_by_half_the_clients(n_clients):
    labels = np.repeat(np.arange(10), 6000)

    clients = skews.label_skew(labels, 10, n_clients, 5, np.random.default_rng(n_clients))

    counts = _held(labels, clients, 10)
    assert ((counts > 0).sum(axis=1) == 5).all()
    assert ((counts > 0).sum(axis=0) == n_clients // 2).all()
    sizes = counts.sum(axis=1)
    assert sizes.mean() == 60_000 / n_clients and sizes.max() > 2 * sizes.min()


@pytest.mark.parametrize("n_clients", [50, 100, 200])
def test_concept_drift_at_cifar100_size_gives_one_subclass_per_superclass(n_clients):
    labels = np.repeat(np.arange(100), 500)
    superclass = skews.consecutive_groups(100, 20)

    clients = skews.concept_drift(labels, superclass, n_clients, np.random.default_rng(n_clients))

    counts = _held(labels, clients, 100)
    for group in range(20):
        assert ((counts[:, superclass == group] > 0).sum(axis=1) == 1).all()
    assert ((counts > 0).sum(axis=0) == n_clients // 5).all()


def test_label_skew_shared_cuts_at_fifty_clients_cut_every_label_alike():
    labels = np.repeat(np.arange(10), 6000)

    clients = skews.label_skew(labels, 10, 50, 5, np.random.default_rng(0), shared_cuts=True)

    counts = _held(labels, clients, 10)
    parts = {tuple(sorted(counts[:, c][counts[:, c] > 0].tolist())) for c in range(10)}
    assert len(parts) == 1
