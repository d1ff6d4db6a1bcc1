"""The per-client results table: the single source of every metric.

A long table, one row per (seed, split, selection, model, client):

| column      | required | default      | meaning                                               |
|-------------|----------|--------------|-------------------------------------------------------|
| client      | yes      |              | client id (any string; digits sort numerically)       |
| model       | yes      |              | algorithm name; baselines default to local / fedavg   |
| accuracy    | yes      |              | fraction in [0, 1] or percent in [0, 100]             |
| seed        | no       | 0            | repetition                                            |
| split       | no       | test         | data split scored (val, test, ...)                    |
| selection   | no       | (any)        | best_val or last_round; empty: applies to both        |
| loss        | no       |              | kept, not used by the metrics                         |
| n_samples   | no       |              | the client's samples in the split (top_samples_decile) |
| round       | no       |              | kept, not used by the metrics                         |
| scope       | no       | (empty)      | which of the algorithm's models the row scores: empty |
|             |          |              | its personalized model, `global` its global model     |
|             |          |              | (GA), another name another view (Flow's `soft`)       |

Rows of scope `global` feed only the generalized-vs-personalized comparison
(`pflpipe.metrics.generalization`); the metrics read the personalized rows (empty scope).
Other columns are ignored. The unit is the caller's (`unit`), or detected per file: fractions when
every accuracy is ≤ 1, percent when some are above 1 and none lies in (0, 1] (a table holding 0.8
and 75 mixes the two and is refused, never read as percent); tables of different units are never
mixed. A regression has no accuracy: its rows leave accuracy empty (or NaN) and give each client's
mean squared error as `loss`; the table's unit is then ``neg_mse`` and the score every metric reads
(the `accuracy` of a `Row`) is −MSE, so that higher is better throughout, as in scikit-learn's
``neg_mean_squared_error``.
"""

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from pflpipe.errors import DataError

REQUIRED = ("client", "model", "accuracy")
SELECTIONS = ("best_val", "last_round")
#: The `scope` of a row scoring an algorithm's global model (GA); empty: its personalized model.
GLOBAL_SCOPE = "global"
Unit = Literal["fraction", "percent", "neg_mse"]
#: The units a caller may name; "auto" detects them.
UNITS = ("auto", "fraction", "percent", "neg_mse")
#: What the score of each unit is called in the report's headings, axes and captions.
MEASURES = {"fraction": "accuracy", "percent": "accuracy", "neg_mse": "−MSE"}


def measure(unit: str, *, fairness: bool = False) -> str:
    """The name of a unit's score; with `fairness`, of the values whose fairness is measured.

    A regression's fairness is that of the per-client MSEs (positive), its score is −MSE.

    >>> measure("fraction"), measure("neg_mse"), measure("neg_mse", fairness=True)
    ('accuracy', '−MSE', 'MSE')
    """
    name = MEASURES[unit]
    return name.lstrip("−") if fairness else name


@dataclass(frozen=True)
class Row:
    """One client's score under one model: its accuracy, or −MSE for a regression."""

    client: str
    model: str
    accuracy: float
    seed: int = 0
    split: str = "test"
    selection: str = ""
    loss: float | None = None
    n_samples: int | None = None
    round: int | None = None
    where: str = ""
    scope: str = ""


@dataclass(frozen=True)
class ResultsTable:
    """Validated rows of one or more tables, all in one accuracy unit."""

    rows: tuple[Row, ...]
    unit: Unit
    sources: tuple[str, ...] = ()

    @property
    def splits(self) -> list[str]:
        """The splits present: test first, then val, then the rest by name."""
        order = {"test": 0, "val": 1}
        return sorted({row.split for row in self.rows}, key=lambda s: (order.get(s, 2), s))


def client_key(client: str) -> tuple[int, int | str]:
    """Sort key: numeric ids in numeric order, then the other ids by name."""
    return (0, int(client)) if client.isdigit() else (1, client)


