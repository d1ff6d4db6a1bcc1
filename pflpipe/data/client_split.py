"""Split each client's samples into train / validation / test, stratified by class.

The rule, for a client of n samples:
- val and test get round(n · fraction) samples each (halves round up), at least one each when
  the fraction is above 0 (a fraction of 0 gives none: no validation split); train gets the
  rest, at least one. So a client needs one sample per non-empty split; fewer is an error naming
  the client (the spec's `min_samples` is at least 3, so only natural groups can hit it).
- Stratification is systematic sampling over the client's samples sorted by class (random order
  within a class): every class's share of a split is within one sample of proportional for val,
  and within two for test. A class with a single sample goes to one split.
- Regression targets (no classes) are split at random.
"""

import math
from dataclasses import dataclass

import numpy as np

from pflpipe.errors import DataError

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class ClientIndices:
    """The pooled positions of one client's samples, per split (each ascending, int64)."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    def __getitem__(self, split: str) -> np.ndarray:
        """Return the positions of `split` ("train", "val" or "test")."""
        return {"train": self.train, "val": self.val, "test": self.test}[split]

    @property
    def n(self) -> int:
        """Total samples of the client."""
        return len(self.train) + len(self.val) + len(self.test)


def split_sizes(n: int, val: float, test: float, client_id: int = 0) -> tuple[int, int, int]:
    """Return (train, val, test) sizes of a client with n samples.

    >>> split_sizes(10, 0.2, 0.2)
    (6, 2, 2)
    >>> split_sizes(3, 0.2, 0.2)
    (1, 1, 1)
    >>> split_sizes(10, 0.0, 0.25)
    (7, 0, 3)
    """
    needed = 1 + (val > 0) + (test > 0)
    if n < needed:
        names = ", ".join(name for name, used in (("train", True), ("val", val > 0),
                                                  ("test", test > 0)) if used)
        raise DataError(f"client {client_id} has {n} sample(s); at least {needed} are needed (one "
                        f"each for {names}). Raise partition.min_samples or drop the client")
    n_val = max(1, math.floor(n * val + 0.5)) if val > 0 else 0
    n_test = max(1, math.floor(n * test + 0.5)) if test > 0 else 0
    while n - n_val - n_test < 1:
        if n_val >= n_test:
            n_val -= 1
        else:
            n_test -= 1
    return n - n_val - n_test, n_val, n_test


def split_client(indices: np.ndarray, labels: np.ndarray | None, val: float, test: float,
                 rng: np.random.Generator, client_id: int = 0) -> ClientIndices:
    """Split one client's pooled positions into train / val / test.

    Args:
        indices: [n] the client's positions in the pooled dataset.
        labels: [N] pooled class labels, or None for a regression target (no stratification).
        val: fraction for validation.
        test: fraction for testing.
        rng: the generator.
        client_id: named in errors.

    """
    n_train, n_val, n_test = split_sizes(len(indices), val, test, client_id)
    order = rng.permutation(indices)
    if labels is not None:
        order = order[np.argsort(labels[order], kind="stable")]
    in_val = _systematic(len(order), n_val, rng)
    rest = order[~in_val]
    in_test = _systematic(len(rest), n_test, rng)
    return ClientIndices(train=np.sort(rest[~in_test]), val=np.sort(order[in_val]),
                         test=np.sort(rest[in_test]))


def split_clients(clients: list[np.ndarray], labels: np.ndarray | None, val: float, test: float,
                  rng: np.random.Generator) -> list[ClientIndices]:
    """Split every client (in client order, one generator)."""
    return [split_client(indices, labels, val, test, rng, client_id)
            for client_id, indices in enumerate(clients)]


def _systematic(n: int, picks: int, rng: np.random.Generator) -> np.ndarray:
    """Mark `picks` of n positions, evenly spaced from a random start.

    Position p is picked when ⌊(p + 1)·r + u⌋ > ⌊p·r + u⌋ with r = picks / n, u ~ U[0, 1), so any
    run of L consecutive positions holds ⌊L·r⌋ or ⌈L·r⌉ picks.
    """
    steps = np.floor(np.arange(n + 1) * (picks / n) + rng.random())
    marked = np.diff(steps) > 0
    # floating error can shift one pick across the end; fix the total exactly
    surplus = int(marked.sum()) - picks
    if surplus > 0:
        marked[np.flatnonzero(marked)[-surplus:]] = False
    elif surplus < 0:
        marked[np.flatnonzero(~marked)[:-surplus]] = True
    return marked
