"""The report's figures as PNG bytes: QoI density (thesis Fig. 6.8), fairness bars (Fig. 6.9).

matplotlib is imported inside each function and used through `Figure` with the Agg canvas, so
importing this module is cheap and no global backend or pyplot state is touched.
"""

import io
import math

import numpy as np

from pflpipe.metrics.base import REGISTRY
from pflpipe.metrics.fairness import FAIRNESS
from pflpipe.metrics.summary import SplitSummary

GROUP_TITLES = {
    "improved": "QoI over U⁺ (improved clients)",
    "decreased": "|QoI| over U⁻ (decreased clients)",
    "accuracy": "accuracy (all clients)",
}


def colors(models: list[str]) -> dict[str, tuple]:
    """One fixed color per model, the same in every figure."""
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    return {model: palette(i % 10) for i, model in enumerate(models)}


def gaussian_density(values: np.ndarray, grid: np.ndarray, bandwidth: float) -> np.ndarray:
    """Return a Gaussian kernel density estimate of `values` on `grid` (area 1)."""
    z = (grid[:, None] - values[None, :]) / bandwidth
    return np.exp(-0.5 * z**2).sum(axis=1) / (values.size * bandwidth * math.sqrt(2 * math.pi))


def _bandwidth(values: np.ndarray, span: float) -> float:
    # Scott's rule; equal values (or a single client) get 5 % of the plotted span instead.
    scott = float(np.std(values)) * values.size ** (-1 / 5)
    return scott if scott > 0 else 0.05 * span


def qoi_density_png(summary: SplitSummary) -> bytes:
    """Plot the density of every personalized model's QoI, pooled over clients and seeds."""
    from matplotlib.figure import Figure

    personalized = {m: r.qoi for m, r in summary.models.items() if r.is_personalized}
    fig = Figure(figsize=(7, 4))
    fig.subplots_adjust(left=0.1, right=0.97, top=0.92, bottom=0.13)
    ax = fig.add_subplot()
    if not personalized:
        ax.text(0.5, 0.5, "no personalized model in the table", ha="center", va="center")
        return _png(fig)
    pooled = np.concatenate(list(personalized.values()))
    low, high = float(pooled.min()), float(pooled.max())
    span = (high - low) or max(abs(high), 1.0 if summary.unit == "percent" else 0.01)
    grid = np.linspace(low - 0.25 * span, high + 0.25 * span, 400)
    palette = colors(list(summary.models))
    for model, qoi in personalized.items():
        if np.ptp(qoi) <= 1e-6 * span:
            # No spread to estimate a density from: mark the common value instead.
            ax.axvline(float(qoi.mean()), color=palette[model], linewidth=2,
                       label=f"{model} (n={qoi.size}, all ≈ {qoi.mean():.4g})")
            continue
        density = gaussian_density(qoi, grid, _bandwidth(qoi, span))
        ax.plot(grid, density, color=palette[model], label=f"{model} (n={qoi.size})")
        ax.fill_between(grid, density, color=palette[model], alpha=0.12)
        ax.plot(qoi, np.zeros_like(qoi), "|", color=palette[model], markersize=12)
    ax.axvline(0, color="0.3", linestyle="--", linewidth=1)
    ax.set_xlabel(f"QoI = P − max(G, L)  ({summary.unit})")
    ax.set_ylabel("density")
    ax.set_title(f"QoI density, split {summary.split} (clients × {len(summary.seeds)} seed(s))")
    ax.legend(frameon=False)
    return _png(fig)


def fairness_bars_png(summary: SplitSummary, metrics: tuple[str, ...] = FAIRNESS) -> bytes:
    """Plot one bar per model for each fairness metric (columns) and group (rows).

    Error bars are the std over seeds; the fairest bar of each panel (by the registry's
    `higher_is_better`) is hatched; an undefined value is written as "n/a". The y axes of the
    higher-is-fairer metrics are zoomed onto the bars (they need not start at 0).
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
            skipped.append(f"{GROUP_TITLES[group]}: not plotted, undefined for every model ({why})")
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
        axes[row][0].set_ylabel(GROUP_TITLES[group])
    fig.suptitle(f"Fairness metrics, split {summary.split}")
    if skipped:
        fig.text(0.01, 0.01, "\n".join(skipped), fontsize=9, ha="left", va="bottom")
    return _png(fig)


def _bar_panel(ax, summary: SplitSummary, models: list[str], path: str, palette: dict) -> None:
    metric = REGISTRY[path.rsplit(".", 1)[1]]
    fairer = "higher" if metric.higher_is_better else "lower"
    ax.set_title(f"{metric.name} {metric.direction} ({fairer} is fairer)", fontsize=10)
    if not models:
        ax.text(0.5, 0.5, "no personalized model", ha="center", va="center",
                transform=ax.transAxes)
        return
    means = [summary.models[m].mean[path] for m in models]
    spread = [summary.models[m].std[path] for m in models]
    stds = [s or 0.0 for s in spread]
    defined = [v for v in means if v is not None]
    best = (max if metric.higher_is_better else min)(defined) if defined else None
    x = np.arange(len(models))
    heights = [0.0 if v is None else v for v in means]
    bars = ax.bar(x, heights, yerr=None if all(s is None for s in spread) else stds,
                  color=[palette[m] for m in models], capsize=3)
    for bar, value in zip(bars, means, strict=True):
        if value is None:
            ax.text(bar.get_x() + bar.get_width() / 2, 0.03, "n/a", ha="center", va="bottom",
                    fontsize=8, transform=ax.get_xaxis_transform())
        elif best is not None and math.isclose(value, best, rel_tol=1e-9, abs_tol=1e-12):
            bar.set_hatch("//")
            bar.set_edgecolor("black")
    ax.set_xticks(x, models, rotation=30, ha="right", fontsize=8)
    if metric.higher_is_better and defined and min(defined) > 0:
        # CS, Entropy and JI of similar models differ in the 2nd or 3rd decimal: zoom in.
        low, high = min(defined), max(defined)
        span = (high - low) + max(stds) or 0.05 * high
        ax.set_ylim(max(0.0, low - 1.5 * span), high + max(stds) + 0.5 * span)


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()
