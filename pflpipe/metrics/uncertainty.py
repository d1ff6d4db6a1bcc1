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

**A gap's interval is the one its test inverts**, so the two cannot disagree: the interval at
level 1 − a excludes 0 exactly when the test's p < a. Over seeds that is the t-interval of the
paired t-test. Over clients the accuracy test is Wilcoxon's signed-rank test in its Walsh-average
form: Δ is the Hodges–Lehmann estimate (the median of the n(n+1)/2 averages (d_i + d_j) / 2), the
interval runs between the k-th smallest and the k-th largest average, k from the exact null
distribution of T⁺ (`signed_rank_cdf`), and p counts the averages on the far side of 0 (a 0
difference counts against both sides). The bootstrap's interval is the k-th smallest and largest
replicate, with k from the same count its p uses (`order_interval`, `count_p`).

Comparisons of several pairs are corrected with Holm's step-down method (`holm`), and a pair
the corrected test does not resolve gets a rough sample size (`units_needed`). A pair whose
gaps have no spread (one unit, or every unit showing the same gap) has no interval and no test:
its spread cannot be estimated (`Gap.reason`). A test can also be unable to reach a level at all:
with n clients the signed-rank p is never below 2 / 2^n (`Gap.p_min`).
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from pflpipe.metrics.inversion import (
    count_p,
    order_interval,
    signed_rank_cdf,
    walsh_averages,
)

