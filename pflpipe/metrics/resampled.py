"""Every metric of `summary.PATHS` on every client resample at once: the one-seed bootstrap.

`replicates` gives what one `summary.score` call per resample gives — bit for bit, the same
numbers — from a [resamples, clients] matrix of each per-client value. A resample's values are
a row; a subset of it (QoI over U⁺, |QoI| over U⁻) is the row's entries under a mask, the rest
set to 0. Each metric repeats its scalar formula (`pflpipe.metrics.performance`,
`pflpipe.metrics.fairness`) elementwise, and every sum is `math.fsum` of a row: exactly rounded,
so neither the clients' order nor the padding zeros change a value. A metric without a
vectorized form here is computed resample by resample with its registered function (`_scalar`),
as is every metric of a model whose values a metric would refuse (the same error is raised).
"""

import math
from collections.abc import Callable

import numpy as np

from pflpipe.metrics.metric_registry import METRIC_REGISTRY
from pflpipe.metrics.summary import PATHS, score


class _Rows:
    """One group of values over R resamples: `values` [R, K] (0 off `mask`), `n` per row."""

    def __init__(self, values: np.ndarray, mask: np.ndarray | None = None):
        self.mask = np.ones(values.shape, dtype=bool) if mask is None else mask
        self.values = np.where(self.mask, values, 0.0)
        self.n = self.mask.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            self.total = _fsum_rows(self.values)
            self.mean = self.total / self.n
        low = np.where(self.mask, self.values, np.inf).min(axis=1)
        high = np.where(self.mask, self.values, -np.inf).max(axis=1)
        self.equal = (self.n > 0) & (low == high)   # `base.all_equal`
        self.zero = ~(self.mask & (self.values != 0)).any(axis=1)

    def fsum(self, values: np.ndarray) -> np.ndarray:
        """Each row's exactly rounded sum of `values` on the mask."""
        return _fsum_rows(np.where(self.mask, values, 0.0))

    def sorted(self) -> np.ndarray:
        """Each row's values ascending, the entries off the mask last (as +inf)."""
        return np.sort(np.where(self.mask, self.values, np.inf), axis=1)


def _fsum_rows(matrix: np.ndarray) -> np.ndarray:
    return np.array(list(map(math.fsum, matrix.tolist())), dtype=float).reshape(len(matrix))


def _python_square(values: np.ndarray) -> np.ndarray:
    """``x ** 2`` of each Python float, as the scalar metrics square a sum."""
    return np.array([x ** 2 for x in values.tolist()], dtype=float)


def _max(floor: np.ndarray | float, x: np.ndarray) -> np.ndarray:
    """Python's ``max(floor, x)``: x only where it is greater."""
    return np.where(x > floor, x, floor)


def _min(ceiling: np.ndarray | float, x: np.ndarray) -> np.ndarray:
    """Python's ``min(ceiling, x)``: x only where it is smaller."""
    return np.where(x < ceiling, x, ceiling)


def _logs(n: np.ndarray) -> np.ndarray:
    """``math.log(n)`` of every count (NaN for 0)."""
    table = np.array([math.log(k) if k else np.nan for k in range(int(n.max(initial=0)) + 1)])
    return table[n]


