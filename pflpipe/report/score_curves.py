"""The report's score figures: the score over rounds per algorithm, the score per client.

Both compare every algorithm at a glance. The score is the accuracy, or −MSE for a regression
(unit ``neg_mse``: the history's `loss`, negated). matplotlib is imported inside each function
and used through `Figure` (no pyplot state).
"""

import math
from collections.abc import Iterable, Mapping

import numpy as np

from pflpipe.metrics.results_table import measure
from pflpipe.metrics.summary import SplitSummary
from pflpipe.report.report_figures import _png, colors

#: Models whose history steps are epochs, not federated rounds.
EPOCHS = {"local": "epochs", "persfl": "distillation epochs from the teacher",
          "persfl_gd": "distillation epochs from the teacher"}


def round_bands(history: Iterable[dict], split: str, unit: str = "fraction"
                ) -> dict[str, tuple[np.ndarray, ...]]:
    """Per model: (rounds, mean, std) of the score over every client and seed at each round.

    The score is the accuracy, or with `unit` ``neg_mse`` the negated loss (−MSE), of the
    personalized model: rows of another scope (the global model's GA, Flow's ``soft``) are left out.

    >>> bands = round_bands([{"model": "a", "split": "test", "round": 1, "accuracy": 0.5},
    ...                      {"model": "a", "split": "test", "round": 1, "accuracy": 0.7}], "test")
    >>> [round(float(v[0]), 3) for v in bands["a"]]
    [1.0, 0.6, 0.141]
    >>> round_bands([{"model": "a", "split": "test", "round": 1, "accuracy": 0.5},
    ...              {"model": "a", "split": "test", "round": 1, "accuracy": 0.1,
    ...               "scope": "global"}], "test")["a"][1]
    array([0.5])
    >>> round_bands([{"model": "a", "split": "test", "round": 2, "accuracy": "nan",
    ...               "loss": 0.25}], "test", "neg_mse")["a"][1]
    array([-0.25])
    """
    column, sign = ("loss", -1.0) if unit == "neg_mse" else ("accuracy", 1.0)
    values: dict[str, dict[int, list[float]]] = {}
    for row in history:
        value = float(row.get(column) or "nan")
        if row["split"] == split and not row.get("scope") and not math.isnan(value):
            values.setdefault(row["model"], {}).setdefault(int(row["round"]), []).append(
                sign * value)
    out = {}
    for model, by_round in values.items():
        rounds = np.array(sorted(by_round), dtype=float)
        samples = [np.array(by_round[int(r)]) for r in rounds]
        out[model] = (rounds, np.array([s.mean() for s in samples]),
                      np.array([s.std(ddof=1) if s.size > 1 else 0.0 for s in samples]))
    return out


def accuracy_rounds_png(history: list[dict], split: str, models: list[str],
                        unit: str = "fraction", starts: Mapping[str, int] | None = None) -> bytes:
    """The PNG of `accuracy_rounds_figure`."""
    return _png(accuracy_rounds_figure(history, split, models, unit, starts))


def accuracy_rounds_figure(history: list[dict], split: str, models: list[str],
                           unit: str = "fraction", starts: Mapping[str, int] | None = None):
    """One panel per model: the mean score over rounds, a band of ± 1 std over clients and seeds.

    The panels share the y axis (0 to 1 for an accuracy) so the algorithms compare by eye;
    models without a history (results given as a table only) are left out. A model started from
    the warm start (`starts`: its warm-start round) says after how many warm-start rounds.
    """
    from matplotlib.figure import Figure

    bands = round_bands(history, split, unit)
    name, accuracy = measure(unit), unit != "neg_mse"
    shown = [m for m in models if m in bands]
    palette = colors(models)
    cols = min(4, max(1, len(shown)))
    rows = max(1, math.ceil(len(shown) / cols))
    fig = Figure(figsize=(3.4 * cols, 2.7 * rows + 0.6))
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.55 / (2.7 * rows + 0.6),
                        bottom=0.5 / (2.7 * rows + 0.6), wspace=0.25, hspace=0.55)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    for ax, model in zip(axes.flat, shown, strict=False):
        rounds, mean, std = bands[model]
        ax.plot(rounds, mean, color=palette[model], linewidth=1.5)
        low, high = (mean - std, mean + std) if not accuracy else \
            (np.clip(mean - std, 0, 1), np.clip(mean + std, 0, 1))
        ax.fill_between(rounds, low, high, color=palette[model], alpha=0.2, linewidth=0)
        ax.set_title(f"{model}: {mean[-1]:.4g} at the end", fontsize=9)
        after = (starts or {}).get(model, 0)
        ax.set_xlabel(EPOCHS.get(model, "round") + (f", after {after} warm-start rounds"
                                                     if after else ""), fontsize=8)
        if accuracy:
            ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{split} {name}", fontsize=8)
    if not shown:
        axes[0][0].text(0.5, 0.5, "no per-round history in the results", ha="center",
                        va="center", transform=axes[0][0].transAxes)
    fig.suptitle(f"Mean {split} {name} over rounds, band: ± 1 std over clients and seeds",
                 fontsize=10)
    return fig