def table_from_records(records: Iterable[Mapping[str, object]], source: str = "<records>",
                       unit: str = "auto", line: Callable[[int], str] | None = None,
                       unique: bool = True) -> ResultsTable:
    """Validate in-memory rows (mappings with the CSV's column names) as a table.

    `line(i)` names the i-th record in an error (``<source>: row i+1`` if not given); `unique`
    False leaves the check that no row repeats to the caller (`concat`).
    """
    check_unit(unit)
    records = list(records)
    where = line or (lambda i: f"{source}: row {i + 1}")
    unit = _regression(records, unit, where)
    rows = tuple(_parse_row(record, where(i), unit == "neg_mse")
                 for i, record in enumerate(records))
    if not rows:
        raise DataError(f"{source}: the results table has no rows" if line is None else
                        f"{source}: the results table has a header but no rows")
    if unique:
        _check_unique(rows)
    return ResultsTable(rows, detect_unit(rows, source, unit), (source,))


def concat(tables: Sequence[ResultsTable]) -> ResultsTable:
    """One table of `tables` (of one unit; no row may repeat across them)."""
    units = {table.unit for table in tables}
    if len(units) > 1:
        listing = ", ".join(f"{table.sources[0]} ({table.unit})" for table in tables)
        raise DataError(
            f"the tables mix accuracy units: {listing}. Convert them to one unit (fractions in "
            f"[0, 1] or percent in [0, 100]) before evaluating them together"
        )
    rows = tuple(row for table in tables for row in table.rows)
    _check_unique(rows)
    return ResultsTable(rows, tables[0].unit, tuple(s for table in tables for s in table.sources))


def detect_unit(rows: Sequence[Row], source: str, unit: str = "auto") -> Unit:
    """Return the unit of `rows`, checking every value against it (see the module docstring).

    Raises:
        DataError: naming the row, for a value outside the unit's range or, under "auto", a
            table mixing fractions and percentages.

    """
    if unit == "neg_mse":
        return unit
    top, expected = (1, "fractions in [0, 1], the unit given") if unit == "fraction" else (
        100, "fractions in [0, 1] or percent in [0, 100]")
    for row in rows:
        if row.accuracy > top:
            raise DataError(f"{row.where}: accuracy {row.accuracy:g} is above {top}; accuracies "
                            f"must be {expected} ({source})")
    if unit == "percent" and all(row.accuracy <= 1 for row in rows):
        largest = max(rows, key=lambda row: row.accuracy)
        raise DataError(
            f"{largest.where}: every accuracy is at most 1 (the largest, {largest.accuracy:g}, "
            f"is here), so the table holds fractions, but --unit percent reads them as percent: "
            f"{largest.accuracy:g} would be {largest.accuracy:g} % and every gap about +0.0 pp. "
            f"Drop --unit percent (auto detects fractions) or pass --unit fraction ({source})")
    if unit != "auto":
        return unit  # type: ignore[return-value]
    if all(row.accuracy <= 1 for row in rows):
        return "fraction"
    small = next((row for row in rows if 0 < row.accuracy <= 1), None)
    if small is not None:
        large = next(row for row in rows if row.accuracy > 1)
        raise DataError(
            f"{small.where}: accuracy {small.accuracy:g} looks like a fraction, but "
            f"{large.where} has {large.accuracy:g} (percent): the table mixes fractions and "
            f"percentages. Convert it to one unit; if the values ≤ 1 are percentages, say so "
            f"(pflpipe report --unit percent)"
        )
    return "percent"


def check_unit(unit: str) -> None:
    """Refuse a unit that is not one of `UNITS`."""
    if unit not in UNITS:
        raise DataError(f"unit must be one of {', '.join(UNITS)} (got {unit!r})")


