"""Split strategies of the PersFL thesis (DS-1..DS-4), IID and natural groups.

Every strategy is a pure function of the labels, its parameters and a NumPy Generator, and returns
one ascending index array per client. Samples are never copied; a sample belongs to at most one
client (some strategies leave samples unused: DS-1 and DS-4 take fixed counts, DS-3 skips classes
no client holds).
"""

import math
from dataclasses import dataclass

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
    redraw,
    share_counts,
)
from pflpipe.errors import DataError

Clients = list[np.ndarray]


@dataclass(frozen=True)
class Limits:
    """The constraints every strategy honours."""

    min_samples: int = 3
    max_retries: int = 100


DEFAULT_LIMITS = Limits()


def iid(n_samples: int, n_clients: int, rng: np.random.Generator, *,
        skew_sigma: float | None = None, limits: Limits = DEFAULT_LIMITS) -> Clients:
    """Shuffle the samples and cut them into equal parts, or parts ∝ log-normal weights."""
    if skew_sigma is None:
        sizes = proportional(n_samples, np.ones(n_clients))
        check_sizes(sizes, limits.min_samples, "iid", "lower n_clients or min_samples")
    else:
        def draw():
            drawn = proportional(n_samples, lognormal_weights(n_clients, skew_sigma, rng))
            return drawn, drawn

        sizes = redraw(draw, limits.min_samples, limits.max_retries,
                       f"iid with quantity_skew σ = {skew_sigma}")
    owner = np.empty(n_samples, dtype=np.int64)
    owner[rng.permutation(n_samples)] = np.repeat(np.arange(n_clients), sizes)
    return members(owner, n_clients)


