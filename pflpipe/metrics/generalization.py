"""Generalized vs personalized accuracy of every algorithm (Flow, Panchal et al. 2023, §5.1).

GA is an algorithm's global model scored on each client's test split, PA its personalized model
(Flow's Tables 2/5); ``beats_global`` is the percentage of clients whose PA is strictly above
their GA (Flow's Tables 3/7: "% of clients benefiting from personalization"; a tie does not
benefit). GA rows are the results table's rows of scope ``global`` (see
`pflpipe.metrics.results_table`). The global baseline (FedAvg) is one global model: its rows are its
GA and it has no PA; the local baseline has no global model: PA only.

Per seed, GA and PA are the unweighted means over clients (as AA) and ``beats_global`` is taken
over the clients scored under both; the report shows the mean ± std over seeds.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pflpipe.metrics.metric_registry import Metric, fsum, register, require_values
from pflpipe.metrics.results_table import GLOBAL_SCOPE, ResultsTable, Row, client_key, select_rows

#: The three numbers of the comparison, in the order the report shows them.
COLUMNS = ("GA", "PA", "beats_global")


def personalization_gain(personalized: Sequence[float], global_: Sequence[float]) -> np.ndarray:
    """Return each client's PA_i − GA_i (personalized minus global accuracy).

    >>> personalization_gain([0.9, 0.6, 0.7], [0.8, 0.7, 0.7]).round(6).tolist()
    [0.1, -0.1, 0.0]
    """
    p, g = np.asarray(personalized, dtype=float), np.asarray(global_, dtype=float)
    if p.shape != g.shape or p.ndim != 1:
        raise ValueError(f"PA and GA need one value per client each (got shapes {p.shape}, "
                         f"{g.shape})")
    return p - g


def percent_beats_global(gain: np.ndarray) -> float:
    """Return 100 · |{i : PA_i > GA_i}| / K, the % of clients benefiting from personalization.

    `gain` holds PA_i − GA_i per client (`personalization_gain`); a tie (gain 0) is not a benefit,
    as in Flow's code (``harmed = before_accuracy >= after_accuracy``).

    >>> percent_beats_global(np.array([0.1, -0.1, 0.0, 0.05]))
    50.0
    """
    require_values(gain, "beats_global")
    return 100.0 * int(np.count_nonzero(gain > 0)) / gain.size


BEATS_GLOBAL = register(Metric("beats_global", percent_beats_global, True, "gain",
                               "% of clients whose PA beats GA"))


@dataclass(frozen=True)
class Comparison:
    """GA, PA and beats_global of one model on one split: mean and std over seeds (None: none)."""

    model: str
    mean: dict[str, float | None]
    std: dict[str, float | None]
    n_clients: int

    def to_json(self) -> dict:
        """Return ``{"GA", "PA", "beats_global", "std_over_seeds", "n_clients"}``."""
        return {**self.mean, "std_over_seeds": dict(self.std), "n_clients": self.n_clients}


def compare(table: ResultsTable, *, global_: str = "fedavg", selection: str = "best_val"
            ) -> dict[str, dict[str, Comparison]]:
    """Return, per split and model, GA, PA and the % of clients whose PA beats GA.

    The global baseline `global_` has GA only (its rows); a model without global rows has PA
    only. Models are in the order of `summarize`: the baselines first, then by name.
    """
    personal = select_rows(table, selection)
    global_rows = [row for row in table.rows
                   if row.scope == GLOBAL_SCOPE and row.selection in ("", selection)]
    out: dict[str, dict[str, Comparison]] = {}
    for split in table.splits:
        pa = _by_seed([r for r in personal if r.split == split and r.model != global_])
        ga = _by_seed([r for r in global_rows if r.split == split]
                      + [r for r in personal if r.split == split and r.model == global_])
        models = sorted({m for per_seed in (pa, ga) for seeds in per_seed.values()
                         for m in seeds}, key=lambda m: (m != global_, m))
        if models:
            out[split] = {m: _comparison(m, pa, ga) for m in models}
    return out


def _by_seed(rows: list[Row]) -> dict[int, dict[str, dict[str, float]]]:
    """{seed: {model: {client: accuracy}}}."""
    out: dict[int, dict[str, dict[str, float]]] = {}
    for row in rows:
        out.setdefault(row.seed, {}).setdefault(row.model, {})[row.client] = row.accuracy
    return out


def _comparison(model: str, pa: dict, ga: dict) -> Comparison:
    per_seed: dict[str, list[float]] = {name: [] for name in COLUMNS}
    clients: set[str] = set()
    for seed in sorted(set(pa) | set(ga)):
        p, g = pa.get(seed, {}).get(model, {}), ga.get(seed, {}).get(model, {})
        clients |= set(p) | set(g)
        for name, values in (("PA", p), ("GA", g)):
            if values:
                per_seed[name].append(fsum(np.array(list(values.values()))) / len(values))
        both = sorted(set(p) & set(g), key=client_key)
        if both:
            gain = personalization_gain([p[c] for c in both], [g[c] for c in both])
            per_seed["beats_global"].append(BEATS_GLOBAL(gain))
    mean = {n: fsum(np.array(v)) / len(v) if v else None for n, v in per_seed.items()}
    std = {n: math.sqrt(fsum((np.array(v) - mean[n]) ** 2) / (len(v) - 1)) if len(v) > 1
           else None for n, v in per_seed.items()}
    return Comparison(model, mean, std, len(clients))