def _regression(records: Sequence[Mapping[str, object]], unit: str,
                where: Callable[[int], str]) -> str:
    """Return "neg_mse" for a regression table under "auto": no accuracy, every loss given.

    A table with accuracies is a classification's: its loss is a cross-entropy, which
    ``neg_mse`` would call −MSE, so declaring it is an error naming the first such row.
    """
    if unit == "neg_mse":
        scored = next((i for i, r in enumerate(records)
                       if _text(r, "accuracy").lower() not in ("", "nan")), None)
        if scored is not None:
            raise DataError(f"{where(scored)}: accuracy {_text(records[scored], 'accuracy')}: "
                            "the table scores a classification, but --unit neg_mse reads the "
                            "loss column as a regression's MSE (a classification's loss is its "
                            "cross-entropy); drop --unit neg_mse, or give --unit fraction or "
                            "percent")
    if unit != "auto" or not records:
        return unit
    no_accuracy = all(_text(r, "accuracy").lower() in ("", "nan") for r in records)
    return "neg_mse" if no_accuracy and all(_text(r, "loss") for r in records) else unit


def _text(record: Mapping[str, object], name: str) -> str:
    value = record.get(name)
    return "" if value is None else str(value).strip()


def _number(record: Mapping[str, object], name: str, where: str, kind: type) -> float | int | None:
    text = _text(record, name)
    if not text:
        return None
    try:
        value = kind(float(text)) if kind is int and float(text).is_integer() else kind(text)
    except ValueError as err:
        expected = "an integer" if kind is int else "a number"
        raise DataError(f"{where}: {name} must be {expected} (got {text!r})") from err
    return value


def _parse_row(record: Mapping[str, object], where: str, regression: bool = False) -> Row:
    client, model = _text(record, "client"), _text(record, "model")
    for name, value in (("client", client), ("model", model)):
        if not value:
            raise DataError(f"{where}: {name} is empty; every row needs a client and a model")
    if regression:
        accuracy = _mse_score(record, where, client, model)
    else:
        accuracy = _number(record, "accuracy", where, float)
    if not regression and (accuracy is None or not math.isfinite(accuracy) or accuracy < 0):
        hint = ("; NaN means the client has no samples in this split, or the task is a "
                "regression (then leave every accuracy empty and give each MSE as loss)"
                if accuracy is not None and math.isnan(accuracy) else "")
        raise DataError(
            f"{where}: accuracy must be a finite number ≥ 0 (got {_text(record, 'accuracy')!r}) "
            f"for client {client}, model {model}{hint}"
        )
    selection = _text(record, "selection")
    if selection and selection not in SELECTIONS:
        raise DataError(
            f"{where}: selection must be one of {', '.join(SELECTIONS)} or empty "
            f"(got {selection!r})"
        )
    scope = _text(record, "scope")
    if scope and not re.fullmatch(r"[a-z][a-z0-9_]*", scope):
        raise DataError(f"{where}: scope must be empty (the personalized model), "
                        f"{GLOBAL_SCOPE!r} (the algorithm's global model) or another lowercase "
                        f"name (got {scope!r})")
    seed = _number(record, "seed", where, int)
    n_samples = _number(record, "n_samples", where, int)
    if (seed is not None and seed < 0) or (n_samples is not None and n_samples < 0):
        raise DataError(f"{where}: seed and n_samples must be ≥ 0")
    return Row(
        client=client, model=model, accuracy=accuracy, seed=0 if seed is None else seed,
        split=_text(record, "split") or "test", selection=selection,
        loss=_number(record, "loss", where, float), n_samples=n_samples,
        round=_number(record, "round", where, int), where=where, scope=scope,
    )


def _mse_score(record: Mapping[str, object], where: str, client: str, model: str) -> float:
    """A regression row's score: −MSE, from its loss column."""
    mse = _number(record, "loss", where, float)
    if mse is None or not math.isfinite(mse) or mse < 0:
        raise DataError(f"{where}: loss (the mean squared error of a regression) must be a finite "
                        f"number ≥ 0 (got {_text(record, 'loss')!r}) for client {client}, model "
                        f"{model}")
    return -mse