def ds1(labels: np.ndarray, n_classes: int, n_clients: int, classes_per_client: int,
        rng: np.random.Generator, *, samples_per_client: int | None = None,
        limits: Limits = DEFAULT_LIMITS) -> tuple[Clients, int]:
    """DS-1: every client gets the same number of samples from its k dealt classes.

    A client of size S takes S // k samples of each class and one more of its first S % k
    classes. Without `samples_per_client`, S is the largest size the data allows.

    Returns:
        The clients and the size S used.

    """
    k = classes_per_client
    by_class = class_indices(labels, n_classes)
    have = np.array([len(indices) for indices in by_class])
    held = deal(n_clients, k, n_classes, rng)

    def counts_for(size: int) -> np.ndarray:
        per_slot = size // k + (np.arange(k) < size % k)
        counts = np.zeros((n_classes, n_clients), dtype=np.int64)
        counts[held, np.arange(n_clients)[:, None]] = per_slot
        return counts

    lowest = max(limits.min_samples, k)
    if samples_per_client is not None and samples_per_client < lowest:
        raise DataError(f"ds1: partition.samples_per_client = {samples_per_client} is below "
                        f"max(min_samples = {limits.min_samples}, classes_per_client = {k}); "
                        f"raise it to {lowest} or more")
    size = samples_per_client or max(lowest, _largest(
        lambda s: bool(np.all(counts_for(s).sum(axis=1) <= have)), upper=len(labels) // n_clients))
    what = f"ds1 with {n_clients} clients × {size} samples over {k} classes each"
    check_capacity(counts_for(size).sum(axis=1), have, what,
                   "lower n_clients, samples_per_client or min_samples")
    return members(owner_from_counts(by_class, counts_for(size), rng), n_clients), size


def ds2(labels: np.ndarray, n_classes: int, n_clients: int, alpha: float,
        rng: np.random.Generator, *, limits: Limits = DEFAULT_LIMITS) -> Clients:
    """DS-2: each class is shared among all clients by Dirichlet(α·1) proportions."""
    by_class = class_indices(labels, n_classes)
    have = np.array([len(indices) for indices in by_class])

    def draw():
        shares = rng.dirichlet(np.full(n_clients, alpha), size=n_classes)
        counts = share_counts(have, shares)
        return counts.sum(axis=0), counts

    counts = redraw(draw, limits.min_samples, limits.max_retries, f"ds2 with α = {alpha}")
    return members(owner_from_counts(by_class, counts, rng), n_clients)


def dirichlet(labels: np.ndarray, n_classes: int, n_clients: int, alpha: float,
              rng: np.random.Generator, *, samples_per_client: int | None = None,
              limits: Limits = DEFAULT_LIMITS) -> tuple[Clients, int]:
    """Hsu et al. (2019) as Flow's CIFAR split: a class prior p_j ~ Dirichlet(α·1) per client.

    Every client gets S samples (⌊N / n_clients⌋ when `samples_per_client` is omitted), its labels
    drawn one at a time from its p_j; a class that runs out is removed from every client's prior,
    which is renormalised (uniform over the classes left if none of its own is).

    Returns:
        The clients and the size S used.

    """
    by_class = class_indices(labels, n_classes)
    have = np.array([len(indices) for indices in by_class])
    size = samples_per_client or len(labels) // n_clients
    check_sizes(np.array([size]), max(limits.min_samples, 1), f"dirichlet with {n_clients} clients",
                "lower n_clients or min_samples, or raise samples_per_client")
    check_capacity(np.array([n_clients * size]), np.array([len(labels)]),
                   f"dirichlet with {n_clients} clients × {size} samples",
                   "lower n_clients or samples_per_client")
    priors = rng.dirichlet(np.full(n_classes, alpha), size=n_clients)
    left, counts = have.copy(), np.zeros((n_classes, n_clients), dtype=np.int64)
    for client in range(n_clients):
        for _ in range(size):
            p = priors[client] * (left > 0)
            p = p / p.sum() if p.sum() > 0 else (left > 0) / np.count_nonzero(left)
            label = rng.choice(n_classes, p=p)
            counts[label, client] += 1
            left[label] -= 1
    return members(owner_from_counts(by_class, counts, rng), n_clients), size


def ds3(labels: np.ndarray, n_classes: int, n_clients: int, rng: np.random.Generator, *,
        classes_per_client: int = 2, mu: float = 0.0, sigma: float = 2.0,
        limits: Limits = DEFAULT_LIMITS) -> Clients:
    """DS-3 (pFedMe): k dealt classes per client, log-normal shares after a floor.

    Every (client, held class) pair first gets ceil(min_samples / k) samples, which guarantees
    min_samples and exactly k classes; the rest of each class goes to its holders in proportion
    to LogNormal(μ, σ) draws, one per pair.
    """
    k = classes_per_client
    by_class = class_indices(labels, n_classes)
    have = np.array([len(indices) for indices in by_class])
    mask = holding(deal(n_clients, k, n_classes, rng), n_classes)
    floor = mask * math.ceil(limits.min_samples / k)
    check_capacity(floor.sum(axis=1), have,
                   f"ds3 (every holder first gets {floor.max()} samples of each of its classes)",
                   "lower n_clients or min_samples")
    shares = mask * rng.lognormal(mu, sigma, size=mask.shape)
    counts = share_counts(have, shares, floor)
    return members(owner_from_counts(by_class, counts, rng), n_clients)


def ds4(labels: np.ndarray, n_classes: int, n_clients: int, rng: np.random.Generator, *,
        k: int | None = None, limits: Limits = DEFAULT_LIMITS) -> tuple[Clients, int]:
    """DS-4 (Per-FedAvg): k of each of classes 0-4, or k/2 of one of them and 2k of one of 5-9.

    Clients 0..⌈J/2⌉-1 hold k samples of each of classes 0-4; each other client holds k/2 samples
    of one class in 0-4 and 2k of one class in 5-9 (both dealt evenly). Without `k`, the largest
    even k the data allows is used.

    Returns:
        The clients and the k used.

    """
    if n_classes < 10:
        raise DataError(f"ds4 needs 10 classes or more; the data has {n_classes}")
    by_class = class_indices(labels, n_classes)
    have = np.array([len(indices) for indices in by_class])
    n_full = (n_clients + 1) // 2
    rest = np.arange(n_full, n_clients)
    low, high = deal(len(rest), 1, 5, rng)[:, 0], 5 + deal(len(rest), 1, 5, rng)[:, 0]

    def counts_for(size: int) -> np.ndarray:
        counts = np.zeros((n_classes, n_clients), dtype=np.int64)
        counts[:5, :n_full] = size
        counts[low, rest] = size // 2
        counts[high, rest] = 2 * size
        return counts

    if k is None:
        k = 2 * _largest(lambda half: bool(np.all(counts_for(2 * half).sum(1) <= have)),
                         upper=len(labels) // 5)
        if k < 2:
            raise DataError(f"ds4: not even k = 2 fits {n_clients} clients; lower n_clients")
    what = f"ds4 with k = {k} over {n_clients} clients"
    check_capacity(counts_for(k).sum(axis=1), have, what, "lower k or n_clients")
    check_sizes(counts_for(k).sum(axis=0), limits.min_samples, what, "raise k or lower min_samples")
    return members(owner_from_counts(by_class, counts_for(k), rng), n_clients), k


def natural(groups: np.ndarray, n_clients: int, *, limits: Limits = DEFAULT_LIMITS) -> Clients:
    """Use the dataset's own client groups; group ids are numbered in ascending order."""
    ids, owner = np.unique(groups, return_inverse=True)
    if len(ids) != n_clients:
        raise DataError(f"the data has {len(ids)} client groups but partition.n_clients is "
                        f"{n_clients}; set n_clients: {len(ids)}")
    sizes = np.bincount(owner, minlength=n_clients)
    small = np.flatnonzero(sizes < limits.min_samples)
    if len(small):
        named = ", ".join(f"client {c} (group {ids[c]}): {sizes[c]}" for c in small[:5])
        more = f" and {len(small) - 5} more" if len(small) > 5 else ""
        raise DataError(f"{len(small)} client group(s) hold fewer than partition.min_samples = "
                        f"{limits.min_samples} samples: {named}{more}; lower min_samples or "
                        "merge small groups")
    return members(owner.astype(np.int64), n_clients)


def unassigned(clients: Clients, n_samples: int) -> int:
    """Return how many of the pooled samples no client holds."""
    return n_samples - sum(len(indices) for indices in clients)


def _largest(fits, upper: int) -> int:
    """Return the largest n in [0, upper] with fits(n), for a monotone `fits` (fits(0) holds)."""
    low, high = 0, upper
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


__all__ = ["DEFAULT_LIMITS", "Clients", "Limits", "dirichlet", "ds1", "ds2", "ds3", "ds4", "iid",
           "natural",
           "unassigned"]
