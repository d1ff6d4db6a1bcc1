"""Label-skew strategies: shards, and pFedVEM's label skew and concept drift.

Pathological shards follow McMahan et al.; label skew and label concept drift cut each class at
random points (Zhu et al., CVPR 2023, App. A). Each composes with a log-normal quantity skew:
client j draws w_j ~ LogNormal(0, σ) and its share of every class it holds is multiplied by w_j.
"""

import numpy as np

from pflpipe.data.allocation import (
    check_capacity,
    check_sizes,
    class_indices,
    deal,
    holding,
    lognormal_weights,
    members,
    owner_from_counts,
    proportional,
    random_cut_counts,
    redraw,
)
from pflpipe.data.splits import DEFAULT_LIMITS, Clients, Limits
from pflpipe.errors import DataError


def shards(labels: np.ndarray, n_clients: int, shards_per_client: int,
           rng: np.random.Generator, *, skew_sigma: float | None = None,
           limits: Limits = DEFAULT_LIMITS) -> Clients:
    """Sort by label (random order within a class), cut into J·s shards, deal s to each client.

    Shards are equal (±1), or sized in proportion to the quantity-skew weight of their client.
    """
    n_samples, n_shards = len(labels), n_clients * shards_per_client
    if n_shards > n_samples:
        raise DataError(f"shards: {n_clients} clients × {shards_per_client} shards = {n_shards} "
                        f"shards exceeds the {n_samples} samples; lower n_clients or "
                        "shards_per_client")
    order = rng.permutation(n_samples)
    order = order[np.argsort(labels[order], kind="stable")]
    shard_owner = rng.permutation(np.repeat(np.arange(n_clients), shards_per_client))

    def draw():
        weights = np.ones(n_shards)
        if skew_sigma is not None:
            weights = lognormal_weights(n_clients, skew_sigma, rng)[shard_owner]
        lengths = proportional(n_samples, weights)
        return np.bincount(shard_owner, weights=lengths, minlength=n_clients), lengths

    what = f"shards with {shards_per_client} shards per client"
    if skew_sigma is None:
        sizes, lengths = draw()
        check_sizes(sizes, limits.min_samples, what, "lower n_clients or min_samples")
    else:
        lengths = redraw(draw, limits.min_samples, limits.max_retries,
                         f"{what} and quantity_skew σ = {skew_sigma}")
    owner = np.empty(n_samples, dtype=np.int64)
    owner[order] = np.repeat(shard_owner, lengths)
    return members(owner, n_clients)


def label_skew(labels: np.ndarray, n_classes: int, n_clients: int, labels_per_client: int,
               rng: np.random.Generator, *, shared_cuts: bool = False,
               skew_sigma: float | None = None, limits: Limits = DEFAULT_LIMITS) -> Clients:
    """Deal labels to clients and cut each label's data among its holders (pFedVEM label skew)."""
    if labels_per_client > n_classes:
        raise DataError(f"label_skew: labels_per_client = {labels_per_client} exceeds the "
                        f"{n_classes} classes of the data")
    mask = holding(deal(n_clients, labels_per_client, n_classes, rng), n_classes)
    return cut_among_holders(labels, mask, rng, shared_cuts=shared_cuts, skew_sigma=skew_sigma,
                             limits=limits, what=f"label_skew with {labels_per_client} labels "
                             "per client")


def concept_drift(labels: np.ndarray, superclass: np.ndarray, n_clients: int,
                  rng: np.random.Generator, *, skew_sigma: float | None = None,
                  limits: Limits = DEFAULT_LIMITS) -> Clients:
    """Label concept drift (pFedVEM): one subclass per superclass per client, cut among holders.

    Args:
        labels: [N] fine labels.
        superclass: [n_classes] the superclass of every fine class.
        n_clients: number of clients.
        rng: the generator.
        skew_sigma: quantity-skew σ, if any.
        limits: min_samples and max_retries.

    The caller relabels the samples with `superclass[labels]`.

    """
    n_classes = len(superclass)
    mask = np.zeros((n_classes, n_clients), dtype=bool)
    for group in np.unique(superclass):
        subclasses = np.flatnonzero(superclass == group)
        picked = subclasses[deal(n_clients, 1, len(subclasses), rng)[:, 0]]
        mask[picked, np.arange(n_clients)] = True
    return cut_among_holders(labels, mask, rng, skew_sigma=skew_sigma, limits=limits,
                             what="concept_drift (one subclass per superclass)")


def cut_among_holders(labels: np.ndarray, mask: np.ndarray, rng: np.random.Generator, *,
                      shared_cuts: bool = False, skew_sigma: float | None = None,
                      limits: Limits = DEFAULT_LIMITS, what: str = "label skew") -> Clients:
    """Cut every held class into one non-empty part per holder at random points.

    Args:
        labels: [N] labels.
        mask: [C, J] whether client j holds class c; held classes are used entirely.
        rng: the generator.
        shared_cuts: reuse one cut vector for every class (the pFedVEM repository).
        skew_sigma: quantity-skew σ: parts become 1 + the rest ∝ (random part × w_j).
        limits: min_samples and max_retries.
        what: the strategy, for error messages.

    """
    n_classes, n_clients = mask.shape
    by_class = class_indices(labels, n_classes)
    have = np.array([len(indices) for indices in by_class])
    holders = mask.sum(axis=1)
    check_capacity(holders, have, what, "each holder needs at least one sample of each of its "
                   "classes; lower n_clients or the classes per client")
    held = np.flatnonzero(holders)
    if shared_cuts and len(np.unique(holders[held])) > 1:
        raise DataError(f"{what}: shared_cuts needs every label held by the same number of "
                        f"clients (got {sorted(set(holders[held].tolist()))}); change n_clients "
                        "or labels_per_client, or set shared_cuts: false")

    def draw():
        counts = np.zeros(mask.shape, dtype=np.int64)
        cuts = None
        if shared_cuts:
            cuts = np.sort(rng.choice(have[held].min() - 1, holders[held[0]] - 1,
                                      replace=False) + 1)
        weights = None if skew_sigma is None else lognormal_weights(n_clients, skew_sigma, rng)
        for c in held:
            parts = random_cut_counts(have[c], holders[c], rng, cuts)
            if weights is not None:
                parts = 1 + proportional(have[c] - holders[c], parts * weights[mask[c]])
            counts[c, mask[c]] = parts
        return counts.sum(axis=0), counts

    label = what if skew_sigma is None else f"{what} and quantity_skew σ = {skew_sigma}"
    counts = redraw(draw, limits.min_samples, limits.max_retries, label)
    return members(owner_from_counts(by_class, counts, rng), n_clients)


def consecutive_groups(n_classes: int, groups: int) -> np.ndarray:
    """Group classes into `groups` superclasses of consecutive classes.

    >>> consecutive_groups(6, 2).tolist()
    [0, 0, 0, 1, 1, 1]
    """
    if n_classes % groups:
        raise DataError(f"concept_drift: groups = {groups} must divide the {n_classes} classes")
    return np.arange(n_classes) // (n_classes // groups)