def _check_unique(rows: Sequence[Row]) -> None:
    seen: dict[tuple, str] = {}
    for row in rows:
        key = (row.seed, row.split, row.selection, row.model, row.client, row.scope)
        if key in seen:
            scope = f", scope {row.scope!r}" if row.scope else ""
            raise DataError(
                f"{row.where}: repeats {seen[key]} (seed {row.seed}, split {row.split!r}, "
                f"selection {row.selection or '(any)'!r}, model {row.model!r}, client "
                f"{row.client}{scope}); keep one row per client, model, seed, split, selection "
                f"and scope"
            )
        seen[key] = row.where


@dataclass(frozen=True)
class Scores:
    """The accuracies of one (split, seed): ``accuracy[model]`` lists the clients in order.

    ``n_samples`` holds each client's sample count in the split, None unless every client's
    rows give one.
    """

    split: str
    seed: int
    clients: tuple[str, ...]
    accuracy: dict[str, np.ndarray]
    n_samples: np.ndarray | None = None


def select_rows(table: ResultsTable, selection: str, scope: str = "") -> list[Row]:
    """Keep the rows of `scope` scored with `selection` (an empty selection applies to both)."""
    if selection not in SELECTIONS:
        raise DataError(f"selection must be one of {', '.join(SELECTIONS)} (got {selection!r})")
    kept = [row for row in table.rows if row.selection in ("", selection)]
    if not kept:
        present = sorted({row.selection for row in table.rows})
        raise DataError(
            f"no row has selection {selection!r} (present: {', '.join(present)}); choose one "
            f"of those with --selection or evaluation.selection"
        )
    return [row for row in kept if row.scope == scope]


def scores_by_seed(rows: Sequence[Row], split: str, required: Sequence[str]) -> list[Scores]:
    """Arrange one split's rows as per-seed score matrices, every model on every client.

    Args:
        rows: Rows already filtered to one selection.
        split: The split to arrange.
        required: Model names that must be present (the baselines), named in the error.

    Raises:
        DataError: naming the client, model, seed and split when a model misses a client that
            another model has, or a required model or a model of another seed is absent.

    """
    rows = [row for row in rows if row.split == split]
    models = sorted({row.model for row in rows})
    by_seed: dict[int, dict[str, dict[str, float]]] = {}
    sizes: dict[tuple[int, str], int] = {}
    for row in rows:
        by_seed.setdefault(row.seed, {}).setdefault(row.model, {})[row.client] = row.accuracy
        if row.n_samples is not None:
            sizes[row.seed, row.client] = row.n_samples
    result = []
    for seed in sorted(by_seed):
        present = by_seed[seed]
        _check_models(present, [*required, *models], required, split, seed)
        clients = sorted({c for per_client in present.values() for c in per_client}, key=client_key)
        for model in models:
            missing = [c for c in clients if c not in present[model]]
            if missing:
                role = "baseline " if model in required else ""
                raise DataError(
                    f"split {split!r}, seed {seed}: client {missing[0]} has no row for "
                    f"{role}model {model!r} ({len(missing)} client(s) missing: "
                    f"{', '.join(missing[:10])}); every model needs every client"
                )
        accuracy = {m: np.array([present[m][c] for c in clients]) for m in models}
        n_samples = (np.array([sizes[seed, c] for c in clients], dtype=float)
                     if all((seed, c) in sizes for c in clients) else None)
        result.append(Scores(split, seed, tuple(clients), accuracy, n_samples))
    return result


def _check_models(present: Mapping[str, object], expected: Sequence[str],
                  required: Sequence[str], split: str, seed: int) -> None:
    for model in expected:
        if model in present:
            continue
        if model in required:
            raise DataError(
                f"split {split!r}, seed {seed}: baseline model {model!r} has no rows (models "
                f"present: {', '.join(sorted(present))}); name the baselines with --local/"
                f"--global or evaluation.baselines"
            )
        raise DataError(
            f"split {split!r}, seed {seed}: model {model!r} has no rows, but other seeds of this "
            f"split have it; every model needs every seed"
        )
