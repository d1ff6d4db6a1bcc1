"""The metric names every algorithm logs to MLflow: one vocabulary, so charts compare algorithms.

Per round (MLflow step = round; epoch for the local baseline and PersFL's distillation):

    train_loss, val_loss, val_accuracy, test_loss, test_accuracy       ({split}_{loss|accuracy})

Final values of the model each client is scored with, chosen on validation (``best``) or the last
round's (``last``):

    best.test_accuracy, best.val_accuracy, best.test_loss, ..., best.round
    last.test_accuracy, ..., last.round

Compute and mechanism diagnostics (`pflpipe.engine.records`): per round ``compute.steps``,
``compute.samples``, ``compute.bytes_sent``, ``compute.bytes_received`` and each diagnostic under
its history column's name (``diag.tau``); at the end a client's totals over its rounds,
``compute.total.samples`` ..., and in an algorithm's run also their sum over its clients,
``compute.all_clients.samples`` ...

An algorithm's run holds the unweighted mean over its clients (the report's "AA"), so selecting
the algorithm runs in the chart view or in Compare puts every algorithm on one chart; each
client's own values are rows of the run's two tables (`CLIENTS_TABLE`, `CLIENT_HISTORY_TABLE`:
MLflow tables, which the Evaluation view of selected runs compares side by side), and its model
is an entry of one file, ``models/clients.pt`` (no run per client: at 1,000 clients that was
4,000 runs). An algorithm that also scores a second model of each client (e.g. the
global model next to the personalized one) prefixes its names with the model's scope:
``global.test_accuracy`` per round, ``best.global.test_accuracy`` at the end.
"""

import math
from collections.abc import Iterable, Iterator

from pflpipe.compute import totals
from pflpipe.engine.records import COMPUTE, DIAGNOSTIC_PREFIX
from pflpipe.layout import CLIENT_HISTORY_TABLE, CLIENT_MODELS, CLIENTS_TABLE  # noqa: F401

#: results.csv's `selection` column → the prefix of the final values.
SELECTIONS = {"best_val": "best", "last_round": "last"}
#: The history and results columns that become metrics.
MEASURES = ("loss", "accuracy")
#: Second models of a client, scored next to the personalized one: a history or results column
#: ``{scope}_{measure}`` (the engine's ``global_accuracy``) becomes ``{scope}.{split}_{measure}``.
SCOPES = ("global",)
#: Prefixes of a compute count's metrics: per round (``compute.samples``), a client's total over
#: its rounds (``compute.total.samples``), the sum of those over an algorithm's clients.
COMPUTE_PREFIX, TOTAL_PREFIX, ALL_PREFIX = "compute.", "compute.total.", "compute.all_clients."



def metric(split: str, measure: str, scope: str = "") -> str:
    """Return the name of one measure on one split.

    >>> metric("test", "accuracy"), metric("test", "accuracy", scope="global")
    ('test_accuracy', 'global.test_accuracy')
    """
    return f"{scope}.{split}_{measure}" if scope else f"{split}_{measure}"


def _values(row: dict) -> Iterator[tuple[str, float]]:
    """(name, value) of every measure in a row of one split, the scoped ones too.

    A row of a results or history table with a `scope` (docs/contracts.md: ``global``, Flow's
    ``soft``) scores that model: its plain measures are named in that scope.

    >>> dict(_values({"split": "test", "scope": "global", "loss": 0.5, "accuracy": 0.8}))
    {'global.test_loss': 0.5, 'global.test_accuracy': 0.8}
    """
    own = row.get("scope") or ""
    for scope in ("", *SCOPES):
        for measure in MEASURES:
            value = row.get(f"{scope}_{measure}" if scope else measure)
            if value not in ("", None) and not math.isnan(float(value)):  # NaN: no such split
                yield metric(row["split"], measure, scope or own), float(value)


def _recorded(row: dict) -> Iterator[tuple[str, float]]:
    """(name, value) of a row's compute and diagnostics (`pflpipe.engine.records`).

    >>> dict(_recorded({"split": "train", "samples": 40, "steps": "", "diag.tau": 2.5}))
    {'compute.samples': 40.0, 'diag.tau': 2.5}
    """
    for key, value in row.items():
        if value in ("", None) or not (key in COMPUTE or key.startswith(DIAGNOSTIC_PREFIX)):
            continue
        yield (f"{COMPUTE_PREFIX}{key}" if key in COMPUTE else key), float(value)