#: Coverage of every interval and the family-wise error rate of every corrected test.
LEVEL, ALPHA = 0.95, 0.05
#: Power the sample-size line aims at.
POWER = 0.8
#: Bootstrap resamples, and the seed of their generator (fixed: a table gives one answer).
RESAMPLES, BOOTSTRAP_SEED = 1000, 0
#: The units a comparison can run over.
SEEDS, CLIENTS = "seeds", "clients"
#: The tests a gap is judged by.
T_TEST, SIGNED_RANK, BOOTSTRAP = "paired t", "Wilcoxon signed-rank", "paired bootstrap"
#: Seeds that measure training noise: 2 estimate a spread (a t-test with 1 df, t_{0.975} = 12.7,
#: resolves only huge gaps); 3 are the fewest that make a test over seeds useful.
MIN_SEEDS = 3


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
        delta: The test's estimate of the difference: the mean over seeds, the Hodges–Lehmann
            estimate over clients (signed-rank), the observed value (bootstrap).
        low, high: Its 95 % interval, the one the test inverts (None: no interval, see
            `reason`, or the test cannot reach that level).
        p: The two-sided p of `test` (1 where `reason` says no test can be made).
        se: The standard error of `delta` at `n` units (for `units_needed`).
        n: The units compared; `over` says which (seeds or clients).
        test: ``"paired t"``, ``"Wilcoxon signed-rank"`` or ``"paired bootstrap"``.
        reason: Why the spread, hence an interval and a test, cannot be estimated (one unit,
            or every unit showing the same gap); None when they can.
        p_min: The smallest p the test could give on `n` units with this sample's ties.
        at: The interval at level 1 − a, for any a (the same inversion as `low`, `high`).
        zeros: The units showing no difference at all (they keep a rank test's p up).

    """

    delta: float
    low: float | None
    high: float | None
    p: float
    se: float
    n: int
    over: str
    test: str
    reason: str | None = None
    p_min: float = 0.0
    at: Callable[[float], tuple[float | None, float | None]] | None = field(
        default=None, compare=False, repr=False)
    zeros: int = 0

    def interval(self, alpha: float) -> tuple[float | None, float | None]:
        """Return the interval at level 1 − `alpha` ((None, None) where there is none)."""
        return (None, None) if self.at is None else self.at(alpha)


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
    half = _t_ppf((1 + level) / 2, array.size - 1) * _sd(array) / math.sqrt(array.size)
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
        means = _rounded(cells.mean(axis=1))
        if _sd(means) == 0:
            return Interval(None, None, SEEDS, means.size, NO_SPREAD.format(units="seeds"))
        return Interval(*t_interval(means), SEEDS, cells.shape[0])
    if _sd(_rounded(cells[0])) == 0:
        return Interval(None, None, CLIENTS, cells.shape[1], NO_SPREAD.format(units="clients"))
    replicates = bootstrap_means(cells, client_resamples(cells.shape[1], n_resamples))
    return Interval(*percentile_interval(replicates), CLIENTS, cells.shape[1])


#: Why a summary of values without spread has no interval.
NO_SPREAD = ("one value over the {units}, or every one alike: no spread to estimate an "
             "interval from")


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
    """Return the two-sided p of the signed-rank test that the differences centre on 0.

    In its Walsh-average form (`count_p` over `walsh_averages`, the p `over_clients`' interval
    inverts): without ties or zeros it is the exact Wilcoxon p; a zero difference is kept and
    counts against both sides, so a tie keeps p up as it keeps the interval on 0.

    >>> wilcoxon_p([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])   # all 10 signs +: 2 / 2^10
    0.001953125
    >>> wilcoxon_p([0.0, 0.0, 0.0]), wilcoxon_p([0.0, 1, 2, 3, 4, 5])  # a tie: 2 · 2 / 2^6
    (1.0, 0.0625)
    """
    d = np.asarray(differences, dtype=float)
    return count_p(walsh_averages(d), signed_rank_cdf(d.size))


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
    from scipy import stats  # here: scipy.stats costs ~0.5 CPU s to import

    return float(stats.ttest_1samp(array, 0.0).pvalue)


def _t_ppf(q: float, df: int) -> float:
    """Student's t quantile: ``scipy.stats.t.ppf(q, df)`` for 0 < q < 1, by the function it calls.

    `scipy.special` imports in a fraction of the time scipy.stats takes.

    >>> _t_ppf(0.975, 2)   # t_{0.975, 2}
    4.302652729749462
    """
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def bootstrap_p(replicates: np.ndarray) -> float:
    """Return the paired bootstrap's two-sided p: 2 · (min(#{d* ≤ 0}, #{d* ≥ 0}) + 1) / (B + 1).

    `replicates` are the B resampled differences d*; the +1 counts the observed sample, so p
    is never 0; it is capped at 1 (a difference that is 0 in every resample gives 1). It is
    `count_p` with cdf[t] = (t + 1) / (B + 1), the p `bootstrapped`'s interval inverts.

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
    from scipy.special import ndtri  # the normal quantile (scipy.stats.norm.ppf's own)

    ratio = se * math.sqrt(n) / abs(delta)
    z = float(ndtri(1 - alpha / 2) + ndtri(power))
    need = max(2, math.ceil((z * ratio) ** 2))
    while need < 100_000:  # t → z: the z start is within a few units of the answer
        t = _t_ppf(1 - alpha / 2, need - 1) + _t_ppf(power, need - 1)
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
    d = _rounded(np.array([x - y for x, y in pairs]))
    delta = math.fsum(d.tolist()) / d.size
    if _sd(d) == 0:
        return Gap(delta, None, None, 1.0, 0.0, d.size, SEEDS, T_TEST, _same_gap(d, SEEDS), 1.0)

    def at(alpha: float) -> tuple[float, float]:
        return t_interval(d, 1 - alpha)
    return Gap(delta, *at(ALPHA), paired_t_p(d), _sd(d) / math.sqrt(d.size), d.size, SEEDS,
               T_TEST, at=at)


def over_clients(a: Sequence[float], b: Sequence[float], resamples: np.ndarray) -> Gap:
    """Compare two models' per-client values of one seed: the signed-rank test and its interval.

    Δ is the Hodges–Lehmann estimate and the interval the one the test inverts (see the module
    docstring); `resamples` give the standard error `units_needed` reads.

    >>> gap = over_clients([0.9, 0.8, 0.7, 0.6], [0.8, 0.75, 0.7, 0.5], client_resamples(4))
    >>> round(gap.delta, 6), gap.p, gap.p_min, gap.low   # d = .1, .05, 0, .1: 4 clients, a tie
    (0.0625, 0.25, 0.25, None)
    >>> over_clients([0.9, 0.8], [0.8, 0.7], client_resamples(2)).reason
    'every one of the 2 clients shows the same gap (+0.1): its spread cannot be estimated'
    """
    d = _rounded(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    replicates = bootstrap_means(d, resamples)
    se = float(np.std(replicates, ddof=1)) if len(replicates) > 1 else 0.0
    if _sd(d) == 0:
        return Gap(float(d[0]), None, None, 1.0, 0.0, d.size, CLIENTS, SIGNED_RANK,
                   _same_gap(d, CLIENTS), 1.0)
    walsh, cdf = walsh_averages(d), signed_rank_cdf(d.size)
    zeros = int((d == 0).sum())

    def at(alpha: float) -> tuple[float | None, float | None]:
        return order_interval(walsh, cdf, alpha)
    return Gap(float(np.median(walsh)), *at(ALPHA), wilcoxon_p(d), se, d.size, CLIENTS,
               SIGNED_RANK, p_min=min(1.0, 2 * float(cdf[zeros * (zeros + 1) // 2])), at=at,
               zeros=zeros)


def bootstrapped(a: float | None, b: float | None, a_replicates: np.ndarray,
                 b_replicates: np.ndarray, n: int) -> Gap | None:
    """Compare a whole-set quantity of two models by the paired bootstrap over `n` clients.

    The replicates come from the same client resamples for both models; a resample where either
    is undefined (NaN) is left out. None when either observed value is undefined or fewer than
    half the resamples define both.

    The interval is the k-th smallest and largest replicate, k from the count its p uses
    (`order_interval`, `count_p`): it excludes 0 exactly when p < α.

    >>> gap = bootstrapped(1.0, 0.5, np.array([1.0, 0.9, 0.8]), np.array([0.5, 0.6, 0.9]), 4)
    >>> round(gap.delta, 6), gap.p, gap.test
    (0.5, 1.0, 'paired bootstrap')
    """
    if not (_defined(a) and _defined(b)):
        return None
    d = np.asarray(a_replicates, dtype=float) - np.asarray(b_replicates, dtype=float)
    d = np.sort(_rounded(d[np.isfinite(d)]))
    if d.size < max(2, len(a_replicates) / 2):
        return None
    if _sd(d) == 0:
        return Gap(a - b, None, None, 1.0, 0.0, n, CLIENTS, BOOTSTRAP,
                   f"every resample of the {n} clients gives the same gap "
                   f"({d[0]:+.3g}): its spread cannot be estimated", 1.0)
    cdf = (np.arange(d.size + 1) + 1) / (d.size + 1)

    def at(alpha: float) -> tuple[float | None, float | None]:
        return order_interval(d, cdf, alpha)
    return Gap(a - b, *at(ALPHA), bootstrap_p(d), float(np.std(d, ddof=1)), n, CLIENTS,
               BOOTSTRAP, p_min=min(1.0, 2 / (d.size + 1)), at=at)


def _rounded(d: np.ndarray) -> np.ndarray:
    """Differences to 12 decimals: 0.9 − 0.8 and 0.8 − 0.7 are the same gap, not two."""
    return np.round(d, 12)


def _same_gap(d: np.ndarray, over: str) -> str:
    if d.size == 1:
        return (f"one {over[:-1]} only: a gap over {over} needs at least 2 to estimate its "
                "spread")
    return (f"every one of the {d.size} {over} shows the same gap ({d[0] + 0.0:+.3g}): its "
            "spread cannot be estimated")


def _defined(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _sd(array: np.ndarray) -> float:
    if array.size < 2 or (array == array[0]).all():
        return 0.0
    mean = math.fsum(array.tolist()) / array.size
    return math.sqrt(math.fsum(((array - mean) ** 2).tolist()) / (array.size - 1))
