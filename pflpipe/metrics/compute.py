"""The report's compute and mechanism sections, from the models' history.csv rows.

Compute (`pflpipe.engine.records.COMPUTE`) sits on the train rows of a history: a model's own
total is the sum over its clients and rounds, averaged over seeds (`pflpipe.metrics.cost` adds
the warm start a model started from, and compares the models). Diagnostics (``diag.*`` columns)
are plotted over rounds, the mean over clients and seeds. matplotlib is imported inside the
figure functions.
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


def accuracy_vs_samples_png(history: list[dict], split: str, models: list[str],
                            start: Mapping[tuple[str, str], float] | None = None) -> bytes:
    """One line per model: mean `split` accuracy against the samples processed so far.

    A warm-started model's line starts at the samples of its warm start (`start`).
    """
    from matplotlib.figure import Figure

    from pflpipe.metrics.figures import _png, colors

    curves = accuracy_vs_samples(history, split, start)
    palette = colors([*models, *sorted(set(curves) - set(models))])
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    for model in [m for m in palette if m in curves]:
        samples, accuracy = curves[model]
        ax.plot(samples, accuracy, marker=".", color=palette[model], label=model, linewidth=1.4)
    ax.set_xscale("symlog")
    ax.set_xlabel("samples processed (forward + backward), all clients, warm start included")
    ax.set_ylabel(f"mean {split} accuracy")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize=7)
    ax.set_title(f"{split} accuracy against compute (mean over seeds)", fontsize=10)
    return _png(fig)


def diagnostics_png(model: str, series: dict[str, tuple[list, list]]) -> bytes:
    """One panel per diagnostic of `model` (a vector's entries share one): mean over rounds."""
    from matplotlib.figure import Figure

    from pflpipe.metrics.figures import _png

    panels: dict[str, list[str]] = {}
    for column in series:
        base = column[len(DIAGNOSTIC_PREFIX):]
        head, _, tail = base.rpartition(".")
        panels.setdefault(head if tail.isdigit() and head else base, []).append(column)
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(max(5.5, 3.6 * cols), 2.6 * rows + 0.5))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (name, columns) in zip(axes.flat, panels.items(), strict=False):
        for column in columns:
            rounds, mean = series[column]
            ax.plot(rounds, mean, linewidth=1.3, label=column[len(DIAGNOSTIC_PREFIX):])
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("round", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        if len(columns) > 1:
            ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"{model}: diagnostics per round (mean over clients and seeds)", fontsize=10)
    fig.tight_layout()
    return _png(fig)