def round_rows(history: Iterable[dict]) -> list[dict]:
    """MLflow rows (step key ``round``) from history rows (round, split, loss, accuracy, ...).

    >>> round_rows([{"round": 1, "split": "val", "loss": 0.5, "accuracy": 0.8,
    ...              "global_accuracy": 0.7},
    ...             {"round": 1, "split": "train", "loss": 0.4, "accuracy": ""}])
    [{'round': 1, 'val_loss': 0.5, 'val_accuracy': 0.8, 'global.val_accuracy': 0.7, \
'train_loss': 0.4}]
    """
    by_round: dict[int, dict] = {}
    for row in history:
        step = by_round.setdefault(int(row["round"]), {"round": int(row["round"])})
        step.update(_values(row))
        step.update(_recorded(row))
    return [by_round[r] for r in sorted(by_round)]


def final_metrics(results: Iterable[dict]) -> dict[str, float]:
    """``best.*`` and ``last.*`` values from results.csv rows of one client.

    >>> final_metrics([{"selection": "best_val", "split": "test", "round": 7, "accuracy": 0.9,
    ...                 "loss": 0.3}])
    {'best.test_loss': 0.3, 'best.test_accuracy': 0.9, 'best.round': 7.0}
    """
    out: dict[str, float] = {}
    for row in results:
        prefix = SELECTIONS[row["selection"]]
        out |= {f"{prefix}.{name}": value for name, value in _values(row)}
        out[f"{prefix}.round"] = float(row["round"])
        out |= {f"{TOTAL_PREFIX}{name}": float(row[name]) for name in COMPUTE
                if row.get(name) not in (None, "")}
    return out



def table_column(name: str) -> str:
    """The column of metric `name` in an algorithm run's tables: its dots as slashes.

    MLflow's table viewer reads a dotted column name as a path into nested values and shows its
    cells empty (``best.val_loss``); ``best/val_loss`` shows, and reads back as the metric's
    name with `metric_of`.

    >>> table_column("compute.total.samples"), metric_of("compute/total/samples")
    ('compute/total/samples', 'compute.total.samples')
    """
    return name.replace(".", "/")


def metric_of(column: str) -> str:
    """The metric name of a table column (`table_column`'s inverse)."""
    return column.replace("/", ".")


def compute_totals(per_client: Iterable[dict]) -> dict[str, float]:
    """The sum over clients of each compute count in their final metrics (an algorithm's run).

    >>> compute_totals([{"compute.total.samples": 20.0, "best.test_accuracy": 0.5},
    ...                 {"compute.total.samples": 4.0}])
    {'compute.all_clients.samples': 24.0}
    """
    counts = [{key[len(TOTAL_PREFIX):]: value for key, value in final.items()
               if key.startswith(TOTAL_PREFIX)} for final in per_client]
    return {ALL_PREFIX + name: value for name, value in totals.model_totals(counts).items()}


def mean_over_clients(per_client: Iterable[dict], step_key: str | None = None) -> list[dict]:
    """The unweighted mean over clients of every metric, per step (or of one final mapping each).

    `per_client` holds one list of rows (with `step_key`) per client, or one mapping per client
    when `step_key` is None.

    >>> mean_over_clients([{"best.test_accuracy": 0.8}, {"best.test_accuracy": 0.6}])
    [{'best.test_accuracy': 0.7}]
    """
    sums: dict[object, dict[str, list[float]]] = {}
    for item in per_client:
        for row in (item if step_key else [item]):
            step = row[step_key] if step_key else None
            for key, value in row.items():
                if key != step_key:
                    sums.setdefault(step, {}).setdefault(key, []).append(value)
    out = []
    for step in sorted(sums, key=lambda s: (s is None, s)):
        means = {key: sum(values) / len(values) for key, values in sums[step].items()}
        out.append({step_key: step, **means} if step_key else means)
    return out


def run_name(model: str, seed: int | None = None) -> str:
    """The run name of an algorithm; the seed when there are several.

    >>> run_name("fedper"), run_name("fedper", seed=1)
    ('fedper', 'fedper · seed 1')
    """
    return model if seed is None else f"{model} · seed {seed}"
