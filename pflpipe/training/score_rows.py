"""The rows of a results directory's tables (results.csv, history.csv) from the engine's scores."""

from pflpipe.engine.data import FederatedData
from pflpipe.engine.federation import FederationResult
from pflpipe.engine.records import COMPUTE, DIAGNOSTIC_PREFIX
from pflpipe.training.stage_setup import has_validation, scored_splits

RESULT_FIELDS = ("seed", "client", "model", "split", "selection", "round", "accuracy", "loss",
                 "n_samples", "scope")


HISTORY_FIELDS = ("seed", "client", "model", "round", "split", "loss", "accuracy", "scope")


def scored_rows(rows: list[dict], data: FederatedData) -> list[dict]:
    """The engine's round rows, by client id.

    Without the (empty, NaN) validation rows of a partition without a validation split.
    """
    rows = [{**r, "client": data.client_id(r["client"])} for r in rows]
    return rows if has_validation(data) else [r for r in rows if r["split"] != "val"]


def client_test_accuracies(results: list[dict], selection: str, scope: str = "") -> list[float]:
    """Each client's test accuracy in the `results` rows of `selection` and `scope`.

    Scope "" is the personalized model, `GLOBAL_SCOPE` the algorithm's global model.
    """
    return [r["accuracy"] for r in results if r["selection"] == selection
            and r["split"] == "test" and r.get("scope", "") == scope]


def mean_test_accuracy(results: list[dict], selection: str, scope: str = "") -> float:
    """The mean over clients of `client_test_accuracies`."""
    values = client_test_accuracies(results, selection, scope)
    return sum(values) / len(values)


def federation_rows(result: FederationResult, model: str, seed: int, data: FederatedData
                    ) -> list[dict]:
    """results.csv rows: each client's val and test scores at its best-val and last round.

    Without a validation split the engine's best-val round is the last one and only test rows
    are written. When the engine scored the algorithm's global model too (``global_*`` scores),
    each row has a twin of scope ``global`` holding the global model's scores at the same round;
    so for any other view of the personalized model the algorithm declares (``soft_*``: scope
    ``soft``) (docs/contracts.md).
    """
    scopes = [(prefix[:-1], prefix) for prefix in _prefixes(result.best, "test_accuracy")]
    rows = []
    for selection, scores in (("best_val", result.best), ("last_round", result.last)):
        for split in scored_splits(data):
            counts = data.split(split).counts.tolist()
            for client in range(data.n_clients):
                for scope, prefix in scopes:
                    rows.append({
                        "seed": seed, "client": data.client_id(client), "model": model,
                        "split": split,
                        "selection": selection, "round": int(scores["round"][client]),
                        "accuracy": float(scores[f"{prefix}{split}_accuracy"][client]),
                        "loss": float(scores[f"{prefix}{split}_loss"][client]),
                        "n_samples": counts[client], "scope": scope})
    return rows


def history_rows(rows: list[dict], model: str, seed: int) -> list[dict]:
    """history.csv rows from the engine's round × client × split records.

    An engine record with the global model's scores (``global_loss``, ``global_accuracy``)
    becomes two rows: the personalized model's and one of scope ``global`` (and so for every
    other scored view, e.g. ``soft_loss``: scope ``soft``).
    A ``train`` record's compute and diagnostics (`pflpipe.engine.records`) stay on its row.
    """
    out = []
    for row in rows:
        base = {"seed": seed, "model": model, "round": row["round"], "client": row["client"],
                "split": row["split"]}
        own = {k: v for k, v in row.items() if k in COMPUTE or k.startswith(DIAGNOSTIC_PREFIX)}
        out += [{**base, "scope": prefix[:-1], "loss": row[f"{prefix}loss"],
                 "accuracy": row.get(f"{prefix}accuracy", ""), **({} if prefix else own)}
                for prefix in _prefixes(row, "loss")]
    return out



def _prefixes(scores: dict, measure: str) -> list[str]:
    """The scopes' key prefixes of the scores of `measure` ("" first, then by name).

    A diagnostic column (``diag.router_loss``) is not a scope's.

    >>> _prefixes({"loss": 1, "global_loss": 2, "soft_loss": 3, "accuracy": 4,
    ...            "diag.router_loss": 5}, "loss")
    ['', 'global_', 'soft_']
    """
    return sorted(key[:-len(measure)] for key in scores if key.endswith(measure)
                  and (key == measure or key[-len(measure) - 1] == "_")
                  and not key.startswith(DIAGNOSTIC_PREFIX))


def mean_by_round(rows: list[dict], split: str, key: str, data: FederatedData) -> dict[int, float]:
    """Sample-weighted mean of `key` over clients, per round, for one split."""
    counts = data.split(split).counts.tolist()
    totals: dict[int, list[float]] = {}
    for row in rows:
        if row["split"] == split:
            acc = totals.setdefault(row["round"], [0.0, 0.0])
            acc[0] += row[key] * counts[row["client"]]
            acc[1] += counts[row["client"]]
    return {r: s / n for r, (s, n) in sorted(totals.items()) if n}
