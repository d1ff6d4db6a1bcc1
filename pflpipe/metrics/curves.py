"""The report's accuracy figures: accuracy over rounds per algorithm, accuracy per client.

Both compare every algorithm at a glance. matplotlib is imported inside each function and used
through `Figure` (no pyplot state).
"""

import math
from collections.abc import Iterable

import numpy as np

from pflpipe.metrics.figures import _png, colors
from pflpipe.metrics.summary import SplitSummary

#: Models whose history steps are epochs, not federated rounds.
EPOCHS = {"local": "epochs", "persfl": "distillation epochs from the teacher",
          "persfl_gd": "distillation epochs from the teacher"}


def round_bands(history: Iterable[dict], split: str) -> dict[str, tuple[np.ndarray, ...]]:
    """Per model: (rounds, mean, std) of the accuracy over every client and seed at each round.

    >>> bands = round_bands([{"model": "a", "split": "test", "round": 1, "accuracy": 0.5},
    ...                      {"model": "a", "split": "test", "round": 1, "accuracy": 0.7}], "test")
    >>> [round(float(v[0]), 3) for v in bands["a"]]
    [1.0, 0.6, 0.141]
    """
    values: dict[str, dict[int, list[float]]] = {}
    for row in history:
        if row["split"] == split and row.get("accuracy") not in ("", None):
            values.setdefault(row["model"], {}).setdefault(int(row["round"]), []).append(
                float(row["accuracy"]))
    out = {}
    for model, by_round in values.items():
        rounds = np.array(sorted(by_round), dtype=float)
        samples = [np.array(by_round[int(r)]) for r in rounds]
        out[model] = (rounds, np.array([s.mean() for s in samples]),
                      np.array([s.std(ddof=1) if s.size > 1 else 0.0 for s in samples]))
    return out


def accuracy_rounds_png(history: list[dict], split: str, models: list[str]) -> bytes:
    """One panel per model: mean accuracy over rounds, a band of ± 1 std over clients and seeds.

    The panels share the y axis (0 to 1) so the algorithms compare by eye; models without a
    history (results given as a table only) are left out.
    """
    from matplotlib.figure import Figure

    bands = round_bands(history, split)
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
        ax.fill_between(rounds, np.clip(mean - std, 0, 1), np.clip(mean + std, 0, 1),
                        color=palette[model], alpha=0.2, linewidth=0)
        ax.set_title(f"{model}: {mean[-1]:.3f} at the end", fontsize=9)
        ax.set_xlabel(EPOCHS.get(model, "round"), fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{split} accuracy", fontsize=8)
    if not shown:
        axes[0][0].text(0.5, 0.5, "no per-round history in the results", ha="center",
                        va="center", transform=axes[0][0].transAxes)
    fig.suptitle(f"Mean {split} accuracy over rounds, band: ± 1 std over clients and seeds",
                 fontsize=10)
    return _png(fig)


def client_bars_png(summary: SplitSummary) -> bytes:
    """Grouped bars: each client's accuracy under every model (mean over seeds, ± std)."""
    from matplotlib.figure import Figure

    models = list(summary.models)
    clients = list(summary.clients)
    palette = colors(models)
    top = 100.0 if summary.unit == "percent" else 1.0
    width = 0.8 / max(1, len(models))
    fig = Figure(figsize=(min(18.0, 2.0 + 0.16 * len(clients) * len(models)), 3.8))
    fig.subplots_adjust(left=0.07, right=0.99, top=0.88, bottom=0.2)
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
    ax.set_ylabel(f"{summary.split} accuracy ({summary.unit})")
    ax.set_ylim(0, top * 1.02)
    ax.legend(ncol=min(len(models), 6), fontsize=8, loc="lower center",
              bbox_to_anchor=(0.5, 1.0), frameon=False)
    return _png(fig)


def _seed_std(summary: SplitSummary, model: str, client: str) -> float:
    """The std over seeds of one client's accuracy (0 with one seed)."""
    values = summary.models[model].per_client_seeds.get(client, ())
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
