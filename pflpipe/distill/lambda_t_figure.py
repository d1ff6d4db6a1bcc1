"""PersFL's figures: chosen teacher rounds and the λ–T interaction.

Chosen teacher rounds per client (thesis Fig. 6.1) and the λ–T interaction (Figs. 6.2-6.7:
accuracy vs λ, one line per T, one panel per client).
"""

import math
from pathlib import Path


def _figure(**kwargs):
    """A matplotlib `Figure` drawn by Agg, without pyplot (whose import costs a stage ~1 s)."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def teacher_rounds_figure(rounds: list[int], last_round: int, path: Path) -> Path:
    """Bar chart of each client's optimal teacher round."""
    fig = _figure(figsize=(max(4.0, 0.45 * len(rounds) + 1.5), 3.2))
    ax = fig.subplots()
    ax.bar(range(len(rounds)), rounds, color="#4C72B0")
    ax.axhline(last_round, color="#C44E52", linestyle="--", linewidth=1, label="last round")
    ax.set(xlabel="client", ylabel="teacher round", title="Optimal teacher round per client")
    ax.set_xticks(range(len(rounds)))
    ax.set_ylim(0, last_round + 1)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return Path(path)


def lambda_t_figure(grid: list[dict], chosen: list[dict], path: Path, split: str = "test") -> Path:
    """Accuracy on `split` vs λ, one line per T, one panel per client; the chosen pair ringed."""
    from matplotlib import colormaps

    clients = sorted({row["client"] for row in grid})
    temperatures = sorted({row["temperature"] for row in grid})
    cols = min(5, len(clients))
    rows = math.ceil(len(clients) / cols)
    fig = _figure(figsize=(3.0 * cols, 2.6 * rows))
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True)
    colors = colormaps["viridis"]([i / max(1, len(temperatures) - 1)
                                   for i in range(len(temperatures))])
    picks = {row["client"]: row for row in chosen}
    for ax, client in zip(axes.flat, clients, strict=False):
        for color, t in zip(colors, temperatures, strict=True):
            points = sorted((r["lam"], r[f"{split}_accuracy"]) for r in grid
                            if r["client"] == client and r["temperature"] == t)
            ax.plot(*zip(*points, strict=True), marker="o", markersize=3, color=color,
                    label=f"T={t:g}")
        pick = picks[client]
        ax.scatter([pick["lam"]], [pick[f"{split}_accuracy"]], s=90, facecolors="none",
                   edgecolors="#C44E52", linewidths=1.5, zorder=3)
        ax.set_title(f"client {client}", fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(clients):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("λ", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{split} accuracy", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(temperatures), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    return Path(path)
