"""Building blocks of the split strategies.

Who holds which class, how many of its samples each holder gets, and which samples those are.

A split is an *owner* array: one client id per pooled sample, -1 for a sample no client holds.
Counting happens on a small [C, J] matrix (classes × clients); samples are only indexed, never
copied.
"""

from collections.abc import Callable
from typing import TypeVar

import numpy as np

from pflpipe.errors import DataError

T = TypeVar("T")
UNASSIGNED = -1


def class_indices(labels: np.ndarray, n_classes: int) -> list[np.ndarray]:
    """Return, per class, the positions of its samples (ascending)."""
    order = np.argsort(labels, kind="stable")
    bounds = np.cumsum(np.bincount(labels, minlength=n_classes))[:-1]
    return np.split(order, bounds)


def deal(n_clients: int, per_client: int, n_types: int, rng: np.random.Generator) -> np.ndarray:
    """Deal `per_client` distinct types to every client from a deck of the `n_types` types.

    The deck is shuffled, dealt without replacement and reshuffled when empty (pFedVEM's
    assignment), so every type is held by ⌊J·k/n⌋ or ⌈J·k/n⌉ clients. A card the client already
    holds stays in the deck for the next client.

    Returns:
        An int64 array [J, per_client]: the types of each client.

    """
    if per_client > n_types:
        raise DataError(f"cannot deal {per_client} distinct classes per client from {n_types}")
    held = np.empty((n_clients, per_client), dtype=np.int64)
    deck: list[int] = []
    for client in range(n_clients):
        taken: list[int] = []
        while len(taken) < per_client:
            if deck and deck[-1] not in taken:
                taken.append(deck.pop())
                continue
            eligible = [i for i, card in enumerate(deck) if card not in taken]
            if eligible:
                taken.append(deck.pop(eligible[-1]))
            else:
                deck = rng.permutation(n_types).tolist() + deck
        held[client] = taken
    return held


def holding(held: np.ndarray, n_types: int) -> np.ndarray:
    """Turn dealt types [J, k] into a boolean [n_types, J] matrix: type t is held by client j."""
    matrix = np.zeros((n_types, held.shape[0]), dtype=bool)
    matrix[held, np.arange(held.shape[0])[:, None]] = True
    return matrix


def proportional(total: int, weights: np.ndarray) -> np.ndarray:
    """Split `total` items into integer parts proportional to `weights` (summing to `total`).

    Uses cumulative flooring, so every part is within one of its exact share.

    >>> proportional(10, np.array([1.0, 1.0, 2.0])).tolist()
    [2, 3, 5]
    """
    weights = np.asarray(weights, dtype=np.float64)
    cumulative = np.cumsum(weights)
    if cumulative[-1] <= 0:
        raise DataError("cannot share samples among holders whose weights are all zero")
    edges = np.floor(cumulative / cumulative[-1] * total + 1e-9).astype(np.int64)
    edges[-1] = total
    return np.diff(edges, prepend=0)


def share_counts(sizes: np.ndarray, shares: np.ndarray, floor: np.ndarray | None = None
                 ) -> np.ndarray:
    """Give every class's samples to clients in proportion to `shares`, after a per-pair floor.

    Args:
        sizes: [C] samples per class.
        shares: [C, J] non-negative weights; a class whose row is all zero is held by no one.
        floor: optional [C, J] samples each pair gets first (zero where a class is not held).

    Returns:
        An int64 [C, J] count matrix whose held rows sum to the class sizes.

    """
    floor = np.zeros(shares.shape, dtype=np.int64) if floor is None else floor
    totals = shares.sum(axis=1, keepdims=True)
    held = totals[:, 0] > 0
    rest = np.where(held, sizes - floor.sum(axis=1), 0)
    fractions = np.cumsum(shares, axis=1) / np.where(held, totals[:, 0], 1.0)[:, None]
    edges = np.floor(fractions * rest[:, None] + 1e-9).astype(np.int64)
    edges[:, -1] = rest
    return floor + np.diff(edges, axis=1, prepend=0)