def _nan_where(undefined: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.where(undefined, np.nan, values)


# --- the fairness metrics over a distribution (fairness.py) ---------------------------------

def _av(rows: _Rows) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = rows.fsum((rows.values - rows.mean[:, None]) ** 2) / rows.n
    return _nan_where(rows.n == 0, np.where(rows.equal, 0.0, spread))


def _cs(rows: _Rows) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_square = rows.fsum(rows.values ** 2) / rows.n
        value = _min(1.0, rows.mean / np.sqrt(mean_square))
    return _nan_where(rows.zero, np.where(rows.equal, 1.0, value))


def _entropy(rows: _Rows) -> np.ndarray:
    positive = rows.mask & (rows.values > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.where(positive, rows.values / rows.total[:, None], 1.0)
        terms = np.where(positive, shares * np.log(shares), 0.0)
        logs = _logs(rows.n)
        value = _min(logs, _max(0.0, -_fsum_rows(terms)))
    return _nan_where(rows.zero, np.where(rows.equal, logs, value))


def _ji(rows: _Rows) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        index = _python_square(rows.total) / (rows.n * rows.fsum(rows.values ** 2))
        value = _min(1.0, _max(1.0 / rows.n, index))
    return _nan_where(rows.zero, np.where(rows.equal, 1.0, value))


DISTRIBUTION: dict[str, Callable[[_Rows], np.ndarray]] = {
    "AV": _av, "CS": _cs, "Entropy": _entropy, "JI": _ji}


# --- the performance metrics (performance.py) ------------------------------------------------

def _median(rows: _Rows) -> np.ndarray:
    ordered = rows.sorted()
    n = np.maximum(rows.n, 1)
    at = np.arange(len(ordered))
    low, high = ordered[at, (n - 1) // 2], ordered[at, n // 2]
    return _nan_where(rows.n == 0, np.where(n % 2 == 1, low, (low + high) / 2))


def _share(qoi: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    return 100.0 * chosen.sum(axis=1) / qoi.shape[1]


def _subset_mean(rows: _Rows) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return _nan_where(rows.n == 0, rows.total / rows.n)


def _accuracy_metrics(a: _Rows, sizes: np.ndarray | None) -> dict[str, np.ndarray]:
    k = a.values.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.sqrt(a.fsum((a.values - a.mean[:, None]) ** 2) / (k - 1))
    worst = math.ceil(k / 10)
    out = {"AA": a.mean,
           "std": np.full(len(a.n), np.nan) if k < 2 else np.where(a.equal, 0.0, std),
           "min": a.values.min(axis=1),
           "bottom_decile": _fsum_rows(a.sorted()[:, :worst]) / worst}
    if sizes is not None:
        out["top_samples_decile"] = _top_samples(a.values, sizes, worst)
    return out


def _top_samples(accuracy: np.ndarray, sizes: np.ndarray, m: int) -> np.ndarray:
    """`performance.top_samples_decile`: the m largest clients, less accurate first on a tie."""
    order = np.lexsort((accuracy, -sizes), axis=1)[:, :m]
    acc, samples = np.take_along_axis(accuracy, order, 1), np.take_along_axis(sizes, order, 1)
    total = _fsum_rows(samples)
    with np.errstate(invalid="ignore", divide="ignore"):
        return _nan_where(total <= 0, _fsum_rows(acc * samples) / total)


def replicates(accuracy: np.ndarray, qoi: np.ndarray | None, n_samples: np.ndarray | None,
               resamples: np.ndarray, *, errors: bool = False) -> dict[str, np.ndarray]:
    """Every metric of `PATHS` on each row of `resamples` ([R, K] client indices); NaN: undefined.

    The same values as ``summary.score(accuracy[idx], qoi[idx], n_samples=n_samples[idx])``
    for each row ``idx`` (None there is NaN here).
    """
    accuracy = np.asarray(accuracy, dtype=float)
    out = vectorized(accuracy, qoi, n_samples, resamples, errors=errors)
    if out is None:   # a value a metric refuses: `score` raises its error
        return _scalar(accuracy, qoi, n_samples, resamples, PATHS, errors)
    if missing := [path for path in PATHS if path not in out]:
        out |= _scalar(accuracy, qoi, n_samples, resamples, missing, errors)
    return {path: out[path] for path in PATHS}


def vectorized(accuracy: np.ndarray, qoi: np.ndarray | None, n_samples: np.ndarray | None,
               resamples: np.ndarray, *, errors: bool = False) -> dict[str, np.ndarray] | None:
    """The metrics of `PATHS` that have a form over the [resamples, clients] matrix.

    None when a fairness group holds a negative value (the metric refuses it).
    """
    accuracy = np.asarray(accuracy, dtype=float)
    a = _Rows(accuracy[resamples])
    groups = {"accuracy": a, "fairness.accuracy": _Rows(-a.values) if errors else a}
    sizes = None if n_samples is None else np.asarray(n_samples, dtype=float)[resamples]
    per_group = {"accuracy": _accuracy_metrics(a, sizes), "performance": {"AA": a.mean}}
    if qoi is not None:
        q = np.asarray(qoi, dtype=float)[resamples]
        gains, losses, signed_losses = _Rows(q, q > 0), _Rows(np.abs(q), q < 0), _Rows(q, q < 0)
        groups |= {"fairness.improved": gains, "fairness.decreased": losses}
        per_group["performance"] |= {
            "PUI": _share(q, q > 0), "PUD": _share(q, q < 0), "MPI": _median(gains),
            "API": _subset_mean(gains), "MPD": _median(signed_losses),
            "APD": _subset_mean(signed_losses)}
    if any((groups[g].values < 0).any() for g in groups if g.startswith("fairness.")):
        return None
    out: dict[str, np.ndarray] = {}
    undefined = np.full(len(resamples), np.nan)
    for path in PATHS:
        group, name = path.rsplit(".", 1)
        if group.startswith("fairness.") and group in groups and name in DISTRIBUTION:
            out[path] = DISTRIBUTION[name](groups[group])
        elif name in per_group.get(group, {}):
            out[path] = per_group[group][name]
        elif (group == "performance" and qoi is None) or (
                group.startswith("fairness.") and group not in groups) or (
                METRIC_REGISTRY[name].reads == "accuracy_and_samples" and n_samples is None):
            out[path] = undefined.copy()
    return {path: np.asarray(values, dtype=float) for path, values in out.items()}


def _scalar(accuracy: np.ndarray, qoi: np.ndarray | None, n_samples: np.ndarray | None,
            resamples: np.ndarray, paths, errors: bool) -> dict[str, np.ndarray]:
    """`paths` by one `score` call per resample (the reference the vectorized forms equal)."""
    out = {path: np.full(len(resamples), np.nan) for path in paths}
    for r, idx in enumerate(resamples):
        values = score(accuracy[idx], None if qoi is None else qoi[idx], "personalized",
                       None if n_samples is None else n_samples[idx], errors=errors)[0]
        for path in paths:
            if values[path] is not None:
                out[path][r] = values[path]
    return out


def scalar_replicates(accuracy: np.ndarray, qoi: np.ndarray | None,
                      n_samples: np.ndarray | None, resamples: np.ndarray, *,
                      errors: bool = False) -> dict[str, np.ndarray]:
    """`replicates` by one `summary.score` call per resample: the reference, and the slow way."""
    return _scalar(np.asarray(accuracy, dtype=float), qoi, n_samples, resamples, PATHS, errors)
