"""Intervals that invert their tests: the k-th smallest and largest of N ordered values.

A test that counts how many of N values fall on one side of 0 (Walsh averages for the
signed-rank test, resampled gaps for the bootstrap) has a null distribution `cdf[t]`, the
probability that at most t fall on one side of the true difference. Its two-sided p is
``2 · min(cdf[#{x ≤ 0}], cdf[#{x ≥ 0}])`` (`count_p`), and its interval at level 1 − α runs from
the k-th smallest to the k-th largest value, k the count of `cdf` entries below α/2
(`order_interval`). The interval excludes 0 exactly when p < α: the lower end x_(k) > 0 means at
most k − 1 values are ≤ 0, that is cdf[#{x ≤ 0}] < α/2 (cdf increases strictly), and likewise
above. `pflpipe.metrics.uncertainty` builds its gaps on these.
"""

import math

import numpy as np

#: Up to this many clients the signed-rank null distribution is exact; beyond, its normal
#: approximation (with continuity correction).
EXACT_RANKS = 200


def signed_rank_cdf(n: int) -> np.ndarray:
    """Return P(T⁺ ≤ t), t = 0 … n(n+1)/2: the null distribution of Wilcoxon's T⁺ over n units.

    Exact (a count over the 2^n sign patterns) up to `EXACT_RANKS` units, the normal
    approximation with continuity correction beyond.

    >>> signed_rank_cdf(2).tolist()   # T⁺ ∈ {0, 1, 2, 3}, each with probability 1/4
    [0.25, 0.5, 0.75, 1.0]
    """
    top = n * (n + 1) // 2
    if n > EXACT_RANKS:
        from scipy.special import ndtr  # the normal cdf (scipy.stats.norm.cdf's own)

        sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        return ndtr((np.arange(top + 1) + 0.5 - top / 2) / sd)
    mass = np.zeros(top + 1)
    mass[0] = 1.0
    for rank in range(1, n + 1):  # rank `rank` adds to T⁺ with probability 1/2
        mass[rank:] = (mass[rank:] + mass[:-rank]) / 2
        mass[:rank] /= 2
    return np.minimum(np.cumsum(mass), 1.0)


def order_interval(ordered: np.ndarray, cdf: np.ndarray, alpha: float
                   ) -> tuple[float | None, float | None]:
    """Return [x_(k), x_(N+1−k)] of the sorted `ordered`, k the count of `cdf` below α/2.

    `cdf[t]` is the null probability that at most t of the N values fall on one side of the
    true difference. The interval excludes 0 exactly when `count_p` < α. (None, None) when
    even k = 1 is too likely: the test cannot reach that level.

    >>> order_interval(np.arange(1.0, 11.0), (np.arange(11) + 1) / 11, 0.4)  # k = 2
    (2.0, 9.0)
    """
    k = int(np.searchsorted(cdf, alpha / 2, side="left"))
    if k == 0:
        return None, None
    return float(ordered[k - 1]), float(ordered[len(ordered) - k])


def count_p(ordered: np.ndarray, cdf: np.ndarray) -> float:
    """Return 2 · min(cdf[#{x ≤ 0}], cdf[#{x ≥ 0}]), capped at 1: the p `order_interval` inverts.

    >>> count_p(np.arange(1.0, 11.0), (np.arange(11) + 1) / 11)   # none ≤ 0: 2 · 1 / 11
    0.18181818181818182
    """
    below = int(np.searchsorted(ordered, 0.0, side="right"))
    above = len(ordered) - int(np.searchsorted(ordered, 0.0, side="left"))
    return min(1.0, 2 * float(min(cdf[below], cdf[above])))


def walsh_averages(differences: np.ndarray) -> np.ndarray:
    """Return the n(n+1)/2 averages (d_i + d_j) / 2, i ≤ j, sorted.

    >>> walsh_averages(np.array([1.0, 3.0])).tolist()
    [1.0, 2.0, 3.0]
    """
    d = np.asarray(differences, dtype=float)
    i, j = np.triu_indices(d.size)
    return np.sort((d[i] + d[j]) / 2)


def signed_rank_units(alpha: float) -> int:
    """Return the fewest units whose signed-rank p can fall below `alpha` (2 / 2^n < α).

    >>> signed_rank_units(0.05), signed_rank_units(0.05 / 3)
    (6, 7)
    """
    n = 1
    while 2 / 2**n >= alpha:
        n += 1
    return n