def random_cut_counts(size: int, parts: int, rng: np.random.Generator,
                      cuts: np.ndarray | None = None) -> np.ndarray:
    """Cut `size` samples into `parts` non-empty parts at random points (pFedVEM's slicing).

    The parts-1 cut points are drawn without replacement from 1..size-1, unless given.
    """
    if cuts is None:
        cuts = np.sort(rng.choice(size - 1, parts - 1, replace=False) + 1)
    return np.diff(np.concatenate(([0], cuts, [size]))).astype(np.int64)


def owner_from_counts(by_class: list[np.ndarray], counts: np.ndarray, rng: np.random.Generator
                      ) -> np.ndarray:
    """Hand out samples: class c's samples are shuffled, then client j takes counts[c, j] of them.

    Returns:
        An int64 owner array over all pooled samples (UNASSIGNED for samples nobody takes).

    """
    n_samples = sum(len(indices) for indices in by_class)
    owner = np.full(n_samples, UNASSIGNED, dtype=np.int64)
    clients = np.arange(counts.shape[1])
    for c, indices in enumerate(by_class):
        if counts[c].sum() == 0:
            continue
        chosen = rng.permutation(indices)[: counts[c].sum()]
        owner[chosen] = np.repeat(clients, counts[c])
    return owner


def members(owner: np.ndarray, n_clients: int) -> list[np.ndarray]:
    """Return, per client, the ascending positions of its samples."""
    order = np.argsort(owner, kind="stable")
    sizes = np.bincount(owner[owner >= 0], minlength=n_clients)
    start = int(np.count_nonzero(owner < 0))
    return np.split(order[start:], np.cumsum(sizes)[:-1])


def redraw(draw: Callable[[], tuple[np.ndarray, T]], min_samples: int, max_retries: int,
           what: str) -> T:
    """Repeat a random draw until every client has at least `min_samples` samples.

    Args:
        draw: returns (client sizes [J], payload); called at most `max_retries` times.
        min_samples: the smallest client size accepted.
        max_retries: the number of draws before giving up.
        what: the strategy and its parameters, for the error message.

    Raises:
        DataError: naming the constraint, the best draw's smallest client and the shortfall.

    """
    best = -1
    for _ in range(max_retries):
        sizes, payload = draw()
        smallest = int(sizes.min())
        if smallest >= min_samples:
            return payload
        best = max(best, smallest)
    raise DataError(
        f"{what}: after {max_retries} draws (partition.max_retries), every draw left a client "
        f"below partition.min_samples = {min_samples}; the best draw's smallest client had {best} "
        f"samples ({min_samples - best} short). Lower min_samples or n_clients, or make the split "
        "less skewed"
    )


def check_sizes(sizes: np.ndarray, min_samples: int, what: str, fix: str) -> None:
    """Fail when a split with fixed sizes leaves a client below `min_samples`, naming it."""
    client = int(np.argmin(sizes))
    if sizes[client] < min_samples:
        raise DataError(
            f"{what} gives client {client} {int(sizes[client])} samples, "
            f"{min_samples - int(sizes[client])} short of partition.min_samples = {min_samples}; "
            f"{fix}"
        )


def check_capacity(need: np.ndarray, have: np.ndarray, what: str, fix: str) -> None:
    """Fail when some class needs more samples than it has, naming the worst class."""
    excess = need - have
    worst = int(np.argmax(excess))
    if excess[worst] > 0:
        raise DataError(
            f"{what} needs {int(need[worst]):,} samples of class {worst} but it has "
            f"{int(have[worst]):,} ({int(excess[worst]):,} short); {fix}"
        )


def lognormal_weights(n_clients: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Return the quantity-skew weights w_j ~ LogNormal(0, σ), one per client."""
    return rng.lognormal(0.0, sigma, n_clients)
