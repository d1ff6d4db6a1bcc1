"""Compute added up: per client, per model, against samples; and the diagnostics over rounds.

Compute (`pflpipe.engine.records.COMPUTE`, counted by the engine, `pflpipe.engine.accounting`)
sits on the train rows of a history: a client's total is the sum over its rounds
(`client_totals`, results.csv), a model's own total the sum over its clients and rounds averaged
over seeds (`totals`; `pflpipe.compute.in_all` adds the warm start a model started from, and
compares the models), an MLflow run's the sum over its clients (`model_totals`). Diagnostics
(``diag.*`` columns) are series over rounds, the mean over clients and seeds.
"""

import math
from collections.abc import Iterable, Mapping

from pflpipe.engine.records import COMPUTE, DIAGNOSTIC_PREFIX

#: The compute measure models are matched on.
MATCHED_ON = "samples"


def totals(history: Iterable[dict]) -> dict[str, dict[str, float]]:
    """Per model, each compute count summed over clients and rounds, averaged over seeds.

    >>> totals([{"model": "a", "seed": 0, "split": "train", "steps": 2, "samples": 8,
    ...          "bytes_sent": 4, "bytes_received": 4},
    ...         {"model": "a", "seed": 1, "split": "train", "steps": 4, "samples": 16,
    ...          "bytes_sent": 4, "bytes_received": 4},
    ...         {"model": "a", "seed": 0, "split": "test", "accuracy": 0.5}])["a"]["samples"]
    12.0
    """
    sums: dict[str, dict[str, dict[str, float]]] = {}
    for row in history:
        counted = {name: float(row[name]) for name in COMPUTE if row.get(name) not in (None, "")}
        if not counted:
            continue
        seed = sums.setdefault(row["model"], {}).setdefault(str(row.get("seed", "")),
                                                            dict.fromkeys(COMPUTE, 0.0))
        for name, value in counted.items():
            seed[name] += value
    return {model: {name: sum(s[name] for s in seeds.values()) / len(seeds) for name in COMPUTE}
            for model, seeds in sums.items()}


def accuracy_vs_samples(history: Iterable[dict], split: str,
                        start: Mapping[tuple[str, str], float] | None = None
                        ) -> dict[str, tuple[list, list]]:
    """Per model: (cumulative samples processed, mean accuracy) at each evaluated round.

    Samples are summed over clients up to and including the round, from the samples the model
    had cost when it started (`start`, by model and seed: its warm start's, `cost.
    starting_samples`); accuracy is the mean over clients (scope ""); both averaged over seeds.

    >>> accuracy_vs_samples([{"model": "a", "seed": 0, "round": 1, "split": "train",
    ...                       "samples": 5}, {"model": "a", "seed": 0, "round": 1,
    ...                       "split": "train", "samples": 7}, {"model": "a", "seed": 0,
    ...                       "round": 1, "split": "test", "accuracy": 0.5}], "test")
    {'a': ([12.0], [0.5])}
    """
    spent: dict[tuple, dict[int, float]] = {}
    scores: dict[tuple, dict[int, list[float]]] = {}
    for row in history:
        key, r = (row["model"], str(row.get("seed", ""))), int(row["round"])
        if row["split"] == "train" and row.get(MATCHED_ON) not in (None, ""):
            spent.setdefault(key, {})
            spent[key][r] = spent[key].get(r, 0.0) + float(row[MATCHED_ON])
        elif row["split"] == split and not row.get("scope") and row.get("accuracy") not in (
                None, "") and not math.isnan(float(row["accuracy"])):
            scores.setdefault(key, {}).setdefault(r, []).append(float(row["accuracy"]))
    points: dict[str, dict[int, list[tuple[float, float]]]] = {}
    for key, by_round in scores.items():
        if key not in spent:
            continue
        for r in sorted(by_round):
            total = (start or {}).get(key, 0.0) + sum(v for q, v in spent[key].items() if q <= r)
            points.setdefault(key[0], {}).setdefault(r, []).append(
                (total, sum(by_round[r]) / len(by_round[r])))
    return {m: ([sum(p[0] for p in ps) / len(ps) for _, ps in sorted(rs.items())],
                [sum(p[1] for p in ps) / len(ps) for _, ps in sorted(rs.items())])
            for m, rs in points.items()}


def diagnostics(history: Iterable[dict]) -> dict[str, dict[str, tuple[list, list]]]:
    """Per model and diagnostic column: (rounds, mean over clients and seeds).

    >>> diagnostics([{"model": "apfl", "round": 1, "split": "train", "diag.alpha": 0.2},
    ...              {"model": "apfl", "round": 1, "split": "train", "diag.alpha": 0.4}])
    {'apfl': {'diag.alpha': ([1], [0.30000000000000004])}}
    """
    values: dict[str, dict[str, dict[int, list[float]]]] = {}
    for row in history:
        for key, value in row.items():
            if key.startswith(DIAGNOSTIC_PREFIX) and value not in (None, ""):
                values.setdefault(row["model"], {}).setdefault(key, {}).setdefault(
                    int(row["round"]), []).append(float(value))
    return {m: {k: (sorted(rs), [sum(rs[r]) / len(rs[r]) for r in sorted(rs)])
                for k, rs in sorted(cols.items())} for m, cols in values.items()}


def diagnostics_last(series: dict[str, dict[str, tuple[list, list]]]) -> list[list[str]]:
    """One row per model and diagnostic column: its last recorded round and value there.

    >>> diagnostics_last({"flow": {"diag.to_global.0": ([1, 2], [0.5, 0.25])}})
    [['flow', 'to_global.0', '2', '0.25']]
    """
    return [[model, column[len(DIAGNOSTIC_PREFIX):], str(rounds[-1]), f"{mean[-1]:.4g}"]
            for model, columns in series.items() for column, (rounds, mean) in columns.items()
            if rounds]


#: The header of the report's table of `diagnostics_last`.
DIAGNOSTICS_HEADER = ["model", "diagnostic", "last round", "mean over clients and seeds"]


def client_totals(history: list[dict]) -> dict[int, dict[str, int]]:
    """Each client's compute summed over its history's rows (`records.COMPUTE`).

    A count a row lacks (training on train rows, adaptation on test rows) adds nothing.

    >>> totals = client_totals([{"client": 1, "steps": 2, "samples": 8, "bytes_sent": 4,
    ...     "bytes_received": 4}, {"client": 1, "steps": 3, "samples": 9, "bytes_sent": 4,
    ...     "bytes_received": 4}, {"client": 1, "loss": 0.5, "adaptation_samples": 6}])
    >>> totals[1]["samples"], totals[1]["bytes_sent"], totals[1]["adaptation_samples"]
    (17, 8, 6)
    """
    totals: dict[int, dict[str, int]] = {}
    for row in history:
        counted = {name: int(row[name]) for name in COMPUTE if row.get(name) not in (None, "")}
        if not counted:
            continue
        total = totals.setdefault(int(row["client"]), dict.fromkeys(COMPUTE, 0))
        for name, value in counted.items():
            total[name] += value
    return totals


def model_totals(per_client: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The sum over clients of each compute count of theirs (an algorithm's MLflow run).

    >>> model_totals([{"samples": 20.0, "steps": 2.0}, {"samples": 4.0}])
    {'samples': 24.0, 'steps': 2.0}
    """
    out: dict[str, float] = {}
    for counts in per_client:
        for name, value in counts.items():
            out[name] = out.get(name, 0.0) + value
    return out
