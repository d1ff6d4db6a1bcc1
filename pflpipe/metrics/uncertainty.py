"""Intervals and paired tests: how sure a mean, a gap between two models and a ranking are.

Pure functions over per-seed and per-client values; `pflpipe.metrics.pairwise` applies them to the
models of a report. What counts as one independent observation (the *unit*) decides the method:

- **Over seeds** (two or more seeds): a seed repeats the whole experiment (its own split, its own
  training), so a model's summary has one value per seed. Its 95 % interval is the t-interval
  ``mean ± t_{0.975, S−1} · s / √S`` over the S per-seed values; a pair of models is compared by
  the paired t-test on the S per-seed differences, with the same t-interval on their mean. The
  Wilcoxon signed-rank test is not used over seeds: with S ≤ 5 seeds its exact two-sided p is never
  below 2 / 2^S ≥ 0.0625, so it could never resolve anything.
- **Over clients** (one seed): the clients of the run are the observations. A summary's interval is
  the percentile bootstrap: resample the K clients with replacement `RESAMPLES` times (a seeded
  NumPy generator: the same table gives the same intervals), recompute the summary on each
  resample, take the 2.5 % and 97.5 % quantiles. Every model is resampled with the same clients,
  so the difference of two models' replicates is the paired bootstrap of their gap (and with
  several seeds a resample takes the same client columns from every seed). A per-client quantity
  (accuracy) is tested with the Wilcoxon signed-rank test on the K per-client differences
  (distribution-free, exact for small K, robust to the one client whose ~35 test samples swing
  it); a quantity of the whole set of clients (Jain's index of QoI over U⁺) with the paired
  bootstrap's two-sided p. These intervals say how much the clients of this one run vary, not
  whether another seed would agree.

Comparisons of several pairs are corrected with Holm's step-down method (`holm`), and a pair
the corrected test does not resolve gets a rough sample size (`units_needed`).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: Coverage of every interval and the family-wise error rate of every corrected test.
LEVEL, ALPHA = 0.95, 0.05
#: Power the sample-size line aims at.
POWER = 0.8
#: Bootstrap resamples, and the seed of their generator (fixed: a table gives one answer).
RESAMPLES, BOOTSTRAP_SEED = 1000, 0
#: The units a comparison can run over.
SEEDS, CLIENTS = "seeds", "clients"


@dataclass(frozen=True)
class Interval:
    """A 95 % interval of a mean over `n` units (`over`: seeds or clients); None ends: none."""

    low: float | None
    high: float | None
    over: str
    n: int
    reason: str | None = None

    def to_json(self) -> dict:
        """Return ``{"low", "high", "over", "n"[, "reason"]}``."""
        out = {"low": self.low, "high": self.high, "over": self.over, "n": self.n}
        return out | ({"reason": self.reason} if self.reason else {})


@dataclass(frozen=True)
class Gap:
    """The paired difference a − b of two models on one quantity, and its test (uncorrected).

    Attributes:
        delta: The observed difference (mean over the units).
        low, high: Its 95 % interval (None: fewer than two units).
        p: The two-sided p of `test` (1 when every difference is 0).
        se: The standard error of `delta` at `n` units (for `units_needed`).
        n: The units compared; `over` says which (seeds or clients).
        test: ``"paired t"``, ``"Wilcoxon signed-rank"`` or ``"paired bootstrap"``.

    """

    delta: float
    low: float | None
    high: float | None
    p: float
    se: float
    n: int
    over: str
    test: str


def t_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """Return mean ∓ t_{(1+level)/2, n−1} · s / √n, the t-interval of the mean of `values`.

    s is the sample standard deviation (n − 1); at least two values are needed.

    >>> low, high = t_interval([1.0, 2.0, 3.0])   # s = 1, t_{0.975, 2} = 4.302653
    >>> round(low, 6), round(high, 6)
    (-0.484138, 4.484138)
    """
    array = np.asarray(values, dtype=float)
    if array.size < 2:
        raise ValueError(f"a t-interval needs at least 2 values (got {array.size})")
    mean = math.fsum(array.tolist()) / array.size
    half = float(stats.t.ppf((1 + level) / 2, array.size - 1)) * _sd(array) / math.sqrt(array.size)
    return mean - half, mean + half


def client_resamples(n_clients: int, n_resamples: int = RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """Return [n_resamples, n_clients] client indices drawn with replacement (seeded).

    >>> client_resamples(3, 2, seed=0).shape
    (2, 3)
    """
    return np.random.default_rng(seed).integers(0, n_clients, size=(n_resamples, n_clients))


def bootstrap_means(cells: np.ndarray, resamples: np.ndarray) -> np.ndarray:
    """Return each resample's mean of `cells` ([S, K]: seeds × clients), seeds kept paired.

    A resample takes the same client columns from every seed; the value is the mean over seeds
    of the mean over the resampled clients (the report's "mean over seeds of AA").

    >>> cells = np.array([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]])
    >>> bootstrap_means(cells, np.array([[0, 0, 0], [2, 1, 2]])).round(6).tolist()  # 1|3, 8/3|14/3
    [2.0, 3.666667]
    """
    cells = np.atleast_2d(np.asarray(cells, dtype=float))
    return cells[:, resamples].mean(axis=2).mean(axis=0)


def mean_interval(cells: np.ndarray, n_resamples: int = RESAMPLES) -> Interval:
    """Return the 95 % interval of the mean of `cells` ([S, K]: seeds × clients).

    Over seeds (the t-interval of the S per-seed means) when S ≥ 2, else the percentile
    bootstrap over the K clients.

    >>> mean_interval(np.array([[0.8, 0.6], [0.9, 0.7]]))   # per-seed means 0.7, 0.8
    Interval(low=0.1146..., high=1.3853..., over='seeds', n=2, reason=None)
    """
    cells = np.atleast_2d(np.asarray(cells, dtype=float))
    if cells.shape[0] > 1:
        return Interval(*t_interval(cells.mean(axis=1)), SEEDS, cells.shape[0])
    replicates = bootstrap_means(cells, client_resamples(cells.shape[1], n_resamples))
    return Interval(*percentile_interval(replicates), CLIENTS, cells.shape[1])


def percentile_interval(replicates: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Return the (1 − level)/2 and (1 + level)/2 quantiles of the finite `replicates`.

    >>> [round(end, 6) for end in percentile_interval(np.arange(101.0))]
    [2.5, 97.5]
    """
    finite = np.asarray(replicates, dtype=float)
    finite = finite[np.isfinite(finite)]
    low, high = np.quantile(finite, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def wilcoxon_p(differences: Sequence[float]) -> float:
    """Return the two-sided p of the Wilcoxon signed-rank test that the differences centre on 0.

    Zero differences are dropped (Wilcoxon's rule); with none left, p is 1. SciPy's exact null
    distribution is used for small samples without ties, its normal approximation otherwise.

    >>> wilcoxon_p([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])   # all 10 signs +: 2 / 2^10
    0.001953125
    >>> wilcoxon_p([0.0, 0.0, 0.0])
    1.0
    """
    array = np.asarray(differences, dtype=float)
    if not array.any():
        return 1.0
    return float(stats.wilcoxon(array, zero_method="wilcox").pvalue)


def paired_t_p(differences: Sequence[float]) -> float:
    """Return the two-sided p of the one-sample t-test that the mean difference is 0.

    With no spread, p is 1 when every difference is 0 and 0 otherwise (every unit shows the
    same gap).

    >>> round(paired_t_p([1.0, 2.0, 3.0]), 6)   # t = 2 / (1 / √3) = 3.4641, 2 df
    0.07418
    >>> paired_t_p([0.5, 0.5]), paired_t_p([0.0, 0.0])
    (0.0, 1.0)
    """
    array = np.asarray(differences, dtype=float)
    if _sd(array) == 0:
        return 1.0 if not array.any() else 0.0
    return float(stats.ttest_1samp(array, 0.0).pvalue)


def bootstrap_p(replicates: np.ndarray) -> float:
    """Return the paired bootstrap's two-sided p: 2 · (min(#{d* ≤ 0}, #{d* ≥ 0}) + 1) / (B + 1).

    `replicates` are the B resampled differences d*; the +1 counts the observed sample, so p
    is never 0; it is capped at 1 (a difference that is 0 in every resample gives 1).

    >>> bootstrap_p(np.array([1.0, 2.0, 3.0]))   # no d* ≤ 0: 2 · 1 / 4
    0.5
    >>> bootstrap_p(np.zeros(5))
    1.0
    """
    finite = np.asarray(replicates, dtype=float)
    finite = finite[np.isfinite(finite)]
    tail = min(int((finite <= 0).sum()), int((finite >= 0).sum()))
    return min(1.0, 2 * (tail + 1) / (finite.size + 1))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Return Holm's adjusted p-values, in the given order.

    Sorted ascending, p_(i) becomes max_{j ≤ i} min(1, (m − j + 1) · p_(j)) for m tests; a
    test is resolved when its adjusted p is below α, which keeps the family-wise error ≤ α.

    >>> holm([0.01, 0.04, 0.03])   # 3 · 0.01; max(2 · 0.03, ·); max(1 · 0.04, 0.06)
    [0.03, 0.06, 0.06]
    """
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def units_needed(delta: float, se: float, n: int, alpha: float = ALPHA,
                 power: float = POWER) -> int | None:
    """Return about how many units a paired test needs to resolve `delta` at this spread.

    The sample size of a paired t-test: the smallest n' with
    n' ≥ ((t_{1−α/2, n'−1} + t_{power, n'−1}) · σ_d / |Δ|)², σ_d = SE · √n the standard
    deviation of the per-unit differences observed at n units (the normal approximation to the
    noncentral t; with z for t it is the textbook n' = ((z_{1−α/2} + z_{power}) σ_d / Δ)²), and
    at least n + 1: the test did not resolve it at n. Pass the α the comparison faces (Holm's
    strictest, α / m, for m pairs). The Wilcoxon test needs about π/3 ≈ 1.05 times as many
    under normal data (its efficiency), the bootstrap about as many. None when Δ is 0 or there
    is no spread: more units would not settle it.

    >>> units_needed(1.0, 0.5, 10)   # σ_d = 0.5 √10 = 1.58: z gives 19.6, t 21.6 at n' = 22
    22
    >>> units_needed(0.25, 0.05, 2)   # two seeds, d = 0.2, 0.3: a third would do (t, 2 df)
    3
    """
    if delta == 0 or se == 0 or not math.isfinite(se):
        return None
    ratio = se * math.sqrt(n) / abs(delta)
    z = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
    need = max(2, math.ceil((z * ratio) ** 2))
    while need < 100_000:  # t → z: the z start is within a few units of the answer
        t = float(stats.t.ppf(1 - alpha / 2, need - 1) + stats.t.ppf(power, need - 1))
        if need >= (t * ratio) ** 2:
            break
        need += 1
    return max(need, n + 1)


def over_seeds(a: Sequence[float | None], b: Sequence[float | None]) -> Gap | None:
    """Compare per-seed values of two models: paired t-test and t-interval over the seeds.

    A seed where either value is undefined (None or NaN) is left out; None with fewer than two
    seeds left.

    >>> gap = over_seeds([0.9, 0.8, 0.85], [0.8, 0.8, 0.8])   # d = 0.1, 0, 0.05
    >>> round(gap.delta, 6), round(gap.se, 6), gap.n, gap.test
    (0.05, 0.028868, 3, 'paired t')
    """
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if _defined(x) and _defined(y)]
    if len(pairs) < 2:
        return None
    d = np.array([x - y for x, y in pairs])
    low, high = t_interval(d)
    return Gap(math.fsum(d.tolist()) / d.size, low, high, paired_t_p(d),
               _sd(d) / math.sqrt(d.size), d.size, SEEDS, "paired t")


def over_clients(a: Sequence[float], b: Sequence[float], resamples: np.ndarray) -> Gap:
    """Compare two models' per-client values of one seed: Wilcoxon test, bootstrap interval.

    The interval is the percentile bootstrap of the mean difference over `resamples`.

    >>> gap = over_clients([0.9, 0.8, 0.7], [0.8, 0.7, 0.6], client_resamples(3))
    >>> round(gap.delta, 6), round(gap.low, 6), round(gap.high, 6), gap.p
    (0.1, 0.1, 0.1, 0.25)
    """
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    replicates = bootstrap_means(d, resamples)
    low, high = percentile_interval(replicates)
    return Gap(math.fsum(d.tolist()) / d.size, low, high, wilcoxon_p(d),
               float(np.std(replicates, ddof=1)), d.size, CLIENTS, "Wilcoxon signed-rank")


def bootstrapped(a: float | None, b: float | None, a_replicates: np.ndarray,
                 b_replicates: np.ndarray, n: int) -> Gap | None:
    """Compare a whole-set quantity of two models by the paired bootstrap over `n` clients.

    The replicates come from the same client resamples for both models; a resample where either
    is undefined (NaN) is left out. None when either observed value is undefined or fewer than
    half the resamples define both.

    >>> gap = bootstrapped(1.0, 0.5, np.array([1.0, 0.9, 0.8]), np.array([0.5, 0.6, 0.9]), 4)
    >>> round(gap.delta, 6), gap.p, gap.test
    (0.5, 1.0, 'paired bootstrap')
    """
    if not (_defined(a) and _defined(b)):
        return None
    d = np.asarray(a_replicates, dtype=float) - np.asarray(b_replicates, dtype=float)
    d = d[np.isfinite(d)]
    if d.size < max(2, len(a_replicates) / 2):
        return None
    low, high = percentile_interval(d)
    return Gap(a - b, low, high, bootstrap_p(d), float(np.std(d, ddof=1)), n, CLIENTS,
               "paired bootstrap")


def _defined(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _sd(array: np.ndarray) -> float:
    if array.size < 2 or (array == array[0]).all():
        return 0.0
    mean = math.fsum(array.tolist()) / array.size
    return math.sqrt(math.fsum(((array - mean) ** 2).tolist()) / (array.size - 1))