def client_axis(summary: SplitSummary) -> tuple[float, float]:
    """The score axis of the per-client bars: (bottom, top).

    An accuracy's axis ends just above its maximum (1 or 100) and starts at a multiple of 5
    points at least 2 points below the lowest bar (less its error bar), so that 89 against 96
    shows; a −MSE's runs from 0 down past the lowest bar.

    >>> from types import SimpleNamespace as S
    >>> client_axis(S(unit="fraction", models={"a": S(per_client_accuracy={"0": 0.89, "1": 0.96},
    ...                                                per_client_seeds={})}))
    (0.85, 1.02)
    """
    values = [v - _std(result.per_client_seeds.get(c, ()))
              for result in summary.models.values()
              for c, v in result.per_client_accuracy.items() if not math.isnan(v)]
    if summary.unit == "neg_mse":
        return 1.1 * min(min(values, default=-1.0), -1e-12), 0.0
    top = 100.0 if summary.unit == "percent" else 1.0
    step = 0.05 * top
    lowest = min(values, default=0.0)
    return max(0.0, round(math.floor((lowest - 0.02 * top) / step + 1e-9) * step, 10)), top * 1.02


def client_bars_png(summary: SplitSummary) -> bytes:
    """Grouped bars: each client's score under every model (mean over seeds, ± std)."""
    return _png(client_bars_figure(summary))


def client_bars_figure(summary: SplitSummary):
    """The figure of `client_bars_png`; its score axis is `client_axis`."""
    from matplotlib.figure import Figure

    models = list(summary.models)
    clients = list(summary.clients)
    palette = colors(models)
    width = 0.8 / max(1, len(models))
    inches = min(18.0, max(6.0, 2.0 + 0.16 * len(clients) * len(models)))
    fig = Figure(figsize=(inches, 3.8))
    fig.subplots_adjust(left=0.8 / inches, right=0.99, top=0.88, bottom=0.2)  # room for labels
    ax = fig.add_subplot()
    x = np.arange(len(clients))
    for i, model in enumerate(models):
        result = summary.models[model]
        values = [result.per_client_accuracy.get(c, np.nan) for c in clients]
        spread = [_seed_std(summary, model, c) for c in clients]
        ax.bar(x + (i - (len(models) - 1) / 2) * width, values, width, label=model,
               color=palette[model], yerr=spread if any(spread) else None, capsize=1.5)
    ticks = x if len(clients) <= 40 else x[:: math.ceil(len(clients) / 40)]
    ax.set_xticks(ticks, [clients[int(t)] for t in ticks], fontsize=7)
    ax.set_xlabel("client")
    ax.set_ylabel(f"{summary.split} {measure(summary.unit)} ({summary.unit})")
    ax.set_ylim(*client_axis(summary))
    ax.legend(ncol=min(len(models), 6), fontsize=8, loc="lower center",
              bbox_to_anchor=(0.5, 1.0), frameon=False)
    return fig


def _std(values) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _seed_std(summary: SplitSummary, model: str, client: str) -> float:
    """The std over seeds of one client's score (0 with one seed)."""
    return _std(summary.models[model].per_client_seeds.get(client, ()))
