"""The report's figures as PNG bytes: QoI per client (thesis Fig. 6.8), fairness bars (Fig. 6.9).

matplotlib is imported inside each function and used through `Figure` with the Agg canvas, so
importing this module is cheap and no global backend or pyplot state is touched.
"""

import io
import math

import numpy as np

from pflpipe.metrics.fairness import FAIRNESS
from pflpipe.metrics.metric_registry import METRIC_REGISTRY
from pflpipe.metrics.results_table import measure
from pflpipe.metrics.summary import SplitSummary

GROUP_TITLES = {
    "improved": "QoI over U⁺ (improved clients)",
    "decreased": "|QoI| over U⁻ (decreased clients)",
    "accuracy": "{measure} (all clients)",
}


def colors(models: list[str]) -> dict[str, tuple]:
    """One fixed color per model, the same in every figure."""
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    return {model: palette(i % 10) for i, model in enumerate(models)}


def qoi_strip_png(summary: SplitSummary, seed: int = 0) -> bytes:
    """Plot every personalized model's QoI as a box with each client (and seed) as a dot.

    A density estimate over ten clients would invent a shape; the dots are the data. Dots are
    jittered sideways only (with a fixed `seed`), never in value.
    """
    from matplotlib.figure import Figure

    personalized = {m: r.qoi for m, r in summary.models.items() if r.is_personalized}
    fig = Figure(figsize=(max(6.5, 1.3 * len(personalized) + 3.0), 4.2))
    fig.subplots_adjust(left=0.14, right=0.97, top=0.86, bottom=0.17)
    ax = fig.add_subplot()
    if not personalized:
        ax.text(0.5, 0.5, "no personalized model in the table", ha="center", va="center")
        return _png(fig)
    palette = colors(list(summary.models))
    rng = np.random.default_rng(seed)
    names = list(personalized)
    ax.boxplot([personalized[m] for m in names], positions=range(len(names)), widths=0.5,
               showfliers=False, medianprops={"color": "0.2"})
    for x, model in enumerate(names):
        qoi = personalized[model]
        ax.scatter(x + rng.uniform(-0.15, 0.15, qoi.size), qoi, s=18, color=palette[model],
                   alpha=0.8, zorder=3, edgecolors="none")
    ax.axhline(0, color="0.3", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(names)),
                  [f"{m}\n(n={personalized[m].size})" for m in names], fontsize=8)
    ax.set_ylabel(f"QoI = P − max(G, L)  ({summary.unit})")
    ax.set_title(f"QoI per client, split {summary.split} ({len(summary.clients)} clients × "
                 f"{len(summary.seeds)} seed(s))\nabove the dashed line: better than max(G, L)",
                 fontsize=10)
    return _png(fig)


def fairness_bars_png(summary: SplitSummary, metrics: tuple[str, ...] = FAIRNESS) -> bytes:
    """Plot one bar per model for each fairness metric (columns) and group (rows).

    Every axis starts at 0 and ends at the metric's bound where it has one (CS and JI: 1,
    Entropy: ln of the number of clients), so small differences look small; each bar carries its
    value. Error bars are the std over seeds, cut at 0 below; the fairest bar of each panel (by
    the registry's `higher_is_better`) is hatched; a zero bar is drawn as a line at 0, an
    undefined value is written as "n/a".
    """
    from matplotlib.figure import Figure

    metrics = tuple(m for m in FAIRNESS if m in metrics) or FAIRNESS
    palette = colors(list(summary.models))
    rows, skipped = [], []
    for group in GROUP_TITLES:
        models = [m for m, r in summary.models.items() if r.is_personalized or group == "accuracy"]
        paths = [f"fairness.{group}.{name}" for name in metrics]
        if any(summary.models[m].mean[p] is not None for m in models for p in paths):
            rows.append((group, models, paths))
        else:
            reasons = {summary.models[m].reasons.get(paths[0], "") for m in models}
            why = "; ".join(sorted(r for r in reasons if r)) or "no personalized model"
            title = GROUP_TITLES[group].format(measure=measure(summary.unit, fairness=True))
            skipped.append(f"{title}: not plotted, undefined for every model ({why})")
    # Fixed margins in inches: a layout engine would double the drawing time.
    width, top, bottom = 3.2 * len(metrics), 0.8, 0.75 + 0.2 * len(skipped)
    height = top + bottom + 3.0 * len(rows)
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=1.1 / width, right=1 - 0.15 / width, top=1 - top / height,
                        bottom=bottom / height, wspace=0.3, hspace=0.5)
    axes = fig.subplots(len(rows), len(metrics), squeeze=False)
    for row, (group, models, paths) in enumerate(rows):
        for col, path in enumerate(paths):
            _bar_panel(axes[row][col], summary, models, path, palette)
        axes[row][0].set_ylabel(GROUP_TITLES[group].format(
            measure=measure(summary.unit, fairness=True)))
    fig.suptitle(f"Fairness metrics, split {summary.split}")
    if skipped:
        fig.text(0.01, 0.01, "\n".join(skipped), fontsize=9, ha="left", va="bottom")
    return _png(fig)


def _bar_panel(ax, summary: SplitSummary, models: list[str], path: str, palette: dict) -> None:
    metric = METRIC_REGISTRY[path.rsplit(".", 1)[1]]
    fairer = "higher" if metric.higher_is_better else "lower"
    ax.set_title(f"{metric.name} {metric.direction} ({fairer} is fairer)", fontsize=10)
    if not models:
        ax.text(0.5, 0.5, "no personalized model", ha="center", va="center",
                transform=ax.transAxes)
        return
    means = [summary.models[m].mean[path] for m in models]
    stds = [summary.models[m].std[path] or 0.0 for m in models]
    defined = [v for v in means if v is not None]
    best = (max if metric.higher_is_better else min)(defined) if defined else None
    x = np.arange(len(models))
    heights = [0.0 if v is None else v for v in means]
    below = [min(s, h) for s, h in zip(stds, heights, strict=True)]  # never below 0
    bars = ax.bar(x, heights, yerr=[below, stds] if any(stds) else None,
                  color=[palette[m] for m in models], capsize=3)
    top = _ceiling(metric.name, len(summary.clients), [h + s for h, s in zip(heights, stds,
                                                                             strict=True)])
    for bar, value, height, model in zip(bars, means, heights, models, strict=True):
        label = "n/a" if value is None else f"{value:.4g}"
        if value == 0:
            ax.hlines(0, bar.get_x(), bar.get_x() + bar.get_width(), color=palette[model],
                      linewidth=3)
        ax.text(bar.get_x() + bar.get_width() / 2, height + 0.02 * top, label, ha="center",
                va="bottom", fontsize=7)
        if value is not None and best is not None and math.isclose(
                value, best, rel_tol=1e-9, abs_tol=1e-12):
            bar.set_hatch("//")
            bar.set_edgecolor("black")
    ax.set_xticks(x, models, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, top)


def _ceiling(name: str, n_clients: int, tops: list[float]) -> float:
    """The top of a fairness axis: the metric's bound, or above the highest bar."""
    bound = {"CS": 1.0, "JI": 1.0, "Entropy": math.log(max(n_clients, 2))}.get(name)
    highest = max(tops, default=0.0)
    if bound is not None:
        return max(bound, highest) * 1.08
    return highest * 1.25 if highest > 0 else 1e-3


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()
